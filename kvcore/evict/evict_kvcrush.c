/* KVCrush refined selection, NNCF's variant (docs/eviction.md, Refiners).
 *
 * Every candidate token the coarse top-k left gets one bit: 0 for the
 * floor(n/2) lowest scores, 1 for the rest. Units (tokens, or groups of G)
 * are ordered by their distance to an anchor pattern, most distant first,
 * and evenly spaced picks along that order keep a diverse sample of what
 * the coarse selection would have evicted. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "evict/evict_impl.h"

/* i-th of k evenly spaced indices over 0..n-1 (decision 6's closed form). */
static int spaced(int i, int k, int n)
{
    return k == 1 ? 0 : (int)((long long)i * (n - 1) / (k - 1));
}

/* bits[t] for every token (0 where masked): 1 for the nv - nv/2 best valid
 * tokens by (score desc, index desc), so the floor(nv/2) lowest by (score
 * asc, index asc) get 0. valid[] receives the unmasked indices; returns
 * their number nv. The selection runs on those indices in place: no copy of
 * the scores, and index order among valid tokens is their slot order. */
static int token_bits(const double *s, int n, char *bits, int *valid)
{
    int nv = 0;
    for (int t = 0; t < n; t++) {
        bits[t] = 0;
        if (s[t] != -INFINITY)
            valid[nv++] = t;
    }
    int ones = nv - nv / 2;
    kv_evict_top_among(s, valid, nv, ones);
    for (int j = 0; j < ones; j++)
        bits[valid[j]] = 1;
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

/* Each unit's Hamming distance to its anchor, -1 for masked units. The
 * anchor goes per valid token in valid order (per_token), per candidate
 * group including masked ones (per_group). */
static void distances(const kv_refine_call *c, anchor mode, const char *bits, int *dist)
{
    int G = c->unit, n_units = c->n_tokens / G;
    if (G == 1) { /* one bit per unit: the common case, kept lean */
        for (int u = 0, j = 0; u < n_units; u++)
            dist[u] =
                c->scores[u] == -INFINITY ? -1 : bits[u] != anchor_bit(mode, j++, c->rng, NULL, 1);
        return;
    }
    for (int u = 0; u < n_units; u++) {
        int a = anchor_bit(mode, u, c->rng, bits + u * G, G), d = 0;
        for (int r = 0; r < G; r++)
            d += bits[u * G + r] != a;
        dist[u] = c->scores[u * G] != -INFINITY ? d : -1;
    }
}

/* Units by (distance desc, unit asc), a counting sort over distances
 * 0..G (start: G + 2 ints of scratch); masked units (distance -1) are left
 * out. Returns how many. */
static int order_by_distance(const int *dist, int n_units, int G, int *order, int *start)
{
    memset(start, 0, (size_t)(G + 2) * sizeof *start);
    for (int u = 0; u < n_units; u++)
        if (dist[u] >= 0)
            start[G - dist[u] + 1]++;
    for (int d = 1; d <= G + 1; d++)
        start[d] += start[d - 1];
    for (int u = 0; u < n_units; u++)
        if (dist[u] >= 0)
            order[start[G - dist[u]]++] = u;
    return start[G];
}

static int kvcrush_pick(const kv_refine_call *c, int *picks, kv_error *err)
{
    anchor mode = anchor_of(c->cfg->p->kvcrush_anchor);
    int G = c->unit, n = c->n_tokens, n_units = n / G;
    if (G == 1 && mode == ANCHOR_MEAN)
        return kv_fail(err, "Mean anchor is not supported for KVCrush in per-token mode.");
    /* one allocation a call: valid[n], dist[n_units], order[n_units],
     * start[G + 2], then bits[n] */
    size_t n_ints = (size_t)n + 2 * (size_t)n_units + (size_t)G + 2;
    int *valid = malloc(n_ints * sizeof(int) + (size_t)n + 1);
    if (!valid)
        return kv_fail(err, "KVCrush: out of memory");
    int *dist = valid + n, *order = dist + n_units, *start = order + n_units;
    char *bits = (char *)(valid + n_ints);
    int nv = token_bits(c->scores, n, bits, valid);
    distances(c, mode, bits, dist);
    int n_valid = order_by_distance(dist, n_units, G, order, start);
    int nvu = nv / G, rc = 0;
    if (nvu < c->n_pick || n_valid < nvu)
        rc = kv_fail(err, "KVCrush: %d candidate units for %d picks", nvu, c->n_pick);
    for (int i = 0; rc == 0 && i < c->n_pick; i++)
        picks[i] = order[spaced(i, c->n_pick, nvu)];
    free(valid);
    return rc;
}

const kv_refiner kv_refiner_kvcrush = {
    .name = "kvcrush",
    .pick = kvcrush_pick,
};
