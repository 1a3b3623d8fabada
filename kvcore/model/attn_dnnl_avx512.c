#include "model/attn_dnnl_avx512.h"

#include <immintrin.h>

#include "model/exp_poly.h"

/* The first n (< 16) lanes. */
static inline __mmask16 first(int n)
{
    return (__mmask16)((1u << n) - 1u);
}

/* e^x for 16 floats: kernels.c's exp8 (Cody-Waite reduction by ln 2,
 * Cephes' polynomial, about 1 ulp) in 16 lanes, 2^n applied by scalef. */
static inline __m512 exp16(__m512 x)
{
    x = _mm512_max_ps(x, _mm512_set1_ps(KV_EXP_LO));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(KV_EXP_LOG2E)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    x = _mm512_fnmadd_ps(n, _mm512_set1_ps(KV_EXP_LN2_HI), x);
    x = _mm512_fnmadd_ps(n, _mm512_set1_ps(KV_EXP_LN2_LO), x);
    __m512 y = _mm512_set1_ps(KV_EXP_P0);
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(KV_EXP_P1));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(KV_EXP_P2));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(KV_EXP_P3));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(KV_EXP_P4));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(KV_EXP_P5));
    y = _mm512_fmadd_ps(y, _mm512_mul_ps(x, x), _mm512_add_ps(x, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(y, n);
}

float kv_attn_row_max_avx512bf16(const float *s, int vis, float prev)
{
    __m512 m = _mm512_set1_ps(prev);
    int j = 0;
    for (; j + 16 <= vis; j += 16)
        m = _mm512_max_ps(m, _mm512_loadu_ps(s + j));
    if (j < vis)
        m = _mm512_mask_max_ps(m, first(vis - j), m, _mm512_maskz_loadu_ps(first(vis - j), s + j));
    return _mm512_reduce_max_ps(m);
}

float kv_attn_softmax_row_avx512bf16(const float *s, int vis, int twp, float prev, float *max,
                                     uint16_t *p)
{
    float m = kv_attn_row_max_avx512bf16(s, vis, prev);
    __m512 mv = _mm512_set1_ps(m), acc = _mm512_setzero_ps();
    int j = 0;
    /* 32 at a time: vcvtne2ps2bf16 rounds two vectors to nearest even */
    for (; j + 32 <= vis; j += 32) {
        __m512 e0 = exp16(_mm512_sub_ps(_mm512_loadu_ps(s + j), mv));
        __m512 e1 = exp16(_mm512_sub_ps(_mm512_loadu_ps(s + j + 16), mv));
        _mm512_storeu_si512(p + j, (__m512i)_mm512_cvtne2ps_pbh(e1, e0));
        acc = _mm512_add_ps(acc, _mm512_add_ps(e0, e1));
    }
    for (; j < vis; j += 16) { /* the rest, masked: lanes past vis are 0 */
        __mmask16 k = vis - j >= 16 ? (__mmask16)0xffff : first(vis - j);
        __m512 e =
            _mm512_maskz_mov_ps(k, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + j), mv)));
        acc = _mm512_add_ps(acc, e);
        _mm256_storeu_si256((__m256i *)(p + j), (__m256i)_mm512_cvtneps_pbh(e));
    }
    for (; j < twp; j += 16) /* keys the row cannot see, to the tile's padded width */
        _mm256_storeu_si256((__m256i *)(p + j), _mm256_setzero_si256());
    *max = m;
    return _mm512_reduce_add_ps(acc);
}

float kv_attn_exp_row_avx512bf16(float *s, int vis, float m)
{
    __m512 mv = _mm512_set1_ps(m), acc = _mm512_setzero_ps();
    for (int j = 0; j < vis; j += 16) {
        __mmask16 k = vis - j >= 16 ? (__mmask16)0xffff : first(vis - j);
        __m512 e =
            _mm512_maskz_mov_ps(k, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + j), mv)));
        _mm512_mask_storeu_ps(s + j, k, e);
        acc = _mm512_add_ps(acc, e);
    }
    return _mm512_reduce_add_ps(acc);
}

void kv_attn_scale_row_avx512bf16(float *s, int vis, int twp, float inv, uint16_t *p)
{
    __m512 iv = _mm512_set1_ps(inv);
    for (int j = 0; j < twp; j += 16) { /* lanes at or past vis: 0 */
        __mmask16 k = vis - j >= 16 ? (__mmask16)0xffff : vis > j ? first(vis - j) : 0;
        __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, s + j), iv);
        _mm512_storeu_ps(s + j, x);
        _mm256_storeu_si256((__m256i *)(p + j), (__m256i)_mm512_cvtneps_pbh(x));
    }
}
