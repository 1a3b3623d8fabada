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

#include "evict/evict_impl.h"
#include "util/pool.h"

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

/* One ranking: the inputs every query head's task reads, and its work
 * space. Query heads are the parallel tasks (the model's pool, when the
 * evictor has one): each writes its own row of p. */
typedef struct ea_job {
    const kv_scorer_rank *r;
    int g0, n_kv;    /* the KV heads ranked: g0 .. g0 + n_kv - 1 */
    double *c, *s;   /* [D/2] the average rotation */
    double *u;       /* [n_kv][n][D] Rbar^T k of every candidate */
    double *us;      /* [threads][n][D] U Sigma, per worker */
    double *p;       /* [n_kv * G][n] each query head's softmax */
} ea_job;

/* u = Rbar^T k of the candidates of KV head g into u [n][D]; buf: D floats
 * for a key the cache stores. */
static void rotate_keys(const ea_job *j, int g, double *u, float *buf)
{
    const kv_scorer_rank *r = j->r;
    const kv_cache *c = r->cache;
    int D = c->head_dim, half = D / 2;
    for (int i = 0; i < r->n; i++) {
        const float *k = kv_cache_heads(c, r->layer, KV_KEYS, r->first + i, g, 1, buf);
        double *ui = u + (size_t)i * (size_t)D;
        for (int f = 0; f < half; f++) {
            double x1 = k[f], x2 = k[f + half];
            ui[f] = j->c[f] * x1 + j->s[f] * x2;
            ui[f + half] = j->c[f] * x2 - j->s[f] * x1;
        }
    }
}

/* Task t: query head j->g0 * G + t's softmax over the candidates of z. */
static void head_task(void *ctx, int t, int worker)
{
    const ea_job *j = ctx;
    const kv_scorer_rank *r = j->r;
    int D = r->cache->head_dim, n = r->n, G = r->cfg->model->n_heads / r->cache->n_kv_heads;
    int h = j->g0 * G + t;
    size_t nd = (size_t)n * (size_t)D;
    const double *st = r->state + (size_t)h * head_size(D), *mu = st + 1, *cov = mu + D;
    const double *u = j->u + (size_t)(t / G) * nd;
    double *us = j->us + (size_t)worker * nd, *z = j->p + (size_t)t * (size_t)n;
    bool covariance = r->cfg->p->ea_use_covariance;
    if (covariance)
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, D, D, 1.0, u, D, cov, D, 0.0, us,
                    D);
    double mx = -INFINITY, sum = 0.0;
    for (int i = 0; i < n; i++) {
        const double *ui = u + (size_t)i * (size_t)D, *usi = us + (size_t)i * (size_t)D;
        double lin = 0.0, quad = 0.0;
        for (int k = 0; k < D; k++)
            lin += mu[k] * ui[k];
        for (int k = 0; covariance && k < D; k++)
            quad += usi[k] * ui[k];
        z[i] = lin / sqrt((double)D) + quad / (2.0 * D);
        mx = z[i] > mx ? z[i] : mx;
    }
    for (int i = 0; i < n; i++)
        sum += z[i] = exp(z[i] - mx);
    for (int i = 0; i < n; i++)
        z[i] /= sum;
}

/* ||v||_2 of KV head g's value at slot t. */
static double value_norm(const kv_cache *c, int layer, int t, int g)
{
    return kv_evict_l2_heads(c, layer, KV_VALUES, t, g, 1);
}

/* scores += each KV head's mean over its query heads, (+ eps) x ||v||. */
static void add_kv_heads(const ea_job *j, double *scores)
{
    const kv_scorer_rank *r = j->r;
    const kv_evict_params *p = r->cfg->p;
    int n = r->n, G = r->cfg->model->n_heads / r->cache->n_kv_heads;
    for (int gi = 0; gi < j->n_kv; gi++)
        for (int i = 0; i < n; i++) {
            double a = 0.0;
            for (int q = 0; q < G; q++)
                a += j->p[(size_t)(gi * G + q) * (size_t)n + (size_t)i] / G;
            scores[i] += p->ea_use_vnorm ? (a + p->ea_epsilon) *
                                               value_norm(r->cache, r->layer, r->first + i,
                                                          j->g0 + gi)
                                         : a;
        }
}

static int ea_rank(const kv_scorer_rank *r, double *scores, kv_error *err)
{
    const kv_evict_cfg *cfg = r->cfg;
    const kv_cache *c = r->cache;
    kv_pool *pool = cfg->model->pool;
    int D = c->head_dim, n = r->n, G = cfg->model->n_heads / c->n_kv_heads;
    int threads = kv_pool_threads(pool);
    ea_job j = {.r = r, .g0 = r->head < 0 ? 0 : r->head, .n_kv = r->head < 0 ? c->n_kv_heads : 1};
    size_t nd = (size_t)(n > 0 ? n : 1) * (size_t)D;
    j.c = malloc((size_t)D * sizeof(double));
    j.u = malloc((size_t)j.n_kv * nd * sizeof(double));
    j.us = malloc((size_t)threads * nd * sizeof(double));
    j.p = malloc((size_t)j.n_kv * (size_t)G * (size_t)(n > 0 ? n : 1) * sizeof(double));
    float *key = malloc((size_t)D * sizeof *key);
    int rc = 0;
    if (!j.c || !j.u || !j.us || !j.p || !key) {
        rc = kv_fail(err, "eviction expected_attention: out of memory for %d slots", n);
    } else {
        j.s = j.c + D / 2;
        average_rotation(cfg, c->next_pos, j.c, j.s);
        for (int gi = 0; gi < j.n_kv; gi++)
            rotate_keys(&j, j.g0 + gi, j.u + (size_t)gi * nd, key);
        kv_pool_run(pool, j.n_kv * G, head_task, &j);
        for (int i = 0; i < n; i++)
            scores[i] = 0.0;
        add_kv_heads(&j, scores);
    }
    free(j.c);
    free(j.u);
    free(j.us);
    free(j.p);
    free(key);
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
