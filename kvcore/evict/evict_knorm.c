/* Key norm (kvpress's KnormPress): keys with a small L2 norm tend to draw
 * the most attention, so the score is -||k||_2 over all KV heads of the
 * slot (per_head: over the head's own key, as kvpress scores each head). Attention-free. RoPE and
 * rerotation leave the norm unchanged, so each slot is scored once, when it arrives. */
#include "evict/evict_impl.h"

static double knorm_slot(const kv_cache *c, int layer, int slot, int head)
{
    return -kv_evict_l2_heads(c, layer, KV_KEYS, slot, head < 0 ? 0 : head,
                              head < 0 ? c->n_kv_heads : 1);
}

const kv_scorer kv_scorer_knorm = {
    .name = "knorm",
    .request = NULL,
    .observe = NULL,
    .rank = NULL,
    .slot_score = knorm_slot,
};
