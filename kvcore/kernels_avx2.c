/* The AVX2 + FMA + F16C level: GEMV rows that widen 16-bit weights in
 * registers. The baseline every build carries; compiled with the project's
 * -march (without AVX2 there, the portable kernel). */
#include "kernels_isa.h"

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
#endif

const kv_isa_kernels kv_kernels_avx2 = {.prepare = prepare, .rows = rows, .gemm_bf16 = NULL};
