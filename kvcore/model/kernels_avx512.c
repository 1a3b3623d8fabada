/* The AVX-512F level: the AVX2 level's GEMV rows at twice the width. This
 * file is compiled with -mavx512f -mavx512bw -mavx512vl (kvcore/meson.build)
 * and only called on a CPU that has them (cpu.c). */
#include "model/kernels_avx512.h"

#include <immintrin.h>

#include "model/kernels_isa.h"

#define INLINE static inline __attribute__((always_inline))

INLINE __m512 load16(kv_dtype dtype, const void *data, size_t i)
{
    if (dtype == KV_DTYPE_F16)
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)data + i)));
    return _mm512_loadu_ps((const float *)data + i);
}

/* Row r of an F16 or F32 matrix against x: one sequential stream per row
 * and four accumulators, as in kernels_avx2.c. */
INLINE float dot_row_t(kv_dtype dt, const kv_weight *w, int r, const float *x)
{
    size_t cols = (size_t)w->cols, base = (size_t)r * cols, c = 0;
    __m512 a[4];
    for (int k = 0; k < 4; k++)
        a[k] = _mm512_setzero_ps();
    for (; c + 64 <= cols; c += 64)
        for (int k = 0; k < 4; k++)
            a[k] = _mm512_fmadd_ps(load16(dt, w->data, base + c + 16 * k),
                                   _mm512_loadu_ps(x + c + 16 * k), a[k]);
    for (; c + 16 <= cols; c += 16)
        a[0] = _mm512_fmadd_ps(load16(dt, w->data, base + c), _mm512_loadu_ps(x + c), a[0]);
    float s =
        _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3])));
    for (; c < cols; c++)
        s += kv_weight_at(w, base + c) * x[c];
    return s;
}

/* BF16 row r against x permuted in blocks of 32 (16 even elements, then 16
 * odd ones): the AVX2 kernel's shift/mask trick on 64-byte loads. */
static float dot_row_bf16(const kv_weight *w, int r, const float *x, const float *xp)
{
    size_t cols = (size_t)w->cols, c = 0;
    const uint16_t *p = (const uint16_t *)w->data + (size_t)r * cols;
    const __m512i hi = _mm512_set1_epi32((int)0xFFFF0000u);
    __m512 a[2], b[2];
    for (int k = 0; k < 2; k++)
        a[k] = b[k] = _mm512_setzero_ps();
#define BF16_STEP(k, cc)                                                                           \
    do {                                                                                           \
        __m512i v = _mm512_loadu_si512((const void *)(p + (cc)));                                  \
        a[k] = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(v, 16)),                      \
                               _mm512_loadu_ps(xp + (cc)), a[k]);                                  \
        b[k] = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(v, hi)),                       \
                               _mm512_loadu_ps(xp + (cc) + 16), b[k]);                             \
    } while (0)
    for (; c + 64 <= cols; c += 64)
        for (int k = 0; k < 2; k++)
            BF16_STEP(k, c + 32 * k);
    for (; c + 32 <= cols; c += 32)
        BF16_STEP(0, c);
#undef BF16_STEP
    float s =
        _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], b[0]), _mm512_add_ps(a[1], b[1])));
    for (; c < cols; c++)
        s += kv_bf16_to_f32(p[c]) * x[c];
    return s;
}

void kv_avx512_prepare(const float *x, int n, kv_compute mode, void *out)
{
    (void)mode;
    float *xp = out;
    for (int c = 0; c + 32 <= n; c += 32)
        for (int j = 0; j < 16; j++) {
            xp[c + j] = x[c + 2 * j];
            xp[c + 16 + j] = x[c + 2 * j + 1];
        }
}

void kv_avx512_rows(const kv_weight *w, int r0, int r1, const float *x, const void *xp,
                    kv_compute mode, float *y)
{
    (void)mode;
    switch (w->dtype) {
    case KV_DTYPE_BF16:
        for (int r = r0; r < r1; r++)
            y[r] = dot_row_bf16(w, r, x, xp);
        break;
    case KV_DTYPE_F16:
        for (int r = r0; r < r1; r++)
            y[r] = dot_row_t(KV_DTYPE_F16, w, r, x);
        break;
    default:
        for (int r = r0; r < r1; r++)
            y[r] = dot_row_t(KV_DTYPE_F32, w, r, x);
    }
}

/* ---- the batched GEMV's tiles ----
 *
 * As in kernels_avx2.c: a tile of TR weight rows x tb input rows runs each
 * accumulator of the row kernel (dot_row_bf16's a[k] and b[k], dot_row_t's
 * a[k]) as its own stream over the columns, one after another, for every
 * pair of the tile at once (the same FMAs in the same order per
 * accumulator), and adds them in the row kernel's order, so each pair gets
 * the bits of the row kernel. One stream holds TR x tb accumulators, tb
 * input vectors and a weight vector: 24 + 4 + 1 of the 32 registers.
 *
 * Why 6 x 4: the input rows of a batch do not fit in L1 beside the weights
 * (17 rows of 1,024 F32 columns are 68 KB), so every tile of weight rows
 * reads them again from L2. Per FMA a TR x TB tile reads 64 / TR bytes of
 * input from L2: the former 2 x 4 tile needed 64 bytes a cycle at two FMAs a
 * cycle, L2's whole bandwidth, and ran at a fraction of the FMA peak; 6
 * rows need a third of that. tb < TB runs the narrow tiles (6 x 1 .. 6 x
 * 3), so no input row is computed twice to fill a tile. */
#define TR 6 /* weight rows per tile */
#define TB 4 /* input rows per tile */

/* Columns per block of a tile's streams: a tile's weight rows and input rows
 * of a block (6 x 2 KB + 4 x 4 KB at 1,024 BF16 columns) stay in L1 while its
 * streams pass over them; longer rows go block by block, each stream
 * picking up its sums where it left them (the same additions in the same
 * order). */
#define TILE_COLS 1024

/* The weight vector of row w at column c that a stream multiplies: BF16 rows
 * as dot_row_bf16 reads them (the even elements of the block of 32 at c, or
 * with odd = 1 the odd ones), F32 and F16 rows as dot_row_t (16 from c).
 * A BF16 value is the high half of its F32: the odd elements are widened by
 * one masked load of 16-bit elements (the mask zeroes the low halves), the
 * even ones by a shift after a plain load at c. A masked load at c - 1 would
 * widen them without the shift, but it straddles two cache lines whenever
 * the row is 64-byte aligned, as the model's are: bench_gemv, BF16 3072 x
 * 1024 on aligned weights, batch 17, 1 thread: 155 GFLOP/s with it, 167 with
 * the shift (medians of 3 interleaved runs, 2 Dec 2026, AVX512_BF16 machine). */
INLINE __m512 tile_weights(kv_dtype dt, const void *w, size_t c, int odd)
{
    if (dt != KV_DTYPE_BF16)
        return load16(dt, w, c);
    const uint16_t *p = (const uint16_t *)w + c;
    if (!odd)
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_loadu_si512((const void *)p), 16));
    return _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(0xAAAAAAAAu, (const void *)p));
}

/* Goes on with one accumulator of the row kernel for every pair of a
 * tr x tb tile, acc[i * tb + b] for weight row w[i] and input row x[b],
 * over the steps at c = from, from + step, ... < to (first: from zero).
 * BF16: x permuted, the odd half 16 floats after the even one. */
INLINE void stream(int tr, int tb, kv_dtype dt, const void *const *w, const float *const *x,
                   int odd, size_t from, size_t to, size_t step, bool first, __m512 *acc)
{
    __m512 a[TR * TB]; /* in registers for the loop; the copies unrolled, or
                        * they become memcpy calls */
#pragma GCC unroll 24
    for (int j = 0; j < tr * tb; j++)
        a[j] = first ? _mm512_setzero_ps() : acc[j];
    for (size_t c = from; c < to; c += step) {
        __m512 xv[TB];
        for (int b = 0; b < tb; b++)
            xv[b] = _mm512_loadu_ps(x[b] + c + 16 * (size_t)odd);
        for (int i = 0; i < tr; i++) {
            __m512 wv = tile_weights(dt, w[i], c, odd);
            for (int b = 0; b < tb; b++)
                a[i * tb + b] = _mm512_fmadd_ps(wv, xv[b], a[i * tb + b]);
        }
    }
#pragma GCC unroll 24
    for (int j = 0; j < tr * tb; j++)
        acc[j] = a[j];
}

/* The row kernel of dtype dt on a tr x tb tile: out[b * tr + i] =
 * W[r[i]] . x[b] (kv_tile_fn's), xp[b] being x[b] prepared. dot_row_bf16
 * has two chains over blocks of 64 columns (chain k at 32 k), each two
 * accumulators (halves: a[k] even, b[k] odd), and chain 0 goes on over the
 * blocks of 32; dot_row_t four chains (chain k at 16 k), chain 0 going on
 * over the blocks of 16. */
INLINE void tile(int tr, int tb, kv_dtype dt, const kv_weight *wm, const int *r,
                 const float *const *x, const void *const *xp, kv_prefetch *pf, float *out)
{
    const int bf16 = dt == KV_DTYPE_BF16, halves = bf16 ? 2 : 1, chains = bf16 ? 2 : 4;
    size_t cols = (size_t)wm->cols, vec = 16 * (size_t)halves, step = 64;
    size_t cmain = cols / step * step, cvec = cols / vec * vec;
    size_t row_bytes = cols * (dt == KV_DTYPE_F32 ? 4 : 2);
    const void *w[TR];
    const float *xs[TB];
    for (int i = 0; i < tr; i++)
        w[i] = (const char *)wm->data + (size_t)r[i] * row_bytes;
    for (int b = 0; b < tb; b++)
        xs[b] = bf16 ? xp[b] : x[b];
    enum { N = TR * TB };
    __m512 acc[4][N]; /* accumulator k * halves + half of the row kernel */
    /* acc stays in memory (its address escapes): spread over registers, the
     * four streams' 96 sums were shuffled through the stack between streams */
    __asm__("" : : "r"(acc) : "memory");
    size_t c0 = 0;
    int nstreams = kv_tile_streams(cmain, TILE_COLS, chains * halves);
    do { /* at least once: the accumulators start at zero there */
        size_t c1 = c0 + TILE_COLS < cmain ? c0 + TILE_COLS : cmain;
        /* unrolled, so that each stream's accumulators are plain registers
         * (else they are copied in and out through the stack) */
#pragma GCC unroll 4
        for (int k = 0; k < chains; k++)
#pragma GCC unroll 2
            for (int h = 0; h < halves; h++) {
                kv_prefetch_share(pf, nstreams--);
                stream(tr, tb, dt, w, xs, h, c0 + vec * (size_t)k, c1, step, c0 == 0,
                       acc[k * halves + h]);
            }
        c0 = c1;
    } while (c0 < cmain);
    if (cvec > cmain) /* chain 0 goes on over the blocks of vec */
        for (int h = 0; h < halves; h++)
            stream(tr, tb, dt, w, xs, h, cmain, cvec, vec, false, acc[h]);
    for (int i = 0; i < tr; i++)
        for (int b = 0; b < tb; b++) {
            /* BF16 ((a0 + b0) + (a1 + b1)), the others ((a0 + a1) + (a2 + a3)):
             * in the order of acc, one expression */
            int j = i * tb + b;
            float s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[0][j], acc[1][j]),
                                                         _mm512_add_ps(acc[2][j], acc[3][j])));
            size_t base = (size_t)r[i] * cols;
            for (size_t c = cvec; c < cols; c++)
                s += kv_weight_at(wm, base + c) * x[b][c];
            out[b * tr + i] = s;
        }
}

/* The kv_tile_fn of each dtype, TR x tb for tb = 1..TB. */
KV_TILE_FNS(TR, 1)
KV_TILE_FNS(TR, 2)
KV_TILE_FNS(TR, 3)
KV_TILE_FNS(TR, 4)
_Static_assert(TB == 4, "one KV_TILE_FNS above for each tb up to TB");

void kv_avx512_rows_batch(const kv_weight *w, int r0, int r1, const float *xs, const void *xps,
                          int batch, kv_compute mode, float *y, size_t ldy)
{
    (void)mode;
    static kv_tile_fn *const bf16[TB] = {bf16_tile_1, bf16_tile_2, bf16_tile_3, bf16_tile_4};
    static kv_tile_fn *const f16[TB] = {f16_tile_1, f16_tile_2, f16_tile_3, f16_tile_4};
    static kv_tile_fn *const f32[TB] = {f32_tile_1, f32_tile_2, f32_tile_3, f32_tile_4};
    kv_tile_fn *const *tiles = kv_tiles_of(w, bf16, f16, f32);
    kv_rows_batch_tiles(tiles[TB - 1], tiles, TR, TB, w, r0, r1, xs, xps, batch, y, ldy);
}

/* ---- decode attention over F32 rows (kernels.h: kv_dot8, kv_axpy_rows) ----
 * The AVX2 kernels at twice the width, with their bits: at 16 lanes a
 * decode step streams its F32 cache with half the instructions (the
 * AVX2 kernels reached ~14 GB of keys and values per CPU-second in a
 * 16-config sweep, against ~27 GB/s of read bandwidth per core). */

/* kv_dot8 for n a multiple of 16. kv_dot feeds a[i, i + 8) of each 16
 * floats to one accumulator and a[i + 8, i + 16) to another, then sums
 * the two: lanes 0-7 and 8-15 of one 512-bit accumulator here, the same
 * FMAs. The sums of the eight rows' lanes follow kernels.c's hsum8x8 pair
 * for pair (its t[j], c01 | c23, then the last step), two 256-bit halves a
 * register. */
bool kv_avx512_dot8(const float *a, const float *b, size_t stride, int n, float scale, float *out)
{
    if (n % 16 != 0)
        return false;
    __m512 acc[8];
    for (int j = 0; j < 8; j++)
        acc[j] = _mm512_setzero_ps();
    for (int i = 0; i < n; i += 16) {
        __m512 av = _mm512_loadu_ps(a + i);
        for (int j = 0; j < 8; j++)
            acc[j] =
                _mm512_fmadd_ps(av, _mm512_loadu_ps(b + (size_t)j * stride + (size_t)i), acc[j]);
    }
    /* u[j] = [acc0 + acc1 of row j | of row j + 4], kv_dot's 8-lane sums */
    __m512 u[4];
    for (int j = 0; j < 4; j++)
        u[j] = _mm512_add_ps(_mm512_shuffle_f32x4(acc[j], acc[j + 4], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_f32x4(acc[j], acc[j + 4], _MM_SHUFFLE(3, 2, 3, 2)));
    /* hsum8x8's t[0] | t[2] and t[1] | t[3] */
    __m512 t02 = _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[2], _MM_SHUFFLE(2, 0, 2, 0)),
                               _mm512_shuffle_f32x4(u[0], u[2], _MM_SHUFFLE(3, 1, 3, 1)));
    __m512 t13 = _mm512_add_ps(_mm512_shuffle_f32x4(u[1], u[3], _MM_SHUFFLE(2, 0, 2, 0)),
                               _mm512_shuffle_f32x4(u[1], u[3], _MM_SHUFFLE(3, 1, 3, 1)));
    /* c01 | c23, then c23 | c23 beside it for the last step's second operand */
    __m512 c = _mm512_add_ps(_mm512_shuffle_ps(t02, t13, _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(t02, t13, _MM_SHUFFLE(3, 2, 3, 2)));
    __m512 c23 = _mm512_shuffle_f32x4(c, c, _MM_SHUFFLE(3, 2, 3, 2));
    __m512 s = _mm512_add_ps(_mm512_shuffle_ps(c, c23, _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_ps(c, c23, _MM_SHUFFLE(3, 1, 3, 1)));
    _mm512_mask_storeu_ps(out, 0xff, _mm512_mul_ps(s, _mm512_set1_ps(scale)));
    return true;
}

/* kv_axpy_rows over the first n / 64 * 64 lanes: 64 floats of two outputs
 * in eight registers while the rows pass, each lane's FMAs those of the
 * AVX2 kernel in the same order of rows. */
int kv_avx512_axpy_rows(float *y, size_t y_stride, int ny, const float *a, size_t a_stride,
                        const float *x, size_t x_stride, int nx, int n)
{
    if (ny % 2 != 0)
        return 0; /* kernels.c takes a lone output row one kv_axpy at a time */
    int i = 0;
    for (; i + 64 <= n; i += 64)
        for (int h = 0; h < ny; h += 2) {
            float *y0 = y + (size_t)h * y_stride + i, *y1 = y0 + y_stride;
            const float *a0 = a + (size_t)h * a_stride, *a1 = a0 + a_stride;
            __m512 s0[4], s1[4];
            for (int k = 0; k < 4; k++) {
                s0[k] = _mm512_loadu_ps(y0 + 16 * k);
                s1[k] = _mm512_loadu_ps(y1 + 16 * k);
            }
            for (int j = 0; j < nx; j++) {
                const float *xj = x + (size_t)j * x_stride + i;
                __m512 b0 = _mm512_set1_ps(a0[j]), b1 = _mm512_set1_ps(a1[j]);
                for (int k = 0; k < 4; k++) {
                    __m512 xv = _mm512_loadu_ps(xj + 16 * k);
                    s0[k] = _mm512_fmadd_ps(b0, xv, s0[k]);
                    s1[k] = _mm512_fmadd_ps(b1, xv, s1[k]);
                }
            }
            for (int k = 0; k < 4; k++) {
                _mm512_storeu_ps(y0 + 16 * k, s0[k]);
                _mm512_storeu_ps(y1 + 16 * k, s1[k]);
            }
        }
    return i;
}

const kv_isa_kernels kv_kernels_avx512 = {.prepare = kv_avx512_prepare,
                                          .rows = kv_avx512_rows,
                                          .rows_batch = kv_avx512_rows_batch,
                                          .gemm_bf16 = NULL,
                                          .dot8 = kv_avx512_dot8,
                                          .axpy_rows = kv_avx512_axpy_rows};
