/* The AVX512_BF16 level: in BF16 mode, GEMV and prefill GEMM with
 * vdpbf16ps (pairs of BF16 products summed into FP32 lanes, twice the
 * FP32 FMA rate and half the bytes of x); in F32 mode the AVX-512F
 * kernels, since vdpbf16ps would round F32 inputs. Compiled with
 * -mavx512f -mavx512bw -mavx512vl -mavx512bf16 (kvcore/meson.build) and
 * only called on a CPU that has them (cpu.c).
 *
 * vdpbf16ps flushes denormal inputs and outputs to zero and rounds each
 * pair's sum once: on BF16 inputs its results differ from an FP32 FMA chain
 * only in accumulation rounding, the freedom BF16 mode already allows. */
#include <immintrin.h>

#include "kernels_avx512.h"

#define INLINE static inline __attribute__((always_inline))

/* The BF16 lanes of the 32 elements at p, zero past n (masked load: no
 * scalar tail, and never a read past the row). */
INLINE __m512bh load32(const uint16_t *p, size_t n)
{
    if (n >= 32)
        return (__m512bh)_mm512_loadu_si512((const void *)p);
    return (__m512bh)_mm512_maskz_loadu_epi16((__mmask32)((1u << n) - 1u), p);
}

/* Row r of BF16 w against BF16 x: four accumulators hide the latency. */
static float dot_row_dp(const kv_weight *w, int r, const uint16_t *x)
{
    size_t cols = (size_t)w->cols, c = 0;
    const uint16_t *p = (const uint16_t *)w->data + (size_t)r * cols;
    __m512 a[4];
    for (int k = 0; k < 4; k++)
        a[k] = _mm512_setzero_ps();
    for (; c + 128 <= cols; c += 128)
        for (int k = 0; k < 4; k++)
            a[k] = _mm512_dpbf16_ps(a[k], load32(p + c + 32 * k, 32), load32(x + c + 32 * k, 32));
    for (; c < cols; c += 32)
        a[0] = _mm512_dpbf16_ps(a[0], load32(p + c, cols - c), load32(x + c, cols - c));
    return _mm512_reduce_add_ps(
        _mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3])));
}

/* BF16 mode: x holds BF16 values, so its upper halves are x exactly. */
static void prepare(const float *x, int n, kv_compute mode, void *out)
{
    if (mode != KV_COMPUTE_BF16) {
        kv_avx512_prepare(x, n, mode, out);
        return;
    }
    kv_pack_bf16(x, (size_t)n, out);
}

static void rows(const kv_weight *w, int r0, int r1, const float *x, const void *xp,
                 kv_compute mode, float *y)
{
    if (mode != KV_COMPUTE_BF16 || w->dtype != KV_DTYPE_BF16) {
        /* BF16 mode has BF16 weights only (kv_model_set_compute); the
         * fallback keeps a stray call exact all the same. */
        kv_avx512_rows(w, r0, r1, x, mode == KV_COMPUTE_BF16 ? NULL : xp, KV_COMPUTE_F32, y);
        return;
    }
    for (int r = r0; r < r1; r++)
        y[r] = dot_row_dp(w, r, xp);
}

/* Rows of x per block: a block of packed x (64 rows of 1,024 columns is
 * 128 KB) stays in L2 while the task's weight rows stream past it. */
#define X_BLOCK 64

/* A 4 x 4 tile: x rows i..i+3 against weight rows r..r+3. Each 64-byte
 * load of x or w feeds four vdpbf16ps. */
static void tile4x4(const uint16_t *w, size_t cols, const uint16_t *x, size_t ldx, float *y,
                    size_t ldy)
{
    __m512 acc[4][4];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            acc[i][j] = _mm512_setzero_ps();
    for (size_t c = 0; c < cols; c += 32) {
        size_t left = cols - c;
        __m512bh wv[4];
        for (int j = 0; j < 4; j++)
            wv[j] = load32(w + (size_t)j * cols + c, left);
        for (int i = 0; i < 4; i++) {
            __m512bh xv = load32(x + (size_t)i * ldx + c, left);
            for (int j = 0; j < 4; j++)
                acc[i][j] = _mm512_dpbf16_ps(acc[i][j], wv[j], xv);
        }
    }
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            y[(size_t)i * ldy + (size_t)j] = _mm512_reduce_add_ps(acc[i][j]);
}

static float dot1(const uint16_t *w, const uint16_t *x, size_t cols)
{
    __m512 acc = _mm512_setzero_ps();
    for (size_t c = 0; c < cols; c += 32)
        acc = _mm512_dpbf16_ps(acc, load32(w + c, cols - c), load32(x + c, cols - c));
    return _mm512_reduce_add_ps(acc);
}

static void gemm_bf16(const kv_weight *w, int r0, int r1, const uint16_t *x, int n, size_t ldx,
                      float *y, size_t ldy)
{
    size_t cols = (size_t)w->cols;
    const uint16_t *wd = w->data;
    for (int i0 = 0; i0 < n; i0 += X_BLOCK) {
        int i1 = n - i0 < X_BLOCK ? n : i0 + X_BLOCK;
        for (int r = r0; r < r1; r += 4) {
            const uint16_t *wr = wd + (size_t)r * cols;
            int i = i0;
            if (r + 4 <= r1)
                for (; i + 4 <= i1; i += 4)
                    tile4x4(wr, cols, x + (size_t)i * ldx, ldx, y + (size_t)i * ldy + (size_t)r,
                            ldy);
            /* Leftover rows of x, or the last < 4 weight rows. */
            int rn = r1 - r < 4 ? r1 - r : 4;
            for (; i < i1; i++)
                for (int j = 0; j < rn; j++)
                    y[(size_t)i * ldy + (size_t)(r + j)] =
                        dot1(wr + (size_t)j * cols, x + (size_t)i * ldx, cols);
        }
    }
}

const kv_isa_kernels kv_kernels_avx512bf16 = {
    .prepare = prepare, .rows = rows, .gemm_bf16 = gemm_bf16};
