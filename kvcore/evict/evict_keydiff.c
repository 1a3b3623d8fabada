/* KeyDiff (arXiv 2504.15364; kvpress's KeyDiffPress): keys that point away
 * from the layer's average key direction are kept. For each KV head the
 * anchor is the mean of the unit-length cached keys over all L slots (start
 * and recent included), and a slot's score is -cos(k_t, anchor); per_token
 * and per_group sum it over the KV heads, per_head ranks each head on its
 * own. Attention-free and recomputed at every eviction, from the keys as
 * stored (post-RoPE, rerotated), so in decode it is kvpress's BlockPress
 * with blocks of one token. */
#include <math.h>
#include <stdlib.h>

#include "evict/evict_impl.h"

/* torch's cosine_similarity guards (1.13): eps 1e-12 on a key's norm for
 * the anchor, 1e-8 on the product of norms for the cosine; they only
 * matter for zero vectors. */
#define UNIT_EPS 1e-12
#define COS_EPS  1e-8

/* A key as stored (buf: head_dim floats, for a dequantised one). */
static const float *key_at(const kv_cache *c, int layer, int slot, int head, float *buf)
{
    return kv_cache_heads(c, layer, KV_KEYS, slot, head, 1, buf);
}

/* Adds -cos(k_t, anchor) of one KV head's slots first .. first + n - 1 to
 * scores; the anchor is over all L slots. anchor: D doubles, norm: L
 * doubles of room (each key's norm, taken once), buf: D floats. */
static void add_head_scores(const kv_scorer_rank *r, int head, int L, double *anchor,
                            double *norm, float *buf, double *scores)
{
    int D = r->cache->head_dim;
    for (int j = 0; j < D; j++)
        anchor[j] = 0.0;
    for (int t = 0; t < L; t++) {
        const float *k = key_at(r->cache, r->layer, t, head, buf);
        norm[t] = kv_evict_l2(k, D);
        double inv = 1.0 / fmax(norm[t], UNIT_EPS);
        for (int j = 0; j < D; j++)
            anchor[j] += k[j] * inv;
    }
    double an = 0.0;
    for (int j = 0; j < D; j++) {
        anchor[j] /= L;
        an += anchor[j] * anchor[j];
    }
    an = sqrt(an);
    for (int i = 0; i < r->n; i++) {
        int t = r->first + i;
        const float *k = key_at(r->cache, r->layer, t, head, buf);
        double dot = 0.0;
        for (int j = 0; j < D; j++)
            dot += k[j] * anchor[j];
        scores[i] -= dot / fmax(norm[t] * an, COS_EPS);
    }
}

static int keydiff_rank(const kv_scorer_rank *r, double *scores, kv_error *err)
{
    int L = r->first + r->n;
    double *anchor = malloc((size_t)r->cache->head_dim * sizeof *anchor);
    double *norm = malloc((size_t)(L > 0 ? L : 1) * sizeof *norm);
    float *buf = malloc((size_t)r->cache->head_dim * sizeof *buf);
    if (!anchor || !norm || !buf) {
        free(anchor);
        free(norm);
        free(buf);
        return kv_fail(err, "eviction keydiff: out of memory");
    }
    for (int i = 0; i < r->n; i++)
        scores[i] = 0.0;
    for (int h = 0; h < r->cache->n_kv_heads; h++)
        if (r->head < 0 || r->head == h)
            add_head_scores(r, h, L, anchor, norm, buf, scores);
    free(anchor);
    free(norm);
    free(buf);
    return 0;
}

const kv_scorer kv_scorer_keydiff = {
    .name = "keydiff",
    .recomputes = true,
    .rank = keydiff_rank,
};
