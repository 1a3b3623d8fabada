/* kvcore/evict: the test vectors of EVICTION.md §10, driven by hand-made
 * attention statistics on small caches, plus the parser and invariants. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "evict.h"
#include "kvcache.h"

/* ---- a tiny simulated model: attention probabilities from a formula ---- */

/* logits of query head h at position i for the key at position j (j <= i) */
typedef double (*logit_fn)(int layer, int h, int i, int j);

typedef struct event {
    int step, layer, n;
    int32_t pos[80];
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

static void record(void *ctx, int step, int layer, const int32_t *pos, int n)
{
    sim *s = ctx;
    cr_assert_lt(s->n_events, 256);
    event *e = &s->events[s->n_events++];
    e->step = step;
    e->layer = layer;
    e->n = n;
    cr_assert_leq(n, 80);
    memcpy(e->pos, pos, (size_t)n * sizeof *pos);
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
    s->m = (kv_evict_model){.n_layers = n_layers, .n_heads = n_heads, .n_kv_heads = 1,
                            .head_dim = 4, .rope_theta = 10000.0};
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
        cr_assert_eq(l->pos[i], want[i], "layer %d slot %d: %d, want %d (%s)", layer, i,
                     l->pos[i], want[i], got);
}

#define POS(s, layer, ...)                                                                       \
    do {                                                                                          \
        int want_[] = {__VA_ARGS__};                                                              \
        assert_positions(s, layer, want_, (int)(sizeof want_ / sizeof want_[0]));                 \
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
            cr_assert_float_eq(a[i], b[i], 1e-6, "trial %d dim %d: %g vs %g", trial, i, a[i],
                               b[i]);
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
    kv_evict_model m = {.n_layers = 1, .n_heads = 1, .n_kv_heads = 1, .head_dim = D,
                        .rope_theta = 100.0};
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
