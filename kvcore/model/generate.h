/* generate: greedy decoding over a model and its KV cache.
 *
 * The next token is the argmax of the logits (the lowest id on ties, like
 * torch.argmax). Generation stops at an end-of-sequence id (the model's eos
 * ids from config.json and generation_config.json, unless ignore_eos), at an
 * extra stop id or stop string, when a callback says so, or after
 * max_new_tokens. The token that triggered a stop is the last generated id.
 *
 * Hooks let callers watch and steer: on_token streams each id, on_logits
 * sees the logits of every fed position, and on_step runs after each forward
 * with that forward's attention statistics, so eviction can compact the
 * cache between steps.
 */
#ifndef KV_GENERATE_H
#define KV_GENERATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/attn_stats.h"
#include "util/error.h"
#include "model/kvcache.h"
#include "model/model.h"

typedef enum kv_stop_reason {
    KV_STOP_LENGTH,   /* max_new_tokens reached */
    KV_STOP_EOS,      /* a model eos id */
    KV_STOP_ID,       /* an extra stop id */
    KV_STOP_STRING,   /* a stop string appeared in the generated text */
    KV_STOP_CALLBACK, /* on_token asked to stop */
} kv_stop_reason;

typedef struct kv_generate_opts {
    int max_new_tokens;
    bool ignore_eos;
    const int32_t *stop_ids; /* extra ids that end generation */
    int n_stop_ids;
    const char *const *stop_strings; /* need token_text */
    int n_stop_strings;
    /* The bytes of one token's text (for stop strings); *len set. */
    const char *(*token_text)(void *user, int32_t id, size_t *len);
    /* Each generated id as it is chosen (the stopping one included);
     * nonzero stops after it. */
    int (*on_token)(void *user, int32_t id);
    /* Logits rows [n_rows][vocab] of fed positions, in order: the prompt's
     * (all of them), then one per fed generated token. */
    int (*on_logits)(void *user, const float *logits, int n_rows, kv_error *err);
    /* After each forward: step 0 is the prompt, step k the k-th fed token.
     * stats is [n_layers] when stats_req asks for any, else NULL. The hook
     * may compact the cache. A negative return aborts with err filled. */
    int (*on_step)(void *user, kv_cache *c, const kv_attn_stats *stats, int step, kv_error *err);
    /* on_step touches only its own row's cache and state, so that
     * kv_generate_batch may run it on a pool thread beside the other rows'
     * (a sweep's per-step eviction is most of what runs between forwards). */
    bool on_step_concurrent;
    kv_attn_stats_request stats_req;
    void *user;
} kv_generate_opts;

typedef struct kv_generation {
    int32_t *ids; /* generated ids, [n] */
    int n;
    kv_stop_reason stop;
    double prefill_seconds, decode_seconds; /* wall time of the forwards */
    int n_decode_forwards;
} kv_generation;

/* Runs the prompt through the model (appending to c), then decodes. */
int kv_generate(kv_model *m, kv_cache *c, const int32_t *prompt, int n_prompt,
                const kv_generate_opts *o, kv_generation *out, kv_error *err);

/* Decodes from a cache that already holds the prompt, given the logits of
 * its last position (e.g. after a shared prefill and kv_cache_fork). */
int kv_generate_from(kv_model *m, kv_cache *c, const float *last_logits, const kv_generate_opts *o,
                     kv_generation *out, kv_error *err);

/* Decodes n sequences together, one batched forward per step
 * (kv_model_forward_batch): row r continues caches[r] from last_logits[r]
 * under opts[r] (its own stops, hooks and statistics) into outs[r]. A row
 * that stops leaves the batch; the others go on. Each row's tokens, hook
 * calls and statistics are those kv_generate_from gives it alone.
 * *n_forwards (may be NULL): the batched forwards run. */
int kv_generate_batch(kv_model *m, int n, kv_cache *const *caches, const float *const *last_logits,
                      const kv_generate_opts *const *opts, kv_generation *outs, int *n_forwards,
                      kv_error *err);

void kv_generation_free(kv_generation *g);

/* The index of the largest of n floats (the first on ties). */
int32_t kv_argmax(const float *x, int n);

#endif
