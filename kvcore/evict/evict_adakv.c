/* AdaKV's head-adaptive choice (head_budget "adaptive", docs/eviction.md):
 * the KV heads of a layer share one budget of intermediate tokens instead
 * of each keeping the same number. */
#include <stdlib.h>

#include "evict/evict_impl.h"

int kv_adaptive_pick(const double *score, const int *head, int n, int n_heads, int n_safe, int k,
                     char *take, kv_error *err)
{
    int *idx = malloc((size_t)(n > 0 ? n : 1) * sizeof *idx);
    if (!idx)
        return kv_fail(err, "eviction: out of memory for %d candidates", n);
    for (int i = 0; i < n; i++)
        take[i] = 0;
    int taken = 0;
    /* every head first keeps its own best n_safe: the safeguard */
    for (int h = 0; h < n_heads && n_safe > 0; h++) {
        int m = 0;
        for (int i = 0; i < n; i++)
            if (head[i] == h)
                idx[m++] = i;
        int safe = n_safe < m ? n_safe : m;
        kv_evict_top_among(score, idx, m, safe);
        for (int i = 0; i < safe; i++)
            take[idx[i]] = 1;
        taken += safe;
    }
    /* the rest of the budget goes to the best of all other entries
     * together; on equal scores the later entry wins, as everywhere */
    int m = 0;
    for (int i = 0; i < n; i++)
        if (!take[i])
            idx[m++] = i;
    int rest = k - taken < m ? k - taken : m;
    kv_evict_top_among(score, idx, m, rest);
    for (int i = 0; i < rest; i++)
        take[idx[i]] = 1;
    free(idx);
    return 0;
}

/* A layer's candidate entries: each head's held slots past its first S,
 * before its last R, in (position, head) order -- the order
 * kv_adaptive_pick breaks ties by: a merge of the heads' lists, each of
 * them in token order. */
typedef struct ada_entries {
    double *score;
    int *head, *slot;
    char *take;
    int n;
} ada_entries;

static void ada_free(ada_entries *e)
{
    free(e->score);
    free(e->head);
    free(e->slot);
    free(e->take);
}

static int ada_collect(const kv_cache *c, int layer, int sets, int L, int S, int R,
                       const double *score, const int *held, const int *n_held, int total,
                       ada_entries *e, kv_error *err)
{
    size_t n = (size_t)(total > 0 ? total : 1);
    int *at = malloc((size_t)sets * sizeof *at);
    *e = (ada_entries){malloc(n * sizeof *e->score), malloc(n * sizeof *e->head),
                       malloc(n * sizeof *e->slot), malloc(n), 0};
    if (!at || !e->score || !e->head || !e->slot || !e->take) {
        free(at);
        return kv_fail(err, "eviction: out of memory for %d candidates", total);
    }
    for (int g = 0; g < sets; g++)
        at[g] = S;
    while (e->n < total) {
        int best = -1;
        int32_t best_pos = 0;
        for (int g = 0; g < sets; g++) {
            if (at[g] >= n_held[g] - R)
                continue;
            int32_t pos = kv_cache_pos(c, layer, held[(size_t)g * (size_t)L + (size_t)at[g]], g);
            if (best < 0 || pos < best_pos) {
                best = g;
                best_pos = pos;
            }
        }
        int t = held[(size_t)best * (size_t)L + (size_t)at[best]++];
        e->score[e->n] = score[(size_t)best * (size_t)L + (size_t)t];
        e->head[e->n] = best;
        e->slot[e->n++] = t;
    }
    free(at);
    return 0;
}

int kv_adaptive_candidates(const int *n_keep, int sets, int S, int R)
{
    int total = 0;
    for (int g = 0; g < sets; g++)
        total += n_keep[g] - S - R > 0 ? n_keep[g] - S - R : 0;
    return total;
}

int kv_adaptive_select(const kv_cache *c, int layer, int sets, int L, int S, int R, int inter,
                       double alpha, const double *score, int *keep, int *n_keep, kv_error *err)
{
    int total = kv_adaptive_candidates(n_keep, sets, S, R);
    ada_entries e;
    int rc = ada_collect(c, layer, sets, L, S, R, score, keep, n_keep, total, &e, err);
    int n_safe = (int)(inter * alpha); /* truncated, as kvpress does */
    if (rc == 0)
        rc = kv_adaptive_pick(e.score, e.head, e.n, sets, n_safe, sets * inter, e.take, err);
    char *mark = rc == 0 ? calloc((size_t)sets * (size_t)L, 1) : NULL;
    if (rc == 0 && !mark)
        rc = kv_fail(err, "eviction: out of memory");
    for (int i = 0; rc == 0 && i < e.n; i++)
        mark[(size_t)e.head[i] * (size_t)L + (size_t)e.slot[i]] = e.take[i];
    for (int g = 0; rc == 0 && g < sets; g++) {
        int *kg = keep + (size_t)g * (size_t)L, k = 0; /* kept slots overwrite held ones */
        for (int i = 0; i < n_keep[g]; i++)
            if (i < S || i >= n_keep[g] - R || mark[(size_t)g * (size_t)L + (size_t)kg[i]])
                kg[k++] = kg[i];
        n_keep[g] = k;
    }
    free(mark);
    ada_free(&e);
    return rc;
}
