/* kv_bpe: the BPE model of a tokenizer — a vocabulary of byte strings and the
 * ranked merges — and the merge loop that turns one pre-token into ids.
 *
 * Everything here works on raw bytes: the tokenizer converts tokenizer.json's
 * GPT-2 "byte-level" strings ("Ġthe") to bytes (" the") once, at load, so
 * encoding never builds those strings.
 */
#ifndef KV_BPE_H
#define KV_BPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/error.h"

typedef struct kv_bpe kv_bpe;

/* A growable id array, the output of encoding. */
typedef struct kv_ids {
    int32_t *v;
    size_t n, cap;
} kv_ids;

int kv_ids_push(kv_ids *ids, int32_t id);

/* Per-thread working memory of kv_bpe_word (grown on demand). Zero-initialise,
 * release with kv_bpe_scratch_free. */
typedef struct kv_bpe_scratch {
    void *mem;
    size_t cap;
} kv_bpe_scratch;

void kv_bpe_scratch_free(kv_bpe_scratch *s);

/* An empty model sized for about n_vocab tokens and n_merges merges. */
kv_bpe *kv_bpe_new(size_t n_vocab, size_t n_merges, kv_error *err);
void kv_bpe_free(kv_bpe *m);

/* Adds vocabulary entry id for the byte string s[0..n). A repeated byte string
 * or id is an error. */
int kv_bpe_add_token(kv_bpe *m, const char *s, size_t n, int32_t id, kv_error *err);

/* The id of byte string s[0..n), or -1. */
int32_t kv_bpe_lookup(const kv_bpe *m, const char *s, size_t n);

/* The same lookup in steps, so that a loader doing many can prefetch them
 * all before the first probe: kv_bpe_hash, kv_bpe_prefetch, then
 * kv_bpe_lookup_hashed with the same hash. */
uint64_t kv_bpe_hash(const char *s, size_t n);
void kv_bpe_prefetch(const kv_bpe *m, uint64_t hash);
int32_t kv_bpe_lookup_hashed(const kv_bpe *m, const char *s, size_t n, uint64_t hash);
int kv_bpe_add_token_hashed(kv_bpe *m, const char *s, size_t n, int32_t id, uint64_t hash,
                            kv_error *err);
void kv_bpe_prefetch_merge(const kv_bpe *m, int32_t a, int32_t b);

/* The bytes of token id, or NULL when id is not in the vocabulary. */
const char *kv_bpe_token(const kv_bpe *m, int32_t id, size_t *len);

/* One more than the largest id in the vocabulary. */
int32_t kv_bpe_id_end(const kv_bpe *m);

/* Declares merge (a, b) -> merged at rank (lower merges first). A pair given
 * again takes the later rank, as in Hugging Face's loader. */
int kv_bpe_add_merge(kv_bpe *m, int32_t a, int32_t b, int32_t merged, uint32_t rank, kv_error *err);

/* Ends loading: checks that every single byte is a token (byte-level BPE needs
 * no unknown token then). ignore_merges: a pre-token that is itself in the
 * vocabulary becomes that token without merging (HF's ignore_merges). */
int kv_bpe_finish(kv_bpe *m, bool ignore_merges, kv_error *err);

/* Appends the ids of pre-token w[0..n) (n > 0) to out. */
int kv_bpe_word(const kv_bpe *m, const unsigned char *w, size_t n, kv_bpe_scratch *s, kv_ids *out,
                kv_error *err);

/* ---- loading from tokenizer.json (bpe_json.c) ---- */

/* Where model.vocab and model.merges lie in a tokenizer.json text (end == 0:
 * absent). */
typedef struct kv_bpe_json {
    size_t vocab_at, vocab_end, merges_at, merges_end;
    size_t vocab_count; /* members of model.vocab */
} kv_bpe_json;

/* Finds them in the top-level object of s[0..n). */
int kv_bpe_json_find(const char *s, size_t n, kv_bpe_json *where, kv_error *err);

/* A malloc'd copy of s with model.vocab as {} and model.merges as [], small
 * enough for cJSON. */
char *kv_bpe_json_strip(const char *s, size_t n, const kv_bpe_json *where, size_t *len);

/* The model: vocab tokens written in the byte-level alphabet, merges as
 * "a b" or ["a", "b"]. Every id must be below id_limit, the vocabulary's
 * size: the id tables are as large as the largest id, so a stray id of 10^9
 * would otherwise cost gigabytes. */
kv_bpe *kv_bpe_json_load(const char *s, const kv_bpe_json *where, bool ignore_merges,
                         int64_t id_limit, kv_error *err);

#endif
