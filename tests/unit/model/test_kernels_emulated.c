/* kvcore's AVX-512 and AVX512_BF16 kernels, compiled against a scalar
 * emulation of their intrinsics (tests/support/emu/immintrin.h; meson.build builds
 * this program with kernels_avx512.c and kernels_avx512bf16.c, and with
 * kernels_stored_avx512.c where the build's baseline has AVX2), against a
 * double-precision reference: GEMV rows of every dtype in F32 mode, BF16
 * rows and the BF16 GEMM in BF16 mode, with column counts that leave every
 * kind of tail and row ranges that leave partial tiles; the batched GEMV's
 * tiles bit for bit against the same level's rows; decode attention's
 * slot-run kernels bit for bit against the baseline's; and the stored-form
 * attention kernels on every cache format (tests/support/stored_kernels.h,
 * as test_attn_stored.c runs them at the levels the CPU has). It runs on any CPU:
 * the logic of the kernels is checked here; the instructions themselves
 * only by tests/unit/model/test_kernels.c on a CPU that has them. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/kernels_isa.h"
#if defined(__AVX2__) /* as tests/meson.build: kernels_stored_avx512.c is in */
#include "model/kernels_stored_isa.h"
#include "support/stored_kernels.h"
#endif

static uint32_t rng = 7;

static float rnd(void)
{
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* |got - sum of x . w| within the rounding of cols FP32 additions. */
static void expect_dot(float got, const float *w, const float *x, int cols, const char *what,
                       int row)
{
    double s = 0, mag = 0;
    for (int c = 0; c < cols; c++) {
        s += (double)w[c] * x[c];
        mag += fabs((double)w[c] * x[c]);
    }
    cr_expect_leq(fabs(got - s), mag * cols * 1.2e-7 + 1e-30, "%s, %d columns, row %d: %g, want %g",
                  what, cols, row, got, s);
}

/* A rows x cols matrix of dtype d with random values; ref gets them as floats. */
static void *random_matrix(kv_dtype d, int rows, int cols, float *ref)
{
    void *data = malloc((size_t)rows * (size_t)cols * 4);
    for (int i = 0; i < rows * cols; i++) {
        float f = rnd();
        if (d == KV_DTYPE_F32)
            ((float *)data)[i] = f;
        else if (d == KV_DTYPE_BF16) {
            ((uint16_t *)data)[i] = kv_f32_to_bf16(f);
            f = kv_bf16_to_f32(((uint16_t *)data)[i]);
        } else {
            ((uint16_t *)data)[i] = (uint16_t)((rng >> 9) & 0x3fff) ^ (uint16_t)(rng & 0x8000);
            f = kv_f16_to_f32(((uint16_t *)data)[i]);
        }
        ref[i] = f;
    }
    return data;
}

static const int colss[] = {1, 7, 16, 31, 32, 33, 64, 100, 129, 256, 1000};
enum { ROWS = 37, N = 11 };

Test(kernels_emulated, gemv_rows_of_both_avx512_levels)
{
    static const kv_dtype dts[] = {KV_DTYPE_F32, KV_DTYPE_F16, KV_DTYPE_BF16};
    const kv_isa_kernels *levels[] = {&kv_kernels_avx512, &kv_kernels_avx512bf16};
    for (size_t ci = 0; ci < sizeof colss / sizeof *colss; ci++)
        for (int di = 0; di < 3; di++)
            for (int mode = 0; mode < 2; mode++) {
                if (mode == KV_COMPUTE_BF16 && dts[di] != KV_DTYPE_BF16)
                    continue; /* BF16 mode has BF16 weights only */
                int cols = colss[ci];
                float *ref = malloc((size_t)ROWS * (size_t)cols * sizeof *ref);
                kv_weight w = {.dtype = dts[di], .rows = ROWS, .cols = cols};
                w.data = random_matrix(dts[di], ROWS, cols, ref);
                float x[1000], xp[1000], y[ROWS];
                for (int c = 0; c < cols; c++)
                    x[c] = rnd();
                if (mode == KV_COMPUTE_BF16)
                    kv_round_bf16(x, (size_t)cols);
                for (int l = 0; l < 2; l++) {
                    levels[l]->prepare(x, cols, (kv_compute)mode, xp);
                    levels[l]->rows(&w, 3, ROWS, x, xp, (kv_compute)mode, y);
                    for (int r = 3; r < ROWS; r++)
                        expect_dot(y[r], ref + (size_t)r * (size_t)cols, x, cols,
                                   l ? "avx512bf16 rows" : "avx512 rows", r);
                }
                free((void *)w.data);
                free(ref);
            }
}

Test(kernels_emulated, bf16_gemm_tiles_and_leftovers)
{
    for (size_t ci = 0; ci < sizeof colss / sizeof *colss; ci++) {
        int cols = colss[ci];
        float *ref = malloc((size_t)ROWS * (size_t)cols * sizeof *ref);
        kv_weight w = {.dtype = KV_DTYPE_BF16, .rows = ROWS, .cols = cols};
        w.data = random_matrix(KV_DTYPE_BF16, ROWS, cols, ref);
        float *x = malloc((size_t)N * (size_t)cols * sizeof *x), y[N * ROWS];
        uint16_t *x16 = malloc((size_t)N * (size_t)cols * sizeof *x16);
        for (int i = 0; i < N * cols; i++)
            x[i] = rnd();
        kv_round_bf16(x, (size_t)N * (size_t)cols);
        kv_pack_bf16(x, (size_t)N * (size_t)cols, x16);
        for (int i = 0; i < N * ROWS; i++)
            y[i] = NAN;
        /* rows [2, 37): 8 full 4-row tiles and a last tile of 3; 11 x rows:
         * two 4-row tiles and 3 left over */
        kv_kernels_avx512bf16.gemm_bf16(&w, 2, ROWS, x16, N, (size_t)cols, y, ROWS);
        for (int i = 0; i < N; i++)
            for (int r = 0; r < ROWS; r++) {
                float got = y[i * ROWS + r];
                if (r < 2)
                    cr_expect(isnan(got), "row %d is outside the range and was written", r);
                else
                    expect_dot(got, ref + (size_t)r * (size_t)cols, x + (size_t)i * (size_t)cols,
                               cols, "avx512bf16 gemm", r);
            }
        free(x16);
        free(x);
        free((void *)w.data);
        free(ref);
    }
}

/* rows_batch of both levels against their own rows() on each input row
 * alone: equal bit for bit (the tiles must keep the row kernel's
 * accumulators and order of sums), for every dtype and mode, batch sizes
 * that leave partial tiles of input rows and a row range that leaves
 * partial tiles of weight rows. */
Test(kernels_emulated, batched_rows_equal_rows_bit_for_bit)
{
    static const kv_dtype dts[] = {KV_DTYPE_F32, KV_DTYPE_F16, KV_DTYPE_BF16};
    static const int batches[] = {2, 3, 5, 9};
    const kv_isa_kernels *levels[] = {&kv_kernels_avx512, &kv_kernels_avx512bf16};
    enum { MAX_B = 9 };
    for (size_t ci = 0; ci < sizeof colss / sizeof *colss; ci++)
        for (int di = 0; di < 3; di++)
            for (int mode = 0; mode < 2; mode++) {
                if (mode == KV_COMPUTE_BF16 && dts[di] != KV_DTYPE_BF16)
                    continue;
                int cols = colss[ci];
                float *ref = malloc((size_t)ROWS * (size_t)cols * sizeof *ref);
                kv_weight w = {.dtype = dts[di], .rows = ROWS, .cols = cols};
                w.data = random_matrix(dts[di], ROWS, cols, ref);
                float *xs = malloc((size_t)MAX_B * (size_t)cols * sizeof *xs);
                float *xps = malloc((size_t)MAX_B * (size_t)cols * sizeof *xps);
                float y[MAX_B * ROWS], alone[ROWS];
                for (int i = 0; i < MAX_B * cols; i++)
                    xs[i] = rnd();
                if (mode == KV_COMPUTE_BF16)
                    kv_round_bf16(xs, (size_t)MAX_B * (size_t)cols);
                for (int l = 0; l < 2; l++)
                    for (size_t bi = 0; bi < sizeof batches / sizeof *batches; bi++) {
                        int batch = batches[bi];
                        for (int b = 0; b < batch; b++)
                            levels[l]->prepare(xs + (size_t)b * (size_t)cols, cols,
                                               (kv_compute)mode, xps + (size_t)b * (size_t)cols);
                        /* rows [4, 37): 16 tiles of 2 rows and one of 1; 8 of
                         * 4 rows and one of 1 */
                        levels[l]->rows_batch(&w, 4, ROWS, xs, xps, batch, (kv_compute)mode, y,
                                              ROWS);
                        for (int b = 0; b < batch; b++) {
                            levels[l]->rows(&w, 4, ROWS, xs + (size_t)b * (size_t)cols,
                                            xps + (size_t)b * (size_t)cols, (kv_compute)mode,
                                            alone);
                            for (int r = 4; r < ROWS; r++)
                                cr_expect_eq(memcmp(&y[b * ROWS + r], &alone[r], sizeof(float)), 0,
                                             "%s, dtype %d, mode %d, %d columns, batch %d: row %d "
                                             "of input %d is %.9g batched, %.9g alone",
                                             l ? "avx512bf16" : "avx512", (int)dts[di], mode, cols,
                                             batch, r, b, y[b * ROWS + r], alone[r]);
                        }
                    }
                free(xps);
                free(xs);
                free((void *)w.data);
                free(ref);
            }
}

/* Decode attention's slot-run kernels of both levels against the kv_dot
 * and kv_axpy calls they replace (kernels.c's, at the baseline), bit for
 * bit: dot8 where n is a multiple of 16 (else it declines), axpy_rows over
 * the lanes it says it did, nothing beyond them. */
Test(kernels_emulated, attention_slot_runs_equal_dot_and_axpy_bit_for_bit)
{
    static const int lens[] = {8, 16, 24, 64, 96, 128, 136, 200, 256, 13};
    const kv_isa_kernels *levels[] = {&kv_kernels_avx512, &kv_kernels_avx512bf16};
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
        int n = lens[li];
        size_t stride = (size_t)n + 37, ys = (size_t)n + 3, as = 11;
        float *a = malloc((size_t)n * sizeof *a), *b = malloc(8 * stride * sizeof *b);
        float *y = malloc(4 * ys * sizeof *y), *w = malloc(4 * ys * sizeof *w);
        float coef[4 * 11];
        for (int i = 0; i < n; i++)
            a[i] = rnd();
        for (size_t i = 0; i < 8 * stride; i++)
            b[i] = rnd();
        for (int l = 0; l < 2; l++) {
            const char *lv = l ? "avx512bf16" : "avx512";
            float got[8] = {0}, scale = 0.0883883f;
            bool did = levels[l]->dot8(a, b, stride, n, scale, got);
            cr_expect_eq(did, n % 16 == 0, "%s: dot8 of %d", lv, n);
            for (int j = 0; did && j < 8; j++) {
                float want = kv_dot(a, b + (size_t)j * stride, n) * scale;
                cr_expect_eq(memcmp(&got[j], &want, sizeof want), 0,
                             "%s, n %d row %d: %.9g vs %.9g", lv, n, j, got[j], want);
            }
            for (int ny = 1; ny <= 4; ny++)
                for (int nx = 1; nx <= 8; nx++) {
                    for (size_t i = 0; i < 4 * ys; i++)
                        y[i] = w[i] = rnd();
                    for (size_t i = 0; i < 4 * as; i++)
                        coef[i] = rnd();
                    int done = levels[l]->axpy_rows(y, ys, ny, coef, as, b, stride, nx, n);
                    cr_expect_eq(done, ny % 2 ? 0 : n / 64 * 64, "%s: axpy_rows of %d x %d", lv, ny,
                                 n);
                    for (int h = 0; h < ny; h++)
                        for (int j = 0; j < nx; j++)
                            kv_axpy(w + (size_t)h * ys, coef[(size_t)h * as + (size_t)j],
                                    b + (size_t)j * stride, done);
                    cr_expect_eq(memcmp(y, w, 4 * ys * sizeof *y), 0, "%s, n %d, %d x %d rows", lv,
                                 n, ny, nx);
                }
        }
        free(a), free(b), free(y), free(w);
    }
}
#if defined(__AVX2__)
Test(kernels_emulated, stored_kernels_read_every_format_as_its_values)
{
    tu_check_stored_kernels(kv_dot_stored_avx512, kv_axpy_stored_avx512, "emulated avx512");
}
#endif
