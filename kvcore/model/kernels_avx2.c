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
 * A tile dots TR weight rows with TB activation rows, so each weight vector
 * is loaded and widened once for TB rows and each activation vector loaded
 * once for TR rows. Every (weight row, activation row) pair must get the
 * bits of the row kernels above, whose four accumulator chains (k = 0..3:
 * the vectors at c + k * step of each block of 4 * step columns, the
 * shorter tail folded into chain 0) are too many to keep for several pairs
 * in 16 registers. The chains are independent, though, so a tile runs them
 * one after another -- the same FMAs in the same order per chain -- and
 * adds the chains' sums in the row kernel's order ((0 + 1) + (2 + 3)) at
 * the end. A partial tile repeats its last row (computed, not stored).
 * A tile reads two weight rows in step, which the note above warns against
 * for the GEMV: there one row's FMAs wait on memory, while a tile does TB
 * times the arithmetic per byte and is bound by the FMAs. A batch of one
 * keeps the one-stream row kernel (kernels.c). */
#define TR 2 /* weight rows per tile */
#define TB 2 /* activation rows per tile */

/* The activation vectors of one step pinned in registers (an empty asm):
 * otherwise the compiler re-loads them for each weight row as FMA memory
 * operands, more loads than the core issues per FMA. */
#define PIN(v) __asm__("" : "+x"(v))

/* out[i][b] = the chain sums (0 + 1) + (2 + 3) of a pair, from the tile's
 * per-chain results. */
INLINE void fold_chains(__m256 ch[4][TR][TB], __m256 out[TR][TB])
{
    for (int i = 0; i < TR; i++)
        for (int b = 0; b < TB; b++)
            out[i][b] = _mm256_add_ps(_mm256_add_ps(ch[0][i][b], ch[1][i][b]),
                                      _mm256_add_ps(ch[2][i][b], ch[3][i][b]));
}

/* dot_row_bf16 on a TR x TB tile (kv_tile_fn): xp[b] is x[b] permuted. */
static void bf16_tile(const kv_weight *wm, const int *r, const float *const *x,
                      const void *const *xpv, float *y)
{
    size_t cols = (size_t)wm->cols;
    const uint16_t *w[TR];
    const float *xp[TB];
    for (int i = 0; i < TR; i++)
        w[i] = (const uint16_t *)wm->data + (size_t)r[i] * cols;
    for (int b = 0; b < TB; b++)
        xp[b] = xpv[b];
    /* The odd elements by blending in zeros, not dot_row_bf16's mask: the
     * same values, and a zero register the compiler keeps where it would
     * reload the mask from the stack every step (all 16 registers are busy). */
    const __m256i zero = _mm256_setzero_si256();
    __m256 ch[4][TR][TB]; /* chain k's a[k] + b[k] of each pair */
    size_t c64 = cols / 64 * 64, c16 = cols / 16 * 16;
#define BF16_TILE_STEP(at)                                                                         \
    do {                                                                                           \
        __m256 xe[TB], xo[TB];                                                                     \
        for (int b = 0; b < TB; b++) {                                                             \
            xe[b] = _mm256_loadu_ps(xp[b] + (at));                                                 \
            xo[b] = _mm256_loadu_ps(xp[b] + (at) + 8);                                             \
            PIN(xe[b]);                                                                            \
            PIN(xo[b]);                                                                            \
        }                                                                                          \
        for (int i = 0; i < TR; i++) {                                                             \
            __m256i v = _mm256_loadu_si256((const __m256i *)(w[i] + (at)));                        \
            __m256 we = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));                             \
            __m256 wo = _mm256_castsi256_ps(_mm256_blend_epi16(v, zero, 0x55));                    \
            for (int b = 0; b < TB; b++) {                                                         \
                ae[i][b] = _mm256_fmadd_ps(we, xe[b], ae[i][b]);                                   \
                ao[i][b] = _mm256_fmadd_ps(wo, xo[b], ao[i][b]);                                   \
            }                                                                                      \
        }                                                                                          \
    } while (0)
    for (int k = 0; k < 4; k++) {
        __m256 ae[TR][TB], ao[TR][TB];
        for (int i = 0; i < TR; i++)
            for (int b = 0; b < TB; b++)
                ae[i][b] = ao[i][b] = _mm256_setzero_ps();
        for (size_t c = 16 * (size_t)k; c < c64; c += 64)
            BF16_TILE_STEP(c);
        if (k == 0) /* chain 0 goes on over the blocks of 16 */
            for (size_t c = c64; c < c16; c += 16)
                BF16_TILE_STEP(c);
        for (int i = 0; i < TR; i++)
            for (int b = 0; b < TB; b++)
                ch[k][i][b] = _mm256_add_ps(ae[i][b], ao[i][b]);
    }
#undef BF16_TILE_STEP
    __m256 s8[TR][TB];
    fold_chains(ch, s8);
    for (int i = 0; i < TR; i++)
        for (int b = 0; b < TB; b++) {
            float s = hsum8(s8[i][b]);
            for (size_t c = c16; c < cols; c++)
                s += kv_bf16_to_f32(w[i][c]) * x[b][c];
            y[b * TR + i] = s;
        }
}

/* dot_row_t on a TR x TB tile of F32 or F16 rows (kv_tile_fn's). */
INLINE void tile_t(kv_dtype dt, const kv_weight *wm, const int *r, const float *const *x, float *y)
{
    size_t cols = (size_t)wm->cols, c32 = cols / 32 * 32, c8 = cols / 8 * 8;
    __m256 ch[4][TR][TB];
#define TILE_T_STEP(at)                                                                            \
    do {                                                                                           \
        __m256 xv[TB];                                                                             \
        for (int b = 0; b < TB; b++) {                                                             \
            xv[b] = _mm256_loadu_ps(x[b] + (at));                                                  \
            PIN(xv[b]);                                                                            \
        }                                                                                          \
        for (int i = 0; i < TR; i++) {                                                             \
            __m256 wv = load8(dt, wm->data, (size_t)r[i] * cols + (at));                           \
            for (int b = 0; b < TB; b++)                                                           \
                a[i][b] = _mm256_fmadd_ps(wv, xv[b], a[i][b]);                                     \
        }                                                                                          \
    } while (0)
    for (int k = 0; k < 4; k++) {
        __m256 a[TR][TB];
        for (int i = 0; i < TR; i++)
            for (int b = 0; b < TB; b++)
                a[i][b] = _mm256_setzero_ps();
        for (size_t c = 8 * (size_t)k; c < c32; c += 32)
            TILE_T_STEP(c);
        if (k == 0)
            for (size_t c = c32; c < c8; c += 8)
                TILE_T_STEP(c);
        for (int i = 0; i < TR; i++)
            for (int b = 0; b < TB; b++)
                ch[k][i][b] = a[i][b];
    }
#undef TILE_T_STEP
    __m256 s8[TR][TB];
    fold_chains(ch, s8);
    for (int i = 0; i < TR; i++)
        for (int b = 0; b < TB; b++) {
            float s = hsum8(s8[i][b]);
            size_t base = (size_t)r[i] * cols;
            for (size_t c = c8; c < cols; c++)
                s += kv_weight_at(wm, base + c) * x[b][c];
            y[b * TR + i] = s;
        }
}

static void f32_tile(const kv_weight *w, const int *r, const float *const *x, const void *const *xp,
                     float *y)
{
    (void)xp;
    tile_t(KV_DTYPE_F32, w, r, x, y);
}

static void f16_tile(const kv_weight *w, const int *r, const float *const *x, const void *const *xp,
                     float *y)
{
    (void)xp;
    tile_t(KV_DTYPE_F16, w, r, x, y);
}

static void rows_batch(const kv_weight *w, int r0, int r1, const float *xs, const void *xps,
                       int batch, kv_compute mode, float *y, size_t ldy)
{
    (void)mode; /* in BF16 mode x holds BF16 values: the same kernels are exact */
    kv_tile_fn *tile = w->dtype == KV_DTYPE_BF16  ? bf16_tile
                       : w->dtype == KV_DTYPE_F16 ? f16_tile
                                                  : f32_tile;
    kv_rows_batch_tiles(tile, TR, TB, w, r0, r1, xs, xps, batch, y, ldy);
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
