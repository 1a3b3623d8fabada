/* A scalar stand-in for <immintrin.h>: the AVX-512 intrinsics that
 * kvcore/model/kernels_avx512.c, kernels_avx512bf16.c and
 * kernels_stored_avx512.c use (with the AVX2 ones of kernels_stored_isa.h
 * that the last shares), written as plain C
 * loops over GCC vector types, with the semantics of Intel's intrinsics
 * guide (vdpbf16ps: each FP32 lane += the products of its two BF16 pairs;
 * the real instruction also flushes denormals, which the test's values never
 * are). tests/unit/model/test_kernels_emulated.c compiles those kernel files
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
typedef float __m256 __attribute__((vector_size(32)));
typedef double __m256d __attribute__((vector_size(32)));
typedef double __m512d __attribute__((vector_size(64)));
typedef long long __m128i __attribute__((vector_size(16)));
typedef uint8_t v16qu __attribute__((vector_size(16)));
typedef uint16_t v8hu __attribute__((vector_size(16)));
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

/* ---- kernels_stored_avx512.c and kernels_stored_isa.h ---- */
static inline __m512 _mm512_maskz_loadu_ps(__mmask16 k, const void *p)
{
    __m512 r = {0};
    const float *q = p;
    for (int i = 0; i < 16; i++)
        if (k >> i & 1)
            r[i] = q[i];
    return r;
}
static inline __m512 _mm512_cvtepi32_ps(__m512i a)
{
    v16si x = (v16si)a;
    __m512 r;
    for (int i = 0; i < 16; i++)
        r[i] = (float)x[i];
    return r;
}
static inline __m512i _mm512_cvtepu8_epi32(__m128i a)
{
    v16qu b = (v16qu)a;
    v16si r;
    for (int i = 0; i < 16; i++)
        r[i] = b[i];
    return (__m512i)r;
}
static inline __m512i _mm512_maskz_cvtepu8_epi32(__mmask16 k, __m128i a)
{
    v16si r = (v16si)_mm512_cvtepu8_epi32(a);
    for (int i = 0; i < 16; i++)
        if (!(k >> i & 1))
            r[i] = 0;
    return (__m512i)r;
}
static inline __m512i _mm512_cvtepu16_epi32(__m256i a)
{
    v16hu h = (v16hu)a;
    v16si r;
    for (int i = 0; i < 16; i++)
        r[i] = h[i];
    return (__m512i)r;
}
static inline __m512d _mm512_castps_pd(__m512 a)
{
    return (__m512d)a;
}
static inline __m256 _mm512_castps512_ps256(__m512 a)
{
    __m256 r;
    memcpy(&r, &a, 32);
    return r;
}
static inline __m256d _mm512_extractf64x4_pd(__m512d a, int imm)
{
    __m256d r;
    memcpy(&r, (const char *)&a + 32 * (imm & 1), 32);
    return r;
}
static inline __m256i _mm256_maskz_loadu_epi16(__mmask16 k, const void *p)
{
    v16hu r = {0};
    const uint16_t *q = p;
    for (int i = 0; i < 16; i++)
        if (k >> i & 1)
            r[i] = q[i];
    return (__m256i)r;
}
static inline __m256 _mm256_setzero_ps(void)
{
    __m256 r = {0};
    return r;
}
static inline __m256 _mm256_add_ps(__m256 a, __m256 b)
{
    return a + b;
}
static inline __m256 _mm256_mul_ps(__m256 a, __m256 b)
{
    return a * b;
}
static inline __m256 _mm256_fmadd_ps(__m256 a, __m256 b, __m256 c)
{
    __m256 r;
    for (int i = 0; i < 8; i++)
        r[i] = __builtin_fmaf(a[i], b[i], c[i]);
    return r;
}
static inline __m256 _mm256_set1_ps(float v)
{
    return (__m256){v, v, v, v, v, v, v, v};
}
static inline __m256 _mm256_setr_ps(float a, float b, float c, float d, float e, float f, float g,
                                    float h)
{
    return (__m256){a, b, c, d, e, f, g, h};
}
static inline __m256 _mm256_loadu_ps(const void *p)
{
    __m256 r;
    memcpy(&r, p, 32);
    return r;
}
static inline __m256 _mm256_castpd_ps(__m256d a)
{
    return (__m256)a;
}
static inline void _mm256_storeu_ps(void *p, __m256 a)
{
    memcpy(p, &a, 32);
}
/* Within each 128-bit half: a's two pair sums, then b's. */
static inline __m256 _mm256_hadd_ps(__m256 a, __m256 b)
{
    __m256 r;
    for (int h = 0; h < 8; h += 4) {
        r[h] = a[h] + a[h + 1];
        r[h + 1] = a[h + 2] + a[h + 3];
        r[h + 2] = b[h] + b[h + 1];
        r[h + 3] = b[h + 2] + b[h + 3];
    }
    return r;
}
/* Each half of the result: the half of a or b that imm's 2-bit field for
 * it names (0, 1: a's low, high; 2, 3: b's), zero where its bit 3 is set. */
static inline __m256 _mm256_permute2f128_ps(__m256 a, __m256 b, int imm)
{
    __m256 r;
    for (int h = 0; h < 2; h++) {
        int sel = imm >> (4 * h);
        const __m256 *src = sel & 2 ? &b : &a;
        for (int i = 0; i < 4; i++)
            r[4 * h + i] = sel & 8 ? 0.0f : (*src)[4 * (sel & 1) + i];
    }
    return r;
}
static inline __m128i _mm_loadu_si128(const void *p)
{
    __m128i r;
    memcpy(&r, p, 16);
    return r;
}
static inline __m128i _mm_loadl_epi64(const void *p)
{
    __m128i r = {0};
    memcpy(&r, p, 8);
    return r;
}
static inline __m128i _mm_maskz_loadu_epi8(__mmask16 k, const void *p)
{
    v16qu r = {0};
    const uint8_t *q = p;
    for (int i = 0; i < 16; i++)
        if (k >> i & 1)
            r[i] = q[i];
    return (__m128i)r;
}
static inline __m128i _mm_set1_epi8(char v)
{
    v16qu r;
    for (int i = 0; i < 16; i++)
        r[i] = (uint8_t)v;
    return (__m128i)r;
}
static inline __m128i _mm_and_si128(__m128i a, __m128i b)
{
    return a & b;
}
static inline __m128i _mm_srli_epi16(__m128i a, int n)
{
    v8hu x = (v8hu)a;
    for (int i = 0; i < 8; i++)
        x[i] = (uint16_t)(x[i] >> n);
    return (__m128i)x;
}
/* The low 8 bytes of a and b interleaved: a0 b0 a1 b1 ... */
static inline __m128i _mm_unpacklo_epi8(__m128i a, __m128i b)
{
    v16qu x = (v16qu)a, y = (v16qu)b, r;
    for (int i = 0; i < 8; i++) {
        r[2 * i] = x[i];
        r[2 * i + 1] = y[i];
    }
    return (__m128i)r;
}

#endif
