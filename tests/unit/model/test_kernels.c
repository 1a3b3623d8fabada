/* kvcore/kernels at every instruction-set level this CPU has: GEMV and
 * matmul of each weight dtype against a double-precision reference, in
 * F32 and BF16 modes, with column counts that leave every kind of tail;
 * and BF16 rounding against hand-made vectors. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gemm_dnnl.h"
#include "model/kernels.h"
#include "support/levels.h"
#include "support/testutil.h"

Test(kernels, bf16_rounding_is_to_nearest_even)
{
    /* value bits -> expected BF16 bits */
    static const uint32_t cases[][2] = {
        {0x3f800000, 0x3f80}, /* 1.0: exact */
        {0x3f807fff, 0x3f80}, /* just below half: down */
        {0x3f808000, 0x3f80}, /* half, even below: down */
        {0x3f818000, 0x3f82}, /* half, odd below: up */
        {0x3f808001, 0x3f81}, /* just above half: up */
        {0xbf818000, 0xbf82}, /* negative mirrors */
        {0x7f7fffff, 0x7f80}, /* the largest float rounds to infinity */
        {0x7f800000, 0x7f80}, /* infinity stays */
        {0x00000001, 0x0000}, /* the smallest denormal rounds to zero */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        float f = tu_f32_from_bits(cases[i][0]);
        cr_expect_eq(kv_f32_to_bf16(f), cases[i][1], "%08x -> %04x, want %04x", cases[i][0],
                     kv_f32_to_bf16(f), cases[i][1]);
        /* the vector path (8 at a time) and the scalar tail agree */
        float v[9];
        for (int k = 0; k < 9; k++)
            v[k] = f;
        kv_round_bf16(v, 9);
        for (int k = 0; k < 9; k++)
            cr_expect_eq(tu_f32_bits(v[k]), cases[i][1] << 16, "kv_round_bf16(%08x)[%d] = %08x",
                         cases[i][0], k, tu_f32_bits(v[k]));
    }
    float nan[9];
    for (int k = 0; k < 9; k++)
        nan[k] = NAN;
    kv_round_bf16(nan, 9);
    for (int k = 0; k < 9; k++)
        cr_expect(isnan(nan[k]), "NaN stays NaN");
}

static uint32_t rng = 12345;

static float rnd(void)
{
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* A rows x cols matrix of dtype dt with random values; *ref gets them as
 * floats. */
static kv_weight random_weight(kv_dtype dt, int rows, int cols, float **ref, void **data)
{
    size_t n = (size_t)rows * (size_t)cols;
    *ref = malloc(n * sizeof **ref);
    *data = malloc(n * 4);
    for (size_t i = 0; i < n; i++) {
        float f = rnd();
        if (dt == KV_DTYPE_F32)
            ((float *)*data)[i] = f;
        else if (dt == KV_DTYPE_BF16) {
            uint16_t h = kv_f32_to_bf16(f);
            ((uint16_t *)*data)[i] = h;
            f = kv_bf16_to_f32(h);
        } else { /* F16: a value exact in both halves, from a random F16 in [-2, 2] */
            uint16_t h = (uint16_t)((rng >> 9) & 0x3fff) ^ (uint16_t)(rng & 0x8000);
            ((uint16_t *)*data)[i] = h;
            f = kv_f16_to_f32(h);
        }
        (*ref)[i] = f;
    }
    return (kv_weight){.dtype = dt, .data = *data, .rows = rows, .cols = cols};
}

/* kv_matmul of n rows (n == 1 and <= KV_GEMV_MAX_ROWS take the GEMV path)
 * against a double reference; products of the inputs are exact in F32 and
 * only the sums round, so the bound scales with the column count. */
static void check_product(kv_pool *p, kv_dtype dt, kv_compute mode, int rows, int cols, int n)
{
    float *ref;
    void *data;
    kv_weight w = random_weight(dt, rows, cols, &ref, &data);
    float *x = malloc((size_t)n * (size_t)cols * sizeof *x);
    for (size_t i = 0; i < (size_t)n * (size_t)cols; i++)
        x[i] = rnd();
    if (mode == KV_COMPUTE_BF16)
        kv_round_bf16(x, (size_t)n * (size_t)cols);
    float *y = malloc((size_t)n * (size_t)rows * sizeof *y);
    float *scratch = malloc((size_t)kv_pool_threads(p) * kv_matmul_scratch(p, &w) * sizeof *y + 4);
    kv_matmul(p, &w, x, n, mode, y, scratch);
    double worst = 0;
    for (int i = 0; i < n; i++)
        for (int r = 0; r < rows; r++) {
            double s = 0, mag = 0;
            for (int c = 0; c < cols; c++) {
                double t = (double)ref[(size_t)r * cols + c] * x[(size_t)i * cols + c];
                s += t;
                mag += fabs(t);
            }
            double e = fabs(y[(size_t)i * rows + r] - s) / (mag * cols * 1.2e-7 + 1e-30);
            worst = e > worst ? e : worst;
        }
    cr_expect_leq(worst, 1.0, "%s: dtype %d, mode %s, %d x %d, %d rows: error %.2f of the bound",
                  kv_isa_name(kv_isa_active()), (int)dt, kv_compute_name(mode), rows, cols, n,
                  worst);
    free(scratch);
    free(y);
    free(x);
    free(data);
    free(ref);
}

/* Every kernel product at level isa (tests/support/levels.h). */
static void check_level(kv_isa isa)
{
    (void)isa; /* set by tu_each_level */
    kv_error err;
    kv_pool *p = kv_pool_new(2, &err);
    cr_assert_not_null(p, "%s", err.msg);
    static const int colss[] = {1, 7, 16, 31, 33, 64, 100, 129, 256, 1000, 2209};
    for (size_t c = 0; c < sizeof colss / sizeof colss[0]; c++)
        for (int n = 1; n <= 9; n += 4) {
            check_product(p, KV_DTYPE_F32, KV_COMPUTE_F32, 37, colss[c], n);
            check_product(p, KV_DTYPE_F16, KV_COMPUTE_F32, 37, colss[c], n);
            check_product(p, KV_DTYPE_BF16, KV_COMPUTE_F32, 37, colss[c], n);
            check_product(p, KV_DTYPE_BF16, KV_COMPUTE_BF16, 37, colss[c], n);
        }
    /* prefill-sized: several blocks of output columns and a partial one,
     * run by both workers (at avx512bf16, oneDNN calls from both at once) */
    for (int cols = 33; cols <= 1000; cols += 967) {
        check_product(p, KV_DTYPE_BF16, KV_COMPUTE_BF16, 300, cols, 40);
        check_product(p, KV_DTYPE_BF16, KV_COMPUTE_F32, 300, cols, 40);
    }
    kv_pool_free(p);
}

Test(kernels, products_match_reference_at_every_level_the_cpu_has)
{
    tu_each_level(check_level);
}

/* oneDNN takes BF16 products at the avx512bf16 level and nothing below it
 * (so KVBENCH_ISA=avx2 runs the AVX2 machine's code), and its results are
 * the reference's within the bound of check_product. */
static void check_library_level(kv_isa isa)
{
    enum { M = 19, N = 45, K = 70 };
    uint16_t a[M * K], b[N * K];
    float y[M * N];
    for (int i = 0; i < M * K; i++)
        a[i] = kv_f32_to_bf16(rnd());
    for (int i = 0; i < N * K; i++)
        b[i] = kv_f32_to_bf16(rnd());
    kv_dnnl_product prod = {.dt = KV_DTYPE_BF16, .m = M, .n = N, .k = K, .a = a, .b = b,
                            .lda = K, .ldb = K, .y = y, .ldy = N};
    bool ran = kv_dnnl_matmul(1, &prod);
    cr_expect_eq(ran, isa >= KV_ISA_AVX512BF16, "%s: oneDNN %s", kv_isa_name(isa),
                 ran ? "ran" : "declined");
    prod.dt = KV_DTYPE_F32; /* OpenBLAS's, at every level */
    cr_expect_not(kv_dnnl_matmul(1, &prod), "%s: oneDNN took an F32 product", kv_isa_name(isa));
    for (int i = 0; ran && i < M; i++)
        for (int r = 0; r < N; r++) {
            double s = 0, mag = 0;
            for (int c = 0; c < K; c++) {
                double t = (double)kv_bf16_to_f32(a[i * K + c]) * kv_bf16_to_f32(b[r * K + c]);
                s += t;
                mag += fabs(t);
            }
            cr_expect_leq(fabs(y[i * N + r] - s), mag * K * 1.2e-7, "y[%d][%d] = %g, want %g", i,
                          r, y[i * N + r], s);
        }
}

Test(kernels, onednn_runs_bf16_products_at_avx512bf16_only)
{
    tu_each_level(check_library_level);
}

/* kv_gemv_batch of `batch` input rows through two matrices (q/k-like: one
 * call, several weights) against kv_gemv of each input row alone: equal
 * bit for bit, whatever the tile a row falls in. */
static void check_batch(kv_pool *p, kv_dtype dt, kv_compute mode, int rows, int cols, int batch)
{
    float *ref[2];
    void *data[2];
    kv_weight w[2] = {random_weight(dt, rows, cols, &ref[0], &data[0]),
                      random_weight(dt, rows / 2 + 1, cols, &ref[1], &data[1])};
    float *xs = malloc((size_t)batch * (size_t)cols * sizeof *xs);
    for (size_t i = 0; i < (size_t)batch * (size_t)cols; i++)
        xs[i] = rnd();
    if (mode == KV_COMPUTE_BF16)
        kv_round_bf16(xs, (size_t)batch * (size_t)cols);
    const kv_weight *ws[2] = {&w[0], &w[1]};
    float *ys[2], *alone = malloc((size_t)rows * sizeof *alone);
    for (int i = 0; i < 2; i++)
        ys[i] = malloc((size_t)batch * (size_t)w[i].rows * sizeof *ys[i]);
    kv_gemv_batch(p, 2, ws, xs, batch, mode, ys);
    for (int i = 0; i < 2; i++)
        for (int b = 0; b < batch; b++) {
            kv_gemv(p, &w[i], xs + (size_t)b * (size_t)cols, mode, alone);
            for (int r = 0; r < w[i].rows; r++)
                cr_assert_eq(tu_f32_bits(ys[i][(size_t)b * (size_t)w[i].rows + (size_t)r]), tu_f32_bits(alone[r]),
                             "%s: dtype %d, mode %s, %d x %d, batch %d: row %d of input %d is "
                             "%.9g batched, %.9g alone",
                             kv_isa_name(kv_isa_active()), (int)dt, kv_compute_name(mode),
                             w[i].rows, cols, batch, r, b, ys[i][(size_t)b * w[i].rows + r],
                             alone[r]);
        }
    for (int i = 0; i < 2; i++) {
        free(ys[i]);
        free(data[i]);
        free(ref[i]);
    }
    free(alone);
    free(xs);
}

/* Batched GEMVs at level isa: every dtype and mode, column counts that leave
 * every tail and rows longer than a tile's block of columns (1,024 F32 /
 * 2,048 BF16-mode columns: the sums carried from block to block), batch
 * sizes that leave partial tiles of input rows (spread by kv_tile_rows: for
 * the AVX2 tiles of three rows, narrower tiles of two, two of them for the
 * last four; for the AVX-512 ones of four, narrow tiles of two and three,
 * 17 as 4 + 4 + 3 + 3 + 3 and 9 as three of three), and row
 * counts (37 to 41 and 19 to 21, and 301 split into tasks) that leave
 * partial tiles of every size up to five weight rows. */
static void check_batch_level(kv_isa isa)
{
    (void)isa; /* set by tu_each_level */
    kv_error err;
    kv_pool *p = kv_pool_new(2, &err);
    cr_assert_not_null(p, "%s", err.msg);
    static const int colss[] = {1, 7, 16, 31, 33, 64, 100, 129, 256, 1000, 2209};
    static const int batches[] = {2, 3, 4, 5, 7, 8, 9, 16, 17, 32};
    for (size_t c = 0; c < sizeof colss / sizeof colss[0]; c++)
        for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++) {
            int rows = colss[c] == 1000 && batches[b] == 17 ? 301 : 37 + (int)(b % 5);
            check_batch(p, KV_DTYPE_F32, KV_COMPUTE_F32, rows, colss[c], batches[b]);
            check_batch(p, KV_DTYPE_F16, KV_COMPUTE_F32, rows, colss[c], batches[b]);
            check_batch(p, KV_DTYPE_BF16, KV_COMPUTE_F32, rows, colss[c], batches[b]);
            check_batch(p, KV_DTYPE_BF16, KV_COMPUTE_BF16, rows, colss[c], batches[b]);
        }
    kv_pool_free(p);
}

Test(kernels, batched_gemv_rows_equal_gemv_bit_for_bit_at_every_level)
{
    tu_each_level(check_batch_level);
}

Test(kernels, a_level_the_cpu_lacks_is_refused)
{
    kv_error err;
    for (int l = 0; l < KV_ISA_COUNT; l++)
        if (!kv_isa_available((kv_isa)l)) {
            cr_expect_eq(kv_isa_set((kv_isa)l, &err), -1);
            cr_expect(strstr(err.msg, "cannot run") != NULL, "%s", err.msg);
        }
    kv_isa out;
    cr_expect_eq(kv_isa_parse("sse2", &out, &err), -1);
    cr_expect(strstr(err.msg, "avx512bf16") != NULL, "%s", err.msg);
    cr_expect_eq(kv_isa_set(KV_ISA_AVX2, &err), 0, "the baseline always runs");
}

/* Decode attention's slot-run kernels give the bits of the kv_dot and
 * kv_axpy calls they replace, at every level: any other order of sums
 * would move every model's logits. Lengths cover whole blocks of 16, 32
 * and 64, an 8-lane tail, and a scalar tail (the fallback); strides are
 * not multiples of n; outputs come in pairs (the AVX-512 kernel's) and
 * alone. */
static void check_slot_runs(kv_isa isa)
{
    static const int lens[] = {8, 16, 24, 64, 96, 128, 136, 200, 256, 13, 77};
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
        int n = lens[li];
        size_t stride = (size_t)n + 37;
        float *a = malloc((size_t)n * sizeof *a), *b = malloc(8 * stride * sizeof *b);
        for (int i = 0; i < n; i++)
            a[i] = rnd();
        for (size_t i = 0; i < 8 * stride; i++)
            b[i] = rnd();
        float got[8], scale = 0.0883883f;
        kv_dot8(a, b, stride, n, scale, got);
        for (int j = 0; j < 8; j++) {
            float want = kv_dot(a, b + (size_t)j * stride, n) * scale;
            cr_assert_eq(tu_f32_bits(got[j]), tu_f32_bits(want), "%s, n %d row %d: %.9g vs %.9g",
                         kv_isa_name(isa), n, j, got[j], want);
        }
        /* two, three and four outputs, 1..8 rows in order */
        for (int ny = 2; ny <= 4; ny++)
            for (int nx = 1; nx <= 8; nx++) {
                size_t ys = (size_t)n + 3, as = 11;
                float *y = malloc((size_t)ny * ys * sizeof *y),
                      *w = malloc((size_t)ny * ys * sizeof *w);
                float *coef = malloc((size_t)ny * as * sizeof *coef);
                for (size_t i = 0; i < (size_t)ny * ys; i++)
                    y[i] = w[i] = rnd();
                for (size_t i = 0; i < (size_t)ny * as; i++)
                    coef[i] = rnd();
                kv_axpy_rows(y, ys, ny, coef, as, b, stride, nx, n);
                for (int h = 0; h < ny; h++)
                    for (int j = 0; j < nx; j++)
                        kv_axpy(w + (size_t)h * ys, coef[(size_t)h * as + (size_t)j],
                                b + (size_t)j * stride, n);
                cr_assert_eq(memcmp(y, w, (size_t)ny * ys * sizeof *y), 0, "%s, n %d, %d x %d rows",
                             kv_isa_name(isa), n, ny, nx);
                free(y), free(w), free(coef);
            }
        free(a), free(b);
    }
}

Test(kernels, attention_slot_runs_equal_dot_and_axpy_bit_for_bit_at_every_level)
{
    tu_each_level(check_slot_runs);
}
