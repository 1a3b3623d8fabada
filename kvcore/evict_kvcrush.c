/* KVCrush refined selection, NNCF's variant (EVICTION.md §2.7, decision 6).
 *
 * Every candidate token the coarse top-k left gets one bit: 0 for the
 * floor(n/2) lowest scores, 1 for the rest. Units (tokens, or groups of G)
 * are ordered by their distance to an anchor pattern, most distant first,
 * and evenly spaced picks along that order keep a diverse sample of what
 * the coarse selection would have evicted. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "evict_impl.h"

/* i-th of k evenly spaced indices over 0..n-1 (decision 6's closed form). */
static int spaced(int i, int k, int n)
{
    return k == 1 ? 0 : (int)((long long)i * (n - 1) / (k - 1));
}

/* bits[t] for every token (0 where masked); returns the number of valid. */
static int token_bits(const double *s, int n, char *bits, int *order, double *tmp)
{
    int nv = 0;
    for (int t = 0; t < n; t++)
        if (s[t] != -INFINITY)
            tmp[nv++] = s[t];
    /* the floor(nv/2) lowest by (score asc, index asc) get 0: the rest
     * are the top nv - nv/2 by (score desc, index desc) */
    kv_evict_top(tmp, nv, nv - nv / 2, order);
    char *vbits = calloc((size_t)nv + 1, 1);
    if (!vbits)
        return -1;
    for (int j = 0; j < nv - nv / 2; j++)
        vbits[order[j]] = 1;
    for (int t = 0, j = 0; t < n; t++)
        bits[t] = s[t] != -INFINITY ? vbits[j++] : 0;
    free(vbits);
    return nv;
}

typedef enum { ANCHOR_ZEROS, ANCHOR_ONES, ANCHOR_ALTERNATE, ANCHOR_RANDOM, ANCHOR_MEAN } anchor;

static anchor anchor_of(const char *name)
{
    static const char *const names[] = {"zeros", "ones", "alternate", "random", "mean"};
    for (int i = 0; i < 5; i++)
        if (strcmp(name, names[i]) == 0)
            return (anchor)i;
    return ANCHOR_ZEROS; /* validation rejects anything else */
}

static int anchor_bit(anchor mode, int index, kv_mt19937 *rng, const char *bits, int G)
{
    switch (mode) {
    case ANCHOR_ALTERNATE:
        return index % 2;
    case ANCHOR_ONES:
        return 1;
    case ANCHOR_RANDOM:
        return (int)(kv_mt19937_next(rng) & 1u);
    case ANCHOR_MEAN: { /* the group's own majority bit */
        int ones = 0;
        for (int r = 0; r < G; r++)
            ones += bits[r];
        return 2 * ones > G;
    }
    case ANCHOR_ZEROS:
        break;
    }
    return 0;
}

/* Units by (distance desc, unit asc), a counting sort over distances
 * 0..G; masked units (distance -1) are left out. Returns how many. */
static int order_by_distance(const int *dist, int n_units, int G, int *order)
{
    int *start = calloc((size_t)G + 2, sizeof *start);
    if (!start)
        return -1;
    for (int u = 0; u < n_units; u++)
        if (dist[u] >= 0)
            start[G - dist[u] + 1]++;
    for (int d = 1; d <= G + 1; d++)
        start[d] += start[d - 1];
    for (int u = 0; u < n_units; u++)
        if (dist[u] >= 0)
            order[start[G - dist[u]]++] = u;
    int n = start[G];
    free(start);
    return n;
}

static int kvcrush_pick(const kv_refine_call *c, int *picks, kv_error *err)
{
    anchor mode = anchor_of(c->cfg->p->kvcrush_anchor);
    int G = c->unit, n = c->n_tokens, n_units = n / G;
    if (G == 1 && mode == ANCHOR_MEAN)
        return kv_fail(err, "Mean anchor is not supported for KVCrush in per-token mode.");
    char *bits = malloc((size_t)n + 1);
    int *ibuf = malloc((size_t)(2 * n + 1) * sizeof *ibuf);
    double *tmp = calloc((size_t)n + 1, sizeof *tmp);
    int rc = -1;
    if (!bits || !ibuf || !tmp) {
        kv_fail(err, "KVCrush: out of memory");
        goto done;
    }
    int *order = ibuf, *dist = ibuf + n;
    int nv = token_bits(c->scores, n, bits, order, tmp);
    if (nv < 0) {
        kv_fail(err, "KVCrush: out of memory");
        goto done;
    }
    /* anchors: per valid token in valid order (per_token), per candidate
     * group including masked ones (per_group) */
    for (int u = 0, j = 0; u < n_units; u++) {
        bool valid = c->scores[u * G] != -INFINITY;
        if (G == 1 && !valid) {
            dist[u] = -1;
            continue;
        }
        int a = anchor_bit(mode, G == 1 ? j++ : u, c->rng, bits + u * G, G);
        int d = 0;
        for (int r = 0; r < G; r++)
            d += bits[u * G + r] != a;
        dist[u] = valid ? d : -1;
    }
    int n_valid = order_by_distance(dist, n_units, G, order);
    int nvu = nv / G;
    if (n_valid < 0) {
        kv_fail(err, "KVCrush: out of memory");
        goto done;
    }
    if (nvu < c->n_pick || n_valid < nvu) {
        kv_fail(err, "KVCrush: %d candidate units for %d picks", nvu, c->n_pick);
        goto done;
    }
    for (int i = 0; i < c->n_pick; i++)
        picks[i] = order[spaced(i, c->n_pick, nvu)];
    rc = 0;
done:
    free(bits);
    free(ibuf);
    free(tmp);
    return rc;
}

const kv_refiner kv_refiner_kvcrush = {
    .name = "kvcrush",
    .needs_vnorm = false,
    .pick = kvcrush_pick,
};
