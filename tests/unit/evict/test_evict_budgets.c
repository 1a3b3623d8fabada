/* kvcore/evict: the budget schedules -- layer_budget pyramid (PyramidKV) and
 * head_budget adaptive (AdaKV) -- against the test vectors of
 * docs/eviction.md (TV-P*, TV-A*), kvpress's own arithmetic, and invariants. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "evict/evict.h"
#include "evict/evict_impl.h" /* kv_adaptive_pick, white-box */
#include "model/kvcache.h"

static kv_evict_params budget_params(int S, int R, int I)
{
    kv_evict_params p;
    kv_evict_params_default(&p);
    strcpy(p.algorithm, "h2o");
    p.start_size = S;
    p.recent_size = R;
    p.intermediate_size = I;
    return p;
}

static kv_evict_params pyramid(int I, double beta, const char *strategy, int G)
{
    kv_evict_params p = budget_params(0, G, I);
    strcpy(p.layer_budget, "pyramid");
    strcpy(p.strategy, strategy);
    p.group_size = G;
    p.pyramid_beta = beta;
    return p;
}

static void assert_schedule(const kv_evict_params *p, int n_layers, const int *want)
{
    for (int l = 0; l < n_layers; l++)
        cr_assert_eq(kv_evict_layer_intermediate(p, n_layers, l), want[l], "layer %d: %d, want %d",
                     l, kv_evict_layer_intermediate(p, n_layers, l), want[l]);
}

#define SCHEDULE(p, ...)                                                                           \
    do {                                                                                           \
        int want_[] = {__VA_ARGS__};                                                               \
        assert_schedule(p, (int)(sizeof want_ / sizeof want_[0]), want_);                          \
    } while (0)

/* ---- PyramidKV: the schedule ---- */

Test(pyramid, tv_p3_framework_schedule)
{
    kv_evict_params p = pyramid(512, 20, "per_token", 1);
    SCHEDULE(&p, 998, 674, 350, 26); /* lo 25.6, hi 998.4: sum 2048 */
    int sum = 0;
    for (int l = 0; l < 28; l++) {
        int i = kv_evict_layer_intermediate(&p, 28, l);
        cr_assert_eq(i, 998 - 36 * l, "N = 28, layer %d: %d", l, i);
        sum += i;
    }
    cr_assert_eq(sum, 28 * 512, "the mean is exactly 512");
    cr_assert_eq(kv_evict_layer_intermediate(&p, 1, 0), 512, "one layer keeps I");
}

Test(pyramid, tv_p3b_rounds_half_to_even)
{
    kv_evict_params p = pyramid(10, 4, "per_token", 1);
    SCHEDULE(&p, 18, 2); /* 17.5, 2.5: half-up would give 18, 3 */
}

Test(pyramid, tv_p4_per_group_in_group_units)
{
    kv_evict_params p = pyramid(32, 4, "per_group", 4);
    SCHEDULE(&p, 56, 32, 8); /* groups 14, 8, 2 */
}

Test(pyramid, uniform_and_beta_1_keep_intermediate_size)
{
    kv_evict_params p = pyramid(300, 1, "per_token", 1);
    SCHEDULE(&p, 300, 300, 300, 300, 300);
    strcpy(p.layer_budget, "uniform");
    p.pyramid_beta = 20;
    SCHEDULE(&p, 300, 300, 300);
}

/* kvpress's test: the mean over the layers is the budget up to rounding
 * (rel 1e-3) on a grid; here for the framework's schedule. */
Test(pyramid, mean_over_layers_is_intermediate_size)
{
    static const int sizes[] = {512, 1000, 1024, 2048, 4096};
    static const int layers[] = {2, 4, 16, 28, 36, 80};
    static const double betas[] = {1, 2, 5, 20, 100};
    for (size_t a = 0; a < sizeof sizes / sizeof *sizes; a++)
        for (size_t b = 0; b < sizeof layers / sizeof *layers; b++)
            for (size_t c = 0; c < sizeof betas / sizeof *betas; c++) {
                kv_evict_params p = pyramid(sizes[a], betas[c], "per_token", 1);
                double sum = 0;
                for (int l = 0; l < layers[b]; l++)
                    sum += kv_evict_layer_intermediate(&p, layers[b], l);
                double mean = sum / layers[b];
                cr_assert_leq(fabs(mean - sizes[a]) / sizes[a], 1e-3, "I %d, N %d, beta %g: %g",
                              sizes[a], layers[b], betas[c], mean);
            }
}

/* kvpress's get_layer_budget, window included: capped, uncapped, and the
 * silent fallback to round(q (1 - r)). */
Test(pyramid, tv_p1_p2_kvpress_arithmetic)
{
    static const int p1[] = {936, 645, 355, 64}, p1b[] = {3900, 2633, 1367, 100};
    for (int l = 0; l < 4; l++) {
        cr_assert_eq(kv_evict_pyramid_kvpress(1000, 0.5, 64, 20, 4, l), p1[l], "TV-P1 %d", l);
        cr_assert_eq(kv_evict_pyramid_kvpress(4000, 0.5, 64, 20, 4, l), p1b[l], "TV-P1b %d", l);
        cr_assert_eq(kv_evict_pyramid_kvpress(1000, 0.9, 64, 20, 4, l), 100, "TV-P2 %d", l);
    }
}

/* The original (KVCache-Factory): integer floor arithmetic, window on top. */
Test(pyramid, tv_p5_original_arithmetic)
{
    static const int want[] = {1997, 1349, 701, 53};
    for (int l = 0; l < 4; l++)
        cr_assert_eq(kv_evict_pyramid_original(4000, 1088, 64, 20, 4, l), want[l], "layer %d", l);
}

/* ---- a small per-head cache whose attention the tests write by hand ---- */

typedef struct rig {
    kv_evict_params p;
    kv_evict_model m;
    kv_cache *cache;
    kv_evictor *ev;
    int32_t trace[4][64]; /* the last event of each layer: [layer][set * n + j] */
    int trace_n[4], trace_sets[4];
} rig;

static void on_trace(void *ctx, int step, int layer, const int32_t *pos, int n, int sets)
{
    (void)step;
    rig *r = ctx;
    cr_assert_leq(n * sets, 64);
    memcpy(r->trace[layer], pos, (size_t)n * (size_t)sets * sizeof *pos);
    r->trace_n[layer] = n;
    r->trace_sets[layer] = sets;
}

/* n_layers layers of H = Hkv = 2 heads (GQA 1:1), head_dim 4. */
static void rig_init(rig *r, const kv_evict_params *p, int n_layers)
{
    memset(r, 0, sizeof *r);
    r->p = *p;
    r->m = (kv_evict_model){
        .n_layers = n_layers, .n_heads = 2, .n_kv_heads = 2, .head_dim = 4, .rope_theta = 100};
    kv_error err;
    r->cache = kv_cache_new(n_layers, 2, 4, 16, &err);
    cr_assert_not_null(r->cache, "%s", err.msg);
    r->ev = kv_evictor_new(&r->p, &r->m, &err);
    cr_assert_not_null(r->ev, "%s", err.msg);
}

static void rig_free(rig *r)
{
    kv_evictor_free(r->ev);
    kv_cache_free(r->cache);
}

/* Appends token t to every layer: every head's key and value encode (t, h). */
static void rig_append(rig *r, int t)
{
    kv_error err;
    cr_assert_eq(kv_cache_reserve(r->cache, 1, &err), 0);
    for (int l = 0; l < r->m.n_layers; l++) {
        kv_cache_layer *cl = &r->cache->layers[l];
        for (int i = 0; i < 8; i++)
            cl->k[(size_t)cl->len * 8 + i] = cl->v[(size_t)cl->len * 8 + i] =
                (float)(10 * t + i / 4);
        kv_cache_set_pos(r->cache, l, cl->len++, t);
    }
    r->cache->next_pos = t + 1;
}

/* One forward: layer l's column sums are sums[l][head][slot] (n = the
 * layer's length), then the evictor compresses. */
static void rig_forward(rig *r, const double *sums, int stride, bool prefill)
{
    kv_error err;
    for (int l = 0; l < r->m.n_layers; l++) {
        int n = r->cache->layers[l].len;
        kv_attn_stats_request req = {.col_sums = true};
        double *cs = calloc(2 * (size_t)n, sizeof *cs);
        for (int h = 0; h < 2; h++)
            memcpy(cs + h * n, sums + ((size_t)l * 2 + h) * (size_t)stride, (size_t)n * sizeof *cs);
        kv_attn_stats st = {.n_heads = 2, .n_keys = n, .col_sums = cs};
        cr_assert_eq(kv_evictor_observe(r->ev, l, &req, &st, prefill, &err), 0, "%s", err.msg);
        free(cs);
    }
    cr_assert_eq(kv_evictor_compress(r->ev, r->cache, on_trace, r, &err), 0, "%s", err.msg);
}

/* Head h of layer l holds these positions, in order, its values with them,
 * and nothing else: the rest of the layer is its gap. */
static void assert_head(const rig *r, int l, int h, const int *want, int n)
{
    const kv_cache_layer *cl = &r->cache->layers[l];
    int k = 0;
    for (int j = 0; j < cl->len; j++) {
        if (!kv_cache_holds(r->cache, l, j, h))
            continue;
        cr_assert_lt(k, n, "layer %d head %d holds more than %d tokens", l, h, n);
        int t = kv_cache_pos(r->cache, l, j, h);
        cr_assert_eq(t, want[k], "layer %d head %d token %d: %d, want %d", l, h, k, t, want[k]);
        cr_assert_eq(j, k, "layer %d head %d: its tokens are packed from slot 0", l, h);
        cr_assert_eq(cl->v[(size_t)j * 8 + (size_t)h * 4], (float)(10 * t + h));
        k++;
    }
    cr_assert_eq(k, n, "layer %d head %d holds %d tokens, want %d", l, h, k, n);
    /* the trace lists the same (per head, or one set for all), ending in
     * -1s when shorter than the layer */
    int set = r->trace_sets[l] > 1 ? h : 0;
    for (int j = 0; j < r->trace_n[l]; j++)
        cr_assert_eq(r->trace[l][set * r->trace_n[l] + j], j < n ? want[j] : -1, "trace %d", j);
}

#define HEAD(r, l, h, ...)                                                                         \
    do {                                                                                           \
        int want_[] = {__VA_ARGS__};                                                               \
        assert_head(r, l, h, want_, (int)(sizeof want_ / sizeof want_[0]));                        \
    } while (0)

/* TV-P6: H2O, S = R = 1, I = 4, beta 4, two layers -> I_l = [7, 1];
 * uniform causal attention over 8 tokens. Layer 0 (M = 9) keeps all, layer
 * 1 (M = 3) keeps [0, 1, 7]: earlier slots have more attention. */
Test(pyramid, tv_p6_each_layer_its_own_budget)
{
    rig r;
    kv_evict_params p = budget_params(1, 1, 4);
    strcpy(p.layer_budget, "pyramid");
    p.pyramid_beta = 4;
    rig_init(&r, &p, 2);
    for (int t = 0; t < 8; t++)
        rig_append(&r, t);
    double sums[2][2][8] = {{{0}}};
    for (int l = 0; l < 2; l++)
        for (int h = 0; h < 2; h++)
            for (int t = 0; t < 8; t++)
                for (int i = t; i < 8; i++)
                    sums[l][h][t] += 1.0 / (i + 1);
    rig_forward(&r, &sums[0][0][0], 8, true);
    cr_assert_eq(r.cache->layers[0].len, 8, "layer 0 evicts nothing");
    cr_assert_eq(r.trace_n[0], 0);
    HEAD(&r, 1, 0, 0, 1, 7);
    HEAD(&r, 1, 1, 0, 1, 7);
    cr_assert_eq(kv_cache_mean_kept(r.cache), 6, "reports show (8 + 3) / 2, rounded");
    rig_free(&r);
}

/* ---- AdaKV ---- */

/* TV-A1 (kvpress): Hkv = 2, L = 5, n_kept = 3: the layer keeps 6 entries,
 * n_safe = int(3 alpha) per head. Entries in (slot, head) order. */
static void tv_a1(double alpha, const char *want_h0, const char *want_h1)
{
    static const double h0[] = {.9, .8, .7, .6, .5}, h1[] = {.1, .2, .3, .95, .05};
    double score[10];
    int head[10];
    for (int t = 0; t < 5; t++) {
        score[2 * t] = h0[t];
        score[2 * t + 1] = h1[t];
        head[2 * t] = 0;
        head[2 * t + 1] = 1;
    }
    char take[10], got[2][16] = {"", ""};
    kv_error err;
    cr_assert_eq(kv_adaptive_pick(score, head, 10, 2, (int)(3 * alpha), 6, take, &err), 0);
    for (int i = 0; i < 10; i++)
        if (take[i])
            got[head[i]][strlen(got[head[i]])] = (char)('0' + i / 2);
    cr_assert_str_eq(got[0], want_h0, "alpha %g", alpha);
    cr_assert_str_eq(got[1], want_h1, "alpha %g", alpha);
}

Test(adakv, tv_a1_kvpress_masks)
{
    tv_a1(0.2, "01234", "3"); /* n_safe int(.6) = 0: a pure global top 6 */
    tv_a1(0.7, "0123", "23"); /* n_safe int(2.0999999999999996) = 2 */
}

/* TV-A3: all scores equal, Hkv = 2, two slots: the later entries win,
 * (slot 1, head 1), (slot 1, head 0), then (slot 0, head 1). */
Test(adakv, tv_a3_ties_keep_the_higher_flat_index)
{
    double score[4] = {.5, .5, .5, .5};
    int head[4] = {0, 1, 0, 1};
    char take[4];
    kv_error err;
    cr_assert_eq(kv_adaptive_pick(score, head, 4, 2, 0, 2, take, &err), 0);
    cr_assert(!take[0] && !take[1] && take[2] && take[3]);
    cr_assert_eq(kv_adaptive_pick(score, head, 4, 2, 0, 3, take, &err), 0);
    cr_assert(!take[0] && take[1] && take[2] && take[3]);
    /* through the evictor: S = R = 0, I = 1, L = 2 -> both heads keep slot 1 */
    rig r;
    kv_evict_params p = budget_params(0, 0, 1);
    strcpy(p.strategy, "per_head");
    strcpy(p.head_budget, "adaptive");
    p.alpha_safeguard = 0;
    rig_init(&r, &p, 1);
    rig_append(&r, 0);
    rig_append(&r, 1);
    double sums[2][2] = {{.5, .5}, {.5, .5}};
    rig_forward(&r, &sums[0][0], 2, true);
    HEAD(&r, 0, 0, 1);
    HEAD(&r, 0, 1, 1);
    rig_free(&r);
}

/* TV-A2's prefill: L = 7, S = R = 1, I = 2; head 0 scores slots 1..5
 * [.9 .8 .7 .6 .5], head 1 [.1 .2 .3 .95 .05], slot 6 0. */
static void tv_a2_prefill(rig *r, double alpha)
{
    kv_evict_params p = budget_params(1, 1, 2);
    strcpy(p.strategy, "per_head");
    strcpy(p.head_budget, "adaptive");
    p.alpha_safeguard = alpha;
    rig_init(r, &p, 1);
    for (int t = 0; t < 7; t++)
        rig_append(r, t);
    static const double sums[2][7] = {{0, .9, .8, .7, .6, .5, 0}, {0, .1, .2, .3, .95, .05, 0}};
    rig_forward(r, &sums[0][0], 7, true);
}

Test(adakv, tv_a2_heads_share_the_budget)
{
    rig r;
    tv_a2_prefill(&r, 0.5); /* n_safe 1: head 0 slot 1, head 1 slot 4; then .8, .7 */
    HEAD(&r, 0, 0, 0, 1, 2, 3, 6);
    HEAD(&r, 0, 1, 0, 4, 6);
    cr_assert_eq(r.cache->layers[0].len, 5, "as long as the fullest head, not the union (6)");
    cr_assert_eq(kv_cache_entries(r.cache, 0), 8, "2 x (S + I + R) entries");
    cr_assert_eq(kv_cache_mean_kept(r.cache), 4, "S + I + R per head");
    rig_free(&r);
    tv_a2_prefill(&r, 0.0); /* the same here */
    HEAD(&r, 0, 0, 0, 1, 2, 3, 6);
    HEAD(&r, 0, 1, 0, 4, 6);
    rig_free(&r);
    tv_a2_prefill(&r, 1.0); /* alpha 1: each head its own top I, as uniform per_head */
    HEAD(&r, 0, 0, 0, 1, 2, 6);
    HEAD(&r, 0, 1, 0, 3, 4, 6);
    cr_assert_null(r.cache->layers[0].gap, "equal counts: no gap");
    rig_free(&r);
}

/* Gap slots hold zeros, compacted in place or forked from a shared prefill
 * (kv_evictor_compress_into), not old tokens or the garbage of fresh
 * memory: attention weighs them 0, but 0 times a NaN is NaN. */
Test(adakv, a_forked_cache_has_zeros_in_its_gaps)
{
    rig r;
    tv_a2_prefill(&r, 0.5); /* in place: head 1's gap held tokens 4, 5 before */
    for (int j = 3; j < 5; j++)
        for (int i = 4; i < 8; i++)
            cr_assert(r.cache->layers[0].k[j * 8 + i] == 0.0f &&
                          r.cache->layers[0].v[j * 8 + i] == 0.0f,
                      "in place, slot %d", j);
    kv_error err;
    kv_cache *src = kv_cache_new(1, 2, 4, 8, &err), *dst = NULL;
    cr_assert_not_null(src, "%s", err.msg);
    for (int t = 0; t < 7; t++) {
        for (int i = 0; i < 8; i++)
            src->layers[0].k[t * 8 + i] = src->layers[0].v[t * 8 + i] = (float)(t + 1);
        kv_cache_set_pos(src, 0, src->layers[0].len++, t);
    }
    src->next_pos = 7;
    static const double sums[2][7] = {{0, .9, .8, .7, .6, .5, 0}, {0, .1, .2, .3, .95, .05, 0}};
    kv_attn_stats_request req = {.col_sums = true};
    kv_attn_stats st = {.n_heads = 2, .n_keys = 7, .col_sums = (double *)&sums[0][0]};
    cr_assert_eq(kv_evictor_observe(r.ev, 0, &req, &st, true, &err), 0, "%s", err.msg);
    cr_assert_eq(kv_evictor_compress_into(r.ev, src, &dst, NULL, NULL, &err), 0, "%s", err.msg);
    const kv_cache_layer *d = &dst->layers[0];
    cr_assert_eq(d->len, 5);
    for (int j = 3; j < 5; j++) { /* head 1 holds 3 tokens: slots 3, 4 are its gap */
        cr_assert(!kv_cache_holds(dst, 0, j, 1));
        for (int i = 4; i < 8; i++)
            cr_assert(d->k[j * 8 + i] == 0.0f && d->v[j * 8 + i] == 0.0f, "slot %d", j);
    }
    kv_cache_free(src);
    kv_cache_free(dst);
    rig_free(&r);
}

/* TV-A4/A5: decode after TV-A2 (alpha .5). The new token 7 goes after the
 * longest head (slot 5) in both heads; head 1's gap stays at slots 3..4. One
 * decode row adds .05 to token 3 in head 0 and .9 to token 6 in head 1:
 * candidates h0 {1 2 3 6}, h1 {4 6}, 6 over a budget of 4; protected h0 1,
 * h1 4; then .9 (h1, token 6) and .8 (h0, token 2). */
Test(adakv, tv_a4_a5_decode_chooses_across_heads)
{
    rig r;
    tv_a2_prefill(&r, 0.5);
    rig_append(&r, 7);
    const kv_cache_layer *cl = &r.cache->layers[0];
    cr_assert_eq(cl->len, 6);
    cr_assert(kv_cache_holds(r.cache, 0, 5, 1) && !kv_cache_holds(r.cache, 0, 3, 1));
    double dec[2][6] = {{0}};
    dec[0][3] = .05; /* head 0 slot 3 = token 3 */
    dec[1][2] = .9;  /* head 1 slot 2 = token 6 */
    rig_forward(&r, &dec[0][0], 6, false);
    HEAD(&r, 0, 0, 0, 1, 2, 7);
    HEAD(&r, 0, 1, 0, 4, 6, 7);
    cr_assert_null(r.cache->layers[0].gap);
    rig_free(&r);
}

/* A head's keys turn by the change of their index in their own head's list
 * (ragged storage), whatever the padding: head 1's token 6 went from index
 * 2 (slot 2) to 2, its token 7 from index 3 (slot 5, after the gap) to 3. */
Test(adakv, rerotation_follows_each_heads_own_index)
{
    rig r;
    tv_a2_prefill(&r, 0.5);
    rig_append(&r, 7);
    const kv_cache_layer *cl = &r.cache->layers[0];
    float k7 = cl->k[5 * 8 + 4], k0 = cl->k[5 * 8 + 4 + 2];
    double dec[2][6] = {{0}};
    dec[0][3] = .05;
    dec[1][2] = .9;
    rig_forward(&r, &dec[0][0], 6, false);
    /* head 1, slot 3 now: token 7 at the same index 3, so not rotated */
    cr_assert_eq(cl->k[3 * 8 + 4], k7);
    cr_assert_eq(cl->k[3 * 8 + 4 + 2], k0);
    /* head 0's token 7 moved from index 5 to 3: rotated by -2 */
    double f[2];
    kv_evict_rope_freqs(100, 4, f);
    float x[4] = {70, 70, 70, 70};
    kv_evict_rope_rotate(x, 4, f, -2);
    for (int i = 0; i < 4; i++)
        cr_assert_float_eq(cl->k[3 * 8 + i], x[i], 1e-4, "head 0 key[%d]", i);
    rig_free(&r);
}

/* A budget the heads never exceed together evicts nothing. */
Test(adakv, within_budget_keeps_everything)
{
    rig r;
    kv_evict_params p = budget_params(1, 1, 3);
    strcpy(p.strategy, "per_head");
    strcpy(p.head_budget, "adaptive");
    rig_init(&r, &p, 1);
    for (int t = 0; t < 5; t++)
        rig_append(&r, t);
    double sums[2][5] = {{0}};
    rig_forward(&r, &sums[0][0], 5, true);
    HEAD(&r, 0, 0, 0, 1, 2, 3, 4);
    HEAD(&r, 0, 1, 0, 1, 2, 3, 4);
    rig_free(&r);
}

/* ---- validation ---- */

/* The messages themselves are in test_evict.c's tv14-style list. */
Test(budgets, validation)
{
    kv_evict_params p;
    kv_evict_params_default(&p);
    kv_error err;
    cr_assert_neq(kv_evict_params_set(&p, "pyramid_beta", "many", &err), 0);
    cr_assert(strstr(err.msg, "pyramid_beta: expected a finite number"), "%s", err.msg);
    cr_assert_neq(kv_evict_params_set(&p, "--alpha-safeguard", "nan", &err), 0);
    /* with the layers known: refined_size above the smallest pyramid layer */
    p = pyramid(512, 20, "per_token", 1); /* 4 layers: [998 674 350 26] */
    p.refined_size = 64;
    cr_assert_eq(kv_evict_params_validate(&p, &err), 0, "%s", err.msg);
    cr_assert_neq(kv_evict_params_validate_layers(&p, 4, &err), 0);
    cr_assert(strstr(err.msg, "refined_size 64 exceeds the smallest pyramid layer budget 26"), "%s",
              err.msg);
    kv_evict_model m = {
        .n_layers = 4, .n_heads = 1, .n_kv_heads = 1, .head_dim = 2, .rope_theta = 1e4};
    cr_assert_null(kv_evictor_new(&p, &m, &err), "the policy refuses it too");
    p.refined_size = 16;
    kv_evictor *ev = kv_evictor_new(&p, &m, &err);
    cr_assert_not_null(ev, "%s", err.msg);
    kv_evictor_free(ev);
}

/* A schedule's parameter without its schedule is resolved away, so such
 * configs hash as the one they run as. */
Test(budgets, resolve_drops_unused_parameters)
{
    kv_evict_params a, b;
    kv_evict_params_default(&a);
    kv_evict_params_default(&b);
    b.pyramid_beta = 7;
    b.alpha_safeguard = 0.9;
    kv_evict_params_resolve(&a);
    kv_evict_params_resolve(&b);
    cr_assert_eq(memcmp(&a, &b, sizeof a), 0);
    strcpy(b.layer_budget, "pyramid");
    b.pyramid_beta = 7;
    kv_evict_params_resolve(&b);
    cr_assert_eq(b.pyramid_beta, 7);
}
