/* The ranking helpers every policy shares: the order of decision 2 (score
 * descending, the later slot first on ties, NaN last) with a linear-time
 * top-k, the L2 norm, and the sum of query heads into kept sets. The
 * bottom of kvcore/evict: it calls nothing above it. */
#include <math.h>
#include <stdlib.h>

#include "evict/evict_impl.h"

double kv_evict_l2(const float *x, int n)
{
    double ss = 0.0;
    for (int j = 0; j < n; j++)
        ss += (double)x[j] * x[j];
    return sqrt(ss);
}

double kv_evict_l2_heads(const kv_cache *c, int layer, kv_cache_part part, int slot, int h0,
                         int heads)
{
    int D = c->head_dim;
    float *buf = kv_cache_stores(c) ? malloc((size_t)D * sizeof *buf) : NULL;
    if (kv_cache_stores(c) && !buf)
        return NAN; /* out of memory for one head: the slot ranks last */
    double ss = 0.0;
    for (int h = h0; h < h0 + heads; h++) {
        const float *x = kv_cache_heads(c, layer, part, slot, h, 1, buf);
        for (int j = 0; j < D; j++)
            ss += (double)x[j] * x[j];
    }
    free(buf);
    return sqrt(ss);
}

int kv_scorer_sum_heads(const kv_scorer_obs *o, const double *sums, double *contrib, kv_error *err)
{
    const kv_attn_stats *st = o->st;
    int n = st->n_keys, sets = o->cfg->n_sets;
    if (st->n_heads % sets != 0)
        return kv_fail(err, "%d query heads do not split over %d KV heads", st->n_heads, sets);
    for (size_t t = 0; t < (size_t)sets * (size_t)n; t++)
        contrib[t] = 0.0;
    for (int h = 0; h < st->n_heads; h++) {
        const double *row = sums + (size_t)h * (size_t)n;
        double *dst = contrib + (size_t)(h / (st->n_heads / sets)) * (size_t)n;
        for (int t = 0; t < n; t++)
            dst[t] += row[t];
    }
    return 0;
}

/* Decision 2's order: higher score first, and among equal scores the
 * higher index (so the lower slot is evicted first). NaN ranks lowest. */
static double rank_value(const double *s, int i)
{
    return isnan(s[i]) ? -INFINITY : s[i];
}

/* Is (a, i) better than (b, j)? a and b are rank values. */
static bool better(double a, int i, double b, int j)
{
    return a > b || (a == b && i > j);
}

/* Quickselect: (score, index) is a total order with distinct keys, so the
 * k best are well defined; finding them costs O(n), not a sort. */
void kv_evict_top(const double *s, int n, int k, int *idx)
{
    for (int i = 0; i < n; i++)
        idx[i] = i;
    kv_evict_top_among(s, idx, n, k);
}

void kv_evict_top_among(const double *s, int *idx, int n, int k)
{
    int lo = 0, hi = n - 1, target = k - 1;
    if (k <= 0 || k >= n)
        return;
    while (lo < hi) {
        int pivot = idx[lo + (hi - lo) / 2], i = lo, j = hi;
        double pv = rank_value(s, pivot); /* once per round, not per comparison */
        while (i <= j) {
            while (better(rank_value(s, idx[i]), idx[i], pv, pivot))
                i++;
            while (better(pv, pivot, rank_value(s, idx[j]), idx[j]))
                j--;
            if (i <= j) {
                int t = idx[i];
                idx[i++] = idx[j];
                idx[j--] = t;
            }
        }
        if (target <= j)
            hi = j;
        else if (target >= i)
            lo = i;
        else
            break;
    }
}
