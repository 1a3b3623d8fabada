/* CriticalKV's shortcut: the bound on a slot's value weight from the cache's
 * value norms and the model's per-head gains must never fall below the
 * weight, and skipping the slots it rules out must not change a single
 * kept slot -- against the same evictor computing every weight. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "evict/evict.h"
#include "evict/evict_impl.h"
#include "model/kernels.h"
#include "model/kvcache.h"
#include "util/pool.h"

enum { LAYERS = 2, HEADS = 4, KV = 2, DIM = 8, HIDDEN = 24, PREFILL = 240, STEPS = 24 };

static uint64_t rng_state;

static double uniform(void)
{
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}

static double gaussian(void)
{
    return sqrt(-2.0 * log(uniform() + 1e-300)) * cos(6.283185307179586 * uniform());
}

typedef struct world {
    float *o_proj[LAYERS];
    kv_weight wo[LAYERS];
    kv_evict_model exact, bounded; /* the same model, without and with gains */
} world;

static void world_init(world *w)
{
    memset(w, 0, sizeof *w);
    for (int l = 0; l < LAYERS; l++) {
        w->o_proj[l] = malloc(sizeof(float) * HIDDEN * HEADS * DIM);
        for (int i = 0; i < HIDDEN * HEADS * DIM; i++) /* uneven columns, like trained weights */
            w->o_proj[l][i] = (float)(gaussian() * (1 + (i % 7)) * 0.1);
        w->wo[l] = (kv_weight){KV_DTYPE_F32, w->o_proj[l], HIDDEN, HEADS * DIM};
    }
    w->exact = (kv_evict_model){.n_layers = LAYERS,
                                .n_heads = HEADS,
                                .n_kv_heads = KV,
                                .head_dim = DIM,
                                .rope_theta = 10000.0,
                                .hidden = HIDDEN,
                                .o_proj = w->wo};
    w->bounded = w->exact;
    kv_error err;
    cr_assert_eq(kv_evict_model_vnorm_gains(&w->bounded, &err), 0, "%s", err.msg);
}

static void world_free(world *w)
{
    free((void *)w->bounded.vnorm_gain);
    for (int l = 0; l < LAYERS; l++)
        free(w->o_proj[l]);
}

/* One token per layer: random values whose size varies a lot from token to
 * token (so weights differ), some all zero; keys do not matter here. */
static void write_token(kv_cache *c, int pos)
{
    kv_error err;
    cr_assert_eq(kv_cache_reserve(c, 1, &err), 0, "%s", err.msg);
    for (int l = 0; l < LAYERS; l++) {
        kv_cache_layer *cl = &c->layers[l];
        int t = cl->len, row = KV * DIM;
        double scale = pos % 37 == 5 ? 0.0 : exp(gaussian());
        for (int i = 0; i < row; i++) {
            cl->v[(size_t)t * row + i] = (float)(gaussian() * scale);
            cl->k[(size_t)t * row + i] = 0.0f;
        }
        kv_cache_set_pos(c, l, t, pos);
        kv_cache_measure_values(c, cl, t, 1);
        cl->len = t + 1;
    }
    c->next_pos = pos + 1;
}

/* Heavy-tailed attention column sums, a function of (layer, head, key
 * position, seed) only, so both evictors see the same statistics. */
static double attention(int layer, int h, int pos, int seed)
{
    uint64_t x = (uint64_t)(layer * 131 + h * 17 + pos * 7919 + seed * 104729) * 0x9E3779B97F4A7C15ULL;
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ULL;
    x ^= x >> 32;
    double u = ((double)(x >> 11) + 0.5) / 9007199254740992.0;
    return exp(3.0 * (u - 0.5) * 2.0); /* log-uniform over 6 nats */
}

static void observe(kv_evictor *ev, const kv_cache *c, bool prefill, int seed)
{
    for (int l = 0; l < LAYERS; l++) {
        int n = c->layers[l].len;
        kv_attn_stats_request req;
        kv_evictor_stats_request(ev, prefill, &req);
        kv_attn_stats st = {.n_heads = HEADS, .n_keys = n};
        st.col_sums = malloc(sizeof(double) * HEADS * (size_t)n);
        for (int w = 0; w < req.n_windows; w++)
            st.win_sums[w] = malloc(sizeof(double) * HEADS * (size_t)n);
        for (int h = 0; h < HEADS; h++)
            for (int t = 0; t < n; t++) {
                int pos = kv_cache_pos(c, l, t, h / (HEADS / KV));
                st.col_sums[h * n + t] = attention(l, h, pos, seed);
                for (int w = 0; w < req.n_windows; w++)
                    st.win_sums[w][h * n + t] = attention(l, h, pos, seed + 1 + w);
            }
        kv_error err;
        cr_assert_eq(kv_evictor_observe(ev, l, &req, &st, prefill, &err), 0, "%s", err.msg);
        free(st.col_sums);
        for (int w = 0; w < req.n_windows; w++)
            free(st.win_sums[w]);
    }
}

static void assert_same_cache(const kv_cache *a, const kv_cache *b, const char *what, int step)
{
    for (int l = 0; l < LAYERS; l++) {
        cr_assert_eq(a->layers[l].len, b->layers[l].len, "%s step %d layer %d", what, step, l);
        for (int t = 0; t < a->layers[l].len; t++)
            for (int g = 0; g < KV; g++)
                cr_assert_eq(kv_cache_pos(a, l, t, g), kv_cache_pos(b, l, t, g),
                             "%s step %d layer %d slot %d head %d", what, step, l, t, g);
    }
}

/* Prefill, compress, then decode steps: both evictors keep the same slots
 * at every step, and the bounded one computed fewer weights. */
static void same_picks(const char *json)
{
    world w;
    world_init(&w);
    kv_evict_params p;
    kv_error err;
    kv_evict_params_default(&p);
    cJSON *obj = cJSON_Parse(json);
    cr_assert_not_null(obj);
    cr_assert_eq(kv_evict_params_from_json(&p, obj, &err), 0, "%s", err.msg);
    cJSON_Delete(obj);
    kv_evictor *ev_exact = kv_evictor_new(&p, &w.exact, &err);
    cr_assert_not_null(ev_exact, "%s", err.msg);
    kv_evictor *ev_bound = kv_evictor_new(&p, &w.bounded, &err);
    cr_assert_not_null(ev_bound, "%s", err.msg);
    kv_cache *a = kv_cache_new(LAYERS, KV, DIM, PREFILL, &err), *b;
    rng_state = 42;
    for (int t = 0; t < PREFILL; t++)
        write_token(a, t);
    b = kv_cache_fork(a, PREFILL, &err);
    cr_assert_not_null(b, "%s", err.msg);
    for (int step = 0; step <= STEPS; step++) {
        if (step > 0) {
            uint64_t saved = rng_state;
            write_token(a, a->next_pos);
            rng_state = saved;
            write_token(b, b->next_pos);
        }
        observe(ev_exact, a, step == 0, step);
        observe(ev_bound, b, step == 0, step);
        cr_assert_eq(kv_evictor_compress(ev_exact, a, NULL, NULL, &err), 0, "%s", err.msg);
        cr_assert_eq(kv_evictor_compress(ev_bound, b, NULL, NULL, &err), 0, "%s", err.msg);
        assert_same_cache(a, b, json, step);
    }
    long long all = kv_evictor_vnorm_count(ev_exact), some = kv_evictor_vnorm_count(ev_bound);
    cr_log_info("%s: %lld of %lld value weights computed", json, some, all);
    cr_assert_lt(some, all, "the bounds spared nothing (%lld of %lld)", some, all);
    kv_evictor_free(ev_exact);
    kv_evictor_free(ev_bound);
    kv_cache_free(a);
    kv_cache_free(b);
    world_free(&w);
}

Test(criticalkv_bound, bound_never_below_the_weight)
{
    world w;
    world_init(&w);
    kv_error err;
    kv_cache *c = kv_cache_new(LAYERS, KV, DIM, PREFILL, &err);
    rng_state = 7;
    for (int t = 0; t < PREFILL; t++)
        write_token(c, t);
    double tightest = INFINITY;
    for (int l = 0; l < LAYERS; l++) {
        const kv_cache_layer *cl = &c->layers[l];
        for (int g = -1; g < KV; g++) {
            double *wt = malloc(sizeof(double) * PREFILL);
            cr_assert_eq(kv_criticalkv_vnorm(&w.exact, l, g, cl->v, PREFILL, wt, &err), 0, "%s",
                         err.msg);
            for (int t = 0; t < PREFILL; t++) {
                double bound = 0.0;
                for (int k = 0; k < KV; k++)
                    if (g < 0 || g == k)
                        bound += w.bounded.vnorm_gain[l * KV + k] * cl->vlen[t * KV + k];
                cr_assert_geq(bound, wt[t], "layer %d set %d slot %d: bound %g < weight %g", l,
                              g, t, bound, wt[t]);
                if (wt[t] > 0)
                    tightest = fmin(tightest, bound / wt[t]);
            }
            free(wt);
        }
    }
    cr_log_info("tightest bound/weight ratio %.3f", tightest);
    cr_assert_lt(tightest, 4.0, "the bound is too loose to rule anything out");
    kv_cache_free(c);
    world_free(&w);
}

Test(criticalkv_bound, per_token_same_picks)
{
    same_picks("{\"algorithm\": \"h2o\", \"start_size\": 4, \"recent_size\": 16, "
               "\"intermediate_size\": 40, \"refined_size\": 12, \"refined_algorithm\": "
               "\"criticalkv\"}");
}

Test(criticalkv_bound, per_token_norm_sum_snapkv_same_picks)
{
    same_picks("{\"algorithm\": \"snapkv\", \"start_size\": 4, \"recent_size\": 16, "
               "\"intermediate_size\": 40, \"refined_size\": 20, \"refined_algorithm\": "
               "\"criticalkv\", \"score_aggregation\": \"norm_sum\", \"window_size\": 8}");
}

Test(criticalkv_bound, per_group_same_picks)
{
    same_picks("{\"algorithm\": \"h2o\", \"strategy\": \"per_group\", \"group_size\": 4, "
               "\"start_size\": 4, \"recent_size\": 16, \"intermediate_size\": 40, "
               "\"refined_size\": 8, \"refined_algorithm\": \"criticalkv\"}");
}

Test(criticalkv_bound, per_head_same_picks)
{
    same_picks("{\"algorithm\": \"h2o\", \"strategy\": \"per_head\", \"start_size\": 4, "
               "\"recent_size\": 16, \"intermediate_size\": 40, \"refined_size\": 12, "
               "\"refined_algorithm\": \"criticalkv\"}");
}

/* CriticalKV reads the model's o_proj in its file dtype: BF16 and F16
 * weights give the very weights and gains that an F32 copy of them gives
 * (widening is exact; per-KV-head calls widen only their heads' columns). */
static void expect_same_as_f32_copy(kv_dtype dtype)
{
    enum { N = 200, ROW = KV * DIM, COLS = HEADS * DIM };
    rng_state = 7;
    uint16_t *half[LAYERS];
    float *wide[LAYERS];
    kv_weight w16[LAYERS], w32[LAYERS];
    for (int l = 0; l < LAYERS; l++) {
        half[l] = malloc(sizeof(uint16_t) * HIDDEN * COLS);
        wide[l] = malloc(sizeof(float) * HIDDEN * COLS);
        for (int i = 0; i < HIDDEN * COLS; i++) {
            float f = (float)(gaussian() * 0.1);
            uint32_t u;
            memcpy(&u, &f, sizeof u);
            if (dtype == KV_DTYPE_BF16) { /* truncated to BF16 */
                half[l][i] = (uint16_t)(u >> 16);
                wide[l][i] = kv_bf16_to_f32(half[l][i]);
            } else { /* a finite F16: random sign and mantissa, exponent 8..22 */
                half[l][i] = (uint16_t)((u & 0x8000u) | (8u + u % 15u) << 10 | (u >> 7 & 0x3FFu));
                wide[l][i] = kv_f16_to_f32(half[l][i]);
            }
        }
        w16[l] = (kv_weight){dtype, half[l], HIDDEN, COLS};
        w32[l] = (kv_weight){KV_DTYPE_F32, wide[l], HIDDEN, COLS};
    }
    kv_error err;
    kv_evict_model m16 = {.n_layers = LAYERS, .n_heads = HEADS, .n_kv_heads = KV,
                          .head_dim = DIM, .rope_theta = 10000.0, .hidden = HIDDEN,
                          .o_proj = w16};
    kv_evict_model m32 = m16;
    m32.o_proj = w32;
    m16.pool = kv_pool_new(3, &err);
    cr_assert(m16.pool, "%s", err.msg);
    cr_assert_eq(kv_evict_model_vnorm_gains(&m16, &err), 0, "%s", err.msg);
    cr_assert_eq(kv_evict_model_vnorm_gains(&m32, &err), 0, "%s", err.msg);
    for (int i = 0; i < LAYERS * KV; i++)
        cr_expect_eq(m16.vnorm_gain[i], m32.vnorm_gain[i], "gain %d", i);
    float *v = malloc(sizeof(float) * N * ROW);
    for (int i = 0; i < N * ROW; i++)
        v[i] = (float)gaussian();
    double a[N], b[N];
    for (int l = 0; l < LAYERS; l++)
        for (int g = -1; g < KV; g++) { /* -1: every head (per_token), else one KV head */
            cr_assert_eq(kv_criticalkv_vnorm(&m16, l, g, v, N, a, &err), 0, "%s", err.msg);
            cr_assert_eq(kv_criticalkv_vnorm(&m32, l, g, v, N, b, &err), 0, "%s", err.msg);
            for (int t = 0; t < N; t++)
                cr_expect_eq(a[t], b[t], "layer %d head %d slot %d: %.17g vs %.17g", l, g, t,
                             a[t], b[t]);
        }
    /* an o_proj of the wrong shape is refused */
    w16[1].cols = COLS - 1;
    cr_assert_eq(kv_evict_model_vnorm_gains(&m16, &err), -1);
    cr_expect(strstr(err.msg, "layer 1's o_proj is [24][31], not [24][32]"), "%s", err.msg);
    free(v);
    kv_pool_free(m16.pool);
    free((void *)m16.vnorm_gain);
    free((void *)m32.vnorm_gain);
    for (int l = 0; l < LAYERS; l++)
        free(half[l]), free(wide[l]);
}

Test(criticalkv_bound, bf16_o_proj_equals_its_f32_copy)
{
    expect_same_as_f32_copy(KV_DTYPE_BF16);
}

Test(criticalkv_bound, f16_o_proj_equals_its_f32_copy)
{
    expect_same_as_f32_copy(KV_DTYPE_F16);
}
