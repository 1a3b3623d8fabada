/* H2O (heavy hitters): a slot's score is the attention it has received,
 * summed over all query heads (per_head: those of its KV head) and all
 * query rows of every forward. */
#include "evict/evict_impl.h"

static void h2o_request(const kv_evict_cfg *cfg, bool prefill, kv_attn_stats_request *req)
{
    (void)cfg;
    (void)prefill;
    req->col_sums = true;
}

static int h2o_observe(const kv_scorer_obs *o, double *contrib, int *rows, kv_error *err)
{
    if (!o->req->col_sums || !o->st->col_sums)
        return kv_fail(err, "eviction h2o: the forward did not report column sums");
    *rows = o->n_new;
    return kv_scorer_sum_heads(o, o->st->col_sums, contrib, err);
}

const kv_scorer kv_scorer_h2o = {
    .name = "h2o",
    .request = h2o_request,
    .observe = h2o_observe,
    .rank = NULL,
};
