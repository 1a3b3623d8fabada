/* kvpress's ChunkKVPress selection, for parity tests. kvbench's ChunkKV is
 * strategy per_group with group_size = the chunk length (docs/eviction.md):
 * its groups start at S, score by sum and budget in whole groups of I; this
 * file is kvpress's own rule, so the tests can show where the two agree
 * and where kvpress's arithmetic (mean scores, a ratio, a kept partial
 * chunk) differs. */
#include <stdlib.h>

#include "evict/evict_impl.h"

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* L < c: no complete chunk, so kvpress falls back to the inner press's
 * token-level compress: each head its own int(L (1 - r)) best slots. */
static int select_tokens(const double *scores, int n_heads, int L, double r, int *keep,
                         int *n_keep, int *idx)
{
    int k = (int)(L * (1.0 - r));
    for (int h = 0; h < n_heads; h++) {
        kv_evict_top(scores + (size_t)h * (size_t)L, L, k, idx);
        qsort(idx, (size_t)k, sizeof *idx, cmp_int);
        for (int i = 0; i < k; i++)
            keep[(size_t)h * (size_t)L + (size_t)i] = idx[i];
        n_keep[h] = k;
    }
    return 0;
}

int kv_chunkkv_select_kvpress(const double *scores, int n_heads, int L, int c, double r,
                              int *keep, int *n_keep, kv_error *err)
{
    int n_chunks = L / c + (L % c > 0);
    int *idx = malloc((size_t)(L > 0 ? L : 1) * sizeof *idx);
    double *chunk = malloc((size_t)(n_chunks > 0 ? n_chunks : 1) * sizeof *chunk);
    if (!idx || !chunk) {
        free(idx);
        free(chunk);
        return kv_fail(err, "eviction: out of memory for %d slots", L);
    }
    if (L < c) {
        select_tokens(scores, n_heads, L, r, keep, n_keep, idx);
        free(idx);
        free(chunk);
        return 0;
    }
    /* a chunk's score: the mean over its slots of the heads' summed scores
     * (a partial last chunk over its own length) */
    for (int j = 0; j < n_chunks; j++) {
        int lo = j * c, hi = lo + c < L ? lo + c : L;
        double s = 0.0;
        for (int t = lo; t < hi; t++) {
            double over_heads = 0.0;
            for (int h = 0; h < n_heads; h++)
                over_heads += scores[(size_t)h * (size_t)L + (size_t)t];
            s += over_heads;
        }
        chunk[j] = s / (hi - lo);
    }
    int k = (int)(n_chunks * (1.0 - r)); /* in double: int(4 * (1 - 0.9)) is 0 */
    k = k > 1 ? k : 1;
    kv_evict_top(chunk, n_chunks, k, idx);
    qsort(idx, (size_t)k, sizeof *idx, cmp_int);
    int n = 0;
    for (int i = 0; i < k; i++)
        for (int t = idx[i] * c; t < idx[i] * c + c && t < L; t++)
            keep[n++] = t;
    for (int h = 0; h < n_heads; h++) { /* every head keeps the same slots */
        for (int i = 0; h > 0 && i < n; i++)
            keep[(size_t)h * (size_t)L + (size_t)i] = keep[i];
        n_keep[h] = n;
    }
    free(idx);
    free(chunk);
    return 0;
}
