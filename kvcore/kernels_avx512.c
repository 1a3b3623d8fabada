/* The AVX-512F level: the AVX2 level's GEMV rows at twice the width. This
 * file is compiled with -mavx512f -mavx512bw -mavx512vl (kvcore/meson.build)
 * and only called on a CPU that has them (cpu.c). */
#include "kernels_avx512.h"

#include <immintrin.h>

#include "kernels_isa.h"

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

const kv_isa_kernels kv_kernels_avx512 = {
    .prepare = kv_avx512_prepare, .rows = kv_avx512_rows, .gemm_bf16 = NULL};
