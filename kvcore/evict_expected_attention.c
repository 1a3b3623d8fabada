/* ExpectedAttention (arXiv 2510.00636; kvpress's ExpectedAttentionPress):
 * the attention a future query is expected to pay each cached key, with
 * the future queries modelled from the prompt's.
 *
 * At the prompt's forward each layer keeps, per query head, the mean mu
 * and the biased covariance Sigma of the prompt's queries (after q_norm,
 * before RoPE) over the rows start_size.. -- the start area doubles as
 * kvpress's sinks. They stay frozen in decode. At every eviction, with
 * Rbar the RoPE rotation averaged over the next ea_n_future_positions
 * positions (from the cache's next position on), a key k scores
 *     z = (Rbar mu) . k / sqrt(D) + k^T (Rbar Sigma Rbar^T) k / (2 D),
 * softmaxed over the candidate slots start_size .. L-1 per query head,
 * averaged over the query heads of its KV head, then (+ ea_epsilon) times
 * ||v||_2 when ea_use_vnorm; per_token and per_group sum over KV heads.
 * Half-split RoPE makes Rbar a 2x2 block [[c, -s], [s, c]] per pair
 * (f, f + D/2), c and s the mean cosine and sine of p * inv_freq[f], so
 * with u = Rbar^T k: z = mu . u / sqrt(D) + u^T Sigma u / (2 D), and the
 * quadratic terms of all slots are one matrix product U Sigma.
 * docs/eviction.md, "expected_attention". */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "evict_impl.h"

/* A layer's state: per query head, the rows counted, mu [D] and Sigma
 * [D][D] (both triangles). */
static size_t head_size(int D)
{
    return 1 + (size_t)D + (size_t)D * (size_t)D;
}

static size_t ea_state_size(const kv_evict_cfg *cfg)
{
    return (size_t)cfg->model->n_heads * head_size(cfg->model->head_dim);
}

static void ea_request(const kv_evict_cfg *cfg, bool prefill, kv_attn_stats_request *req)
{
    if (!prefill)
        return; /* the statistics are the prompt's, frozen in decode */
    req->q_moments = true;
    req->q_from = cfg->p->start_size;
    req->q_rows = 0;
}

/* mu and Sigma of query head h from the moments of rows q_from.. less the
 * rows q_from .. S-1 (a shared prefill may start before this config's S). */
static void head_moments(const kv_attn_stats_request *req, const kv_attn_stats *st, int S, int h,
                         double *out)
{
    int D = st->head_dim, skip = S - req->q_from;
    if (skip > st->q_count)
        skip = st->q_count;
    size_t hd = (size_t)st->n_heads * (size_t)D;
    const double *sum = st->q_sum + (size_t)h * (size_t)D;
    const double *outer = st->q_outer + (size_t)h * (size_t)D * (size_t)D;
    double n = st->q_count - skip, *mu = out + 1, *cov = mu + D;
    out[0] = n;
    for (int i = 0; i < D; i++) {
        mu[i] = sum[i];
        for (int j = i; j < D; j++)
            cov[i * D + j] = outer[i * D + j];
    }
    for (int r = 0; r < skip; r++) {
        const float *q = st->q_first + (size_t)r * hd + (size_t)h * (size_t)D;
        for (int i = 0; i < D; i++) {
            mu[i] -= q[i];
            for (int j = i; j < D; j++)
                cov[i * D + j] -= (double)q[i] * q[j];
        }
    }
    for (int i = 0; i < D; i++)
        mu[i] = n > 0 ? mu[i] / n : 0.0;
    for (int i = 0; i < D; i++)
        for (int j = i; j < D; j++) {
            double c = n > 0 ? cov[i * D + j] / n - mu[i] * mu[j] : 0.0;
            cov[i * D + j] = cov[j * D + i] = c;
        }
}

static int ea_observe(const kv_scorer_obs *o, double *contrib, int *rows, kv_error *err)
{
    const kv_attn_stats *st = o->st;
    int n = st->n_keys, S = o->cfg->p->start_size;
    for (size_t t = 0; t < (size_t)o->cfg->n_sets * (size_t)n; t++)
        contrib[t] = 0.0; /* it ranks at selection time */
    *rows = o->n_new;
    if (!o->first)
        return 0;
    const kv_attn_stats_request *req = o->req;
    int skip = S - req->q_from < st->q_count ? S - req->q_from : st->q_count;
    if (!req->q_moments || !st->q_sum || req->q_from > S || skip > req->q_rows ||
        st->head_dim != o->cfg->model->head_dim || st->n_heads != o->cfg->model->n_heads)
        return kv_fail(err, "eviction expected_attention: the prompt's forward did not report "
                            "the query moments from row %d",
                       S);
    size_t hs = head_size(st->head_dim);
    for (int h = 0; h < st->n_heads; h++)
        head_moments(req, st, S, h, o->state + (size_t)h * hs);
    return 0;
}

/* The mean cosine and sine of p * inv_freq[f] over the future positions. */
static void average_rotation(const kv_evict_cfg *cfg, int next_pos, double *c, double *s)
{
    int half = cfg->model->head_dim / 2, nf = cfg->p->ea_n_future_positions;
    for (int f = 0; f < half; f++) {
        double sc = 0.0, ss = 0.0;
        for (int p = 0; p < nf; p++) {
            double a = ((double)next_pos + p) * cfg->inv_freq[f];
            sc += cos(a);
            ss += sin(a);
        }
        c[f] = sc / nf;
        s[f] = ss / nf;
    }
}

/* Work space of one ranking. */
typedef struct ea_work {
    double *c, *s;  /* [D/2] the average rotation */
    double *u;      /* [n][D] Rbar^T k of every candidate */
    double *us;     /* [n][D] U Sigma */
    double *z, *acc; /* [n] */
} ea_work;

/* u = Rbar^T k of the candidates of KV head g. */
static void rotate_keys(const kv_scorer_rank *r, int g, const ea_work *w)
{
    const kv_cache *c = r->cache;
    int D = c->head_dim, half = D / 2, row = kv_cache_row(c);
    for (int i = 0; i < r->n; i++) {
        const float *k = c->layers[r->layer].k + (size_t)(r->first + i) * (size_t)row +
                         (size_t)g * (size_t)D;
        double *u = w->u + (size_t)i * (size_t)D;
        for (int f = 0; f < half; f++) {
            double x1 = k[f], x2 = k[f + half];
            u[f] = w->c[f] * x1 + w->s[f] * x2;
            u[f + half] = w->c[f] * x2 - w->s[f] * x1;
        }
    }
}

/* acc += softmax over the candidates of query head h's z, / G. */
static void add_head(const kv_scorer_rank *r, int h, int G, const ea_work *w)
{
    int D = r->cache->head_dim, n = r->n;
    const double *st = r->state + (size_t)h * head_size(D), *mu = st + 1, *cov = mu + D;
    bool covariance = r->cfg->p->ea_use_covariance;
    if (covariance)
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, D, D, 1.0, w->u, D, cov, D, 0.0,
                    w->us, D);
    double mx = -INFINITY, sum = 0.0;
    for (int i = 0; i < n; i++) {
        const double *u = w->u + (size_t)i * (size_t)D, *us = w->us + (size_t)i * (size_t)D;
        double lin = 0.0, quad = 0.0;
        for (int j = 0; j < D; j++)
            lin += mu[j] * u[j];
        for (int j = 0; covariance && j < D; j++)
            quad += us[j] * u[j];
        w->z[i] = lin / sqrt((double)D) + quad / (2.0 * D);
        mx = w->z[i] > mx ? w->z[i] : mx;
    }
    for (int i = 0; i < n; i++)
        sum += w->z[i] = exp(w->z[i] - mx);
    for (int i = 0; i < n; i++)
        w->acc[i] += w->z[i] / sum / G;
}

/* ||v||_2 of KV head g's value at slot t. */
static double value_norm(const kv_cache *c, int layer, int t, int g)
{
    return kv_evict_l2(c->layers[layer].v + (size_t)t * (size_t)kv_cache_row(c) +
                           (size_t)g * (size_t)c->head_dim,
                       c->head_dim);
}

static int ea_rank(const kv_scorer_rank *r, double *scores, kv_error *err)
{
    const kv_evict_cfg *cfg = r->cfg;
    const kv_cache *c = r->cache;
    int D = c->head_dim, n = r->n, G = cfg->model->n_heads / c->n_kv_heads;
    size_t nd = (size_t)(n > 0 ? n : 1) * (size_t)D;
    ea_work w = {.c = malloc((size_t)D * sizeof(double)),
                 .u = malloc(nd * sizeof(double)),
                 .us = malloc(nd * sizeof(double)),
                 .z = malloc((size_t)(n > 0 ? n : 1) * sizeof(double)),
                 .acc = malloc((size_t)(n > 0 ? n : 1) * sizeof(double))};
    int rc = 0;
    if (!w.c || !w.u || !w.us || !w.z || !w.acc) {
        rc = kv_fail(err, "eviction expected_attention: out of memory for %d slots", n);
        goto done;
    }
    w.s = w.c + D / 2;
    average_rotation(cfg, c->next_pos, w.c, w.s);
    for (int i = 0; i < n; i++)
        scores[i] = 0.0;
    for (int g = 0; g < c->n_kv_heads; g++) {
        if (r->head >= 0 && r->head != g)
            continue;
        rotate_keys(r, g, &w);
        for (int i = 0; i < n; i++)
            w.acc[i] = 0.0;
        for (int h = g * G; h < (g + 1) * G; h++)
            add_head(r, h, G, &w);
        for (int i = 0; i < n; i++)
            scores[i] += cfg->p->ea_use_vnorm
                             ? (w.acc[i] + cfg->p->ea_epsilon) *
                                   value_norm(c, r->layer, r->first + i, g)
                             : w.acc[i];
    }
done:
    free(w.c);
    free(w.u);
    free(w.us);
    free(w.z);
    free(w.acc);
    return rc;
}

const kv_scorer kv_scorer_expected_attention = {
    .name = "expected_attention",
    .recomputes = true,
    .state_size = ea_state_size,
    .request = ea_request,
    .observe = ea_observe,
    .rank = ea_rank,
};
