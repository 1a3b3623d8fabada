/* kvcore/model/attn_dnnl.h: bf16 mode's prefill attention through oneDNN
 * against a double-precision causal softmax attention, on shapes that cross
 * its tiles (512 keys), blocks (128 query rows) and paddings, with GQA, in
 * chunks that continue a layer (keys packed once) and calls that start a
 * new one; with every row's probabilities handed on (eviction's statistics)
 * their column and window sums against the reference's too. Only at the
 * avx512bf16 level, where it runs; below it it must say it does not. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/attn_dnnl.h"
#include "model/cpu.h"
#include "model/kernels.h"
#include "model/model.h"
#include "support/testutil.h"
#include "util/pool.h"

enum { HEADS = 4, KV_HEADS = 2, HD = 64, QD = HEADS * HD, KVD = KV_HEADS * HD };

static uint32_t rng = 777;

/* A random BF16 value in [-1, 1). */
static float rnd(void)
{
    rng = rng * 1664525u + 1013904223u;
    return kv_bf16_to_f32(kv_f32_to_bf16((float)((rng >> 8) & 0xffff) / 32768.0f - 1.0f));
}

static float *random_rows(int rows, int width)
{
    float *x = malloc((size_t)rows * (size_t)width * sizeof *x);
    for (size_t i = 0; i < (size_t)rows * (size_t)width; i++)
        x[i] = 2.0f * rnd(); /* scores spread enough that the softmax is not flat */
    return x;
}

/* p[0..keys) = head h's softmax probabilities in double of query row qrow
 * (q [QD]) over keys k [keys][KVD]. */
static void reference_probs(const float *qrow, const float *k, int h, int keys, float scale,
                            double *p)
{
    int g = h / (HEADS / KV_HEADS);
    double mx = -INFINITY, sum = 0;
    for (int j = 0; j < keys; j++) {
        double s = 0;
        for (int d = 0; d < HD; d++)
            s += (double)qrow[(size_t)h * HD + (size_t)d] *
                 k[(size_t)j * KVD + (size_t)g * HD + (size_t)d];
        p[j] = s * scale;
        mx = p[j] > mx ? p[j] : mx;
    }
    for (int j = 0; j < keys; j++)
        sum += p[j] = exp(p[j] - mx);
    for (int j = 0; j < keys; j++)
        p[j] /= sum;
}

/* The largest |out - reference| over the chunk's rows [0, cn) at base,
 * relative to the largest |value|. */
static double worst_error(const float *q, const float *k, const float *v, const float *out, int cn,
                          int base, float scale)
{
    double worst = 0, *p = malloc((size_t)(base + cn) * sizeof *p);
    for (int i = 0; i < cn; i++)
        for (int h = 0; h < HEADS; h++) {
            int g = h / (HEADS / KV_HEADS), keys = base + i + 1;
            reference_probs(q + (size_t)i * QD, k, h, keys, scale, p);
            for (int d = 0; d < HD; d++) {
                double o = 0;
                for (int j = 0; j < keys; j++)
                    o += p[j] * v[(size_t)j * KVD + (size_t)g * HD + (size_t)d];
                double e = fabs(o - out[(size_t)i * QD + (size_t)h * HD + (size_t)d]) / 2.0;
                worst = e > worst ? e : worst;
            }
        }
    free(p);
    return worst;
}

static void release(kv_attn_dnnl *a, kv_pool *pool, float *q, float *k, float *v, float *out)
{
    kv_attn_dnnl_free(a);
    kv_pool_free(pool);
    free(q);
    free(k);
    free(v);
    free(out);
}

Test(attn_dnnl, chunks_match_a_double_reference_across_tiles_blocks_and_padding)
{
    if (!kv_attn_dnnl_usable()) {
        cr_expect_lt(kv_isa_active(), KV_ISA_AVX512BF16, "usable at avx512bf16");
        cr_skip_test("oneDNN's BF16 attention runs at the avx512bf16 level only (this CPU: %s)",
                     kv_isa_name(kv_isa_active()));
    }
    kv_error err;
    kv_pool *pool = kv_pool_new(2, &err);
    cr_assert_not_null(pool, "%s", err.msg);
    /* chunks of 300 then 427 query rows: 727 keys (two tiles, the second
     * padded), blocks of 128 and a last one of 44 then of 43 rows */
    int chunk = 427, total = 727, cuts[] = {0, 300, 727};
    float *q = random_rows(total, QD), *k = random_rows(total, KVD), *v = random_rows(total, KVD);
    float *out = malloc((size_t)chunk * QD * sizeof *out), scale = 0.125f;
    kv_attn_dnnl *a = kv_attn_dnnl_new(HEADS, KV_HEADS, HD, chunk, total, 2);
    cr_assert_not_null(a);
    for (int c = 0; c < 2; c++) {
        int base = cuts[c], cn = cuts[c + 1] - base;
        cr_assert(kv_attn_dnnl_run(a, pool, q + (size_t)base * QD, k, v, cn, base, c > 0, scale,
                                   out, NULL, NULL));
        /* the probabilities are rounded to BF16 (2^-9 relative) for P V */
        double e = worst_error(q + (size_t)base * QD, k, v, out, cn, base, scale);
        cr_expect_lt(e, 4e-3, "chunk %d: error %g of the values' range", c, e);
    }
    /* a call that does not continue the layer (other keys, all of them
     * packed before) packs them anew */
    for (size_t i = 0; i < (size_t)total * KVD; i++)
        k[i] = -k[i];
    cr_assert(
        kv_attn_dnnl_run(a, pool, q + 300 * QD, k, v, 427, 300, false, scale, out, NULL, NULL));
    double e = worst_error(q + 300 * QD, k, v, out, 427, 300, scale);
    cr_expect_lt(e, 4e-3, "new layer: error %g", e);
    release(a, pool, q, k, v, out);
}

/* The statistics a forward collects, from the probabilities handed on:
 * per head, the column sums over every row and over the last WINDOW rows
 * of the prompt. */
enum { TOTAL = 727, WINDOW = 40 };
typedef struct sums {
    int base; /* the chunk's first row */
    double col[HEADS][TOTAL], win[HEADS][TOTAL];
} sums;

static void add_probs(void *ctx, int h, const float *p, int ldp, int r0, int n, int k0, int keys)
{
    sums *s = ctx;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < keys; k++) {
            double x = p[(size_t)i * (size_t)ldp + (size_t)k];
            s->col[h][k0 + k] += x;
            if (s->base + r0 + i >= TOTAL - WINDOW)
                s->win[h][k0 + k] += x;
        }
}

/* The same sums in double from q and k (rows [0, TOTAL)). */
static void reference_sums(const float *q, const float *k, float scale, sums *s)
{
    double *p = malloc(TOTAL * sizeof *p);
    for (int i = 0; i < TOTAL; i++)
        for (int h = 0; h < HEADS; h++) {
            reference_probs(q + (size_t)i * QD, k, h, i + 1, scale, p);
            for (int j = 0; j <= i; j++) {
                s->col[h][j] += p[j];
                if (i >= TOTAL - WINDOW)
                    s->win[h][j] += p[j];
            }
        }
    free(p);
}

Test(attn_dnnl, probabilities_for_the_statistics_match_a_double_reference)
{
    if (!kv_attn_dnnl_usable())
        cr_skip_test("oneDNN's BF16 attention runs at the avx512bf16 level only (this CPU: %s)",
                     kv_isa_name(kv_isa_active()));
    kv_error err;
    kv_pool *pool = kv_pool_new(2, &err);
    cr_assert_not_null(pool, "%s", err.msg);
    int chunk = 427, cuts[] = {0, 300, TOTAL};
    float *q = random_rows(TOTAL, QD), *k = random_rows(TOTAL, KVD), *v = random_rows(TOTAL, KVD);
    float *out = malloc((size_t)chunk * QD * sizeof *out), scale = 0.125f;
    static sums got, want;
    kv_attn_dnnl *a = kv_attn_dnnl_new(HEADS, KV_HEADS, HD, chunk, TOTAL, 2);
    cr_assert_not_null(a);
    for (int c = 0; c < 2; c++) {
        int base = cuts[c], cn = cuts[c + 1] - base;
        got.base = base;
        cr_assert(kv_attn_dnnl_run(a, pool, q + (size_t)base * QD, k, v, cn, base, c > 0, scale,
                                   out, add_probs, &got));
        /* the output as without them: P rounded to BF16 for P V */
        double e = worst_error(q + (size_t)base * QD, k, v, out, cn, base, scale);
        cr_expect_lt(e, 4e-3, "chunk %d: error %g of the values' range", c, e);
    }
    reference_sums(q, k, scale, &want);
    /* F32 scores and exponentials against double: sums of up to 727
     * probabilities within 1e-5 (2e-7 measured) */
    double worst = 0;
    for (int h = 0; h < HEADS; h++)
        for (int j = 0; j < TOTAL; j++) {
            double dc = fabs(got.col[h][j] - want.col[h][j]),
                   dw = fabs(got.win[h][j] - want.win[h][j]);
            worst = dc > worst ? dc : worst;
            worst = dw > worst ? dw : worst;
        }
    cr_expect_lt(worst, 1e-5, "largest |sum - reference| %g", worst);
    /* a sum that is not all zeros: the statistics were handed on */
    cr_expect_gt(got.win[0][TOTAL - 1], 0.0);
    release(a, pool, q, k, v, out);
}

/* In the model: bf16 mode's prefill collecting H2O's and SnapKV's
 * statistics (column sums, a 32-row window) on the tiny Qwen3 model runs
 * through oneDNN at avx512bf16 and through sgemm at avx2 (kv_isa_set);
 * each layer's sums must agree within what bf16 mode's roundings move
 * (the probabilities rounded to BF16 for P V change the next layer's
 * inputs by BF16 steps): 1e-2 of 1 + the sum (3.1e-3 measured). */
enum { PROMPT = 300 };

/* Every layer's column and window sums of one bf16 prefill at level isa,
 * [layers][2][heads x keys]. */
static double *prefill_sums(kv_model *m, kv_isa isa, const kv_attn_stats_request *req)
{
    kv_error err;
    cr_assert_eq(kv_isa_set(isa, &err), 0, "%s", err.msg);
    const kv_model_config *c = kv_model_get_config(m);
    int32_t tokens[PROMPT];
    for (int i = 0; i < PROMPT; i++)
        tokens[i] = (int32_t)((i * 7919u + 13u) % (unsigned)c->vocab);
    kv_cache *cache = kv_model_cache_new(m, PROMPT, &err);
    cr_assert_not_null(cache, "%s", err.msg);
    kv_attn_stats *st = kv_model_stats_new(m, cache, PROMPT, req, &err);
    cr_assert_not_null(st, "%s", err.msg);
    cr_assert_eq(kv_model_forward(m, cache, tokens, PROMPT, req, st, NULL, false, &err), 0, "%s",
                 err.msg);
    size_t per = (size_t)c->n_heads * PROMPT;
    double *out = malloc((size_t)c->n_layers * 2 * per * sizeof *out);
    for (int l = 0; l < c->n_layers; l++) {
        memcpy(out + (size_t)l * 2 * per, st[l].col_sums, per * sizeof *out);
        memcpy(out + ((size_t)l * 2 + 1) * per, st[l].win_sums[0], per * sizeof *out);
    }
    kv_model_stats_free(st, c->n_layers);
    kv_cache_free(cache);
    return out;
}

Test(attn_dnnl, model_statistics_match_the_sgemm_path)
{
    if (!kv_attn_dnnl_usable())
        cr_skip_test("oneDNN's BF16 attention runs at the avx512bf16 level only (this CPU: %s)",
                     kv_isa_name(kv_isa_active()));
    char *dir = tu_source("tests/data/models/qwen3-bf16");
    kv_model *m;
    kv_error err;
    cr_assert_eq(kv_model_load(dir, &m, &err), 0, "%s", err.msg);
    cr_assert_eq(kv_model_set_compute(m, KV_COMPUTE_BF16, &err), 0, "%s", err.msg);
    kv_attn_stats_request req = {.col_sums = true, .n_windows = 1, .windows = {32}};
    kv_isa best = kv_isa_active();
    double *dnnl = prefill_sums(m, best, &req), *sgemm = prefill_sums(m, KV_ISA_AVX2, &req);
    cr_assert_eq(kv_isa_set(best, &err), 0, "%s", err.msg);
    const kv_model_config *c = kv_model_get_config(m);
    size_t n = (size_t)c->n_layers * 2 * (size_t)c->n_heads * PROMPT;
    double worst = 0, differ = 0;
    for (size_t i = 0; i < n; i++) {
        /* each sum against its size: a column sums up to PROMPT rows */
        double d = fabs(dnnl[i] - sgemm[i]) / (1.0 + fabs(sgemm[i]));
        worst = d > worst ? d : worst;
        differ += dnnl[i] != sgemm[i];
    }
    if (getenv("KVB_PRINT_BF16"))
        printf("largest |oneDNN - sgemm| / (1 + |sgemm|): %g; %.0f of %zu sums differ\n", worst,
               differ, n);
    cr_expect_lt(worst, 1e-2, "largest |oneDNN - sgemm| / (1 + |sgemm|): %g", worst);
    cr_expect_gt(differ, 0, "the two paths gave the same bits: was oneDNN's path taken?");
    free(dnnl);
    free(sgemm);
    kv_model_free(m);
    free(dir);
}
