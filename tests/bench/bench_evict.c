/* bench_evict: what eviction costs on the Qwen3-0.6B shapes (28 layers, 16
 * query heads, 8 KV heads, head_dim 128, hidden 1024, rope_theta 1e6).
 *
 *   build/tests/bench_evict [PROMPT_TOKENS] [DECODE_STEPS] [CONFIG_SUBSTRING]
 *                                    (8192, 256, all configs and the sweep)
 *
 * Measures, with synthetic attention statistics and random keys:
 *   - compressing an 8k prefill (observe 28 layers + compress) per config,
 *   - one decode step of eviction work (observe + compress) per config,
 *   - a sweep of 8 configs over one prefill (fork + observe + compress each),
 * and sets them against the model work they must be small next to: the
 * prefill's FLOPs at the sgemm rate measured here, and a decode step's
 * weight traffic at the sgemv rate measured here (both single-process, the
 * threads OpenBLAS uses by default). */
#include <cblas.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/clock.h"
#include "evict/evict.h"
#include "model/kernels.h"
#include "util/pool.h"

enum { LAYERS = 28, HEADS = 16, KV_HEADS = 8, DIM = 128, HIDDEN = 1024, FFN = 3072 };
static const double VOCAB = 151936;

static void die(const char *what, const kv_error *err)
{
    fprintf(stderr, "bench_evict: %s: %s\n", what, err ? err->msg : "out of memory");
    exit(1);
}

static float frand(void)
{
    return (float)rand() / (float)RAND_MAX - 0.5f;
}

/* ---- the model work eviction is compared with ---- */

/* GFLOP/s of sgemm on a prefill-like shape. */
static double sgemm_rate(void)
{
    int m = 1024, k = HIDDEN, n = FFN;
    float *a = malloc((size_t)m * k * 4), *b = malloc((size_t)k * n * 4),
          *c = malloc((size_t)m * n * 4);
    if (!a || !b || !c)
        die("sgemm", NULL);
    for (size_t i = 0; i < (size_t)m * k; i++)
        a[i] = frand();
    for (size_t i = 0; i < (size_t)k * n; i++)
        b[i] = frand();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1, a, k, b, n, 0, c, n);
    double t0 = kv_clock_s();
    int reps = 5;
    for (int r = 0; r < reps; r++)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1, a, k, b, n, 0, c, n);
    double dt = kv_clock_s() - t0;
    free(a), free(b), free(c);
    return 2.0 * m * n * k * reps / dt / 1e9;
}

/* Seconds for the matrix-vector products of one decoder layer's weights
 * (f32), the memory-bound core of a decode step. */
static double layer_sgemv_seconds(void)
{
    static const int shapes[][2] = {{2048, HIDDEN}, {1024, HIDDEN}, {1024, HIDDEN}, {HIDDEN, 2048},
                                    {FFN, HIDDEN},  {FFN, HIDDEN},  {HIDDEN, FFN}};
    float *w[7], x[FFN], y[FFN];
    for (int i = 0; i < FFN; i++)
        x[i] = frand();
    for (int i = 0; i < 7; i++) {
        size_t n = (size_t)shapes[i][0] * shapes[i][1];
        w[i] = malloc(n * 4);
        if (!w[i])
            die("sgemv", NULL);
        for (size_t j = 0; j < n; j++)
            w[i][j] = frand();
    }
    double best = 1e9;
    for (int rep = 0; rep < 20; rep++) {
        double t0 = kv_clock_s();
        for (int i = 0; i < 7; i++)
            cblas_sgemv(CblasRowMajor, CblasNoTrans, shapes[i][0], shapes[i][1], 1, w[i],
                        shapes[i][1], x, 1, 0, y, 1);
        double dt = kv_clock_s() - t0;
        best = dt < best ? dt : best;
    }
    for (int i = 0; i < 7; i++)
        free(w[i]);
    return best;
}

/* ---- synthetic forwards ---- */

typedef struct stats_set {
    kv_attn_stats_request req;
    kv_attn_stats st;
} stats_set;

/* The attention key t gets from one head. Real attention concentrates on
 * few keys, and the heads of a layer largely agree on which (heavy hitters,
 * sinks), so by default log(mass) = 2 z_t + e with z_t shared by the heads
 * and e the head's own, both standard normal. `uniform` (4th argument)
 * gives independent uniform masses instead: the flat worst case for
 * CriticalKV's bounds, under which every key looks alike. */
static bool uniform_attention;

static double normal(void)
{
    double u1 = (rand() + 1.0) / (RAND_MAX + 2.0), u2 = rand() / (double)RAND_MAX;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static double key_importance(int pos);

/* The attention mass of every head on the n keys of a layer of cache c
 * (NULL: keys at positions 0..n-1): each key's importance follows its
 * token; a slot in a KV head's gap (AdaKV) gets nothing. */
static void attention_fill(double *mass, const kv_cache *c, int layer, int n)
{
    for (int h = 0; h < HEADS; h++) {
        int g = h / (HEADS / KV_HEADS);
        for (int t = 0; t < n; t++) {
            double *m = &mass[(size_t)h * n + t];
            if (c && !kv_cache_holds(c, layer, t, g)) {
                *m = 0.0;
                continue;
            }
            double z = key_importance(c ? kv_cache_pos(c, layer, t, g) : t);
            *m = uniform_attention ? rand() / (double)RAND_MAX : exp(2.0 * z + normal());
        }
    }
}

static double key_importance(int pos)
{
    static double *z;
    static int n_z;
    if (pos >= n_z) {
        int n = 2 * pos + 1024;
        if (!(z = realloc(z, (size_t)n * sizeof *z)))
            die("stats", NULL);
        for (int i = n_z; i < n; i++)
            z[i] = normal();
        n_z = n;
    }
    return z[pos];
}

/* ExpectedAttention's query moments of `rows` prompt rows: unit-variance
 * queries around a random mean (the values do not change the cost). */
static void queries_fill(kv_attn_stats *st, int rows)
{
    size_t hd = (size_t)HEADS * DIM;
    st->head_dim = DIM;
    st->q_count = rows > 0 ? rows : 0;
    st->q_sum = realloc(st->q_sum, hd * sizeof(double));
    st->q_outer = realloc(st->q_outer, hd * DIM * sizeof(double));
    if (!st->q_sum || !st->q_outer)
        die("stats", NULL);
    for (size_t i = 0; i < hd; i++)
        st->q_sum[i] = 0.3 * frand() * st->q_count;
    for (int h = 0; h < HEADS; h++)
        for (int i = 0; i < DIM; i++)
            for (int j = 0; j < DIM; j++)
                st->q_outer[((size_t)h * DIM + i) * DIM + j] =
                    st->q_sum[h * DIM + i] * st->q_sum[h * DIM + j] / (st->q_count ? st->q_count : 1) +
                    (i == j) * (double)st->q_count;
}

/* Statistics for the n keys of a layer of cache c (NULL: keys at positions
 * 0..n-1). */
static void stats_fill(stats_set *s, const kv_attn_stats_request *req, const kv_cache *c, int layer,
                       int n)
{
    s->req = *req;
    s->st.n_heads = HEADS;
    s->st.n_keys = n;
    size_t cells = (size_t)HEADS * n;
    s->st.col_sums = realloc(s->st.col_sums, cells * sizeof(double));
    if (!s->st.col_sums)
        die("stats", NULL);
    attention_fill(s->st.col_sums, c, layer, n);
    for (int w = 0; w < req->n_windows; w++) {
        s->st.win_sums[w] = realloc(s->st.win_sums[w], cells * sizeof(double));
        if (!s->st.win_sums[w])
            die("stats", NULL);
        attention_fill(s->st.win_sums[w], c, layer, n);
    }
    if (req->q_moments)
        queries_fill(&s->st, n - req->q_from);
}

static kv_cache *prefilled_cache(int n)
{
    kv_error err;
    kv_cache *c = kv_cache_new(LAYERS, KV_HEADS, DIM, n + 1, &err);
    if (!c)
        die("cache", &err);
    size_t row = (size_t)KV_HEADS * DIM;
    for (int l = 0; l < LAYERS; l++) {
        kv_cache_layer *cl = &c->layers[l];
        for (size_t i = 0; i < (size_t)n * row; i++)
            cl->k[i] = cl->v[i] = frand();
        for (int t = 0; t < n; t++)
            kv_cache_set_pos(c, l, t, t);
        kv_cache_measure_values(c, cl, 0, n); /* as the model's forward does */
        cl->len = n;
    }
    c->next_pos = n;
    return c;
}

static void append_token(kv_cache *c)
{
    kv_error err;
    if (kv_cache_reserve(c, 1, &err) != 0)
        die("reserve", &err);
    size_t row = (size_t)KV_HEADS * DIM;
    for (int l = 0; l < LAYERS; l++) {
        kv_cache_layer *cl = &c->layers[l];
        for (size_t i = 0; i < row; i++)
            cl->k[cl->len * row + i] = cl->v[cl->len * row + i] = frand();
        kv_cache_measure_values(c, cl, cl->len, 1);
        kv_cache_set_pos(c, l, cl->len++, c->next_pos);
    }
    c->next_pos++;
}

typedef struct config {
    const char *name;
    const char *kv[24];
} config;

static const config configs[] = {
    {"seed snapkv per_token M=224",
     {"algorithm", "snapkv", "start_size", "32", "recent_size", "64", "intermediate_size", "128",
      "window_size", "8", "score_aggregation", "norm_sum"}},
    {"  + kvcrush refined 32",
     {"algorithm", "snapkv", "start_size", "32", "recent_size", "64", "intermediate_size", "128",
      "window_size", "8", "score_aggregation", "norm_sum", "refined_size", "32"}},
    {"  + criticalkv refined 32",
     {"algorithm", "snapkv", "start_size", "32", "recent_size", "64", "intermediate_size", "128",
      "window_size", "8", "score_aggregation", "norm_sum", "refined_size", "32",
      "refined_algorithm", "criticalkv"}},
    {"  per_head",
     {"algorithm", "snapkv", "start_size", "32", "recent_size", "64", "intermediate_size", "128",
      "window_size", "8", "score_aggregation", "norm_sum", "strategy", "per_head"}},
    {"  pyramid (beta 20)",
     {"algorithm", "snapkv", "start_size", "32", "recent_size", "64", "intermediate_size", "128",
      "window_size", "8", "score_aggregation", "norm_sum", "layer_budget", "pyramid"}},
    {"  per_head adaptive (AdaKV)",
     {"algorithm", "snapkv", "start_size", "32", "recent_size", "64", "intermediate_size", "128",
      "window_size", "8", "score_aggregation", "norm_sum", "strategy", "per_head", "head_budget",
      "adaptive"}},
    {"  no rerotation",
     {"algorithm", "snapkv", "start_size", "32", "recent_size", "64", "intermediate_size", "128",
      "window_size", "8", "score_aggregation", "norm_sum", "apply_rerotation", "false"}},
    {"h2o per_group 32 M=672", {"algorithm", "h2o", "strategy", "per_group"}},
    {"h2o per_token M=672", {"algorithm", "h2o"}},
    {"streaming M=672", {"algorithm", "streaming"}},
    {"knorm M=672", {"algorithm", "knorm"}},
    {"tova M=672", {"algorithm", "tova"}},
    {"keydiff M=672", {"algorithm", "keydiff"}},
    {"expected_attention M=672", {"algorithm", "expected_attention"}},
};
enum { N_CONFIGS = sizeof configs / sizeof configs[0] };

static kv_evict_params params_of(const config *c)
{
    kv_evict_params p;
    kv_evict_params_default(&p);
    kv_error err;
    for (int i = 0; c->kv[i]; i += 2)
        if (kv_evict_params_set(&p, c->kv[i], c->kv[i + 1], &err) != 0)
            die(c->name, &err);
    return p;
}

static float *o_proj[LAYERS];
static kv_weight wo[LAYERS];

static kv_evict_model model(void)
{
    return (kv_evict_model){.n_layers = LAYERS,
                            .n_heads = HEADS,
                            .n_kv_heads = KV_HEADS,
                            .head_dim = DIM,
                            .rope_theta = 1e6,
                            .hidden = HIDDEN,
                            .o_proj = wo};
}

/* observe every layer's statistics (s[l], or with shared the same s[0]
 * for each layer: a prefill's content does not change the cost) and
 * compress; returns seconds. */
__attribute__((noinline)) static double forward_evict(kv_evictor *ev, kv_cache *c, stats_set *s,
                                                      bool shared, bool prefill)
{
    kv_error err;
    double t0 = kv_clock_s();
    for (int l = 0; l < LAYERS; l++)
        if (kv_evictor_observe(ev, l, &s[shared ? 0 : l].req, &s[shared ? 0 : l].st, prefill,
                               &err) != 0)
            die("observe", &err);
    if (kv_evictor_compress(ev, c, NULL, NULL, &err) != 0)
        die("compress", &err);
    return kv_clock_s() - t0;
}

/* What a compressed cache holds, averaged over the layers: its slots, the
 * tokens per KV head (the exact ragged size), and the distinct tokens of all
 * heads (what a shared-slot layout with a validity mask would need). */
typedef struct slot_counts {
    double slots, tokens, union_slots;
} slot_counts;

static int cmp_pos(const void *a, const void *b)
{
    return *(const int32_t *)a - *(const int32_t *)b;
}

static slot_counts count_slots(const kv_cache *c)
{
    slot_counts r = {0};
    for (int l = 0; l < LAYERS; l++) {
        int len = c->layers[l].len, n = 0;
        int32_t *all = malloc((size_t)(len > 0 ? len : 1) * KV_HEADS * sizeof *all);
        if (!all)
            die("count", NULL);
        for (int g = 0; g < KV_HEADS; g++)
            for (int t = 0; t < len; t++)
                if (kv_cache_holds(c, l, t, g))
                    all[n++] = kv_cache_pos(c, l, t, g);
        qsort(all, (size_t)n, sizeof *all, cmp_pos);
        int distinct = 0;
        for (int i = 0; i < n; i++)
            distinct += i == 0 || all[i] != all[i - 1];
        free(all);
        r.slots += (double)len / LAYERS;
        r.tokens += (double)n / KV_HEADS / LAYERS;
        r.union_slots += (double)distinct / LAYERS;
    }
    return r;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 8192, steps = argc > 2 ? atoi(argv[2]) : 256;
    const char *only = argc > 3 && *argv[3] ? argv[3] : NULL;
    uniform_attention = argc > 4 && strcmp(argv[4], "uniform") == 0;
    srand(1);
    for (int l = 0; l < LAYERS && !(only && !strstr(only, "critical")); l++) {
        o_proj[l] = malloc((size_t)HIDDEN * HEADS * DIM * 4);
        if (!o_proj[l])
            die("o_proj", NULL);
        for (size_t i = 0; i < (size_t)HIDDEN * HEADS * DIM; i++)
            o_proj[l][i] = frand() * 0.05f;
        wo[l] = (kv_weight){KV_DTYPE_F32, o_proj[l], HIDDEN, HEADS * DIM};
    }
    /* with a filter (profiling one config) the model estimate is skipped */
    double gflops = only ? 1.0 : sgemm_rate();
    double prefill_flop =
        2.0 * n * LAYERS * (2048.0 * HIDDEN * 2 + 1024.0 * HIDDEN * 2 + 3.0 * FFN * HIDDEN) +
        2.0 * 2.0 * HEADS * DIM * ((double)n * n / 2) * LAYERS;
    double prefill_s = prefill_flop / (gflops * 1e9);
    double layer_s = only ? 1.0 : layer_sgemv_seconds();
    double decode_s = layer_s * LAYERS + layer_s * VOCAB * HIDDEN / 15.7e6; /* + lm_head */
    printf("model work (estimates from the measured BLAS rates):\n");
    printf("  sgemm %.1f GFLOP/s -> %d-token prefill %.2f TFLOP = %.1f s\n", gflops, n,
           prefill_flop / 1e12, prefill_s);
    printf("  sgemv one layer %.2f ms -> decode step (28 layers + lm_head) %.1f ms\n\n",
           layer_s * 1e3, decode_s * 1e3);
    printf("%-30s %12s %9s %14s %9s\n", "config", "prefill ms", "% prefill", "decode ms/step",
           "% decode");
    static stats_set pre, dec[LAYERS];
    kv_cache *base = prefilled_cache(n);
    kv_evict_model m = model();
    openblas_set_num_threads(1); /* threads come from the pool, as in the engine */
    kv_error perr;
    m.pool = kv_pool_new(kv_get_threads(), &perr); /* CriticalKV's products, as generate does */
    if (!m.pool)
        die("pool", &perr);
    if (o_proj[0]) {
        double t0 = kv_clock_s();
        if (kv_evict_model_vnorm_gains(&m, &perr) != 0)
            die("gains", &perr);
        printf("CriticalKV's value bounds, once per model: %.1f ms (%s attention)\n\n",
               (kv_clock_s() - t0) * 1e3, uniform_attention ? "uniform" : "log-normal");
    }
    for (int i = 0; i < N_CONFIGS; i++) {
        if (only && !strstr(configs[i].name, only))
            continue;
        kv_evict_params p = params_of(&configs[i]);
        kv_error err;
        kv_evictor *ev = kv_evictor_new(&p, &m, &err);
        if (!ev)
            die(configs[i].name, &err);
        kv_attn_stats_request req;
        kv_evictor_stats_request(ev, true, &req);
        stats_fill(&pre, &req, NULL, 0, n);
        kv_cache *c = kv_cache_fork(base, 0, &err);
        if (!c)
            die("fork", &err);
        double tp = forward_evict(ev, c, &pre, true, true);
        slot_counts prefilled = count_slots(c);
        kv_evictor_stats_request(ev, false, &req);
        double td = 0;
        for (int s = 0; s < steps; s++) {
            append_token(c);
            for (int l = 0; l < LAYERS; l++) /* layers (pyramid) and heads (AdaKV) differ */
                stats_fill(&dec[l], &req, c, l, c->layers[l].len);
            td += forward_evict(ev, c, dec, false, false);
        }
        printf("%-30s %12.1f %8.3f%% %14.3f %8.2f%%", configs[i].name, tp * 1e3,
               100 * tp / prefill_s, td / steps * 1e3, 100 * td / steps / decode_s);
        if (prefilled.slots != prefilled.tokens) /* a layout with gaps: what it costs */
            printf("  (slots/layer after prefill: %.1f; union of the heads' tokens %.1f; "
                   "tokens per head %.1f)",
                   prefilled.slots, prefilled.union_slots, prefilled.tokens);
        if (kv_evictor_vnorm_count(ev) > 0) /* of the slots that were ever candidates */
            printf("  (value weights computed: %lld of %lld)", kv_evictor_vnorm_count(ev),
                   (long long)LAYERS * (n + steps - p.start_size - p.recent_size));
        printf("\n");
        kv_cache_free(c);
        kv_evictor_free(ev);
    }
    if (only)
        return 0; /* (the OS reclaims the rest) */
    /* a sweep: one prefill's statistics, 8 forks compressed */
    kv_evict_params ps[N_CONFIGS];
    for (int i = 0; i < N_CONFIGS; i++)
        ps[i] = params_of(&configs[i]);
    kv_attn_stats_request req;
    kv_error err;
    if (kv_evict_stats_request(ps, N_CONFIGS, true, &req, &err) != 0)
        die("union", &err);
    stats_fill(&pre, &req, NULL, 0, n);
    kv_attn_stats layers[LAYERS];
    for (int l = 0; l < LAYERS; l++)
        layers[l] = pre.st; /* the same values for every layer */
    double t0 = kv_clock_s();
    for (int i = 0; i < N_CONFIGS; i++) {
        kv_evictor *ev = kv_evictor_new(&ps[i], &m, &err);
        kv_cache *c = NULL;
        if (!ev || kv_evictor_fork(ev, base, &req, layers, &c, NULL, NULL, &err) != 0)
            die("sweep", &err);
        kv_cache_free(c);
        kv_evictor_free(ev);
    }
    double sweep = kv_clock_s() - t0;
    printf("\nsweep of %d configs over one %d-token prefill: kv_evictor_fork each %.1f ms "
           "= %.2f%% of one prefill (vs %d prefills without sharing)\n",
           N_CONFIGS, n, sweep * 1e3, 100 * sweep / prefill_s, N_CONFIGS);
    kv_cache_free(base);
    free(pre.st.col_sums);
    free(pre.st.q_sum);
    free(pre.st.q_outer);
    for (int w = 0; w < KV_MAX_WINDOWS; w++)
        free(pre.st.win_sums[w]);
    for (int l = 0; l < LAYERS; l++) {
        free(dec[l].st.col_sums);
        for (int w = 0; w < KV_MAX_WINDOWS; w++)
            free(dec[l].st.win_sums[w]);
    }
    for (int l = 0; l < LAYERS; l++)
        free(o_proj[l]);
    return 0;
}
