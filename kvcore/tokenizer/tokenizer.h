/* kv_tokenizer: byte-level BPE from a Hugging Face tokenizer.json, identical to
 * the `tokenizers` library (what transformers uses) for the models kvbench runs.
 *
 * encode: added tokens are split first (leftmost-longest, special or not), then
 * each text segment between them is NFC-normalised (when the tokenizer has the
 * NFC normalizer), pre-tokenised by the Split/ByteLevel regexes and BPE-merged
 * by merge rank. No BOS/EOS is added: encode is HF's encode(text,
 * add_special_tokens=False), which is what chat prompts need (their template
 * writes the BOS); kv_tokenizer_encode_special adds them.
 * decode: ids to bytes through the GPT-2 byte map, then lossy UTF-8 (every
 * invalid or partial sequence becomes U+FFFD, like Rust's from_utf8_lossy).
 *
 * A tokenizer.json feature that this module does not implement is a load-time
 * error that names it, never a silent difference. A loaded tokenizer is
 * read-only: encode and decode may run on many threads at once.
 */
#ifndef KV_TOKENIZER_H
#define KV_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/error.h"

typedef struct kv_tokenizer kv_tokenizer;

/* Reads model_dir/tokenizer.json and, when present, tokenizer_config.json
 * (chat template, bos/eos tokens). */
kv_tokenizer *kv_tokenizer_load(const char *model_dir, kv_error *err);
void kv_tokenizer_free(kv_tokenizer *t);

/* Encodes len bytes of text into a malloc'd array *ids of *n_ids tokens (the
 * caller frees it; for empty text *ids may be NULL). Invalid UTF-8 in text is
 * read as U+FFFD per maximal invalid subsequence, as Python's
 * bytes.decode("utf-8", "replace") would before handing the text to HF. */
int kv_tokenizer_encode(const kv_tokenizer *t, const char *text, size_t len, int32_t **ids,
                        size_t *n_ids, kv_error *err);

/* The same as HF's encode(text, add_special_tokens=True): the tokens that
 * tokenizer.json's TemplateProcessing post-processor puts around a single
 * sequence are added (Llama-3: BOS first; Qwen3: nothing). */
int kv_tokenizer_encode_special(const kv_tokenizer *t, const char *text, size_t len, int32_t **ids,
                                size_t *n_ids, kv_error *err);

/* Decodes ids into malloc'd, NUL-terminated UTF-8 text (NULL only when out of
 * memory), as transformers' tokenizer.decode does. Ids outside the vocabulary
 * are skipped, like HF. skip_special drops the added tokens marked "special":
 * true and keeps the others (<think>...). When tokenizer_config.json sets
 * clean_up_tokenization_spaces (Qwen3 does not), " ." becomes "." and so on,
 * as transformers does; absent means false (transformers >= 4.45). */
char *kv_tokenizer_decode(const kv_tokenizer *t, const int32_t *ids, size_t n, bool skip_special);

/* The same, with the length: decoded text may hold NUL bytes (the token for
 * byte 0x00), which a C string would cut short. */
char *kv_tokenizer_decode_len(const kv_tokenizer *t, const int32_t *ids, size_t n,
                              bool skip_special, size_t *len);

/* The id of a token given in its vocabulary form ("Ġthe", "<|im_end|>"), or -1
 * when there is no such token. */
int32_t kv_tokenizer_token_id(const kv_tokenizer *t, const char *token);

/* One more than the largest token id (vocabulary plus added tokens). */
int kv_tokenizer_vocab_size(const kv_tokenizer *t);

/* The raw bytes of one token (decode of that single id before UTF-8 repair),
 * or NULL for an id that is not a token. *len receives the byte count. */
const char *kv_tokenizer_token_bytes(const kv_tokenizer *t, int32_t id, size_t *len);

/* true when id is an added token marked "special": true. */
bool kv_tokenizer_is_special(const kv_tokenizer *t, int32_t id);

/* The ids of tokenizer_config.json's bos_token / eos_token, or -1 when the
 * config does not name one (Qwen3 has no BOS; its eos_token is <|im_end|>). */
int32_t kv_tokenizer_bos_id(const kv_tokenizer *t);
int32_t kv_tokenizer_eos_id(const kv_tokenizer *t);

/* tokenizer_config.json's chat template (the "default" one when it lists
 * several) and bos_token, or NULL when absent; kv_chat_render reads them. */
const char *kv_tokenizer_chat_template(const kv_tokenizer *t);
const char *kv_tokenizer_bos_token(const kv_tokenizer *t);

#endif
