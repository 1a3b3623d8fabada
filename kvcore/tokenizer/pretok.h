/* kv_pretok: the pre-tokenizer, a chain of regex splits ("Isolated": every
 * match and every gap between matches is a piece), compiled with PCRE2 (UTF,
 * Unicode properties, JIT).
 *
 * tokenizer.json regexes are written for Oniguruma, which Hugging Face uses.
 * Two constructs mean something else in PCRE2 and are rewritten at load:
 *   \s, \S    Oniguruma's \s is Unicode White_Space; PCRE2's also matches
 *             U+180E. Both become \p{White_Space} / \P{White_Space}.
 *   (?i:...)  Oniguruma folds only ASCII here ('S matches 's); PCRE2 would
 *             also let s match U+017F. Letters in such a group become [sS].
 */
#ifndef KV_PRETOK_H
#define KV_PRETOK_H

#include <stdbool.h>
#include <stddef.h>

#include "util/error.h"

typedef struct kv_pretok kv_pretok;

/* The pre-tokenization regex of GPT-2's ByteLevel pre-tokenizer (use_regex). */
extern const char kv_pretok_gpt2_regex[];

kv_pretok *kv_pretok_new(kv_error *err);
void kv_pretok_free(kv_pretok *p);

/* Appends a split stage: pieces of the previous stage are split again by this
 * pattern (an Oniguruma regex, or with literal a plain string). */
int kv_pretok_add(kv_pretok *p, const char *pattern, bool literal, kv_error *err);

/* Working memory of one thread (PCRE2 match data). */
typedef struct kv_pretok_state kv_pretok_state;
kv_pretok_state *kv_pretok_state_new(const kv_pretok *p);
void kv_pretok_state_free(kv_pretok_state *st);

/* Calls fn for every piece of valid UTF-8 text s[0..n), in order; a non-zero
 * return from fn stops the split and is returned. With no stages the whole
 * text is one piece. */
typedef int (*kv_pretok_fn)(void *ctx, const char *s, size_t n);
int kv_pretok_split(const kv_pretok *p, kv_pretok_state *st, const char *s, size_t n,
                    kv_pretok_fn fn, void *ctx, kv_error *err);

#endif
