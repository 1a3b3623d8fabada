/* The scorers tova, keydiff and expected_attention: the test vectors of
 * docs/eviction.md's policies (TV-T*, TV-K*, TV-E*), their validation, and
 * the aliases ChunkKV (per_group) on hand-made caches and statistics. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "evict/evict.h"
#include "evict/evict_impl.h" /* the scorer registry, white-box */
#include "model/kvcache.h"

/* ---- a one-layer cache and an evictor over it ---- */

typedef struct pol {
    kv_evict_params p;
    kv_evict_model m;
    float inv_freq[8];
    kv_cache *cache;
    kv_evictor *ev;
} pol;

static kv_evict_params params(const char *algo, const char *strategy, int S, int R, int I)
{
    kv_evict_params p;
    kv_evict_params_default(&p);
    strcpy(p.algorithm, algo);
    strcpy(p.strategy, strategy);
    p.start_size = S;
    p.recent_size = R;
    p.intermediate_size = I;
    p.apply_rerotation = false; /* the vectors give keys as cached; keep them */
    return p;
}

/* H query heads over Hkv KV heads of dimension D, RoPE frequencies freq
 * (NULL: rope_theta 100), L slots at positions 0..L-1, keys and values 0. */
static void pol_init(pol *s, const kv_evict_params *p, int H, int Hkv, int D, const float *freq,
                     int L)
{
    memset(s, 0, sizeof *s);
    s->p = *p;
    s->m = (kv_evict_model){
        .n_layers = 1, .n_heads = H, .n_kv_heads = Hkv, .head_dim = D, .rope_theta = 100.0};
    if (freq) {
        memcpy(s->inv_freq, freq, (size_t)(D / 2) * sizeof *freq);
        s->m.inv_freq = s->inv_freq;
    }
    kv_error err;
    s->cache = kv_cache_new(1, Hkv, D, L + 4, &err);
    cr_assert_not_null(s->cache, "%s", err.msg);
    for (int t = 0; t < L; t++)
        kv_cache_set_pos(s->cache, 0, t, t);
    s->cache->layers[0].len = L;
    s->cache->next_pos = L;
    s->ev = kv_evictor_new(&s->p, &s->m, &err);
    cr_assert_not_null(s->ev, "%s", err.msg);
}

static void pol_free(pol *s)
{
    kv_evictor_free(s->ev);
    kv_cache_free(s->cache);
}

static float *key(pol *s, int slot, int head)
{
    return s->cache->layers[0].k + (size_t)slot * (size_t)kv_cache_row(s->cache) +
           (size_t)head * (size_t)s->cache->head_dim;
}

static float *value(pol *s, int slot, int head)
{
    return s->cache->layers[0].v + (size_t)slot * (size_t)kv_cache_row(s->cache) +
           (size_t)head * (size_t)s->cache->head_dim;
}

/* Appends one slot at position pos (keys and values 0). */
static void pol_append(pol *s, int pos)
{
    kv_error err;
    cr_assert_eq(kv_cache_reserve(s->cache, 1, &err), 0, "%s", err.msg);
    kv_cache_layer *l = &s->cache->layers[0];
    memset(key(s, l->len, 0), 0, (size_t)kv_cache_row(s->cache) * sizeof(float));
    memset(value(s, l->len, 0), 0, (size_t)kv_cache_row(s->cache) * sizeof(float));
    kv_cache_set_pos(s->cache, 0, l->len++, pos);
    s->cache->next_pos = pos + 1;
}

/* Observes a forward of n_new rows whose newest row per query head is
 * last[H][L] (the window-1 sums TOVA reads; also the column sums), then
 * compresses. */
static void pol_forward_rows(pol *s, const double *last, bool prefill)
{
    int H = s->m.n_heads, L = s->cache->layers[0].len;
    kv_attn_stats_request req;
    kv_evictor_stats_request(s->ev, prefill, &req);
    kv_attn_stats st = {.n_heads = H, .n_keys = L};
    st.col_sums = (double *)last;
    for (int w = 0; w < req.n_windows; w++)
        st.win_sums[w] = (double *)last;
    kv_error err;
    cr_assert_eq(kv_evictor_observe(s->ev, 0, &req, &st, prefill, &err), 0, "%s", err.msg);
    cr_assert_eq(kv_evictor_compress(s->ev, s->cache, NULL, NULL, &err), 0, "%s", err.msg);
}

/* Compresses an attention-free policy's cache (a prefill). */
static void pol_compress(pol *s)
{
    kv_error err;
    cr_assert_eq(kv_evictor_compress(s->ev, s->cache, NULL, NULL, &err), 0, "%s", err.msg);
}

static void assert_kept(pol *s, int head, const int *want, int n)
{
    const kv_cache_layer *l = &s->cache->layers[0];
    char got[256] = "";
    for (int i = 0; i < l->len; i++)
        snprintf(got + strlen(got), sizeof got - strlen(got), "%d ",
                 kv_cache_pos(s->cache, 0, i, head));
    cr_assert_eq(l->len, n, "head %d kept %s", head, got);
    for (int i = 0; i < n; i++)
        cr_assert_eq(kv_cache_pos(s->cache, 0, i, head), want[i], "head %d kept %s", head, got);
}

#define KEPT(s, head, ...)                                                                         \
    do {                                                                                           \
        int want_[] = {__VA_ARGS__};                                                               \
        assert_kept(s, head, want_, (int)(sizeof want_ / sizeof want_[0]));                        \
    } while (0)

/* ---- TOVA ---- */

/* TV-T1 then TV-T2 (units of 1/32): the last row decides, summed over
 * heads; at decode the new row alone decides: position 3, the best at
 * prefill, goes. */
Test(policies, tv_t1_t2_tova_prefill_then_decode)
{
    kv_evict_params p = params("tova", "per_token", 1, 2, 2);
    pol s;
    pol_init(&s, &p, 2, 1, 2, NULL, 8);
    double last[2][8] = {{10, 1, 2, 6, 1, 3, 1, 8}, {6, 2, 1, 8, 2, 1, 3, 9}};
    for (int h = 0; h < 2; h++)
        for (int t = 0; t < 8; t++)
            last[h][t] /= 32;
    pol_forward_rows(&s, &last[0][0], true);
    KEPT(&s, 0, 0, 3, 5, 6, 7);
    pol_append(&s, 8);
    double row[2][6] = {{12, 1, 7, 4, 3, 5}, {0}}; /* the summed row, all on head 0 */
    pol_forward_rows(&s, &row[0][0], false);
    KEPT(&s, 0, 0, 5, 6, 7, 8);
    pol_free(&s);
}

/* TV-T3 in kvbench's terms: the same sums [16,3,3,14,3,4,4 | 17], the last
 * token kept (kvpress pads it with max + 1; here R = 1), 3 more: slots 0
 * and 3, then the 4/64 tie of slots 5 and 6 goes to the higher slot. */
Test(policies, tv_t3_tie_keeps_the_higher_slot)
{
    kv_evict_params p = params("tova", "per_token", 0, 1, 3);
    pol s;
    pol_init(&s, &p, 1, 1, 2, NULL, 8);
    double last[8] = {16, 3, 3, 14, 3, 4, 4, 17};
    pol_forward_rows(&s, last, true);
    KEPT(&s, 0, 0, 3, 6, 7);
    pol_free(&s);
}

/* per_head: each KV head ranks by the sum of its own query heads' rows. */
Test(policies, tova_per_head_sums_each_group)
{
    kv_evict_params p = params("tova", "per_head", 1, 1, 1);
    pol s;
    pol_init(&s, &p, 4, 2, 2, NULL, 5);
    /* query heads 0, 1 -> KV head 0; 2, 3 -> KV head 1 */
    double last[4][5] = {{0, .1, .5, .2, 0}, {0, .4, 0, .1, 0}, {0, .9, 0, 0, 0}, {0, 0, .3, .7, 0}};
    pol_forward_rows(&s, &last[0][0], true);
    KEPT(&s, 0, 0, 2, 4); /* .5 beats .5 at slot 1 by the higher slot */
    KEPT(&s, 1, 0, 1, 4); /* .9 against .3 and .7 */
    pol_free(&s);
}

/* ---- KeyDiff ---- */

static void set2(float *k, float x, float y)
{
    k[0] = x;
    k[1] = y;
}

/* TV-K1's keys on KV head 0 of s. */
static void tv_k1_keys(pol *s)
{
    const float k[6][2] = {{1, 0}, {0, 2}, {3, 0}, {0, -1}, {1, 1}, {-2, 0}};
    for (int t = 0; t < 6; t++)
        set2(key(s, t, 0), k[t][0], k[t][1]);
}

/* The scorer's selection scores of slots first.. (white-box). */
static void rank_scores(pol *s, int head, double *out)
{
    const kv_scorer *sc = kv_scorer_find(s->p.algorithm);
    kv_evict_cfg cfg = {.p = &s->p, .group = 1, .n_sets = 1, .model = &s->m};
    double inv[4];
    for (int f = 0; f < s->m.head_dim / 2; f++)
        inv[f] = s->m.inv_freq ? s->m.inv_freq[f] : pow(100.0, -2.0 * f / s->m.head_dim);
    cfg.inv_freq = inv;
    int S = s->p.start_size;
    kv_scorer_rank r = {&cfg, s->cache, 0, head, S, s->cache->layers[0].len - S, NULL,
                        kv_evictor_scorer_state(s->ev, 0)};
    kv_error err;
    cr_assert_eq(sc->rank(&r, out, &err), 0, "%s", err.msg);
}

/* TV-K1: the anchor at 22.5 degrees; keys pointing away from it stay. */
Test(policies, tv_k1_keydiff_scores_and_kept)
{
    kv_evict_params p = params("keydiff", "per_token", 1, 1, 2);
    pol s;
    pol_init(&s, &p, 1, 1, 2, NULL, 6);
    tv_k1_keys(&s);
    double got[5];
    rank_scores(&s, -1, got);
    const double deg[] = {67.5, 22.5, 112.5, 22.5, 157.5}; /* slots 1..5 */
    for (int i = 0; i < 5; i++)
        cr_assert_float_eq(got[i], -cos(deg[i] * M_PI / 180), 1e-12, "slot %d: %g", i + 1, got[i]);
    pol_compress(&s);
    KEPT(&s, 0, 0, 1, 3, 5);
    pol_free(&s);
}

/* TV-K2: a second KV head with anchor along (1, 2); per_token sums the heads,
 * per_head keeps [0,1,3,5] in both. */
Test(policies, tv_k2_keydiff_two_heads)
{
    const float k2[6][2] = {{0, 1}, {1, 0}, {0, 1}, {1, 0}, {0, 1}, {0, 1}};
    const char *strategies[] = {"per_token", "per_head"};
    for (int i = 0; i < 2; i++) {
        kv_evict_params p = params("keydiff", strategies[i], 1, 1, 2);
        pol s;
        pol_init(&s, &p, 2, 2, 2, NULL, 6);
        tv_k1_keys(&s);
        for (int t = 0; t < 6; t++)
            set2(key(&s, t, 1), k2[t][0], k2[t][1]);
        if (i == 1) {
            double got[5];
            rank_scores(&s, 1, got);
            for (int t = 1; t < 6; t++)
                cr_assert_float_eq(got[t - 1], k2[t][0] ? -1 / sqrt(5) : -2 / sqrt(5), 1e-7);
        }
        pol_compress(&s);
        KEPT(&s, 0, 0, 1, 3, 5);
        if (i == 1)
            KEPT(&s, 1, 0, 1, 3, 5);
        pol_free(&s);
    }
}

/* TV-K3: head 1's anchor along (5, 1); slots 1, 3 and 4 tie exactly and
 * the highest wins. */
Test(policies, tv_k3_keydiff_per_head_tie)
{
    const float k2[6][2] = {{1, 0}, {1, 0}, {0, 1}, {1, 0}, {1, 0}, {1, 0}};
    kv_evict_params p = params("keydiff", "per_head", 1, 1, 2);
    pol s;
    pol_init(&s, &p, 2, 2, 2, NULL, 6);
    tv_k1_keys(&s);
    for (int t = 0; t < 6; t++)
        set2(key(&s, t, 1), k2[t][0], k2[t][1]);
    double got[5];
    rank_scores(&s, 1, got);
    cr_assert_float_eq(got[0], -5 / sqrt(26), 1e-7); /* -.9806 */
    cr_assert_float_eq(got[1], -1 / sqrt(26), 1e-7); /* -.1961 */
    cr_assert_eq(got[0], got[2]);
    cr_assert_eq(got[0], got[3]);
    pol_compress(&s);
    KEPT(&s, 0, 0, 1, 3, 5);
    KEPT(&s, 1, 0, 2, 4, 5);
    pol_free(&s);
}

/* ---- ExpectedAttention ---- */

/* Observes a prefill whose query rows (pre-RoPE, [n][H][D]) are q, as the
 * forward reports them from row q_from = start_size on. */
static void ea_observe_rows(pol *s, const double *q, int n)
{
    int H = s->m.n_heads, D = s->m.head_dim, S = s->p.start_size;
    kv_attn_stats_request req;
    kv_evictor_stats_request(s->ev, true, &req);
    cr_assert(req.q_moments && req.q_from == S && req.q_rows == 0);
    kv_attn_stats st = {.n_heads = H, .n_keys = s->cache->layers[0].len, .head_dim = D};
    st.q_sum = calloc((size_t)H * D, sizeof(double));
    st.q_outer = calloc((size_t)H * D * D, sizeof(double));
    for (int r = S; r < n; r++, st.q_count++)
        for (int h = 0; h < H; h++) {
            const double *x = q + ((size_t)r * H + h) * D;
            for (int i = 0; i < D; i++) {
                st.q_sum[h * D + i] += x[i];
                for (int j = i; j < D; j++)
                    st.q_outer[(h * D + i) * D + j] += x[i] * x[j];
            }
        }
    kv_error err;
    cr_assert_eq(kv_evictor_observe(s->ev, 0, &req, &st, true, &err), 0, "%s", err.msg);
    free(st.q_sum);
    free(st.q_outer);
}

/* TV-E2's cache: D = 2, a quarter turn per position, stats rows (1,0) and
 * (1,2) after a sink row, keys of slots 1..5 as given, unit values. */
static void tv_e2(pol *s, bool covariance, float v2)
{
    kv_evict_params p = params("expected_attention", "per_token", 1, 1, 2);
    p.ea_n_future_positions = 2;
    p.ea_use_covariance = covariance;
    const float quarter = (float)(M_PI / 2);
    pol_init(s, &p, 1, 1, 2, &quarter, 6);
    s->cache->next_pos = 4;
    const double q[3][2] = {{9, 9}, {1, 0}, {1, 2}}; /* row 0 is the sink's: skipped */
    ea_observe_rows(s, &q[0][0], 3);
    const float k[6][2] = {{5, 5}, {0, 1}, {4, 0}, {0, -1}, {1, 1.2f}, {0, 0}};
    for (int t = 0; t < 6; t++) {
        set2(key(s, t, 0), k[t][0], k[t][1]);
        set2(value(s, t, 0), t == 2 ? v2 : 1, 0);
    }
}

Test(policies, tv_e2_expected_attention)
{
    pol s;
    double got[5];
    tv_e2(&s, true, 1);
    rank_scores(&s, -1, got);
    const double with_cov[] = {.2469, .3109, .0600, .2678, .1144};
    for (int i = 0; i < 5; i++)
        cr_assert_float_eq(got[i], with_cov[i], 6e-5, "slot %d: %.5f", i + 1, got[i]);
    pol_compress(&s);
    KEPT(&s, 0, 0, 2, 4, 5);
    pol_free(&s);

    tv_e2(&s, false, 1);
    rank_scores(&s, -1, got);
    const double without[] = {.2958, .1458, .0719, .3407, .1458};
    for (int i = 0; i < 5; i++)
        cr_assert_float_eq(got[i], without[i], 6e-5, "slot %d: %.5f", i + 1, got[i]);
    pol_compress(&s);
    KEPT(&s, 0, 0, 1, 4, 5);
    pol_free(&s);

    tv_e2(&s, true, 0.1f);
    pol_compress(&s);
    KEPT(&s, 0, 0, 1, 4, 5);
    pol_free(&s);
}

/* The expected logit of one query head from explicit D x D matrices: the
 * mean of the RoPE matrices R_p over the future positions, mu' = Rbar mu,
 * Sigma' = Rbar Sigma Rbar^T (kvpress's computation, TV-E3). */
static double explicit_z(const double *mu, const double *cov, const float *k, int D,
                         const double *inv, int next, int nf, bool covariance)
{
    double rbar[8][8] = {{0}}, m2[8] = {0}, c2[8][8] = {{0}}, tmp[8][8] = {{0}};
    int half = D / 2;
    for (int p = next; p < next + nf; p++)
        for (int f = 0; f < half; f++) {
            double c = cos(p * inv[f]) / nf, s = sin(p * inv[f]) / nf;
            rbar[f][f] += c;
            rbar[f][f + half] -= s;
            rbar[f + half][f] += s;
            rbar[f + half][f + half] += c;
        }
    for (int i = 0; i < D; i++)
        for (int j = 0; j < D; j++) {
            m2[i] += rbar[i][j] * mu[j];
            for (int l = 0; l < D; l++)
                tmp[i][j] += rbar[i][l] * cov[l * D + j];
        }
    for (int i = 0; i < D; i++)
        for (int j = 0; j < D; j++)
            for (int l = 0; l < D; l++)
                c2[i][j] += tmp[i][l] * rbar[j][l];
    double z = 0;
    for (int i = 0; i < D; i++) {
        z += m2[i] * k[i] / sqrt(D);
        for (int j = 0; covariance && j < D; j++)
            z += k[i] * c2[i][j] * k[j] / (2.0 * D);
    }
    return z;
}

/* TV-E1 and TV-E3: with one statistics row, no covariance and one future
 * position the score is the real attention row of that query placed at
 * next_pos (D = 8, theta = 100); with many rows and covariance the scores
 * equal the explicit-matrix computation to 1e-12 (relative). GQA: 2 query
 * heads share each of 2 KV heads, per_head. */
Test(policies, tv_e1_e3_expected_attention_against_explicit_rotations)
{
    enum { H = 4, HKV = 2, D = 8, L = 7, ROWS = 6 };
    float fq[D / 2];
    double inv[D / 2];
    for (int f = 0; f < D / 2; f++)
        inv[f] = fq[f] = (float)pow(100.0, -2.0 * f / D); /* the evictor widens the floats */
    srand(7);
    for (int pass = 0; pass < 2; pass++) {
        bool one = pass == 0;
        kv_evict_params p = params("expected_attention", "per_head", 1, 1, 3);
        p.ea_use_covariance = !one;
        p.ea_use_vnorm = false;
        p.ea_n_future_positions = one ? 1 : 40;
        pol s;
        pol_init(&s, &p, H, HKV, D, fq, L);
        s.cache->next_pos = 13;
        double q[ROWS][H][D];
        for (int r = 0; r < ROWS; r++)
            for (int h = 0; h < H; h++)
                for (int i = 0; i < D; i++)
                    q[r][h][i] = rand() / (double)RAND_MAX - 0.5;
        int rows = one ? 2 : ROWS; /* the sink row and one statistics row */
        ea_observe_rows(&s, &q[0][0][0], rows);
        for (int t = 0; t < L; t++)
            for (int g = 0; g < HKV; g++)
                for (int i = 0; i < D; i++)
                    key(&s, t, g)[i] = (float)(rand() / (double)RAND_MAX - 0.5) * 3;
        for (int g = 0; g < HKV; g++) {
            double got[L - 1], want[L - 1] = {0};
            rank_scores(&s, g, got);
            for (int h = g * 2; h < g * 2 + 2; h++) {
                double mu[D] = {0}, cov[D * D] = {0}, z[L - 1], zsum = 0, mx = -INFINITY;
                int n = rows - 1;
                for (int r = 1; r < rows; r++)
                    for (int i = 0; i < D; i++)
                        mu[i] += q[r][h][i] / n;
                for (int r = 1; r < rows; r++)
                    for (int i = 0; i < D; i++)
                        for (int j = 0; j < D; j++)
                            cov[i * D + j] += (q[r][h][i] - mu[i]) * (q[r][h][j] - mu[j]) / n;
                for (int t = 1; t < L; t++) {
                    z[t - 1] = explicit_z(mu, cov, key(&s, t, g), D, inv, 13,
                                          p.ea_n_future_positions, !one);
                    mx = fmax(mx, z[t - 1]);
                }
                for (int t = 0; t < L - 1; t++)
                    zsum += z[t] = exp(z[t] - mx);
                for (int t = 0; t < L - 1; t++)
                    want[t] += z[t] / zsum / 2;
            }
            for (int t = 0; t < L - 1; t++)
                cr_assert(fabs(got[t] - want[t]) <= 1e-12 * fabs(want[t]) + 1e-15,
                          "pass %d head %d slot %d: %.17g vs %.17g", pass, g, t + 1, got[t],
                          want[t]);
        }
        for (int g = 0; one && g < HKV; g++) { /* TV-E1: q's real attention at position 13 */
            double got[L - 1], want[L - 1] = {0};
            rank_scores(&s, g, got);
            for (int h = g * 2; h < g * 2 + 2; h++) {
                float qr[D];
                for (int i = 0; i < D; i++)
                    qr[i] = (float)q[1][h][i];
                kv_evict_rope_rotate(qr, D, inv, 13); /* RoPE at 13 of the pre-RoPE query */
                double a[L - 1], sum = 0;
                for (int t = 1; t < L; t++) {
                    double dot = 0;
                    for (int i = 0; i < D; i++)
                        dot += (double)qr[i] * key(&s, t, g)[i];
                    sum += a[t - 1] = exp(dot / sqrt(D));
                }
                for (int t = 0; t < L - 1; t++)
                    want[t] += a[t] / sum / 2;
            }
            for (int t = 0; t < L - 1; t++)
                cr_assert_float_eq(got[t], want[t], 1e-6, "head %d slot %d", g, t + 1);
        }
        pol_free(&s);
    }
}

/* ---- validation and aliases ---- */

static void expect_invalid(const char *algo, const char *key, const char *value, const char *msg)
{
    kv_evict_params p;
    kv_evict_params_default(&p);
    kv_error err;
    cr_assert_eq(kv_evict_params_set(&p, "algorithm", algo, &err), 0, "%s", err.msg);
    int rc = kv_evict_params_set(&p, key, value, &err);
    if (rc == 0)
        rc = kv_evict_params_validate(&p, &err);
    cr_assert_neq(rc, 0, "%s %s=%s accepted", algo, key, value);
    cr_assert(strstr(err.msg, msg), "%s %s=%s: %s", algo, key, value, err.msg);
}

Test(policies, validation_messages)
{
    const char *recomputing[] = {"tova", "keydiff", "expected_attention"};
    for (int i = 0; i < 3; i++) {
        expect_invalid(recomputing[i], "score_aggregation", "norm_sum",
                       "score_aggregation 'norm_sum' needs an accumulating algorithm ('h2o' or "
                       "'snapkv').");
        expect_invalid(recomputing[i], "window_size", "8",
                       "Window size is only supported for SNAPKV algorithm.");
    }
    expect_invalid("expected_attention", "ea_n_future_positions", "0",
                   "ea_n_future_positions must be >= 1.");
    expect_invalid("expected_attention", "ea_epsilon", "nan", "ea_epsilon: expected a finite number");
    expect_invalid("expected_attention", "ea_use_vnorm", "maybe", "ea_use_vnorm: expected true or false");
    /* the accumulating ones keep norm_sum (ObservedAttention = h2o + norm_sum) */
    kv_evict_params p;
    kv_evict_params_default(&p);
    kv_error err;
    strcpy(p.algorithm, "h2o");
    strcpy(p.score_aggregation, "norm_sum");
    cr_assert_eq(kv_evict_params_validate(&p, &err), 0, "%s", err.msg);
}

/* TV-C5: ChunkKV is per_group with group_size = chunk length: groups of 3
 * from slot 0, the last group recent, the best of the rest kept. */
Test(policies, tv_c5_chunkkv_is_per_group)
{
    kv_evict_params p = params("tova", "per_group", 0, 3, 3);
    p.group_size = 3;
    pol s;
    pol_init(&s, &p, 1, 1, 2, NULL, 9);
    double last[9] = {.1, .2, .3, .9, .8, .1, 0, .1, .2};
    pol_forward_rows(&s, last, true);
    KEPT(&s, 0, 3, 4, 5, 6, 7, 8);
    pol_free(&s);
}

/* TV-C1..C4: kvpress's own ChunkKV selection (kv_chunkkv_select_kvpress,
 * for parity): chunk means of the heads' summed scores, a ratio of whole
 * chunks, a kept partial chunk, and the token fallback below one chunk. */
static void expect_chunks(const double *scores, int heads, int L, int c, double r,
                          const int *want, int n_want)
{
    int keep[2 * 16], n_keep[2];
    kv_error err;
    cr_assert_eq(kv_chunkkv_select_kvpress(scores, heads, L, c, r, keep, n_keep, &err), 0, "%s",
                 err.msg);
    for (int h = 0; h < heads; h++) {
        cr_assert_eq(n_keep[h], n_want, "head %d keeps %d, want %d", h, n_keep[h], n_want);
        for (int i = 0; i < n_want; i++)
            cr_assert_eq(keep[h * L + i], want[i], "head %d, kept %d: %d, want %d", h, i,
                         keep[h * L + i], want[i]);
    }
}

Test(policies, tv_c1_c4_chunkkv_kvpress_parity)
{
    static const double one[10] = {.1, .2, .3, .9, .8, .1, 0, .1, .2, .5};
    /* C1: chunk means .2 .6 .1 .5; int(4 * .5) = 2 chunks: 4 tokens, not 5 */
    expect_chunks(one, 1, 10, 3, 0.5, (const int[]){3, 4, 5, 9}, 4);
    /* C2: a second head's .9s lift chunk 0 to a mean of 1.1, for both heads */
    double two[20];
    for (int t = 0; t < 10; t++) {
        two[t] = one[t];
        two[10 + t] = t < 3 ? .9 : 0;
    }
    expect_chunks(two, 2, 10, 3, 0.5, (const int[]){0, 1, 2, 3, 4, 5}, 6);
    /* C3: L = 2 < c: the token fallback keeps int(2 * .5) = 1 slot per head */
    expect_chunks((const double[]){.7, .4}, 1, 2, 3, 0.5, (const int[]){0}, 1);
    /* C4: int(4 * (1 - 0.9)) = int(0.3999...) = 0, raised to 1 chunk */
    expect_chunks(one, 1, 10, 3, 0.9, (const int[]){3, 4, 5}, 3);
}

/* TV-L1, TV-L2: kvpress's LagKV scores (kv_lagkv_scores_kvpress, parity
 * only: LagKV is not a kvbench policy). */
Test(policies, tv_l1_l2_lagkv_kvpress_parity)
{
    /* L1: n_sink 1, lag 2; keys = values; partition {1, 2} against {3, 4} =
     * {(0,0), (2,2)}: (1,0) -> (.5,0), std .354; (0,3) -> (0,1.5), std 1.061 */
    static const double kv[12] = {0, 0, 1, 0, 0, 3, 0, 0, 2, 2, 9, 9};
    double s[6];
    kv_lagkv_scores_kvpress(kv, kv, 6, 2, 1, 2, s);
    static const double want[6] = {1, 0, .5, 1, 1, 1};
    for (int t = 0; t < 6; t++)
        cr_assert_float_eq(s[t], want[t], 1e-12, "slot %d: %g, want %g", t, s[t], want[t]);
    /* L2: L = 4 < n_sink + 2 lag = 5: the ramp, sinks 1 */
    kv_lagkv_scores_kvpress(kv, kv, 4, 2, 1, 2, s);
    static const double ramp[4] = {1, 0, 1.0 / 3, 2.0 / 3};
    for (int t = 0; t < 4; t++)
        cr_assert_float_eq(s[t], ramp[t], 1e-12, "slot %d: %g, want %g", t, s[t], ramp[t]);
}
