/* TOVA (token omission via attention, arXiv 2401.06104; kvpress's
 * TOVAPress): a slot's score is the attention the newest query row pays
 * it, summed over all query heads (per_head: over those of its KV head),
 * the row's own column included. Non-accumulating: every forward replaces
 * the scores, so at the end of prefill the last prompt row ranks the
 * prompt and at each decode step the current token's row ranks the cache
 * (docs/eviction.md, "tova"). That is SnapKV's window statistic with W = 1
 * and no pooling. */
#include "evict/evict_impl.h"

static void tova_request(const kv_evict_cfg *cfg, bool prefill, kv_attn_stats_request *req)
{
    (void)cfg;
    (void)prefill;
    kv_attn_stats_request_window(req, 1); /* a decode step's one row, or the prompt's last */
}

static int tova_observe(const kv_scorer_obs *o, double *contrib, int *rows, kv_error *err)
{
    const double *last = kv_attn_stats_window(o->req, o->st, 1);
    if (!last)
        return kv_fail(err, "eviction tova: the forward did not report its last query row");
    *rows = 1;
    return kv_scorer_sum_heads(o, last, contrib, err);
}

const kv_scorer kv_scorer_tova = {
    .name = "tova",
    .recomputes = true,
    .request = tova_request,
    .observe = tova_observe,
};
