/* rope: rotary position embeddings, as Hugging Face computes them.
 *
 * inv_freq[i] = theta^(-2i/d) for i < d/2 (in float, as HF does), optionally
 * reshaped by Llama 3's frequency scaling. A vector of head_dim floats is
 * rotated in "half-split" (rotate_half / NeoX) layout: element i pairs with
 * element i + d/2, both turned by the angle pos * inv_freq[i].
 *
 * Rotations compose: turning a key stored at position p by the angles of a
 * delta gives (up to rounding) the key at p + delta. Eviction's rerotation
 * relies on it with its own rotation in double precision over the engine's
 * inv_freq (kvcore/evict/evict.c, gather), not through kv_rope_apply.
 */
#ifndef KV_ROPE_H
#define KV_ROPE_H

#include <stdint.h>

#include "util/error.h"
#include "model/model_config.h"

typedef struct kv_rope {
    int head_dim;
    float *inv_freq; /* [head_dim / 2] */
} kv_rope;

int kv_rope_init(kv_rope *r, const kv_rope_config *cfg, int head_dim, kv_error *err);
void kv_rope_free(kv_rope *r);

/* Rotates n_heads consecutive vectors of head_dim floats in x by position
 * pos (negative: rotate back). */
void kv_rope_apply(const kv_rope *r, float *x, int n_heads, int32_t pos);

#endif
