/* Random: fresh uniform scores at every eviction (kvpress's RandomPress),
 * drawn from the evictor's seeded generator in (step, layer) order so a run
 * reproduces. The floor every real method must beat. */
#include "evict/evict_impl.h"

static int random_rank(const kv_scorer_rank *r, double *scores, kv_error *err)
{
    (void)err;
    for (int i = 0; i < r->n; i++)
        scores[i] = kv_mt19937_double(r->rng);
    return 0;
}

const kv_scorer kv_scorer_random = {
    .name = "random",
    .request = NULL,
    .observe = NULL,
    .rank = random_rank,
};
