/* Stable 64-bit content hashes: config hashes, model hashes.
 *
 * A result must be traceable to the exact config and model that made it, and
 * two shards must be provably made by the same ones. The hash is a fixed,
 * documented function (not a library's, which could change between versions),
 * so a hash written in run.json today still compares equal next year. It is
 * not cryptographic: it detects accidents (a different model, a changed
 * config), not adversaries.
 */
#ifndef KB_HASH_H
#define KB_HASH_H

#include <stddef.h>
#include <stdint.h>

#include "util/error.h"

typedef struct kb_hash {
    uint64_t h;
    uint64_t len;
    unsigned char tail[8];
    size_t n_tail;
} kb_hash;

void kb_hash_init(kb_hash *s);
void kb_hash_update(kb_hash *s, const void *data, size_t n);
uint64_t kb_hash_final(const kb_hash *s);

/* One-shot hash of a buffer. */
uint64_t kb_hash_bytes(const void *data, size_t n);

/* The 16 lowercase hex digits of h, NUL-terminated, into out[17]. */
void kb_hash_hex(uint64_t h, char out[17]);

/* Hash of a model folder: config.json, tokenizer files and every *.safetensors
 * file (names sorted), each as (name, size, contents). Reads every byte. */
int kb_hash_model(const char *dir, char out[17], kv_error *err);

#endif
