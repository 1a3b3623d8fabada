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

#include "model/kernels_avx512.h"

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

/* ---- the batched GEMV's tiles ----
 *
 * BF16 mode, as the F32 tiles of kernels_avx512.c: a tile of DP_TR weight
 * rows x tb activation rows runs each of dot_row_dp's four accumulator
 * chains as its own stream over the columns (the same vdpbf16ps in the
 * same order per chain, the masked tail in chain 0), for every pair of the
 * tile at once, and adds the chains as dot_row_dp does, so each pair gets
 * its bits. A stream holds 24 accumulators, 4 activation vectors and a
 * weight vector. 6 weight rows (not 4) read each activation vector from L2
 * for half as many vdpbf16ps again; narrow tiles (6 x 1 .. 6 x 3) end a
 * batch without computing a row twice. */
#define DP_TR 6
#define DP_TB 4

/* Columns per block of a tile's streams (6 weight and 4 activation rows of
 * 2,048 BF16 columns are 40 KB, in L1 between the streams); longer rows go
 * block by block, each chain picking up its sums where it left them. */
#define DP_TILE_COLS 2048

/* Goes on with chain acc of every pair of a tr x tb tile, acc[i * tb + b]
 * for weight row w[i] and activation row x[b], over the blocks of 32 at c =
 * from, from + step, ... < to; masked: the last block may be partial (the
 * row ends at cols). */
INLINE void dp_stream(int tr, int tb, const uint16_t *const *w, const uint16_t *const *x,
                      size_t from, size_t to, size_t step, size_t cols, bool masked, bool first,
                      __m512 *acc)
{
    __m512 a[DP_TR * DP_TB]; /* in registers for the loop; the copies
                              * unrolled, or they become memcpy calls */
#pragma GCC unroll 24
    for (int j = 0; j < tr * tb; j++)
        a[j] = first ? _mm512_setzero_ps() : acc[j];
    for (size_t c = from; c < to; c += step) {
        size_t n = masked ? cols - c : 32;
        __m512bh xv[DP_TB];
        for (int b = 0; b < tb; b++)
            xv[b] = load32(x[b] + c, n);
        for (int i = 0; i < tr; i++) {
            __m512bh wv = load32(w[i] + c, n);
            for (int b = 0; b < tb; b++)
                a[i * tb + b] = _mm512_dpbf16_ps(a[i * tb + b], wv, xv[b]);
        }
    }
#pragma GCC unroll 24
    for (int j = 0; j < tr * tb; j++)
        acc[j] = a[j];
}

/* dot_row_dp on a tr x tb tile (kv_tile_fn's out[b * tr + i]): xp[b] is
 * x[b] packed to BF16. */
INLINE void dp_tile(int tr, int tb, const kv_weight *wm, const int *r, const void *const *xp,
                    kv_prefetch *pf, float *out)
{
    size_t cols = (size_t)wm->cols, c128 = cols / 128 * 128;
    const uint16_t *w[DP_TR], *x[DP_TB];
    for (int i = 0; i < tr; i++)
        w[i] = (const uint16_t *)wm->data + (size_t)r[i] * cols;
    for (int b = 0; b < tb; b++)
        x[b] = xp[b];
    enum { N = DP_TR * DP_TB };
    __m512 acc[4][N];
    /* acc stays in memory (its address escapes): spread over registers, the
     * four streams' 96 sums were shuffled through the stack between streams */
    __asm__("" : : "r"(acc) : "memory");
    size_t c0 = 0;
    int nstreams = kv_tile_streams(c128, DP_TILE_COLS, 4);
    do { /* at least once: the accumulators start at zero there */
        size_t c1 = c0 + DP_TILE_COLS < c128 ? c0 + DP_TILE_COLS : c128;
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            kv_prefetch_share(pf, nstreams--);
            dp_stream(tr, tb, w, x, c0 + 32 * (size_t)k, c1, 128, cols, false, c0 == 0, acc[k]);
        }
        c0 = c1;
    } while (c0 < c128);
    if (cols > c128) /* chain 0 goes on over the rest, 32 at a time */
        dp_stream(tr, tb, w, x, c128, cols, 32, cols, true, false, acc[0]);
    for (int i = 0; i < tr; i++)
        for (int b = 0; b < tb; b++) {
            int j = i * tb + b;
            out[b * tr + i] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[0][j], acc[1][j]),
                                                                 _mm512_add_ps(acc[2][j], acc[3][j])));
        }
}

/* The kv_tile_fn of DP_TR x tb for tb = 1..DP_TB. */
#define DP_TILE(tb)                                                                                \
    static void dp_tile_##tb(const kv_weight *w, const int *r, const float *const *x,              \
                             const void *const *xp, kv_prefetch *pf, float *out)                   \
    {                                                                                              \
        (void)x;                                                                                   \
        dp_tile(DP_TR, tb, w, r, xp, pf, out);                                                     \
    }
DP_TILE(1)
DP_TILE(2)
DP_TILE(3)
DP_TILE(4)
#undef DP_TILE
_Static_assert(DP_TB == 4, "one DP_TILE(tb) above for each tb up to DP_TB");

static void rows_batch(const kv_weight *w, int r0, int r1, const float *xs, const void *xps,
                       int batch, kv_compute mode, float *y, size_t ldy)
{
    if (mode != KV_COMPUTE_BF16 || w->dtype != KV_DTYPE_BF16) { /* as rows() */
        kv_avx512_rows_batch(w, r0, r1, xs, mode == KV_COMPUTE_BF16 ? NULL : xps, batch,
                             KV_COMPUTE_F32, y, ldy);
        return;
    }
    static kv_tile_fn *const tiles[DP_TB] = {dp_tile_1, dp_tile_2, dp_tile_3, dp_tile_4};
    kv_rows_batch_tiles(tiles[DP_TB - 1], tiles, DP_TR, DP_TB, w, r0, r1, xs, xps, batch, y, ldy);
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

const kv_isa_kernels kv_kernels_avx512bf16 = {.prepare = prepare,
                                              .rows = rows,
                                              .rows_batch = rows_batch,
                                              .gemm_bf16 = gemm_bf16,
                                              .dot8 = kv_avx512_dot8,
                                              .axpy_rows = kv_avx512_axpy_rows};
