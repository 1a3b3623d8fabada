/* H2O (heavy hitters): a slot's score is the attention it has received,
 * summed over all query heads (per_head: those of its KV head) and all
 * query rows of every forward. */
#include "evict_impl.h"

static void h2o_request(const kv_evict_cfg *cfg, bool prefill, kv_attn_stats_request *req)
{
    (void)cfg;
    (void)prefill;
    req->col_sums = true;
}

static int h2o_observe(const kv_scorer_obs *o, double *contrib, int *rows, kv_error *err)
{
    const kv_attn_stats *st = o->st;
    if (!o->req->col_sums || !st->col_sums)
        return kv_fail(err, "eviction h2o: the forward did not report column sums");
    int n = st->n_keys, sets = o->cfg->n_sets;
    if (st->n_heads % sets != 0)
        return kv_fail(err, "eviction h2o: %d query heads do not split over %d KV heads",
                       st->n_heads, sets);
    for (size_t t = 0; t < (size_t)sets * (size_t)n; t++)
        contrib[t] = 0.0;
    for (int h = 0; h < st->n_heads; h++) {
        const double *row = st->col_sums + (size_t)h * (size_t)n;
        double *dst = contrib + (size_t)(h / (st->n_heads / sets)) * (size_t)n;
        for (int t = 0; t < n; t++)
            dst[t] += row[t];
    }
    *rows = o->n_new;
    return 0;
}

const kv_scorer kv_scorer_h2o = {
    .name = "h2o",
    .request = h2o_request,
    .observe = h2o_observe,
    .rank = NULL,
};
