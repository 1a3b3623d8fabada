/* SnapKV as the NNCF pull request runs it (docs/eviction.md): at prefill,
 * the attention of the last window_size query rows, max-pooled per query
 * head over a centred window of 7 slots, then summed over heads (per_head:
 * over the query heads of each KV head); in decode,
 * plain H2O accumulation of the new row(s). */
#include <math.h>
#include <stdlib.h>

#include "evict/evict_impl.h"

enum { POOL = 7 }; /* fixed in NNCF and openvino.genai alike */

static void snapkv_request(const kv_evict_cfg *cfg, bool prefill, kv_attn_stats_request *req)
{
    if (prefill)
        kv_attn_stats_request_window(req, cfg->window);
    else
        req->col_sums = true; /* one query row: the window is that row */
}

/* Max over src[lo..hi], the clipped windows at the ends. */
static double window_max(const double *src, int lo, int hi)
{
    double m = -INFINITY;
    for (int j = lo; j <= hi; j++)
        m = src[j] > m ? src[j] : m;
    return m;
}

/* dst[t] += max(src[t-3 .. t+3]) clipped at both ends (-inf padding).
 * Inside, van Herk / Gil-Werman: with running maxima from the start (g)
 * and from the end (h) of each block of POOL slots, any full window
 * [a, a + POOL - 1] is max(h[a], g[a + POOL - 1]) -- three comparisons a
 * slot instead of seven. scratch holds 2n doubles. */
static void add_max_pooled(const double *src, int n, double *dst, double *scratch)
{
    const int r = POOL / 2;
    if (n < POOL) {
        for (int t = 0; t < n; t++)
            dst[t] += window_max(src, t - r < 0 ? 0 : t - r, t + r >= n ? n - 1 : t + r);
        return;
    }
    double *g = scratch, *h = scratch + n;
    for (int i = 0; i < n; i++)
        g[i] = i % POOL == 0 || src[i] > g[i - 1] ? src[i] : g[i - 1];
    for (int i = n - 1; i >= 0; i--)
        h[i] = i == n - 1 || (i + 1) % POOL == 0 || src[i] > h[i + 1] ? src[i] : h[i + 1];
    for (int t = 0; t < n; t++) {
        if (t < r || t + r >= n) {
            dst[t] += window_max(src, t - r < 0 ? 0 : t - r, t + r >= n ? n - 1 : t + r);
            continue;
        }
        double a = h[t - r], b = g[t + r];
        dst[t] += a > b ? a : b;
    }
}

static int snapkv_observe(const kv_scorer_obs *o, double *contrib, int *rows, kv_error *err)
{
    const kv_attn_stats *st = o->st;
    int n = st->n_keys, w = o->cfg->window;
    const double *sums = NULL;
    if (o->first || o->n_new > w)
        sums = kv_attn_stats_window(o->req, st, w);
    else if (o->req->col_sums)
        sums = st->col_sums;
    if (!sums)
        return kv_fail(err,
                       "eviction snapkv: the forward did not report the sums of the last "
                       "%d query rows",
                       w);
    int sets = o->cfg->n_sets;
    if (st->n_heads % sets != 0)
        return kv_fail(err, "eviction snapkv: %d query heads do not split over %d KV heads",
                       st->n_heads, sets);
    double *scratch = o->first ? malloc((size_t)(2 * n + 1) * sizeof *scratch) : NULL;
    if (o->first && !scratch)
        return kv_fail(err, "eviction snapkv: out of memory for %d slots", n);
    for (size_t t = 0; t < (size_t)sets * (size_t)n; t++)
        contrib[t] = 0.0;
    for (int h = 0; h < st->n_heads; h++) {
        const double *row = sums + (size_t)h * (size_t)n;
        double *dst = contrib + (size_t)(h / (st->n_heads / sets)) * (size_t)n;
        if (o->first) {
            add_max_pooled(row, n, dst, scratch);
        } else {
            for (int t = 0; t < n; t++)
                dst[t] += row[t];
        }
    }
    free(scratch);
    *rows = o->n_new < w ? o->n_new : w;
    return 0;
}

const kv_scorer kv_scorer_snapkv = {
    .name = "snapkv",
    .request = snapkv_request,
    .observe = snapkv_observe,
    .rank = NULL,
};
