/* The AVX2 + FMA + F16C level: GEMV rows that widen 16-bit weights in
 * registers. The baseline every build carries; compiled with the project's
 * -march (without AVX2 there, the portable kernel). */
#include "model/kernels_isa.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#define INLINE static inline __attribute__((always_inline))

/* dtype is a compile-time constant at every call below (the callers are
 * instantiated per dtype), so the switch folds away. */
INLINE __m256 load8(kv_dtype dtype, const void *data, size_t i)
{
    const uint16_t *p = (const uint16_t *)data + i;
    switch (dtype) {
    case KV_DTYPE_BF16: {
        __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
        return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    }
    case KV_DTYPE_F16:
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
    default:
        return _mm256_loadu_ps((const float *)data + i);
    }
}

static inline float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Every GEMV kernel below reads ONE weight row at a time, front to back.
 * Reading four rows in step (four interleaved streams, each x load serving
 * four rows) measured half the bandwidth of a plain read loop on this
 * machine (5 vs 10 GB/s on a busy box, either thread count): the hardware
 * prefetcher follows one sequential stream per core far better than four.
 * A single row keeps the read loop's bandwidth; four accumulator pairs hide
 * the FMA latency so the core still has 2x headroom when DRAM is idle. */

/* Row r of a 16-bit or F32 matrix against x, widening in registers. */
INLINE float dot_row_t(kv_dtype dt, const kv_weight *w, int r, const float *x)
{
    size_t cols = (size_t)w->cols, base = (size_t)r * cols, c = 0;
    __m256 a[4];
    for (int k = 0; k < 4; k++)
        a[k] = _mm256_setzero_ps();
    for (; c + 32 <= cols; c += 32)
        for (int k = 0; k < 4; k++)
            a[k] = _mm256_fmadd_ps(load8(dt, w->data, base + c + 8 * k),
                                   _mm256_loadu_ps(x + c + 8 * k), a[k]);
    for (; c + 8 <= cols; c += 8)
        a[0] = _mm256_fmadd_ps(load8(dt, w->data, base + c), _mm256_loadu_ps(x + c), a[0]);
    float s = hsum8(_mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3])));
    for (; c < cols; c++)
        s += kv_weight_at(w, base + c) * x[c];
    return s;
}

/* BF16 row r against x permuted in blocks of 16 (xp: the 8 even elements,
 * then the 8 odd ones). A 32-byte load holds 16 BF16 values; shifting each
 * 32-bit lane left by 16 yields the even ones as floats and masking off the
 * low half the odd ones, so no widening shuffle is needed: two cheap integer
 * ops feed two FMAs. */
static float dot_row_bf16(const kv_weight *w, int r, const float *x, const float *xp)
{
    size_t cols = (size_t)w->cols, c = 0;
    const uint16_t *p = (const uint16_t *)w->data + (size_t)r * cols;
    const __m256i hi = _mm256_set1_epi32((int)0xFFFF0000u);
    __m256 a[4], b[4];
    for (int k = 0; k < 4; k++)
        a[k] = b[k] = _mm256_setzero_ps();
#define BF16_STEP(k, cc)                                                                           \
    do {                                                                                           \
        __m256i v = _mm256_loadu_si256((const __m256i *)(p + (cc)));                               \
        a[k] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(v, 16)),                      \
                               _mm256_loadu_ps(xp + (cc)), a[k]);                                  \
        b[k] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(v, hi)),                       \
                               _mm256_loadu_ps(xp + (cc) + 8), b[k]);                              \
    } while (0)
    for (; c + 64 <= cols; c += 64)
        for (int k = 0; k < 4; k++)
            BF16_STEP(k, c + 16 * k);
    for (; c + 16 <= cols; c += 16)
        BF16_STEP(0, c);
#undef BF16_STEP
    __m256 s8 = _mm256_add_ps(_mm256_add_ps(a[0], b[0]), _mm256_add_ps(a[1], b[1]));
    s8 = _mm256_add_ps(s8, _mm256_add_ps(_mm256_add_ps(a[2], b[2]), _mm256_add_ps(a[3], b[3])));
    float s = hsum8(s8);
    for (; c < cols; c++)
        s += kv_bf16_to_f32(p[c]) * x[c];
    return s;
}

/* The block-of-16 even/odd permutation of x that dot_row_bf16 reads; in
 * BF16 mode x already holds BF16 values, so the same kernel is exact. */
static void prepare(const float *x, int n, kv_compute mode, void *out)
{
    (void)mode;
    float *xp = out;
    for (int c = 0; c + 16 <= n; c += 16)
        for (int j = 0; j < 8; j++) {
            xp[c + j] = x[c + 2 * j];
            xp[c + 8 + j] = x[c + 2 * j + 1];
        }
}

/* ---- the batched GEMV's tiles ----
 *
 * A tile dots TR weight rows with TB input rows, so each weight vector is
 * loaded and widened once for TB rows and each input vector loaded once for
 * TR rows. Every (weight row, input row) pair must get the bits of the row
 * kernels above. Their accumulators -- dot_row_bf16's a[k] and b[k] for the
 * chains k = 0..3 (eight per pair), dot_row_t's a[k] (four) -- are
 * independent sums, each over its own vectors in column order; no tile could
 * keep them all for several pairs in 16 registers. So a tile computes one
 * accumulator of every pair at a time (a "stream": the row kernel's FMAs in
 * its order, into TR x TB registers) and adds the streams' sums in the row
 * kernel's order, ((0 + 1) + (2 + 3)), at the end.
 *
 * The shape, measured on this project's AMD EPYC (Zen 1: one 256-bit FMA and
 * one 256-bit load per cycle, FP32 peak 38 GFLOP/s per thread) with one tile
 * on L1-resident BF16 rows of 1024 columns, in GFLOP/s per thread:
 *
 *     3x3 31.9 (84 %)   2x3 30.8   4x2 30.2   3x2 29.8   4x3 28.1
 *     2x2 26.8          3x1 20.7   former 2x2 with a[k] and b[k] together 25.2
 *
 * 3x3 takes 9 accumulators, 3 input vectors, the weight vector and the odd
 * mask: 14 of the 16 registers, 6 loads per 9 FMAs. 4x3 needs all 16 and
 * must rebuild the mask with two shifts each step. A batch that does not
 * fill its last tile of input rows ends in a 3x2 or 3x1 tile instead of
 * repeating a row, and in two 3x2 tiles rather than a 3x3 and a 3x1 (17
 * rows: 5 tiles of 3 and one of 2; 16: 4 of 3 and 2 of 2).
 *
 * A tile reads several weight rows in step, which the note above warns
 * against for the GEMV: there one row's FMAs wait on memory, while a tile
 * does TB times the arithmetic per byte and is bound by the FMAs (the loop in
 * kernels_isa.h prefetches the next weight rows). A batch of one keeps the
 * one-stream row kernel (kernels.c). */
#define TR 3 /* weight rows per tile */
#define TB 3 /* input rows per tile */

/* The input vectors of one step pinned in registers (an empty asm):
 * otherwise the compiler re-loads them for each weight row as FMA memory
 * operands, more loads than the core issues per FMA. */
#define PIN(v) __asm__("" : "+x"(v))

/* Columns per block of a tile's streams. A stream reads a quarter or an
 * eighth of each cache line of its rows, and the tile's other streams the
 * rest; the lines must stay in L1 in between (32 KB): 3 BF16 weight rows and
 * 3 F32 input rows of 1024 columns take 18 KB. Longer rows are done in
 * blocks, each stream picking up its sums where the last block left them
 * (the same additions in the same order). BF16 1024 x 3072, 17 input rows:
 * 22.7 GFLOP/s per thread unblocked, 26.7 in blocks of 1024. */
#define TILE_COLS 1024

/* The chains' sums in the row kernels' order, ((0 + 1) + (2 + 3)), into
 * out[j] for j < n: chain k's sums are ch[k * n + j]. */
INLINE void fold_chains(int n, const __m256 *ch, __m256 *out)
{
    for (int j = 0; j < n; j++)
        out[j] = _mm256_add_ps(_mm256_add_ps(ch[j], ch[n + j]),
                               _mm256_add_ps(ch[2 * n + j], ch[3 * n + j]));
}

/* The weight vector of row w at column c that a tile multiplies: BF16 rows
 * as dot_row_bf16 reads them (the even elements of the block of 16 at c,
 * or with odd = 1 the odd ones), F32 and F16 rows as dot_row_t (8 from c). */
INLINE __m256 tile_weights(kv_dtype dt, const void *w, size_t c, int odd)
{
    if (dt != KV_DTYPE_BF16)
        return load8(dt, w, c);
    __m256i v = _mm256_loadu_si256((const __m256i *)((const uint16_t *)w + c));
    return _mm256_castsi256_ps(odd ? _mm256_and_si256(v, _mm256_set1_epi32((int)0xFFFF0000u))
                                   : _mm256_slli_epi32(v, 16));
}

/* Goes on with one accumulator of the row kernel for every pair of a
 * tr x tb tile, acc[i * tb + b] for weight row w[i] and input row x[b],
 * over the steps at c = from, from + step, ... < to (first: from zero).
 * BF16: x permuted, and the accumulator is chain k's a[k] (odd = 0) or
 * b[k] (odd = 1); F32 and F16: chain k's a[k]. */
INLINE void stream(int tr, int tb, kv_dtype dt, const void *const *w, const float *const *x,
                   int odd, size_t from, size_t to, size_t step, bool first, __m256 *acc)
{
    __m256 a[TR * TB]; /* in registers for the loop */
    for (int j = 0; j < tr * tb; j++)
        a[j] = first ? _mm256_setzero_ps() : acc[j];
    for (size_t c = from; c < to; c += step) {
        __m256 xv[TB];
        for (int b = 0; b < tb; b++) {
            xv[b] = _mm256_loadu_ps(x[b] + c + 8 * odd);
            PIN(xv[b]);
        }
        for (int i = 0; i < tr; i++) {
            __m256 wv = tile_weights(dt, w[i], c, odd);
            for (int b = 0; b < tb; b++)
                a[i * tb + b] = _mm256_fmadd_ps(wv, xv[b], a[i * tb + b]);
        }
    }
    for (int j = 0; j < tr * tb; j++)
        acc[j] = a[j];
}

/* The row kernel of dtype dt on a tr x tb tile: out[b * tr + i] =
 * W[r[i]] . x[b] (kv_tile_fn's), xp[b] being x[b] prepared. dot_row_bf16
 * has two accumulators per chain (halves = 2: a[k], b[k]) over blocks of 64
 * columns, chain k at 16 k; dot_row_t one over blocks of 32, chain k at 8 k. */
INLINE void tile(int tr, int tb, kv_dtype dt, const kv_weight *wm, const int *r,
                 const float *const *x, const void *const *xp, kv_prefetch *pf, float *out)
{
    const int halves = dt == KV_DTYPE_BF16 ? 2 : 1;
    size_t cols = (size_t)wm->cols, vec = 8 * (size_t)halves, step = 4 * vec;
    size_t cmain = cols / step * step, cvec = cols / vec * vec;
    size_t row_bytes = cols * (dt == KV_DTYPE_F32 ? 4 : 2);
    const void *w[TR];
    const float *xs[TB];
    for (int i = 0; i < tr; i++)
        w[i] = (const char *)wm->data + (size_t)r[i] * row_bytes;
    for (int b = 0; b < tb; b++)
        xs[b] = halves == 2 ? xp[b] : x[b];
    enum { N = TR * TB };
    __m256 acc[8][N]; /* chain k's accumulators at k * halves + half */
    size_t c0 = 0;
    int nstreams = kv_tile_streams(cmain, TILE_COLS, 4 * halves);
    do { /* at least once: the accumulators start at zero there */
        size_t c1 = c0 + TILE_COLS < cmain ? c0 + TILE_COLS : cmain;
        for (int k = 0; k < 4; k++)
            for (int h = 0; h < halves; h++) {
                kv_prefetch_share(pf, nstreams--);
                stream(tr, tb, dt, w, xs, h, c0 + vec * (size_t)k, c1, step, c0 == 0,
                       acc[k * halves + h]);
            }
        c0 = c1;
    } while (c0 < cmain);
    /* Chain 0 goes on over the blocks of vec; only where there are some:
     * an empty stream's store and reload of the sums cost 7 % at 1024. */
    if (cvec > cmain)
        for (int h = 0; h < halves; h++)
            stream(tr, tb, dt, w, xs, h, cmain, cvec, vec, false, acc[h]);
    __m256 ch[4 * N], sum[N];
    for (int k = 0; k < 4; k++)
        for (int j = 0; j < tr * tb; j++)
            ch[k * tr * tb + j] = halves == 2 ? _mm256_add_ps(acc[2 * k][j], acc[2 * k + 1][j])
                                              : acc[k][j];
    fold_chains(tr * tb, ch, sum);
    for (int i = 0; i < tr; i++)
        for (int b = 0; b < tb; b++) {
            float s = hsum8(sum[i * tb + b]);
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
_Static_assert(TB == 3, "one KV_TILE_FNS above for each tb up to TB");

static void rows_batch(const kv_weight *w, int r0, int r1, const float *xs, const void *xps,
                       int batch, kv_compute mode, float *y, size_t ldy)
{
    (void)mode; /* in BF16 mode x holds BF16 values: the same kernels are exact */
    static kv_tile_fn *const bf16[TB] = {bf16_tile_1, bf16_tile_2, bf16_tile_3};
    static kv_tile_fn *const f16[TB] = {f16_tile_1, f16_tile_2, f16_tile_3};
    static kv_tile_fn *const f32[TB] = {f32_tile_1, f32_tile_2, f32_tile_3};
    kv_tile_fn *const *tiles = kv_tiles_of(w, bf16, f16, f32);
    kv_rows_batch_tiles(tiles[TB - 1], tiles, TR, TB, w, r0, r1, xs, xps, batch, y, ldy);
}

static void rows(const kv_weight *w, int r0, int r1, const float *x, const void *xp,
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
#else
static void prepare(const float *x, int n, kv_compute mode, void *xp)
{
    (void)x, (void)n, (void)mode, (void)xp;
}

static void rows(const kv_weight *w, int r0, int r1, const float *x, const void *xp,
                 kv_compute mode, float *y)
{
    (void)xp, (void)mode;
    for (int r = r0; r < r1; r++)
        y[r] = kv_dot_row_scalar(w, r, x);
}

static void rows_batch(const kv_weight *w, int r0, int r1, const float *xs, const void *xps,
                       int batch, kv_compute mode, float *y, size_t ldy)
{
    (void)xps, (void)mode;
    for (int r = r0; r < r1; r++)
        for (int b = 0; b < batch; b++)
            y[(size_t)b * ldy + (size_t)r] =
                kv_dot_row_scalar(w, r, xs + (size_t)b * (size_t)w->cols);
}
#endif

const kv_isa_kernels kv_kernels_avx2 = {
    .prepare = prepare, .rows = rows, .rows_batch = rows_batch, .gemm_bf16 = NULL};
