/* A scalar stand-in for <immintrin.h>: the AVX-512 intrinsics that
 * kvcore/model/kernels_avx512.c and kernels_avx512bf16.c use, written as plain C
 * loops over GCC vector types, with the semantics of Intel's intrinsics
 * guide (vdpbf16ps: each FP32 lane += the products of its two BF16 pairs;
 * the real instruction also flushes denormals, which the test's values never
 * are). tests/unit/model/test_kernels_emulated.c compiles those two kernel files
 * against this header, so their indexing, tails and tiling are checked on
 * any x86-64 CPU; only the real instructions need an AVX-512 machine.
 * Compiled with -Wno-psabi: 64-byte vectors without AVX-512 change the
 * calling convention, harmless inside one test program. */
#ifndef KB_TEST_EMU_IMMINTRIN_H
#define KB_TEST_EMU_IMMINTRIN_H
#include <stdint.h>
#include <string.h>

#include "model/kernels.h" /* the BF16 and F16 conversions */
typedef float __m512 __attribute__((vector_size(64)));
typedef long long __m512i __attribute__((vector_size(64)));
typedef short __m512bh __attribute__((vector_size(64)));
typedef long long __m256i __attribute__((vector_size(32)));
typedef uint32_t __mmask32;
typedef uint16_t __mmask16;
typedef int32_t v16si __attribute__((vector_size(64)));
typedef uint16_t v32hu __attribute__((vector_size(64)));
typedef uint16_t v16hu __attribute__((vector_size(32)));
static inline __m512 _mm512_setzero_ps(void)
{
    __m512 r = {0};
    return r;
}
static inline __m512 _mm512_add_ps(__m512 a, __m512 b)
{
    return a + b;
}
static inline __m512 _mm512_fmadd_ps(__m512 a, __m512 b, __m512 c)
{
    __m512 r;
    for (int i = 0; i < 16; i++)
        r[i] = __builtin_fmaf(a[i], b[i], c[i]);
    return r;
}
static inline __m512 _mm512_loadu_ps(const void *p)
{
    __m512 r;
    memcpy(&r, p, 64);
    return r;
}
static inline __m512i _mm512_loadu_si512(const void *p)
{
    __m512i r;
    memcpy(&r, p, 64);
    return r;
}
static inline __m256i _mm256_loadu_si256(const void *p)
{
    __m256i r;
    memcpy(&r, p, 32);
    return r;
}
static inline __m512i _mm512_maskz_loadu_epi16(__mmask32 k, const void *p)
{
    v32hu r = {0};
    const uint16_t *q = p;
    for (int i = 0; i < 32; i++)
        if (k >> i & 1)
            r[i] = q[i];
    return (__m512i)r;
}
static inline __m512 _mm512_castsi512_ps(__m512i a)
{
    return (__m512)a;
}
static inline __m512i _mm512_set1_epi32(int v)
{
    v16si r;
    for (int i = 0; i < 16; i++)
        r[i] = v;
    return (__m512i)r;
}
static inline __m512i _mm512_slli_epi32(__m512i a, int n)
{
    v16si x = (v16si)a;
    for (int i = 0; i < 16; i++)
        x[i] = (int32_t)((uint32_t)x[i] << n);
    return (__m512i)x;
}
static inline __m512i _mm512_and_si512(__m512i a, __m512i b)
{
    return a & b;
}
static inline __m512 _mm512_cvtph_ps(__m256i a)
{
    v16hu h = (v16hu)a;
    __m512 r;
    for (int i = 0; i < 16; i++)
        r[i] = kv_f16_to_f32(h[i]);
    return r;
}
static inline float _mm512_reduce_add_ps(__m512 a)
{
    float s = 0;
    for (int i = 0; i < 16; i++)
        s += a[i];
    return s;
}
static inline __m512 _mm512_mul_ps(__m512 a, __m512 b)
{
    return a * b;
}
static inline __m512 _mm512_set1_ps(float v)
{
    __m512 r;
    for (int i = 0; i < 16; i++)
        r[i] = v;
    return r;
}
static inline void _mm512_storeu_ps(void *p, __m512 a)
{
    memcpy(p, &a, 64);
}
static inline void _mm512_mask_storeu_ps(void *p, __mmask16 k, __m512 a)
{
    float *q = p;
    for (int i = 0; i < 16; i++)
        if (k >> i & 1)
            q[i] = a[i];
}
#define _MM_SHUFFLE(z, y, x, w) (((z) << 6) | ((y) << 4) | ((x) << 2) | (w))
/* 128-bit lanes: two of a (imm bits 1:0, 3:2), then two of b (5:4, 7:6). */
static inline __m512 _mm512_shuffle_f32x4(__m512 a, __m512 b, int imm)
{
    __m512 r;
    for (int l = 0; l < 4; l++)
        for (int e = 0; e < 4; e++)
            r[4 * l + e] = (l < 2 ? a : b)[4 * (imm >> (2 * l) & 3) + e];
    return r;
}
/* Within each 128-bit lane: two elements of a (imm bits 1:0, 3:2), then
 * two of b (5:4, 7:6). */
static inline __m512 _mm512_shuffle_ps(__m512 a, __m512 b, int imm)
{
    __m512 r;
    for (int l = 0; l < 4; l++)
        for (int e = 0; e < 4; e++)
            r[4 * l + e] = (e < 2 ? a : b)[4 * l + (imm >> (2 * e) & 3)];
    return r;
}
static inline __m512 _mm512_dpbf16_ps(__m512 acc, __m512bh a, __m512bh b)
{
    v32hu x = (v32hu)a, y = (v32hu)b;
    for (int i = 0; i < 16; i++)
        acc[i] += kv_bf16_to_f32(x[2 * i + 1]) * kv_bf16_to_f32(y[2 * i + 1]) +
                  kv_bf16_to_f32(x[2 * i]) * kv_bf16_to_f32(y[2 * i]);
    return acc;
}

#endif
