/* Key norm (kvpress's KnormPress): keys with a small L2 norm tend to draw
 * the most attention, so the score is -||k||_2 over all KV heads of the
 * slot. Attention-free; RoPE (and rerotation) leaves the norm unchanged. */
#include <math.h>

#include "evict_impl.h"

static int knorm_rank(const kv_scorer_rank *r, double *scores, kv_error *err)
{
    (void)err;
    int row = kv_cache_row(r->cache);
    const float *k = r->cache->layers[r->layer].k;
    for (int i = 0; i < r->n; i++) {
        const float *x = k + (size_t)(r->first + i) * (size_t)row;
        double ss = 0.0;
        for (int j = 0; j < row; j++)
            ss += (double)x[j] * x[j];
        scores[i] = -sqrt(ss);
    }
    return 0;
}

const kv_scorer kv_scorer_knorm = {
    .name = "knorm",
    .request = NULL,
    .observe = NULL,
    .rank = knorm_rank,
};
