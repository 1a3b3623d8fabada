/* kernels_stored: the two halves of decode attention (kernels.h,
 * kv_dot_stored and kv_axpy_stored, and their _groups forms that apply u8/u4
 * groups' parameters too) over keys and values in a KV cache's stored form:
 * 8 values at a time are widened to F32 in registers (u8 and u4 codes
 * zero-extended, bf16 shifted, f16 converted by F16C) and used at once for
 * every query head that shares them, so a u8 cache is read as
 * a quarter of the bytes of an F32 one. Compiled at the build's baseline
 * (AVX2 + FMA + F16C), which every kernel level has; a portable loop
 * otherwise. At the AVX-512 levels (cpu.h) kernels_stored_avx512.c runs
 * instead: 16 values a vector. */
#include "model/cpu.h"
#include "model/kernels.h"
#include "model/kernels_stored_isa.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define KV_STORED_AVX2 1
#endif

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

/* A tile of kv_dot_stored: NQ query vectors against NX rows (NQ NX <= 8
 * accumulators: independent chains of FMAs), each row widened once for
 * all NQ and each query vector loaded once for all NX; at the start of
 * each cache line of the rows, that line of the rows `ahead` bytes on is
 * asked for (kv_stored_ask). */
static inline __attribute__((always_inline)) void
dot_tile(const kv_precision p, const float *q, size_t qs, const int NQ, const uint8_t *x, size_t xs,
         const int NX, size_t ahead, int n, float *out, size_t os, const kv_stored_groups *e)
{
    __m256 acc[8];
    for (int k = 0; k < NQ * NX; k++)
        acc[k] = _mm256_setzero_ps();
    int j = 0;
    for (; j + 8 <= n; j += 8) {
        size_t off = kv_stored_offset(p, j);
        if (off % 64 == 0)
            for (int t = 0; t < NX; t++)
                kv_stored_ask(x + (size_t)t * xs, ahead, off, off + 1);
        __m256 xv[8];
        for (int t = 0; t < NX; t++)
            xv[t] = widen8(x + (size_t)t * xs, p, j);
        for (int i = 0; i < NQ; i++) {
            __m256 qv = _mm256_loadu_ps(q + (size_t)i * qs + j);
            for (int t = 0; t < NX; t++)
                acc[i * NX + t] = _mm256_fmadd_ps(qv, xv[t], acc[i * NX + t]);
        }
    }
    float s[8];
    _mm256_storeu_ps(s, kv_stored_sums8(acc, NQ * NX));
    for (int i = 0; i < NQ; i++)
        for (int t = 0; t < NX; t++) {
            float v = s[i * NX + t];
            for (int r = j; r < n; r++)
                v += q[(size_t)i * qs + (size_t)r] * kv_stored_value_at(x + (size_t)t * xs, p, r);
            kv_stored_put(out, os, i, t, v, e);
        }
}

/* Tiles of four query vectors against two rows, of two and one against
 * four (at most 8 accumulators of the 16 registers). */
#define DOT_ROWS_4 2
#define DOT_ROWS_2 4
#define DOT_ROWS_1 4
#include "model/kernels_stored_rows.h"

/* A tile of kv_axpy_stored: NY outputs of W x 8 channels held in registers
 * (NY W <= 8) while the nx rows pass, each row widened once for all NY. */
static inline __attribute__((always_inline)) void
axpy_tile(float *y, size_t ys, const int NY, const float *a, size_t as, const uint8_t *x, size_t xs,
          int nx, const kv_precision p, int j, const int W)
{
    __m256 acc[8];
    for (int i = 0; i < NY; i++)
        for (int w = 0; w < W; w++)
            acc[i * W + w] = _mm256_loadu_ps(y + (size_t)i * ys + (size_t)(j + 8 * w));
    size_t ahead = (size_t)nx * xs; /* the next call's rows: kv_stored_ask */
    for (int t = 0; t < nx; t++) {
        kv_stored_ask(x + (size_t)t * xs, ahead, kv_stored_offset(p, j),
                      kv_stored_offset(p, j + 8 * W));
        __m256 xv[8];
        for (int w = 0; w < W; w++)
            xv[w] = widen8(x + (size_t)t * xs, p, j + 8 * w);
        for (int i = 0; i < NY; i++) {
            __m256 av = _mm256_broadcast_ss(a + (size_t)i * as + t);
            for (int w = 0; w < W; w++)
                acc[i * W + w] = _mm256_fmadd_ps(av, xv[w], acc[i * W + w]);
        }
    }
    for (int i = 0; i < NY; i++)
        for (int w = 0; w < W; w++)
            _mm256_storeu_ps(y + (size_t)i * ys + (size_t)(j + 8 * w), acc[i * W + w]);
}

/* kv_axpy_stored at a constant p: outputs two, or one, at a time over 32
 * channels, then 8, then one by one. */
static inline __attribute__((always_inline)) void axpy_p(const kv_precision p, float *y, size_t ys,
                                                         int ny, const float *a, size_t as,
                                                         const uint8_t *x, size_t xs, int nx, int n)
{
    for (int i = 0; i < ny;) {
        int c = ny - i >= 2 ? 2 : 1, j = 0;
        float *yi = y + (size_t)i * ys;
        const float *ai = a + (size_t)i * as;
        for (; j + 32 <= n; j += 32)
            c == 2 ? axpy_tile(yi, ys, 2, ai, as, x, xs, nx, p, j, 4)
                   : axpy_tile(yi, ys, 1, ai, as, x, xs, nx, p, j, 4);
        for (; j + 8 <= n; j += 8)
            c == 2 ? axpy_tile(yi, ys, 2, ai, as, x, xs, nx, p, j, 1)
                   : axpy_tile(yi, ys, 1, ai, as, x, xs, nx, p, j, 1);
        for (; j < n; j++)
            for (int t = 0; t < nx; t++) {
                float v = kv_stored_value_at(x + (size_t)t * xs, p, j);
                for (int k = 0; k < c; k++)
                    yi[(size_t)k * ys + (size_t)j] += ai[(size_t)k * as + (size_t)t] * v;
            }
        i += c;
    }
}
#endif

/* kv_dot_stored (e NULL) or kv_dot_stored_groups at the active level. */
static void dot_stored(const float *q, size_t q_stride, int nq, const uint8_t *x, size_t x_stride,
                       int nx, kv_precision p, int n, const kv_stored_groups *e, float *out,
                       size_t out_stride)
{
    if (kv_isa_active() >= KV_ISA_AVX512) {
        kv_dot_stored_avx512(q, q_stride, nq, x, x_stride, nx, p, n, e, out, out_stride);
        return;
    }
#ifdef KV_STORED_AVX2
    KV_STORED_AT_PRECISION(p, dot_p, q, q_stride, nq, x, x_stride, nx, n, e, out, out_stride);
#else
    for (int i = 0; i < nq; i++)
        for (int t = 0; t < nx; t++) {
            float s = 0;
            for (int j = 0; j < n; j++)
                s += q[(size_t)i * q_stride + (size_t)j] *
                     kv_stored_value_at(x + (size_t)t * x_stride, p, j);
            kv_stored_put(out, out_stride, i, t, s, e);
        }
#endif
}

void kv_dot_stored(const float *q, size_t q_stride, int nq, const uint8_t *x, size_t x_stride,
                   int nx, kv_precision p, int n, float *out, size_t out_stride)
{
    dot_stored(q, q_stride, nq, x, x_stride, nx, p, n, NULL, out, out_stride);
}

void kv_dot_stored_groups(const float *q, size_t q_stride, int nq, const uint8_t *x,
                          size_t x_stride, int nx, kv_precision p, int n,
                          const kv_stored_groups *e, float *out, size_t out_stride)
{
    dot_stored(q, q_stride, nq, x, x_stride, nx, p, n, e, out, out_stride);
}

void kv_axpy_stored(float *y, size_t y_stride, int ny, const float *a, size_t a_stride,
                    const uint8_t *x, size_t x_stride, int nx, kv_precision p, int n)
{
    if (kv_isa_active() >= KV_ISA_AVX512) {
        kv_axpy_stored_avx512(y, y_stride, ny, a, a_stride, x, x_stride, nx, p, n, NULL);
        return;
    }
#ifdef KV_STORED_AVX2
    KV_STORED_AT_PRECISION(p, axpy_p, y, y_stride, ny, a, a_stride, x, x_stride, nx, n);
#else
    for (int t = 0; t < nx; t++)
        for (int j = 0; j < n; j++) {
            float v = kv_stored_value_at(x + (size_t)t * x_stride, p, j);
            for (int i = 0; i < ny; i++)
                y[(size_t)i * y_stride + (size_t)j] += a[(size_t)i * a_stride + (size_t)t] * v;
        }
#endif
}

/* Below the AVX-512 levels: the rows' a_it scale_t RUN rows at a time for
 * kv_axpy_stored, then sum_t a_it min_t added to every channel. */
void kv_axpy_stored_groups(float *y, size_t y_stride, int ny, const float *a, size_t a_stride,
                           const uint8_t *x, size_t x_stride, int nx, kv_precision p, int n,
                           const kv_stored_groups *e)
{
    if (kv_isa_active() >= KV_ISA_AVX512) {
        kv_axpy_stored_avx512(y, y_stride, ny, a, a_stride, x, x_stride, nx, p, n, e);
        return;
    }
    enum { RUN = 32, NY = 8 };
    float coef[NY * RUN], bias[NY] = {0};
    for (int t0 = 0; t0 < nx; t0 += RUN) {
        int m = nx - t0 < RUN ? nx - t0 : RUN;
        for (int i = 0; i < ny; i++)
            for (int t = 0; t < m; t++) {
                const kv_qgroup *g = e->g + (size_t)(t0 + t) * e->stride;
                float ai = a[(size_t)i * a_stride + (size_t)(t0 + t)];
                coef[i * RUN + t] = ai * g->scale;
                bias[i] += ai * g->min;
            }
        kv_axpy_stored(y, y_stride, ny, coef, RUN, x + (size_t)t0 * x_stride, x_stride, m, p, n);
    }
    for (int i = 0; i < ny; i++)
        for (int j = 0; j < n; j++)
            y[(size_t)i * y_stride + (size_t)j] += bias[i];
}
