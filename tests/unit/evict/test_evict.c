/* kvcore/evict: test vectors of docs/eviction.md's semantics, driven by hand-made
 * attention statistics on small caches, plus the parser and invariants. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "evict/evict.h"
#include "evict/evict_impl.h" /* the generator and registries, white-box */
#include "model/kernels.h"
#include "model/kvcache.h"

/* ---- a tiny simulated model: attention probabilities from a formula ---- */

/* logits of query head h at position i for the key at position j (j <= i) */
typedef double (*logit_fn)(int layer, int h, int i, int j);

typedef struct event {
    int step, layer, n, sets;
    int32_t pos[320]; /* [sets][n] */
} event;

typedef struct sim {
    kv_evict_params p;
    kv_evict_model m;
    kv_cache *cache;
    kv_evictor *ev;
    logit_fn logit;
    event events[256];
    int n_events;
} sim;

static void record(void *ctx, int step, int layer, const int32_t *pos, int n, int sets)
{
    sim *s = ctx;
    cr_assert_lt(s->n_events, 256);
    event *e = &s->events[s->n_events++];
    e->step = step;
    e->layer = layer;
    e->n = n;
    e->sets = sets;
    cr_assert_leq(n * sets, 320);
    memcpy(e->pos, pos, (size_t)n * (size_t)sets * sizeof *pos);
}

static double logit_tv5(int layer, int h, int i, int j)
{
    (void)layer;
    return ((i * (h + 2) + j * (h + 3)) % 7) / 2.0;
}

static double logit_uniform(int layer, int h, int i, int j)
{
    (void)layer, (void)h, (void)i, (void)j;
    return 0.0;
}

static void sim_init(sim *s, const kv_evict_params *p, int n_layers, int n_heads, logit_fn f)
{
    memset(s, 0, sizeof *s);
    s->p = *p;
    s->m = (kv_evict_model){.n_layers = n_layers,
                            .n_heads = n_heads,
                            .n_kv_heads = 1,
                            .head_dim = 4,
                            .rope_theta = 10000.0};
    kv_error err;
    s->cache = kv_cache_new(n_layers, 1, 4, 16, &err);
    cr_assert_not_null(s->cache, "%s", err.msg);
    s->ev = kv_evictor_new(&s->p, &s->m, &err);
    cr_assert_not_null(s->ev, "%s", err.msg);
    s->logit = f;
}

static void sim_free(sim *s)
{
    kv_evictor_free(s->ev);
    kv_cache_free(s->cache);
}

/* Runs attention for query positions q[0..nq) of one layer over its cache
 * (keys at cache->pos), and reports column sums over all rows and each
 * requested window to the evictor. */
static void sim_attend(sim *s, int layer, const int *q, int nq, bool prefill)
{
    kv_cache_layer *cl = &s->cache->layers[layer];
    int H = s->m.n_heads, n = cl->len;
    kv_attn_stats_request req;
    kv_evictor_stats_request(s->ev, prefill, &req);
    kv_attn_stats st = {.n_heads = H, .n_keys = n};
    st.col_sums = calloc((size_t)H * n, sizeof(double));
    for (int w = 0; w < req.n_windows; w++)
        st.win_sums[w] = calloc((size_t)H * n, sizeof(double));
    double *row = malloc((size_t)n * sizeof *row);
    for (int h = 0; h < H; h++)
        for (int r = 0; r < nq; r++) {
            double mx = -INFINITY, z = 0;
            for (int t = 0; t < n; t++) {
                row[t] = cl->pos[t] <= q[r] ? s->logit(layer, h, q[r], cl->pos[t]) : -INFINITY;
                mx = row[t] > mx ? row[t] : mx;
            }
            for (int t = 0; t < n; t++)
                z += row[t] = exp(row[t] - mx);
            for (int t = 0; t < n; t++) {
                st.col_sums[h * n + t] += row[t] / z;
                for (int w = 0; w < req.n_windows; w++)
                    if (r >= nq - req.windows[w])
                        st.win_sums[w][h * n + t] += row[t] / z;
            }
        }
    kv_error err;
    int rc = kv_evictor_observe(s->ev, layer, &req, &st, prefill, &err);
    cr_assert_eq(rc, 0, "%s", err.msg);
    free(row);
    free(st.col_sums);
    for (int w = 0; w < req.n_windows; w++)
        free(st.win_sums[w]);
}

static void sim_compress(sim *s)
{
    kv_error err;
    cr_assert_eq(kv_evictor_compress(s->ev, s->cache, record, s, &err), 0, "%s", err.msg);
}

static void append(kv_cache *c, int layer, int pos)
{
    kv_error err;
    kv_cache_layer *l = &c->layers[layer];
    if (l->len + 1 > l->cap)
        cr_assert_eq(kv_cache_reserve(c, 1, &err), 0);
    int row = kv_cache_row(c);
    for (int j = 0; j < row; j++)
        l->k[l->len * row + j] = l->v[l->len * row + j] = 0.0f;
    l->pos[l->len++] = pos;
}

static void sim_prefill(sim *s, int L)
{
    int *q = malloc((size_t)L * sizeof *q);
    for (int i = 0; i < L; i++)
        q[i] = i;
    for (int l = 0; l < s->m.n_layers; l++) {
        s->cache->layers[l].len = 0;
        for (int i = 0; i < L; i++)
            append(s->cache, l, i);
        sim_attend(s, l, q, L, true);
    }
    s->cache->next_pos = L;
    free(q);
    sim_compress(s);
}

static void sim_decode(sim *s)
{
    int p = s->cache->next_pos;
    for (int l = 0; l < s->m.n_layers; l++) {
        append(s->cache, l, p);
        sim_attend(s, l, &p, 1, false);
    }
    s->cache->next_pos = p + 1;
    sim_compress(s);
}

static void assert_positions(const sim *s, int layer, const int *want, int n)
{
    const kv_cache_layer *l = &s->cache->layers[layer];
    char got[512] = "";
    for (int i = 0; i < l->len; i++)
        snprintf(got + strlen(got), sizeof got - strlen(got), "%d ", l->pos[i]);
    cr_assert_eq(l->len, n, "layer %d kept %d slots: %s", layer, l->len, got);
    for (int i = 0; i < n; i++)
        cr_assert_eq(l->pos[i], want[i], "layer %d slot %d: %d, want %d (%s)", layer, i, l->pos[i],
                     want[i], got);
}

#define POS(s, layer, ...)                                                                         \
    do {                                                                                           \
        int want_[] = {__VA_ARGS__};                                                               \
        assert_positions(s, layer, want_, (int)(sizeof want_ / sizeof want_[0]));                  \
    } while (0)

static kv_evict_params params(const char *algo, const char *strategy, int G, int S, int R, int I)
{
    kv_evict_params p;
    kv_evict_params_default(&p);
    strcpy(p.algorithm, algo);
    strcpy(p.strategy, strategy);
    p.group_size = G;
    p.start_size = S;
    p.recent_size = R;
    p.intermediate_size = I;
    return p;
}

/* ---- hand-made scores: one head whose column sums are the scores ---- */

/* Prefills L slots with given scores s (for slots S..L-1) and compresses. */
static void score_prefill(sim *s, int L, const double *scores)
{
    kv_error err;
    for (int l = 0; l < s->m.n_layers; l++) {
        s->cache->layers[l].len = 0;
        for (int i = 0; i < L; i++)
            append(s->cache, l, i);
        kv_attn_stats_request req = {.col_sums = true};
        kv_attn_stats st = {.n_heads = 1, .n_keys = L};
        st.col_sums = calloc((size_t)L, sizeof(double));
        for (int t = s->p.start_size; t < L; t++)
            st.col_sums[t] = scores[t - s->p.start_size];
        cr_assert_eq(kv_evictor_observe(s->ev, l, &req, &st, true, &err), 0, "%s", err.msg);
        free(st.col_sums);
    }
    s->cache->next_pos = L;
    sim_compress(s);
}

static const double tv1_s[] = {0.5, 0.1, 0.9, 0.3, 0.7, 0.2, 0.8, 0.4};

Test(evict_tv, tv1_per_token_selection)
{
    sim s;
    kv_evict_params p = params("h2o", "per_token", 32, 2, 3, 2);
    sim_init(&s, &p, 1, 1, logit_uniform);
    score_prefill(&s, 10, tv1_s);
    POS(&s, 0, 0, 1, 4, 6, 7, 8, 9);
    cr_assert_eq(s.n_events, 1);
    cr_assert_eq(s.events[0].step, 0);
    cr_assert_eq(s.events[0].n, 7);
    sim_free(&s);
}

Test(evict_tv, tv2_per_group_even)
{
    sim s;
    kv_evict_params p = params("h2o", "per_group", 2, 2, 2, 2);
    sim_init(&s, &p, 1, 1, logit_uniform);
    score_prefill(&s, 10, tv1_s);
    POS(&s, 0, 0, 1, 4, 5, 8, 9);
    sim_free(&s);
}

Test(evict_tv, tv3_per_group_partial_group_is_recent)
{
    sim s;
    kv_evict_params p = params("h2o", "per_group", 2, 2, 2, 2);
    sim_init(&s, &p, 1, 1, logit_uniform);
    score_prefill(&s, 9, tv1_s);
    POS(&s, 0, 0, 1, 4, 5, 8);
    sim_free(&s);
}

Test(evict_tv, tv4_noop_below_budget_then_one_per_step)
{
    sim s;
    kv_evict_params p = params("h2o", "per_token", 32, 2, 3, 4); /* M = 9 */
    sim_init(&s, &p, 2, 2, logit_tv5);
    sim_prefill(&s, 9);
    cr_assert_eq(s.n_events, 0, "no eviction at L = M");
    POS(&s, 1, 0, 1, 2, 3, 4, 5, 6, 7, 8);
    int len;
    const double *cnt = kv_evictor_counters(s.ev, 0, &len);
    cr_assert_eq(len, 9);
    for (int t = 2; t < 9; t++)
        cr_assert_float_eq(cnt[t], 9 - t, 1e-12, "counter of slot %d", t);
    for (int step = 1; step <= 3; step++) {
        sim_decode(&s);
        cr_assert_eq(s.cache->layers[0].len, 9);
        cr_assert_eq(s.cache->layers[1].len, 9);
        cr_assert_eq(s.n_events, 2 * step, "one eviction per layer per step");
        cr_assert_eq(s.events[s.n_events - 1].step, step);
    }
    sim_free(&s);
}

/* TV-5: H2O end to end on the modular logits. */
Test(evict_tv, tv5_prefill_column_sums)
{
    sim s;
    kv_evict_params p = params("h2o", "per_token", 32, 0, 12, 0); /* M = 12: no eviction */
    sim_init(&s, &p, 1, 2, logit_tv5);
    sim_prefill(&s, 12);
    static const double want[] = {6.85205, 4.01385, 3.02909, 2.11904, 2.27011, 1.7265,
                                  1.42171, 0.97243, 0.69088, 0.51933, 0.13509, 0.24991};
    int len;
    const double *sc = kv_evictor_scores(s.ev, 0, &len);
    cr_assert_eq(len, 12);
    for (int t = 0; t < 12; t++)
        cr_assert_float_eq(sc[t], want[t], 6e-6, "slot %d: %.6f", t, sc[t]);
    sim_free(&s);
}

Test(evict_tv, tv5_h2o_sum)
{
    sim s;
    kv_evict_params p = params("h2o", "per_token", 32, 2, 3, 4);
    sim_init(&s, &p, 1, 2, logit_tv5);
    sim_prefill(&s, 12);
    POS(&s, 0, 0, 1, 2, 3, 4, 5, 9, 10, 11);
    sim_decode(&s);
    POS(&s, 0, 0, 1, 2, 3, 4, 5, 10, 11, 12);
    sim_decode(&s);
    POS(&s, 0, 0, 1, 2, 3, 4, 5, 11, 12, 13);
    sim_decode(&s);
    POS(&s, 0, 0, 1, 2, 3, 4, 5, 12, 13, 14);
    static const double want[] = {3.69698, 2.82965, 2.90422, 2.46822, 0.74172, 0.22521, 0.02918};
    int len;
    const double *sc = kv_evictor_scores(s.ev, 0, &len);
    cr_assert_eq(len, 9);
    for (int i = 0; i < 7; i++)
        cr_assert_float_eq(sc[2 + i], want[i], 6e-6, "slot %d: %.6f", 2 + i, sc[2 + i]);
    sim_free(&s);
}

Test(evict_tv, tv5_h2o_norm_sum_counters)
{
    sim s;
    kv_evict_params p = params("h2o", "per_token", 32, 2, 3, 4);
    strcpy(p.score_aggregation, "norm_sum");
    sim_init(&s, &p, 1, 2, logit_tv5);
    sim_prefill(&s, 12);
    POS(&s, 0, 0, 1, 2, 4, 5, 6, 9, 10, 11);
    int len;
    const double *cnt = kv_evictor_counters(s.ev, 0, &len);
    static const double after_prefill[] = {10, 8, 7, 6, 3, 2, 1};
    for (int i = 0; i < 7; i++)
        cr_assert_float_eq(cnt[2 + i], after_prefill[i], 1e-12, "counter %d", i);
    sim_decode(&s);
    POS(&s, 0, 0, 1, 2, 4, 5, 6, 10, 11, 12);
    sim_decode(&s);
    POS(&s, 0, 0, 1, 2, 4, 5, 6, 11, 12, 13);
    sim_decode(&s);
    POS(&s, 0, 0, 1, 2, 4, 5, 11, 12, 13, 14);
    cnt = kv_evictor_counters(s.ev, 0, &len);
    static const double final[] = {13, 11, 10, 4, 3, 2, 1};
    for (int i = 0; i < 7; i++)
        cr_assert_float_eq(cnt[2 + i], final[i], 1e-12, "final counter %d", i);
    sim_free(&s);
}

/* TV-O1: kvpress's ObservedAttention is h2o + norm_sum. Its score of slot t
 * is sum_q A[h, q, t] / (L - t), averaged over the GQA group (here both
 * heads): computed here from the TV-5 attention itself, times 2 it equals
 * kvbench's norm_sum score (column sum over counter) of slots 2..11, and
 * the kept set is kvpress's. */
Test(evict_tv, tv_o1_observed_attention_is_h2o_norm_sum)
{
    enum { L = 12, H = 2 };
    double kvpress[L] = {0};
    for (int h = 0; h < H; h++)
        for (int q = 0; q < L; q++) {
            double row[L], mx = -INFINITY, z = 0;
            for (int t = 0; t <= q; t++)
                mx = fmax(mx, row[t] = logit_tv5(0, h, q, t));
            for (int t = 0; t <= q; t++)
                z += row[t] = exp(row[t] - mx);
            for (int t = 0; t <= q; t++)
                kvpress[t] += row[t] / z / (L - t) / H;
        }
    sim s;
    kv_evict_params p = params("h2o", "per_token", 32, 2, 3, 4);
    strcpy(p.score_aggregation, "norm_sum");
    sim_init(&s, &p, 1, H, logit_tv5);
    int q[L];
    for (int i = 0; i < L; i++) {
        q[i] = i;
        append(s.cache, 0, i);
    }
    sim_attend(&s, 0, q, L, true);
    s.cache->next_pos = L;
    int n_scores, n_counters;
    const double *sc = kv_evictor_scores(s.ev, 0, &n_scores);
    const double *cnt = kv_evictor_counters(s.ev, 0, &n_counters);
    cr_assert_geq(n_scores, L);
    for (int t = 2; t < L; t++)
        cr_assert_float_eq(sc[t] / cnt[t], 2 * kvpress[t], 1e-12, "slot %d: %.15g vs 2 x %.15g", t,
                           sc[t] / cnt[t], kvpress[t]);
    sim_compress(&s);
    POS(&s, 0, 0, 1, 2, 4, 5, 6, 9, 10, 11);
    sim_free(&s);
}

Test(evict_tv, tv5_h2o_per_group)
{
    sim s;
    kv_evict_params p = params("h2o", "per_group", 2, 2, 2, 4);
    sim_init(&s, &p, 1, 2, logit_tv5);
    sim_prefill(&s, 12);
    POS(&s, 0, 0, 1, 2, 3, 4, 5, 10, 11);
    sim_decode(&s);
    POS(&s, 0, 0, 1, 2, 3, 4, 5, 12);
    int events = s.n_events;
    sim_decode(&s);
    POS(&s, 0, 0, 1, 2, 3, 4, 5, 12, 13);
    cr_assert_eq(s.n_events, events, "p=13: no eviction");
    sim_decode(&s);
    POS(&s, 0, 0, 1, 2, 3, 4, 5, 14);
    sim_free(&s);
}

static void assert_counters(const sim *s, int S, const double *want, int n)
{
    int len;
    const double *cnt = kv_evictor_counters(s->ev, 0, &len);
    cr_assert_eq(len - S, n);
    for (int i = 0; i < n; i++)
        cr_assert_float_eq(cnt[S + i], want[i], 1e-12, "counter %d: %g", i, cnt[S + i]);
}

Test(evict_tv, tv6_snapkv_counters)
{
    sim s;
    kv_evict_params p = params("snapkv", "per_token", 32, 2, 64, 0);
    p.has_window = true;
    p.window_size = 4;
    strcpy(p.score_aggregation, "norm_sum");
    sim_init(&s, &p, 1, 1, logit_uniform);
    sim_prefill(&s, 12);
    static const double a[] = {4, 4, 4, 4, 4, 4, 4, 3, 2, 1};
    assert_counters(&s, 2, a, 10);
    sim_decode(&s);
    static const double b[] = {5, 5, 5, 5, 5, 5, 5, 4, 3, 2, 1};
    assert_counters(&s, 2, b, 11);
    sim_prefill(&s, 5); /* a new prompt, n = 3 <= W */
    static const double c[] = {3, 2, 1};
    assert_counters(&s, 2, c, 3);
    sim_free(&s);
}

Test(evict_tv, snapkv_default_window_is_8)
{
    sim s;
    kv_evict_params p = params("snapkv", "per_token", 32, 0, 64, 0);
    strcpy(p.score_aggregation, "norm_sum");
    sim_init(&s, &p, 1, 1, logit_uniform);
    kv_attn_stats_request req;
    kv_evictor_stats_request(s.ev, true, &req);
    cr_assert_eq(req.n_windows, 1);
    cr_assert_eq(req.windows[0], 8);
    cr_assert_not(req.col_sums);
    kv_evictor_stats_request(s.ev, false, &req);
    cr_assert(req.col_sums);
    sim_prefill(&s, 10);
    static const double c[] = {8, 8, 8, 7, 6, 5, 4, 3, 2, 1};
    assert_counters(&s, 0, c, 10);
    sim_free(&s);
}

/* TV-7: SnapKV's centred max pool, per head before the head sum. */
static void pooled_prefill(sim *s, const double *heads, int H, int n)
{
    kv_error err;
    s->cache->layers[0].len = 0;
    for (int i = 0; i < n; i++)
        append(s->cache, 0, i);
    kv_attn_stats_request req = {.n_windows = 1, .windows = {8}};
    kv_attn_stats st = {.n_heads = H, .n_keys = n, .win_sums = {(double *)heads}};
    cr_assert_eq(kv_evictor_observe(s->ev, 0, &req, &st, true, &err), 0, "%s", err.msg);
}

Test(evict_tv, tv7_pooling)
{
    sim s;
    kv_evict_params p = params("snapkv", "per_token", 32, 0, 64, 0);
    sim_init(&s, &p, 1, 1, logit_uniform);
    static const double one[] = {9, 1, 2, 8, 1, 1, 1, 3, 1, 6, 2, 4};
    pooled_prefill(&s, one, 1, 12);
    static const double want1[] = {9, 9, 9, 9, 8, 8, 8, 6, 6, 6, 6, 6};
    int len;
    const double *sc = kv_evictor_scores(s.ev, 0, &len);
    for (int t = 0; t < 12; t++)
        cr_assert_float_eq(sc[t], want1[t], 1e-12, "slot %d", t);
    static const double two[] = {1, 0, 0, 0, 0, 0, 0, 0, 0, 5, /* head 1 */
                                 0, 0, 0, 0, 0, 3, 0, 0, 0, 0};
    pooled_prefill(&s, two, 2, 10);
    static const double want2[] = {1, 1, 4, 4, 3, 3, 8, 8, 8, 5};
    sc = kv_evictor_scores(s.ev, 0, &len);
    cr_assert_eq(len, 10);
    for (int t = 0; t < 10; t++)
        cr_assert_float_eq(sc[t], want2[t], 1e-12, "two heads, slot %d", t);
    sim_free(&s);
}

/* TV-9: per_group steady state with uniform causal attention. */
Test(evict_tv, tv9_per_group_steady_state)
{
    sim s;
    kv_evict_params p = params("h2o", "per_group", 4, 4, 4, 8);
    sim_init(&s, &p, 1, 1, logit_uniform);
    sim_prefill(&s, 17);
    POS(&s, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 16);
    for (int p_ = 17; p_ <= 19; p_++)
        sim_decode(&s);
    cr_assert_eq(s.cache->layers[0].len, 16);
    sim_decode(&s); /* p = 20 */
    POS(&s, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 20);
    for (int p_ = 21; p_ <= 24; p_++)
        sim_decode(&s);
    POS(&s, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 24);
    sim_free(&s);
}

/* TV-11: rerotation equals RoPE at the new position. */
static void rope(float *x, const float *pre, int D, const double *inv_freq, int pos)
{
    memcpy(x, pre, (size_t)D * sizeof *x);
    kv_evict_rope_rotate(x, D, inv_freq, pos);
}

Test(evict_tv, tv11_rerotation_vectors)
{
    double f[2];
    kv_evict_rope_freqs(100.0, 4, f);
    cr_assert_float_eq(f[0], 1.0, 1e-15);
    cr_assert_float_eq(f[1], 0.1, 1e-15);
    static const float ka[] = {1, 0, 0, 1}, kb[] = {0.5f, -1, 2, 0.25f};
    float x[4];
    rope(x, ka, 4, f, 5);
    static const float a5[] = {0.283662f, -0.479426f, -0.958924f, 0.877583f};
    static const float a2[] = {-0.416147f, -0.198669f, 0.909297f, 0.980067f};
    for (int i = 0; i < 4; i++)
        cr_assert_float_eq(x[i], a5[i], 1e-6);
    kv_evict_rope_rotate(x, 4, f, 2 - 5);
    for (int i = 0; i < 4; i++)
        cr_assert_float_eq(x[i], a2[i], 1e-6);
    rope(x, kb, 4, f, 9);
    static const float b9[] = {-1.279802f, -0.817442f, -1.616201f, -0.627924f};
    static const float b3[] = {-0.777236f, -1.029217f, -1.909425f, -0.056686f};
    for (int i = 0; i < 4; i++)
        cr_assert_float_eq(x[i], b9[i], 1e-6);
    kv_evict_rope_rotate(x, 4, f, 3 - 9);
    for (int i = 0; i < 4; i++)
        cr_assert_float_eq(x[i], b3[i], 1e-6);
}

/* Property: rerotate(RoPE(k, p_old)) == RoPE(k, p_new) in f32 with Qwen3's
 * theta and head_dim, and q.k is invariant under a common shift. */
Test(evict_tv, tv11_rerotation_property)
{
    enum { D = 128 };
    double f[D / 2];
    kv_evict_rope_freqs(1e6, D, f);
    srand(7);
    for (int trial = 0; trial < 200; trial++) {
        float k[D], q[D], a[D], b[D], qa[D], qb[D];
        for (int i = 0; i < D; i++) {
            k[i] = (float)rand() / RAND_MAX * 2 - 1;
            q[i] = (float)rand() / RAND_MAX * 2 - 1;
        }
        int p_old = rand() % 8192, p_new = rand() % (p_old + 1);
        rope(a, k, D, f, p_old);
        kv_evict_rope_rotate(a, D, f, p_new - p_old);
        rope(b, k, D, f, p_new);
        for (int i = 0; i < D; i++)
            cr_assert_float_eq(a[i], b[i], 1e-6, "trial %d dim %d: %g vs %g", trial, i, a[i], b[i]);
        int qp = p_old + 3, shift = p_new - p_old;
        rope(qa, q, D, f, qp);
        rope(a, k, D, f, p_old);
        rope(qb, q, D, f, qp + shift);
        rope(b, k, D, f, p_old + shift);
        double da = 0, db = 0;
        for (int i = 0; i < D; i++) {
            da += (double)qa[i] * a[i];
            db += (double)qb[i] * b[i];
        }
        cr_assert_float_eq(da, db, 1e-4, "q.k %g vs %g", da, db);
    }
}

/* TV-12: bookkeeping through the evictor: every kept key carries the RoPE
 * of its effective position, new tokens keep their absolute position. */
Test(evict_tv, tv12_rerotated_cache_keys)
{
    enum { D = 4 };
    kv_evict_params p = params("h2o", "per_token", 32, 1, 2, 1); /* M = 4 */
    kv_evict_model m = {
        .n_layers = 1, .n_heads = 1, .n_kv_heads = 1, .head_dim = D, .rope_theta = 100.0};
    kv_error err;
    kv_evictor *ev = kv_evictor_new(&p, &m, &err);
    kv_cache *c = kv_cache_new(1, 1, D, 8, &err);
    double f[D / 2];
    kv_evict_rope_freqs(100.0, D, f);
    float pre[8][D];
    for (int t = 0; t < 8; t++)
        for (int i = 0; i < D; i++)
            pre[t][i] = (float)(0.3 * t + 0.1 * i + 0.2);
    kv_cache_layer *l = &c->layers[0];
    for (int t = 0; t < 6; t++) {
        rope(l->k + t * D, pre[t], D, f, t);
        l->pos[t] = t;
    }
    l->len = 6;
    /* scores for slots 1..5: slot 2 beats 1 and 3 -> kept [0,2,4,5] */
    double sums[6] = {0, 0.1, 0.9, 0.2, 0, 0};
    kv_attn_stats_request req = {.col_sums = true};
    kv_attn_stats st = {.n_heads = 1, .n_keys = 6, .col_sums = sums};
    cr_assert_eq(kv_evictor_observe(ev, 0, &req, &st, true, &err), 0, "%s", err.msg);
    cr_assert_eq(kv_evictor_compress(ev, c, NULL, NULL, &err), 0, "%s", err.msg);
    static const int kept1[] = {0, 2, 4, 5}, eff1[] = {0, 1, 2, 3};
    for (int j = 0; j < 4; j++) {
        float want[D];
        rope(want, pre[kept1[j]], D, f, eff1[j]);
        cr_assert_eq(l->pos[j], kept1[j]);
        for (int i = 0; i < D; i++)
            cr_assert_float_eq(l->k[j * D + i], want[i], 1e-6, "slot %d", j);
    }
    /* next token: absolute position 6 in slot 4; slot 2 (position 4) loses */
    rope(l->k + 4 * D, pre[6], D, f, 6);
    l->pos[4] = 6;
    l->len = 5;
    double sums2[5] = {0, 5, 0, 0, 0};
    st.n_keys = 5;
    st.col_sums = sums2;
    cr_assert_eq(kv_evictor_observe(ev, 0, &req, &st, false, &err), 0, "%s", err.msg);
    cr_assert_eq(kv_evictor_compress(ev, c, NULL, NULL, &err), 0, "%s", err.msg);
    static const int kept2[] = {0, 2, 5, 6}, eff2[] = {0, 1, 2, 5};
    for (int j = 0; j < 4; j++) {
        float want[D];
        rope(want, pre[kept2[j]], D, f, eff2[j]);
        cr_assert_eq(l->pos[j], kept2[j], "slot %d holds %d", j, l->pos[j]);
        for (int i = 0; i < D; i++)
            cr_assert_float_eq(l->k[j * D + i], want[i], 1e-6, "slot %d dim %d", j, i);
    }
    kv_evictor_free(ev);
    kv_cache_free(c);
}

/* TV-15: layers are independent; a prefill on layer 0 restarts all. */
static double logit_layered(int layer, int h, int i, int j)
{
    return layer == 0 ? logit_tv5(layer, h, i, j) : ((i + 3 * j * (h + 1)) % 5) / 1.5;
}

Test(evict_tv, tv15_multi_layer)
{
    sim s;
    kv_evict_params p = params("h2o", "per_token", 32, 2, 3, 4);
    sim_init(&s, &p, 2, 2, logit_layered);
    sim_prefill(&s, 12);
    POS(&s, 0, 0, 1, 2, 3, 4, 5, 9, 10, 11);
    const kv_cache_layer *a = &s.cache->layers[0], *b = &s.cache->layers[1];
    cr_assert_eq(b->len, 9);
    cr_assert(memcmp(a->pos, b->pos, 9 * sizeof *a->pos) != 0,
              "different attention, different kept sets");
    cr_assert_eq(s.n_events, 2);
    cr_assert_eq(s.events[0].layer, 0);
    cr_assert_eq(s.events[1].layer, 1);
    sim_decode(&s);
    /* a second prompt after the generation starts from empty scores: the
     * same prompt gives the same kept sets as the first time */
    sim_prefill(&s, 12);
    POS(&s, 0, 0, 1, 2, 3, 4, 5, 9, 10, 11);
    cr_assert_eq(s.events[s.n_events - 1].step, 0, "steps restart with the prompt");
    int len;
    kv_evictor_scores(s.ev, 1, &len);
    cr_assert_eq(len, 9);
    sim_free(&s);
}

/* Decision 2: among equal scores the lower slot is evicted first. */
Test(evict_tv, ties_evict_lower_slot_first)
{
    static const double flat[] = {1, 1, 1, 1, 1, 1, 1, 1};
    sim s;
    kv_evict_params p = params("h2o", "per_token", 32, 0, 1, 2);
    sim_init(&s, &p, 1, 1, logit_uniform);
    score_prefill(&s, 6, flat);
    POS(&s, 0, 3, 4, 5);
    sim_free(&s);
    p = params("h2o", "per_group", 2, 0, 2, 2);
    sim_init(&s, &p, 1, 1, logit_uniform);
    score_prefill(&s, 8, flat);
    POS(&s, 0, 4, 5, 6, 7);
    sim_free(&s);
}

/* TV-8: CriticalKV, per_token. V rows as given, W_O = diag(1, 2). */
Test(evict_tv, tv8_criticalkv)
{
    enum { L = 9 };
    kv_evict_params p = params("h2o", "per_token", 32, 1, 1, 4);
    p.refined_size = 2;
    strcpy(p.refined_algorithm, "criticalkv");
    static const float wo[] = {1, 0, 0, 2};
    const kv_weight o_proj[] = {{KV_DTYPE_F32, wo, 2, 2}};
    kv_evict_model m = {.n_layers = 1,
                        .n_heads = 1,
                        .n_kv_heads = 1,
                        .head_dim = 2,
                        .rope_theta = 10000.0,
                        .hidden = 2,
                        .o_proj = o_proj};
    kv_error err;
    kv_evictor *ev = kv_evictor_new(&p, &m, &err);
    cr_assert_not_null(ev, "%s", err.msg);
    kv_cache *c = kv_cache_new(1, 1, 2, L, &err);
    static const float v[L] = {1, 1, 10, 1, 2, 1, 4, 1, 1};
    kv_cache_layer *l = &c->layers[0];
    for (int t = 0; t < L; t++) {
        l->v[2 * t] = v[t];
        l->v[2 * t + 1] = 0;
        l->k[2 * t] = l->k[2 * t + 1] = 0;
        l->pos[t] = t;
    }
    l->len = L;
    double sums[L] = {0, 0.9, 0.1, 0.5, 0.3, 0.45, 0.2, 0.6, 0.05};
    kv_attn_stats_request req = {.col_sums = true};
    kv_attn_stats st = {.n_heads = 1, .n_keys = L, .col_sums = sums};
    cr_assert_eq(kv_evictor_observe(ev, 0, &req, &st, true, &err), 0, "%s", err.msg);
    cr_assert_eq(kv_evictor_compress(ev, c, NULL, NULL, &err), 0, "%s", err.msg);
    static const int want[] = {0, 1, 2, 6, 7, 8};
    cr_assert_eq(l->len, 6);
    for (int j = 0; j < 6; j++)
        cr_assert_eq(l->pos[j], want[j], "slot %d holds %d", j, l->pos[j]);
    kv_evictor_free(ev);
    kv_cache_free(c);
    /* without o_proj the policy cannot be built */
    m.o_proj = NULL;
    cr_assert_null(kv_evictor_new(&p, &m, &err));
    cr_assert(strstr(err.msg, "o_proj"), "%s", err.msg);
}

static const double tv10_tok[] = {0.60, 0.80, 0.30, 0.05, 0.10, 0.20,
                                  0.90, 0.40, 0.15, 0.50, 0.70, 0.30};

static void kvcrush_tokens(int r, const int *want, int n)
{
    sim s;
    kv_evict_params p = params("h2o", "per_token", 32, 2, 2, 2 + r);
    p.refined_size = r;
    sim_init(&s, &p, 1, 1, logit_uniform);
    score_prefill(&s, 14, tv10_tok);
    assert_positions(&s, 0, want, n);
    sim_free(&s);
}

Test(evict_tv, tv10_kvcrush_per_token)
{
    static const int r2[] = {0, 1, 2, 3, 8, 11, 12, 13};
    kvcrush_tokens(2, r2, 8);
    static const int r3[] = {0, 1, 2, 3, 5, 8, 11, 12, 13};
    kvcrush_tokens(3, r3, 9);
}

static const double tv10_grp[] = {.9,  .8,  .7,  .6,  .1, .2,  .95, .05, .3, .35, .4, .45,
                                  .02, .03, .04, .01, .5, .05, .55, .06, .2, .2,  .2, .2};

static void kvcrush_groups(const char *anchor, int I, int refined, int first_refined,
                           int second_refined)
{
    sim s;
    kv_evict_params p = params("h2o", "per_group", 4, 4, 4, I);
    p.refined_size = refined;
    strcpy(p.kvcrush_anchor, anchor);
    sim_init(&s, &p, 1, 1, logit_uniform);
    score_prefill(&s, 28, tv10_grp);
    int want[32], n = 0;
    for (int t = 0; t < 8; t++) /* start 0..3, coarse group 4..7 */
        want[n++] = t;
    int refined_starts[2] = {first_refined, second_refined};
    for (int g = 0; g < 2; g++)
        for (int t = 0; refined_starts[g] >= 0 && t < 4; t++)
            want[n++] = refined_starts[g] + t;
    for (int t = 24; t < 28; t++)
        want[n++] = t;
    if (second_refined >= 0 && second_refined < first_refined)
        cr_assert_fail("test expects ascending refined groups");
    assert_positions(&s, 0, want, n);
    sim_free(&s);
}

Test(evict_tv, tv10_kvcrush_per_group)
{
    kvcrush_groups("alternate", 8, 4, 12, -1);
    kvcrush_groups("zeros", 8, 4, 12, -1);
    kvcrush_groups("ones", 8, 4, 16, -1);
    kvcrush_groups("mean", 8, 4, 8, -1);
    kvcrush_groups("alternate", 12, 8, 12, 20);
}

Test(evict, kvcrush_random_anchor_is_reproducible)
{
    /* the random anchor draws from mt19937(seed); same seed, same picks,
     * across prompts too (reseeded per prompt) */
    int kept[3][16];
    for (int run = 0; run < 3; run++) {
        sim s;
        kv_evict_params p = params("h2o", "per_token", 32, 2, 2, 5);
        p.refined_size = 3;
        strcpy(p.kvcrush_anchor, "random");
        p.seed = run == 2 ? 12345 : 7;
        sim_init(&s, &p, 1, 1, logit_uniform);
        score_prefill(&s, 14, tv10_tok);
        score_prefill(&s, 14, tv10_tok);
        cr_assert_eq(s.cache->layers[0].len, 9);
        memcpy(kept[run], s.cache->layers[0].pos, 9 * sizeof(int));
        cr_assert_eq(memcmp(s.events[0].pos, s.events[1].pos, 9 * sizeof(int32_t)), 0,
                     "each prompt restarts the generator");
        sim_free(&s);
    }
    cr_assert_eq(memcmp(kept[0], kept[1], 9 * sizeof(int)), 0);
}

Test(evict, mt19937_matches_the_standard)
{
    /* std::mt19937 default seed 5489: the 10000th output is 4123659995 */
    kv_mt19937 g;
    kv_mt19937_seed(&g, 5489);
    cr_assert_eq(kv_mt19937_next(&g), 3499211612u);
    for (int i = 1; i < 9999; i++)
        kv_mt19937_next(&g);
    cr_assert_eq(kv_mt19937_next(&g), 4123659995u);
}

/* ---- TV-14: validation, first failing check in §2.2 order ---- */

static void expect_invalid(const char *const *kv, const char *msg)
{
    kv_evict_params p;
    kv_evict_params_default(&p);
    kv_error err;
    for (; *kv; kv += 2)
        cr_assert_eq(kv_evict_params_set(&p, kv[0], kv[1], &err), 0, "%s", err.msg);
    cr_assert_neq(kv_evict_params_validate(&p, &err), 0, "accepted, wanted: %s", msg);
    cr_assert(strstr(err.msg, msg), "got '%s', wanted '%s'", err.msg, msg);
    kv_evict_model m = {
        .n_layers = 1, .n_heads = 1, .n_kv_heads = 1, .head_dim = 2, .rope_theta = 1e4};
    cr_assert_null(kv_evictor_new(&p, &m, &err), "the policy refuses it too");
}

#define INVALID(msg, ...) expect_invalid((const char *const[]){__VA_ARGS__, NULL}, msg)

Test(evict_tv, tv14_validation)
{
    INVALID("KV cache sizes must be non-negative integers.", "start_size", "-1");
    INVALID("refined_size cannot be greater than intermediate_size.", "refined_size", "64",
            "intermediate_size", "32");
    INVALID("At least one of the KV cache sizes must be greater than zero.", "start_size", "0",
            "recent_size", "0", "intermediate_size", "0");
    INVALID("KV cache part sizes must be divisible by the group size.", "strategy", "per_group",
            "group_size", "32", "start_size", "16");
    INVALID("score_aggregation must be 'sum' or 'norm_sum' (got 'max')", "score_aggregation",
            "max");
    INVALID("Window size is only supported for SNAPKV algorithm.", "algorithm", "h2o",
            "window_size", "8");
    INVALID("window_size must be a positive integer", "window_size", "0");
    INVALID("strategy must be 'per_token', 'per_group' or 'per_head' (got 'per_layer')", "strategy",
            "per_layer");
    INVALID("kvcrush_anchor must be one of", "kvcrush_anchor", "foo");
    INVALID("Mean anchor is not supported for KVCrush in per-token mode.", "kvcrush_anchor", "mean",
            "refined_size", "32");
    /* per_group of size 1 is per-token to the refiner (libFuzzer's find:
     * tests/data/fuzz/evict_params/kvcrush_mean_group_size_1.json) */
    INVALID("Mean anchor is not supported for KVCrush in per-token mode.", "kvcrush_anchor", "mean",
            "refined_size", "4", "strategy", "per_group", "group_size", "1");
    INVALID("recent_size must be greater than zero with strategy per_group", "strategy",
            "per_group", "recent_size", "0");
    INVALID("Unknown eviction algorithm 'foo'", "algorithm", "foo");
    INVALID("Unknown refined_algorithm 'x'", "refined_algorithm", "x");
    INVALID("positions must be 'absolute' or 'compact'", "positions", "relative");
    INVALID("group_size must be a positive integer", "strategy", "per_group", "group_size", "0");
    /* order: the size check comes before the name checks */
    INVALID("KV cache sizes must be non-negative integers.", "start_size", "-1",
            "score_aggregation", "max", "strategy", "x");
    INVALID("refined_size cannot be greater", "refined_size", "600", "strategy", "per_group",
            "group_size", "7");
}

Test(evict, defaults_are_nncf)
{
    kv_evict_params p;
    kv_evict_params_default(&p);
    kv_error err;
    cr_assert_eq(kv_evict_params_validate(&p, &err), 0, "%s", err.msg);
    cr_assert_str_eq(p.algorithm, "snapkv");
    cr_assert_str_eq(p.strategy, "per_token");
    cr_assert_eq(p.group_size, 32);
    cr_assert_eq(p.start_size, 32);
    cr_assert_eq(p.recent_size, 128);
    cr_assert_eq(p.intermediate_size, 512);
    cr_assert_eq(p.refined_size, 0);
    cr_assert_str_eq(p.score_aggregation, "sum");
    cr_assert(p.apply_rerotation);
    cr_assert_not(p.has_window);
    cr_assert_str_eq(p.refined_algorithm, "kvcrush");
    cr_assert_str_eq(p.kvcrush_anchor, "alternate");
    cr_assert_str_eq(p.positions, "absolute");
    cr_assert_eq(kv_evict_params_budget(&p), 672);
}

/* ---- the parser ---- */

Test(evict_params, cli_flags_reproduce_the_seed_example)
{
    kv_evict_params p;
    kv_evict_params_default(&p);
    kv_error err;
    static const char *const kv[] = {"algorithm",
                                     "SnapKV",
                                     "--start-size",
                                     "32",
                                     "--recent-size",
                                     "64",
                                     "--intermediate-size",
                                     "128",
                                     "--window-size",
                                     "8",
                                     "--strategy",
                                     "per_token",
                                     "--score-aggregation",
                                     "norm_sum",
                                     "apply-rerotation",
                                     "false",
                                     "seed",
                                     "42",
                                     NULL};
    for (int i = 0; kv[i]; i += 2)
        cr_assert_eq(kv_evict_params_set(&p, kv[i], kv[i + 1], &err), 0, "%s", err.msg);
    cr_assert_eq(kv_evict_params_validate(&p, &err), 0, "%s", err.msg);
    cr_assert_str_eq(p.algorithm, "snapkv");
    cr_assert_eq(kv_evict_params_budget(&p), 224);
    cr_assert(p.has_window);
    cr_assert_eq(p.window_size, 8);
    cr_assert_str_eq(p.score_aggregation, "norm_sum");
    cr_assert_not(p.apply_rerotation);
    cr_assert_eq(p.seed, 42u);
}

Test(evict_params, bad_values_and_unknown_keys_are_named)
{
    kv_evict_params p;
    kv_evict_params_default(&p);
    kv_error err;
    cr_assert_neq(kv_evict_params_set(&p, "--start-size", "3x", &err), 0);
    cr_assert(strstr(err.msg, "start_size: expected an integer, got '3x'"), "%s", err.msg);
    cr_assert_neq(kv_evict_params_set(&p, "--budget", "3", &err), 0);
    cr_assert(strstr(err.msg, "unknown key '--budget'"), "%s", err.msg);
    cr_assert(strstr(err.msg, "intermediate_size"), "lists the known keys: %s", err.msg);
    cr_assert_neq(kv_evict_params_set(&p, "apply_rerotation", "maybe", &err), 0);
    cr_assert(strstr(err.msg, "apply_rerotation"), "%s", err.msg);
    cr_assert_neq(kv_evict_params_set(&p, "seed", "-1", &err), 0);
    cr_assert_neq(kv_evict_params_set(&p, "recent_size", "99999999999", &err), 0);
    cr_assert_eq(kv_evict_params_set(&p, "window_size", "none", &err), 0);
    cr_assert_not(p.has_window);
}

static int parse_json(kv_evict_params *p, const char *text, kv_error *err)
{
    cJSON *j = cJSON_Parse(text);
    cr_assert_not_null(j, "test JSON: %s", text);
    kv_evict_params_default(p);
    int rc = kv_evict_params_from_json(p, j, err);
    cJSON_Delete(j);
    return rc;
}

Test(evict_params, json_config_files)
{
    kv_evict_params p;
    kv_error err;
    cr_assert_eq(parse_json(&p,
                            "{\"algorithm\": \"h2o\", \"strategy\": \"per_group\", \"group_size\""
                            ": 4, \"start_size\": 4, \"recent_size\": 16, \"intermediate_size\": "
                            "44, \"score_aggregation\": \"sum\", \"window_size\": null, "
                            "\"apply_rerotation\": false}",
                            &err),
                 0, "%s", err.msg);
    cr_assert_str_eq(p.algorithm, "h2o");
    cr_assert_eq(p.group_size, 4);
    cr_assert_eq(p.intermediate_size, 44);
    cr_assert_not(p.has_window);
    cr_assert_not(p.apply_rerotation);
    cr_assert_neq(parse_json(&p, "{\"start_size\": 1.5}", &err), 0);
    cr_assert(strstr(err.msg, "start_size: expected an integer"), "%s", err.msg);
    cr_assert_neq(parse_json(&p, "{\"strategy\": 3}", &err), 0);
    cr_assert(strstr(err.msg, "strategy: expected a string"), "%s", err.msg);
    cr_assert_neq(parse_json(&p, "{\"apply_rerotation\": 1}", &err), 0);
    cr_assert_neq(parse_json(&p, "{\"kv_budget\": 1}", &err), 0);
    cr_assert(strstr(err.msg, "unknown key 'kv_budget'"), "%s", err.msg);
    cr_assert_neq(parse_json(&p, "[1]", &err), 0);
}

Test(evict_params, json_round_trip)
{
    kv_evict_params a, b;
    kv_error err;
    cr_assert_eq(parse_json(&a,
                            "{\"algorithm\": \"snapkv\", \"window_size\": 16, \"refined_size\""
                            ": 64, \"refined_algorithm\": \"CriticalKV\", \"positions\": "
                            "\"compact\", \"seed\": 4000000000}",
                            &err),
                 0, "%s", err.msg);
    cJSON *j = kv_evict_params_to_json(&a);
    cr_assert_not_null(j);
    cr_assert_eq(cJSON_GetArraySize(j), 29);
    kv_evict_params_default(&b);
    cr_assert_eq(kv_evict_params_from_json(&b, j, &err), 0, "%s", err.msg);
    cr_assert_eq(memcmp(&a, &b, sizeof a), 0);
    cr_assert_str_eq(b.refined_algorithm, "criticalkv");
    cr_assert_eq(b.seed, 4000000000u);
    cJSON_Delete(j);
    kv_evict_params_default(&a);
    j = kv_evict_params_to_json(&a);
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(j, "window_size")));
    cJSON_Delete(j);
}

/* ---- prefill once, fork many ---- */

Test(evict, union_request_of_a_sweep)
{
    kv_evict_params ps[4];
    ps[0] = params("snapkv", "per_token", 32, 2, 4, 4);
    ps[1] = params("snapkv", "per_token", 32, 2, 4, 4);
    ps[1].has_window = true;
    ps[1].window_size = 16;
    ps[2] = params("h2o", "per_token", 32, 2, 4, 4);
    ps[3] = params("knorm", "per_token", 32, 2, 4, 4);
    kv_attn_stats_request req;
    kv_error err;
    cr_assert_eq(kv_evict_stats_request(ps, 4, true, &req, &err), 0, "%s", err.msg);
    cr_assert(req.col_sums);
    cr_assert_eq(req.n_windows, 2);
    cr_assert_eq(req.windows[0], 8);
    cr_assert_eq(req.windows[1], 16);
    cr_assert_eq(kv_evict_stats_request(ps + 3, 1, true, &req, &err), 0);
    cr_assert_not(req.col_sums, "knorm needs no attention");
    cr_assert_eq(req.n_windows, 0);
    cr_assert_eq(kv_evict_stats_request(ps, 2, false, &req, &err), 0);
    cr_assert(req.col_sums);
    cr_assert_eq(req.n_windows, 0, "decode rows are the window");
    strcpy(ps[2].strategy, "diagonal");
    cr_assert_neq(kv_evict_stats_request(ps, 4, true, &req, &err), 0);
    cr_assert(strstr(err.msg, "config 2: strategy"), "%s", err.msg);
}

/* Runs the TV-5 prompt under params p, forking the prefilled cache when
 * `fork` (the prefill computed with the union request of all configs). */
typedef struct run_out {
    int n_events;
    event events[64];
    float keys[2][16 * 4];
} run_out;

static void run_tv5(const kv_evict_params *p, const kv_evict_params *sweep, int n_sweep,
                    run_out *out)
{
    sim s;
    sim_init(&s, p, 2, 2, logit_layered);
    kv_error err;
    if (sweep) {
        /* the shared prefill: full attention, union statistics, no eviction */
        sim base;
        kv_evict_params none = params("h2o", "per_token", 32, 0, 64, 0);
        sim_init(&base, &none, 2, 2, logit_layered);
        kv_attn_stats_request req;
        cr_assert_eq(kv_evict_stats_request(sweep, n_sweep, true, &req, &err), 0);
        int q[12];
        for (int i = 0; i < 12; i++)
            q[i] = i;
        for (int l = 0; l < 2; l++) {
            for (int i = 0; i < 12; i++) {
                append(base.cache, l, i);
                for (int j = 0; j < 4; j++) /* distinct keys, to see rerotation */
                    base.cache->layers[l].k[i * 4 + j] = (float)(i + j + l) / 10.0f;
            }
            kv_cache_layer *cl = &base.cache->layers[l];
            kv_attn_stats st = {.n_heads = 2, .n_keys = 12};
            st.col_sums = calloc(24, sizeof(double));
            for (int w = 0; w < req.n_windows; w++)
                st.win_sums[w] = calloc(24, sizeof(double));
            for (int h = 0; h < 2; h++)
                for (int i = 0; i < 12; i++) {
                    double z = 0, e[12];
                    for (int t = 0; t <= i; t++)
                        z += e[t] = exp(logit_layered(l, h, q[i], cl->pos[t]));
                    for (int t = 0; t <= i; t++) {
                        st.col_sums[h * 12 + t] += e[t] / z;
                        for (int w = 0; w < req.n_windows; w++)
                            if (i >= 12 - req.windows[w])
                                st.win_sums[w][h * 12 + t] += e[t] / z;
                    }
                }
            cr_assert_eq(kv_evictor_observe(s.ev, l, &req, &st, true, &err), 0, "%s", err.msg);
            free(st.col_sums);
            for (int w = 0; w < req.n_windows; w++)
                free(st.win_sums[w]);
        }
        base.cache->next_pos = 12;
        kv_cache_free(s.cache);
        s.cache = kv_cache_fork(base.cache, 0, &err);
        sim_free(&base);
        sim_compress(&s);
    } else {
        for (int l = 0; l < 2; l++)
            for (int i = 0; i < 12; i++) {
                append(s.cache, l, i);
                for (int j = 0; j < 4; j++)
                    s.cache->layers[l].k[i * 4 + j] = (float)(i + j + l) / 10.0f;
            }
        int q[12];
        for (int i = 0; i < 12; i++)
            q[i] = i;
        for (int l = 0; l < 2; l++)
            sim_attend(&s, l, q, 12, true);
        s.cache->next_pos = 12;
        sim_compress(&s);
    }
    for (int i = 0; i < 4; i++)
        sim_decode(&s);
    out->n_events = s.n_events;
    memcpy(out->events, s.events, (size_t)s.n_events * sizeof(event));
    for (int l = 0; l < 2; l++)
        memcpy(out->keys[l], s.cache->layers[l].k, (size_t)s.cache->layers[l].len * 4 * 4);
    sim_free(&s);
}

Test(evict, forked_cache_gives_the_fresh_run)
{
    kv_evict_params sweep[3];
    sweep[0] = params("h2o", "per_token", 32, 2, 3, 4);
    sweep[1] = params("snapkv", "per_token", 32, 2, 3, 4);
    strcpy(sweep[1].score_aggregation, "norm_sum");
    sweep[1].has_window = true;
    sweep[1].window_size = 4;
    sweep[2] = params("h2o", "per_group", 2, 2, 2, 4);
    static run_out fresh, forked;
    for (int i = 0; i < 3; i++) {
        run_tv5(&sweep[i], NULL, 0, &fresh);
        run_tv5(&sweep[i], sweep, 3, &forked);
        cr_assert_gt(fresh.n_events, 2, "config %d evicts", i);
        cr_assert_eq(fresh.n_events, forked.n_events, "config %d", i);
        for (int e = 0; e < fresh.n_events; e++) {
            cr_assert_eq(fresh.events[e].step, forked.events[e].step);
            cr_assert_eq(fresh.events[e].layer, forked.events[e].layer);
            cr_assert_eq(fresh.events[e].n, forked.events[e].n);
            cr_assert_eq(memcmp(fresh.events[e].pos, forked.events[e].pos,
                                (size_t)fresh.events[e].n * sizeof(int32_t)),
                         0, "config %d event %d", i, e);
        }
        cr_assert_eq(memcmp(fresh.keys, forked.keys, sizeof fresh.keys), 0, "rerotated keys");
    }
}

/* ---- the wider policy family ---- */

Test(evict_policy, streaming_keeps_start_and_newest)
{
    sim s;
    kv_evict_params p = params("streaming", "per_token", 32, 2, 2, 3);
    sim_init(&s, &p, 1, 1, logit_tv5);
    score_prefill(&s, 12, tv10_tok); /* scores are ignored */
    POS(&s, 0, 0, 1, 7, 8, 9, 10, 11);
    sim_decode(&s);
    POS(&s, 0, 0, 1, 8, 9, 10, 11, 12);
    kv_attn_stats_request req;
    kv_evictor_stats_request(s.ev, true, &req);
    cr_assert_not(req.col_sums);
    cr_assert_eq(req.n_windows, 0);
    sim_free(&s);
}

Test(evict_policy, random_is_seeded_and_uniform)
{
    int hits[10] = {0}, first[2][5];
    for (int run = 0; run < 200; run++) {
        sim s;
        kv_evict_params p = params("random", "per_token", 32, 1, 1, 3);
        p.seed = (uint32_t)(run % 100); /* runs 100.. repeat the seeds of 0.. */
        sim_init(&s, &p, 1, 1, logit_uniform);
        score_prefill(&s, 10, tv10_tok);
        cr_assert_eq(s.cache->layers[0].len, 5);
        cr_assert_eq(s.cache->layers[0].pos[0], 0);
        cr_assert_eq(s.cache->layers[0].pos[4], 9);
        for (int j = 1; j < 4; j++)
            hits[s.cache->layers[0].pos[j]]++;
        if (run == 3 || run == 103)
            memcpy(first[run / 100], s.cache->layers[0].pos, sizeof first[0]);
        sim_free(&s);
    }
    cr_assert_eq(memcmp(first[0], first[1], sizeof first[0]), 0, "same seed, same picks");
    for (int t = 1; t < 9; t++) /* 600 picks over 8 candidates: 75 expected each */
        cr_assert(hits[t] > 40 && hits[t] < 110, "slot %d kept %d times", t, hits[t]);
}

Test(evict_policy, knorm_keeps_small_keys)
{
    kv_evict_params p = params("knorm", "per_token", 32, 1, 1, 2);
    kv_evict_model m = {
        .n_layers = 1, .n_heads = 2, .n_kv_heads = 2, .head_dim = 2, .rope_theta = 1e4};
    kv_error err;
    kv_evictor *ev = kv_evictor_new(&p, &m, &err);
    kv_cache *c = kv_cache_new(1, 2, 2, 8, &err);
    kv_cache_layer *l = &c->layers[0];
    static const float norms[7] = {9, 3, 1, 4, 0.5f, 2, 9}; /* slot t: keys of that size */
    for (int t = 0; t < 7; t++) {
        for (int j = 0; j < 4; j++)
            l->k[t * 4 + j] = norms[t] / 2; /* ||k|| = norms[t] over both heads */
        kv_cache_set_pos(c, 0, t, t);
    }
    l->len = 7;
    /* no statistics at all: compress tracks the length itself */
    cr_assert_eq(kv_evictor_compress(ev, c, NULL, NULL, &err), 0, "%s", err.msg);
    static const int want[] = {0, 2, 4, 6};
    cr_assert_eq(l->len, 4);
    for (int j = 0; j < 4; j++)
        for (int h = 0; h < 2; h++)
            cr_assert_eq(kv_cache_pos(c, 0, j, h), want[j]);
    kv_evictor_free(ev);
    kv_cache_free(c);
}

/* ---- memory and positions ---- */

/* ---- per_head: each KV head keeps its own tokens ---- */

/* A layer of 4 query heads over 2 KV heads (GQA 2:1), head_dim 4. The key of
 * token t in KV head h is RoPE(pre(t, h), t); its value encodes (t, h). */
enum { PH_Q = 4, PH_KV = 2, PH_D = 4 };

static void ph_pre_key(float *k, int t, int h)
{
    for (int i = 0; i < PH_D; i++)
        k[i] = (float)(0.3 * t + 0.1 * i + 0.2 + 0.05 * h);
}

static void ph_init(sim *s, const kv_evict_params *p)
{
    memset(s, 0, sizeof *s);
    s->p = *p;
    s->m = (kv_evict_model){
        .n_layers = 1, .n_heads = PH_Q, .n_kv_heads = PH_KV, .head_dim = PH_D, .rope_theta = 100};
    kv_error err;
    s->cache = kv_cache_new(1, PH_KV, PH_D, 16, &err);
    cr_assert_not_null(s->cache, "%s", err.msg);
    s->ev = kv_evictor_new(&s->p, &s->m, &err);
    cr_assert_not_null(s->ev, "%s", err.msg);
}

static void ph_append(sim *s, int t)
{
    kv_error err;
    cr_assert_eq(kv_cache_reserve(s->cache, 1, &err), 0);
    kv_cache_layer *l = &s->cache->layers[0];
    double f[PH_D / 2];
    kv_evict_rope_freqs(100.0, PH_D, f);
    for (int h = 0; h < PH_KV; h++) {
        float pre[PH_D];
        ph_pre_key(pre, t, h);
        float *k = l->k + (size_t)l->len * PH_KV * PH_D + h * PH_D;
        rope(k, pre, PH_D, f, t);
        for (int i = 0; i < PH_D; i++)
            l->v[(size_t)l->len * PH_KV * PH_D + h * PH_D + i] = (float)(10 * t + h);
    }
    kv_cache_set_pos(s->cache, 0, l->len++, t);
}

/* One forward whose column sums are sums[q][n] (n = cache length). */
static void ph_forward(sim *s, const double *sums, bool prefill)
{
    kv_error err;
    int n = s->cache->layers[0].len;
    kv_attn_stats_request req = {.col_sums = true};
    kv_attn_stats st = {.n_heads = PH_Q, .n_keys = n, .col_sums = (double *)sums};
    cr_assert_eq(kv_evictor_observe(s->ev, 0, &req, &st, prefill, &err), 0, "%s", err.msg);
    sim_compress(s);
}

/* Head h keeps these positions, and each slot holds that token's value and
 * key: RoPE at the token's position without rerotation; with it, at the
 * slot for the 8 prompt tokens, and for the decoded token 8 (written at its
 * absolute position in slot 5, then moved down one slot) at 7. */
static void ph_assert_head(const sim *s, int h, const int *want, int n)
{
    const kv_cache_layer *l = &s->cache->layers[0];
    cr_assert_eq(l->len, n);
    double f[PH_D / 2];
    kv_evict_rope_freqs(100.0, PH_D, f);
    for (int j = 0; j < n; j++) {
        int t = kv_cache_pos(s->cache, 0, j, h);
        cr_assert_eq(t, want[j], "head %d slot %d holds %d, want %d", h, j, t, want[j]);
        const float *v = l->v + (size_t)j * PH_KV * PH_D + h * PH_D;
        cr_assert_eq(v[0], (float)(10 * t + h), "head %d slot %d: value of another token", h, j);
        float pre[PH_D], k[PH_D];
        ph_pre_key(pre, t, h);
        rope(k, pre, PH_D, f, !s->p.apply_rerotation ? t : t < 8 ? j : t - 1);
        const float *got = l->k + (size_t)j * PH_KV * PH_D + h * PH_D;
        for (int i = 0; i < PH_D; i++)
            cr_assert_float_eq(got[i], k[i], 1e-5, "head %d slot %d key[%d]", h, j, i);
    }
}

#define HEAD_POS(s, h, ...)                                                                        \
    do {                                                                                           \
        int want_[] = {__VA_ARGS__};                                                               \
        ph_assert_head(s, h, want_, (int)(sizeof want_ / sizeof want_[0]));                        \
    } while (0)

/* Slots 1..5 are candidates (S = 1, R = 2, I = 2, L = 8). KV head 0 sums
 * query heads 0 and 1: [.6 .5 .7 0 .55] keeps slots 3, 1 -- neither query
 * head alone (0: slots 1, 5; 1: slots 3, 2) nor all four heads summed
 * (slots 4, 2) would. KV head 1 sums heads 2 and 3: slots 4, 2. */
static const double ph_prefill_sums[PH_Q][8] = {
    {0, .6, 0, .2, 0, .55, 0, 0},
    {0, 0, .5, .5, 0, 0, 0, 0},
    {0, 0, 0, 0, .9, 0, 0, 0},
    {0, 0, .3, 0, 0, .2, 0, 0},
};

static void ph_per_head_run(bool rerotate)
{
    sim s;
    kv_evict_params p = params("h2o", "per_head", 32, 1, 2, 2); /* M = 5 */
    p.apply_rerotation = rerotate;
    ph_init(&s, &p);
    for (int t = 0; t < 8; t++)
        ph_append(&s, t);
    s.cache->next_pos = 8;
    ph_forward(&s, &ph_prefill_sums[0][0], true);
    HEAD_POS(&s, 0, 0, 1, 3, 6, 7);
    HEAD_POS(&s, 1, 0, 2, 4, 6, 7);
    cr_assert_eq(s.n_events, 1);
    const event *e = &s.events[0];
    cr_assert_eq(e->sets, 2);
    cr_assert_eq(e->n, 5);
    static const int32_t trace[] = {0, 1, 3, 6, 7, 0, 2, 4, 6, 7};
    cr_assert_eq(memcmp(e->pos, trace, sizeof trace), 0, "trace: per head, head 0 first");

    /* decode: the scores moved with each head's own compaction. Head 0
     * (tokens 0 1 3 6 7 8): +1 on slot 1 = token 1 (1.6), so token 6 (0)
     * goes; head 1 (tokens 0 2 4 6 7 8): +1 on slot 3 = token 6 (1.0), so
     * token 2 (.3) goes. */
    ph_append(&s, 8);
    s.cache->next_pos = 9;
    double dec[PH_Q][6] = {{0}};
    dec[1][1] = 1.0;
    dec[3][3] = 1.0;
    ph_forward(&s, &dec[0][0], false);
    HEAD_POS(&s, 0, 0, 1, 3, 7, 8);
    HEAD_POS(&s, 1, 0, 4, 6, 7, 8);
    sim_free(&s);
}

Test(evict_per_head, gqa_heads_keep_their_own_tokens)
{
    ph_per_head_run(false);
}

Test(evict_per_head, rerotation_turns_each_head_by_its_own_delta)
{
    ph_per_head_run(true);
}

/* per_token on the same statistics: one set for all heads (slots 4, 2). */
Test(evict_per_head, per_token_keeps_one_set_for_all_heads)
{
    sim s;
    kv_evict_params p = params("h2o", "per_token", 32, 1, 2, 2);
    ph_init(&s, &p);
    for (int t = 0; t < 8; t++)
        ph_append(&s, t);
    ph_forward(&s, &ph_prefill_sums[0][0], true);
    HEAD_POS(&s, 0, 0, 2, 4, 6, 7);
    HEAD_POS(&s, 1, 0, 2, 4, 6, 7);
    cr_assert_eq(s.events[0].sets, 1);
    sim_free(&s);
}

/* With one KV head, per_head is per_token: TV-5 over prefill and decode. */
Test(evict_per_head, one_kv_head_is_per_token)
{
    const char *aggs[] = {"sum", "norm_sum"};
    for (int a = 0; a < 2; a++) {
        sim t, h;
        kv_evict_params p = params("h2o", "per_token", 32, 2, 3, 4);
        strcpy(p.score_aggregation, aggs[a]);
        sim_init(&t, &p, 2, 2, logit_tv5);
        strcpy(p.strategy, "per_head");
        sim_init(&h, &p, 2, 2, logit_tv5);
        sim_prefill(&t, 12);
        sim_prefill(&h, 12);
        for (int i = 0; i < 3; i++) {
            sim_decode(&t);
            sim_decode(&h);
        }
        cr_assert_eq(t.n_events, 8);
        cr_assert_eq(h.n_events, t.n_events);
        for (int i = 0; i < t.n_events; i++)
            cr_assert_eq(memcmp(&t.events[i], &h.events[i], sizeof t.events[i]), 0,
                         "%s: event %d differs", aggs[a], i);
        sim_free(&t);
        sim_free(&h);
    }
}

/* Each KV head's set is what per_token keeps for a model whose only KV
 * head sees that head's summed scores -- with the refiners too. */
static void ph_equals_per_token_per_head(kv_evict_params p, int L, const double *sums)
{
    sim h;
    strcpy(p.strategy, "per_head");
    ph_init(&h, &p);
    for (int t = 0; t < L; t++)
        ph_append(&h, t);
    ph_forward(&h, sums, true);
    for (int kv = 0; kv < PH_KV; kv++) {
        sim t;
        strcpy(p.strategy, "per_token");
        sim_init(&t, &p, 1, 1, logit_uniform);
        double one[64];
        for (int i = 0; i < L; i++)
            one[i] = sums[(2 * kv) * L + i] + sums[(2 * kv + 1) * L + i];
        score_prefill(&t, L, one + p.start_size);
        const kv_cache_layer *l = &t.cache->layers[0];
        cr_assert_eq(h.cache->layers[0].len, l->len);
        for (int j = 0; j < l->len; j++)
            cr_assert_eq(kv_cache_pos(h.cache, 0, j, kv), l->pos[j], "head %d slot %d", kv, j);
        sim_free(&t);
    }
    sim_free(&h);
}

Test(evict_per_head, each_head_is_a_per_token_selection)
{
    double sums[PH_Q][14];
    for (int q = 0; q < PH_Q; q++)
        for (int t = 0; t < 14; t++) /* TV-10's scores, mirrored for KV head 1 */
            sums[q][t] = t < 2 ? 0
                               : 0.5 * (q < 2 ? tv10_tok[t - 2] : tv10_tok[13 - t]) +
                                     0.01 * (q % 2) * (t % 3);
    kv_evict_params p = params("h2o", "per_token", 32, 2, 2, 4);
    p.apply_rerotation = false;
    ph_equals_per_token_per_head(p, 14, &sums[0][0]);
    p.refined_size = 2; /* KVCrush, alternate anchor */
    ph_equals_per_token_per_head(p, 14, &sums[0][0]);
    strcpy(p.kvcrush_anchor, "ones");
    ph_equals_per_token_per_head(p, 14, &sums[0][0]);
    strcpy(p.algorithm, "streaming");
    p.refined_size = 0;
    ph_equals_per_token_per_head(p, 14, &sums[0][0]);
}

Test(evict_per_head, knorm_scores_each_heads_own_key)
{
    kv_evict_params p = params("knorm", "per_head", 32, 1, 1, 2);
    p.apply_rerotation = false;
    kv_evict_model m = {
        .n_layers = 1, .n_heads = 2, .n_kv_heads = 2, .head_dim = 2, .rope_theta = 1e4};
    kv_error err;
    kv_evictor *ev = kv_evictor_new(&p, &m, &err);
    cr_assert_not_null(ev, "%s", err.msg);
    kv_cache *c = kv_cache_new(1, 2, 2, 8, &err);
    kv_cache_layer *l = &c->layers[0];
    static const float norms[2][7] = {{9, 3, 1, 4, 0.5f, 2, 9}, {9, 0.5f, 4, 1, 3, 2, 9}};
    for (int t = 0; t < 7; t++) {
        for (int h = 0; h < 2; h++)
            l->k[t * 4 + h * 2] = norms[h][t], l->k[t * 4 + h * 2 + 1] = 0;
        kv_cache_set_pos(c, 0, t, t);
    }
    l->len = 7;
    cr_assert_eq(kv_evictor_compress(ev, c, NULL, NULL, &err), 0, "%s", err.msg);
    static const int want[2][4] = {{0, 2, 4, 6}, {0, 1, 3, 6}};
    cr_assert_eq(l->len, 4);
    for (int h = 0; h < 2; h++)
        for (int j = 0; j < 4; j++)
            cr_assert_eq(kv_cache_pos(c, 0, j, h), want[h][j], "head %d slot %d", h, j);
    kv_evictor_free(ev);
    kv_cache_free(c);
}

Test(evict_per_head, validation)
{
    kv_evict_params p = params("snapkv", "per_head", 32, 4, 4, 8);
    kv_error err;
    cr_assert_eq(kv_evict_params_validate(&p, &err), 0, "%s", err.msg);
    p.group_size = 3; /* group_size only matters with per_group */
    cr_assert_eq(kv_evict_params_validate(&p, &err), 0, "%s", err.msg);
    p.refined_size = 4;
    strcpy(p.kvcrush_anchor, "mean");
    cr_assert_neq(kv_evict_params_validate(&p, &err), 0);
    cr_assert(strstr(err.msg, "Mean anchor is not supported"), "%s", err.msg);
}

Test(evict, compressed_cache_holds_only_the_budget)
{
    sim s;
    kv_evict_params p = params("h2o", "per_token", 32, 2, 3, 4); /* M = 9 */
    sim_init(&s, &p, 2, 2, logit_tv5);
    kv_error err;
    cr_assert_eq(kv_cache_reserve(s.cache, 200, &err), 0);
    sim_prefill(&s, 60);
    for (int l = 0; l < 2; l++) {
        cr_assert_eq(s.cache->layers[l].len, 9);
        cr_assert_leq(s.cache->layers[l].cap, 10, "cap %d", s.cache->layers[l].cap);
    }
    for (int i = 0; i < 5; i++)
        sim_decode(&s);
    cr_assert_leq(s.cache->layers[0].cap, 10);
    cr_assert_eq(s.cache->next_pos, 65, "absolute positions continue");
    sim_free(&s);
}

Test(evict, compact_positions_continue_at_cache_length)
{
    sim s;
    kv_evict_params p = params("h2o", "per_token", 32, 2, 3, 4);
    strcpy(p.positions, "compact");
    sim_init(&s, &p, 1, 2, logit_tv5);
    sim_prefill(&s, 12);
    cr_assert_eq(s.cache->next_pos, 9);
    sim_decode(&s);
    cr_assert_eq(s.cache->next_pos, 9);
    cr_assert_eq(s.cache->layers[0].pos[8], 9, "the new token was written at position 9");
    sim_free(&s);
}

Test(evict, misuse_is_reported)
{
    sim s;
    kv_evict_params p = params("h2o", "per_token", 32, 2, 3, 4);
    sim_init(&s, &p, 1, 2, logit_tv5);
    sim_prefill(&s, 12);
    append(s.cache, 0, 12); /* a forward without observe */
    kv_error err;
    cr_assert_neq(kv_evictor_compress(s.ev, s.cache, NULL, NULL, &err), 0);
    cr_assert(strstr(err.msg, "kv_evictor_observe"), "%s", err.msg);
    kv_attn_stats_request req = {.n_windows = 1, .windows = {8}};
    kv_attn_stats st = {.n_heads = 2, .n_keys = 10};
    cr_assert_neq(kv_evictor_observe(s.ev, 0, &req, &st, false, &err), 0);
    cr_assert_neq(kv_evictor_observe(s.ev, 3, &req, &st, false, &err), 0);
    cr_assert(strstr(err.msg, "no layer 3"), "%s", err.msg);
    st.n_keys = 13;
    cr_assert_neq(kv_evictor_observe(s.ev, 0, &req, &st, false, &err), 0);
    cr_assert(strstr(err.msg, "column sums"), "%s", err.msg);
    sim_free(&s);
}

/* kv_evict_top against a brute force, with plateaus (ties are common after
 * SnapKV's max pool): the k best by (score desc, index desc). */
Test(evict, top_k_selection_matches_brute_force)
{
    srand(11);
    for (int trial = 0; trial < 300; trial++) {
        int n = 1 + rand() % 300, k = rand() % (n + 1);
        double *s = malloc((size_t)n * sizeof *s);
        int *idx = malloc((size_t)n * sizeof *idx);
        char *in = calloc((size_t)n, 1);
        for (int i = 0; i < n; i++)
            s[i] = trial % 3 == 0 ? rand() % 4 : (trial % 3 == 1 ? 1.0 : rand() / 1e9);
        if (trial == 7)
            s[n / 2] = NAN;
        kv_evict_top(s, n, k, idx);
        for (int i = 0; i < k; i++)
            in[idx[i]] = 1;
        for (int i = 0; i < n; i++) {
            /* i belongs to the top k iff fewer than k elements beat it */
            int beaten = 0;
            double si = isnan(s[i]) ? -INFINITY : s[i];
            for (int j = 0; j < n; j++) {
                double sj = isnan(s[j]) ? -INFINITY : s[j];
                beaten += sj > si || (sj == si && j > i);
            }
            cr_assert_eq(in[i], beaten < k, "trial %d n %d k %d: element %d (%g)", trial, n, k, i,
                         s[i]);
        }
        free(s);
        free(idx);
        free(in);
    }
}

/* SnapKV's pooling against the definition, on random sums of every length
 * around the pool size (the fast path must agree at the edges too). */
Test(evict, snapkv_pool_matches_definition)
{
    srand(5);
    for (int n = 1; n < 40; n++) {
        kv_evict_params p = params("snapkv", "per_token", 32, 0, 64, 0);
        kv_evict_model m = {
            .n_layers = 1, .n_heads = 2, .n_kv_heads = 1, .head_dim = 2, .rope_theta = 1e4};
        kv_error err;
        kv_evictor *ev = kv_evictor_new(&p, &m, &err);
        double *w = malloc((size_t)2 * n * sizeof *w);
        for (int i = 0; i < 2 * n; i++)
            w[i] = rand() % 5 == 0 ? 0.5 : rand() / (double)RAND_MAX;
        kv_attn_stats_request req = {.n_windows = 1, .windows = {8}};
        kv_attn_stats st = {.n_heads = 2, .n_keys = n, .win_sums = {w}};
        cr_assert_eq(kv_evictor_observe(ev, 0, &req, &st, true, &err), 0, "%s", err.msg);
        int len;
        const double *sc = kv_evictor_scores(ev, 0, &len);
        for (int t = 0; t < n; t++) {
            double want = 0;
            for (int h = 0; h < 2; h++) {
                double mx = -INFINITY;
                for (int j = t - 3; j <= t + 3; j++)
                    if (j >= 0 && j < n && w[h * n + j] > mx)
                        mx = w[h * n + j];
                want += mx;
            }
            cr_assert_float_eq(sc[t], want, 1e-15, "n %d slot %d", n, t);
        }
        free(w);
        kv_evictor_free(ev);
    }
}

Test(evict_params, keys_and_algorithms_are_listed)
{
    kv_evict_params p;
    kv_evict_params_default(&p);
    kv_error err;
    int n = 0;
    for (; kv_evict_param_key(n); n++) /* every listed key is accepted */
        cr_assert_neq(strstr("algorithm strategy group_size start_size recent_size "
                             "intermediate_size refined_size score_aggregation apply_rerotation "
                             "window_size refined_algorithm kvcrush_anchor positions seed "
                             "ea_n_future_positions ea_use_covariance ea_use_vnorm ea_epsilon "
                             "layer_budget pyramid_beta head_budget alpha_safeguard "
                             "kv_cache_precision key_quant value_quant key_group_size "
                             "value_group_size compression_ratio query_aware",
                             kv_evict_param_key(n)),
                      NULL, "%s", kv_evict_param_key(n));
    cr_assert_eq(n, 29);
    cr_assert_null(kv_evict_param_key(-1));
    for (int i = 0; kv_evict_algorithm(i); i++) {
        cr_assert_eq(kv_evict_params_set(&p, "algorithm", kv_evict_algorithm(i), &err), 0);
        p.has_window = false;
        cr_assert_eq(kv_evict_params_validate(&p, &err), 0, "%s: %s", kv_evict_algorithm(i),
                     err.msg);
    }
    cr_assert_str_eq(kv_evict_algorithm(0), "snapkv");
    cr_assert_str_eq(kv_evict_algorithm(7), "expected_attention");
    cr_assert_null(kv_evict_algorithm(8));
}

/* The table is the parser's: each row's key, CLI flag and --flag set the
 * same field, its default is what kv_evict_params_default gives (and what
 * to_json writes back), and a non-NAME row rejects text of the wrong type
 * naming its key. */
Test(evict_params, every_table_row_parses_by_key_and_flag)
{
    kv_evict_params def, a, b;
    kv_evict_params_default(&def);
    cJSON *dj = kv_evict_params_to_json(&def);
    kv_error err;
    const kv_evict_param_def *d;
    int n = 0;
    for (; (d = kv_evict_param(n)); n++) {
        cr_assert_eq(kv_evict_param_find(d->key), d);
        cr_assert_eq(kv_evict_param_find(d->flag), d, "%s", d->flag);
        char flag[64];
        snprintf(flag, sizeof flag, "--%s", d->flag);
        cr_assert_eq(kv_evict_param_find(flag), d, "%s", flag);
        /* the default, set as text through the flag, changes nothing */
        a = def;
        cr_assert_eq(kv_evict_params_set(&a, flag, d->dflt, &err), 0, "%s", err.msg);
        cr_assert_eq(memcmp(&a, &def, sizeof a), 0, "%s", d->key);
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(dj, d->key);
        cr_assert_not_null(v, "%s", d->key);
        char *text = cJSON_IsString(v) ? strdup(v->valuestring) : cJSON_PrintUnformatted(v);
        cr_assert_str_eq(strcmp(text, "null") == 0 ? "none" : text, d->dflt, "%s", d->key);
        free(text);
        if (d->type != KV_PARAM_NAME) {
            b = def;
            cr_assert_neq(kv_evict_params_set(&b, d->key, "many", &err), 0, "%s", d->key);
            cr_assert(strstr(err.msg, d->key), "%s", err.msg);
        }
    }
    cr_assert_eq(n, 29);
    cr_assert_null(kv_evict_param_find("--no-such-flag"));
    cJSON *schema = kv_evict_params_schema();
    cr_assert_eq(cJSON_GetArraySize(schema), n);
    cJSON_Delete(schema);
    cJSON_Delete(dj);
}

/* The budget schedules' messages (docs/eviction.md), after NNCF's checks. */
Test(evict_tv, budgets_validation)
{
    INVALID("head_budget 'adaptive' (AdaKV) needs strategy 'per_head'.", "head_budget", "adaptive");
    INVALID("alpha_safeguard must be in [0, 1].", "alpha_safeguard", "1.5");
    INVALID("alpha_safeguard must be in [0, 1].", "alpha_safeguard", "-0.1");
    INVALID("refined_size must be 0 with strategy 'per_head'.", "strategy", "per_head",
            "head_budget", "adaptive", "refined_size", "32");
    INVALID("pyramid_beta must be >= 1.", "pyramid_beta", "0.5");
    INVALID("must be <= 1073741824 with layer_budget 'pyramid'", "layer_budget", "pyramid",
            "intermediate_size", "600000000", "start_size", "0", "recent_size", "0");
    INVALID("layer_budget must be 'uniform' or 'pyramid'", "layer_budget", "cone");
    INVALID("head_budget must be 'uniform' or 'adaptive'", "head_budget", "greedy");
}
