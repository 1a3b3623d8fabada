/* Key norm (kvpress's KnormPress): keys with a small L2 norm tend to draw
 * the most attention, so the score is -||k||_2 over all KV heads of the
 * slot (per_head: over the head's own key, as kvpress scores each head). Attention-free. RoPE and
 * rerotation leave the norm unchanged, so each slot is scored once, when it arrives. */
#include "evict/evict_impl.h"

static double knorm_slot(const kv_cache *c, int layer, int slot, int head)
{
    int row = kv_cache_row(c), n = head < 0 ? row : c->head_dim;
    const float *x = c->layers[layer].k + (size_t)slot * (size_t)row +
                     (size_t)(head < 0 ? 0 : head) * (size_t)c->head_dim;
    return -kv_evict_l2(x, n);
}

const kv_scorer kv_scorer_knorm = {
    .name = "knorm",
    .request = NULL,
    .observe = NULL,
    .rank = NULL,
    .slot_score = knorm_slot,
};
