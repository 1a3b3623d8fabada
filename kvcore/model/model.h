/* model: a Qwen3 / Qwen2 / Llama transformer loaded from a Hugging Face
 * folder, and its forward pass over a KV cache.
 *
 * Weights are read into memory in their file dtype (BF16 stays BF16: decode
 * widens it in registers; prefill widens blocks for sgemm). Norm weights and
 * biases are small and widened to F32 at load.
 *
 * The forward appends n tokens to a cache. Token i gets RoPE position
 * cache->next_pos + i; its slot's pos records its index in the sequence,
 * next_pos + token_offset + i (kvcache.h); next_pos advances by n.
 * Attention is causal by slot order (a token sees every slot before its own,
 * whatever positions eviction left there), so a compacted cache works as is.
 * A call is processed in query chunks (kv_model_set_chunk), so an 8k prompt
 * never holds an 8k x 8k score matrix per head.
 *
 * A model is read-only during a forward; forwards on different caches may
 * run one after the other freely.
 */
#ifndef KV_MODEL_H
#define KV_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/attn_stats.h"
#include "model/kernels.h"
#include "util/error.h"
#include "model/kvcache.h"
#include "model/model_config.h"
#include "model/rope.h"

typedef struct kv_model kv_model;

/* Loads DIR/config.json (+ generation_config.json) and the safetensors. */
int kv_model_load(const char *dir, kv_model **out, kv_error *err);
void kv_model_free(kv_model *m);

const kv_model_config *kv_model_get_config(const kv_model *m);

/* The model's RoPE (for eviction's key rerotation). */
const kv_rope *kv_model_get_rope(const kv_model *m);

/* Layer `layer`'s o_proj weight, [hidden][n_heads * head_dim] in its file
 * dtype, as the forward uses it (CriticalKV reads it). */
struct kv_weight;
const struct kv_weight *kv_model_o_proj(const kv_model *m, int layer);

/* Bytes of weights held in memory. */
size_t kv_model_weight_bytes(const kv_model *m);

/* Threads of the model's pool (kv_set_threads sets the default). */
int kv_model_set_threads(kv_model *m, int threads, kv_error *err);
int kv_model_threads(const kv_model *m);
/* The model's pool, for work between forwards (its threads are idle then). */
struct kv_pool;
struct kv_pool *kv_model_pool(kv_model *m);

/* The compute mode of the forward (kernels.h; default KV_COMPUTE_F32).
 * Switching to BF16 rounds the model's F32/F16 matrices to BF16 for good
 * (switching such a model back fails: load it again); BF16 weights are
 * used as they are either way. Rounding replaces those matrices, so switch
 * before anything keeps a weight descriptor (kv_model_o_proj). */
int kv_model_set_compute(kv_model *m, kv_compute mode, kv_error *err);
kv_compute kv_model_compute(const kv_model *m);

/* Query rows per prefill chunk (default 1024; at least 1). */
void kv_model_set_chunk(kv_model *m, int chunk);

/* An empty cache shaped for this model, with room for cap slots per layer. */
kv_cache *kv_model_cache_new(const kv_model *m, int cap, kv_error *err);

/* Runs tokens[0..n) after what the cache holds, appending their keys and
 * values. logits (may be NULL): with all_logits [n][vocab], else [vocab] for
 * the last token. When req asks for statistics, stats is an array of
 * n_layers filled by the forward (see kv_model_stats_new); else NULL. */
int kv_model_forward(kv_model *m, kv_cache *c, const int32_t *tokens, int n,
                     const kv_attn_stats_request *req, kv_attn_stats *stats, float *logits,
                     bool all_logits, kv_error *err);

/* One decode step of n sequences as one batch: row b appends tokens[b] to
 * caches[b] (n distinct caches, each at its own length and next_pos). The
 * projections and the LM head read each weight once for all rows;
 * attention, RoPE and the cache append are each row's own. Row b's keys,
 * values, statistics and logits are bit-identical to kv_model_forward of
 * tokens[b] alone on caches[b]. reqs (may be NULL) and stats: per row, as
 * kv_model_forward's req and stats. logits (may be NULL): [n][vocab]. */
int kv_model_forward_batch(kv_model *m, kv_cache *const *caches, const int32_t *tokens, int n,
                           const kv_attn_stats_request *const *reqs, kv_attn_stats *const *stats,
                           float *logits, kv_error *err);

/* The same n tokens appended to each of n_caches distinct caches, as one
 * forward: every weight is read once for all n_caches x n rows (batched
 * GEMV), so that a row's keys, values and logits do not depend on which
 * other caches share the call; RoPE, the cache append and attention are each
 * cache's own. Without statistics. logits (may be NULL): [n_caches][vocab],
 * each cache's last token, or with all_logits [n_caches][n][vocab]. (Query-agnostic eviction prefills the question on
 * every config's compressed cache at once.) */
int kv_model_forward_many(kv_model *m, kv_cache *const *caches, int n_caches, const int32_t *tokens,
                          int n, float *logits, bool all_logits, kv_error *err);

/* Per-layer statistics buffers for a forward of n tokens on cache c (n_keys
 * = each layer's length after the call), zeroed; free with
 * kv_model_stats_free. */
kv_attn_stats *kv_model_stats_new(const kv_model *m, const kv_cache *c, int n,
                                  const kv_attn_stats_request *req, kv_error *err);
void kv_model_stats_free(kv_attn_stats *stats, int n_layers);

/* Statistics buffers for one decode step of n tokens on cache c, reusing
 * *stats (an earlier step's, or NULL for new ones) where its buffers hold
 * the step: a generation's steps need the same buffers, a slot longer each,
 * and fresh ones per row and step (7 MB at Qwen3-0.6B's 16 heads x 2,048
 * keys x 28 layers) were most of a sweep's page faults. Not zeroed: the
 * forward zeroes them (req->rows_before must be 0). No query moments. On
 * failure *stats is freed and NULL. */
int kv_model_stats_renew(const kv_model *m, const kv_cache *c, int n,
                         const kv_attn_stats_request *req, kv_attn_stats **stats, kv_error *err);

#endif
