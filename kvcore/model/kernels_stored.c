/* kernels_stored: the two halves of decode attention (kernels.h,
 * kv_dot_stored and kv_axpy_stored) over keys and values in a KV cache's
 * stored form: 8 values at a time are widened to F32 in registers (u8 and
 * u4 codes zero-extended, bf16 shifted, f16 converted by F16C) and used at
 * once for every query head that shares them, so a u8 cache is read as
 * a quarter of the bytes of an F32 one. Compiled at the build's baseline
 * (AVX2 + FMA + F16C), which every kernel level has; a portable loop
 * otherwise. */
#include <string.h>

#include "model/kernels.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define KV_STORED_AVX2 1
#endif

/* x_j as a float (the portable path and the tails). */
static inline float value_at(const uint8_t *x, kv_precision p, int j)
{
    uint16_t h;
    switch (p) {
    case KV_PREC_U8:
        return (float)x[j];
    case KV_PREC_U4:
        return (float)kv_u4_get(x, (size_t)j);
    case KV_PREC_BF16:
        memcpy(&h, x + 2 * (size_t)j, sizeof h);
        return kv_bf16_to_f32(h);
    default:
        memcpy(&h, x + 2 * (size_t)j, sizeof h);
        return kv_f16_to_f32(h);
    }
}

#ifdef KV_STORED_AVX2
/* x_j .. x_{j+7} as floats; j a multiple of 8 for u4. */
static inline __attribute__((always_inline)) __m256 widen8(const uint8_t *x, kv_precision p, int j)
{
    switch (p) {
    case KV_PREC_U8:
        return _mm256_cvtepi32_ps(
            _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(x + j))));
    case KV_PREC_U4: {
        uint32_t w;
        memcpy(&w, x + j / 2, sizeof w);
        __m128i b = _mm_cvtsi32_si128((int)w), m = _mm_set1_epi8(0x0f);
        __m128i lo = _mm_and_si128(b, m), hi = _mm_and_si128(_mm_srli_epi16(b, 4), m);
        return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi)));
    }
    case KV_PREC_BF16:
        return _mm256_castsi256_ps(_mm256_slli_epi32(
            _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)(x + 2 * j))),
            16));
    default:
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(x + 2 * j)));
    }
}

/* The sum of v's eight lanes. */
static inline float lanes_sum(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_hadd_ps(s, s);
    return _mm_cvtss_f32(_mm_hadd_ps(s, s));
}

/* kv_dot_stored for a constant nq and p (each pair its own loop, the
 * accumulators in registers). */
static inline __attribute__((always_inline)) void dot_n(const float *q, size_t qs, const int nq,
                                                        const uint8_t *x, const kv_precision p,
                                                        int n, float *out)
{
    __m256 acc[8];
    for (int i = 0; i < nq; i++)
        acc[i] = _mm256_setzero_ps();
    int j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 xv = widen8(x, p, j);
        for (int i = 0; i < nq; i++)
            acc[i] = _mm256_fmadd_ps(_mm256_loadu_ps(q + (size_t)i * qs + j), xv, acc[i]);
    }
    for (int i = 0; i < nq; i++) {
        float s = lanes_sum(acc[i]);
        for (int t = j; t < n; t++)
            s += q[(size_t)i * qs + (size_t)t] * value_at(x, p, t);
        out[i] = s;
    }
}

static inline __attribute__((always_inline)) void
dot_p(const float *q, size_t qs, int nq, const uint8_t *x, const kv_precision p, int n, float *out)
{
    switch (nq) {
    case 1:
        dot_n(q, qs, 1, x, p, n, out);
        return;
    case 2:
        dot_n(q, qs, 2, x, p, n, out);
        return;
    case 3:
        dot_n(q, qs, 3, x, p, n, out);
        return;
    case 4:
        dot_n(q, qs, 4, x, p, n, out);
        return;
    case 5:
        dot_n(q, qs, 5, x, p, n, out);
        return;
    case 6:
        dot_n(q, qs, 6, x, p, n, out);
        return;
    case 7:
        dot_n(q, qs, 7, x, p, n, out);
        return;
    default:
        dot_n(q, qs, 8, x, p, n, out);
        return;
    }
}

/* kv_axpy_stored for a constant ny and p: eight channels of every output
 * stay in registers while the nx rows pass. */
static inline __attribute__((always_inline)) void axpy_n(float *y, size_t ys, const int ny,
                                                         const float *a, size_t as,
                                                         const uint8_t *x, size_t xs, int nx,
                                                         const kv_precision p, int n)
{
    int j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 acc[8];
        for (int i = 0; i < ny; i++)
            acc[i] = _mm256_loadu_ps(y + (size_t)i * ys + j);
        for (int t = 0; t < nx; t++) {
            __m256 xv = widen8(x + (size_t)t * xs, p, j);
            for (int i = 0; i < ny; i++)
                acc[i] = _mm256_fmadd_ps(_mm256_broadcast_ss(a + (size_t)i * as + t), xv, acc[i]);
        }
        for (int i = 0; i < ny; i++)
            _mm256_storeu_ps(y + (size_t)i * ys + j, acc[i]);
    }
    for (; j < n; j++)
        for (int t = 0; t < nx; t++) {
            float v = value_at(x + (size_t)t * xs, p, j);
            for (int i = 0; i < ny; i++)
                y[(size_t)i * ys + (size_t)j] += a[(size_t)i * as + (size_t)t] * v;
        }
}

static inline __attribute__((always_inline)) void axpy_p(float *y, size_t ys, int ny,
                                                         const float *a, size_t as,
                                                         const uint8_t *x, size_t xs, int nx,
                                                         const kv_precision p, int n)
{
    switch (ny) {
    case 1:
        axpy_n(y, ys, 1, a, as, x, xs, nx, p, n);
        return;
    case 2:
        axpy_n(y, ys, 2, a, as, x, xs, nx, p, n);
        return;
    case 3:
        axpy_n(y, ys, 3, a, as, x, xs, nx, p, n);
        return;
    case 4:
        axpy_n(y, ys, 4, a, as, x, xs, nx, p, n);
        return;
    default: /* up to 8: four, then one at a time */
        axpy_n(y, ys, 4, a, as, x, xs, nx, p, n);
        for (int i = 4; i < ny; i++)
            axpy_n(y + (size_t)i * ys, ys, 1, a + (size_t)i * as, as, x, xs, nx, p, n);
    }
}
#endif

void kv_dot_stored(const float *q, size_t q_stride, int nq, const uint8_t *x, kv_precision p, int n,
                   float *out)
{
#ifdef KV_STORED_AVX2
    switch (p) {
    case KV_PREC_U8:
        dot_p(q, q_stride, nq, x, KV_PREC_U8, n, out);
        return;
    case KV_PREC_U4:
        dot_p(q, q_stride, nq, x, KV_PREC_U4, n, out);
        return;
    case KV_PREC_BF16:
        dot_p(q, q_stride, nq, x, KV_PREC_BF16, n, out);
        return;
    default:
        dot_p(q, q_stride, nq, x, KV_PREC_F16, n, out);
        return;
    }
#else
    for (int i = 0; i < nq; i++) {
        float s = 0;
        for (int j = 0; j < n; j++)
            s += q[(size_t)i * q_stride + (size_t)j] * value_at(x, p, j);
        out[i] = s;
    }
#endif
}

void kv_axpy_stored(float *y, size_t y_stride, int ny, const float *a, size_t a_stride,
                    const uint8_t *x, size_t x_stride, int nx, kv_precision p, int n)
{
#ifdef KV_STORED_AVX2
    switch (p) {
    case KV_PREC_U8:
        axpy_p(y, y_stride, ny, a, a_stride, x, x_stride, nx, KV_PREC_U8, n);
        return;
    case KV_PREC_U4:
        axpy_p(y, y_stride, ny, a, a_stride, x, x_stride, nx, KV_PREC_U4, n);
        return;
    case KV_PREC_BF16:
        axpy_p(y, y_stride, ny, a, a_stride, x, x_stride, nx, KV_PREC_BF16, n);
        return;
    default:
        axpy_p(y, y_stride, ny, a, a_stride, x, x_stride, nx, KV_PREC_F16, n);
        return;
    }
#else
    for (int t = 0; t < nx; t++)
        for (int j = 0; j < n; j++) {
            float v = value_at(x + (size_t)t * x_stride, p, j);
            for (int i = 0; i < ny; i++)
                y[(size_t)i * y_stride + (size_t)j] += a[(size_t)i * a_stride + (size_t)t] * v;
        }
#endif
}
