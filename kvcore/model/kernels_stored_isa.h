/* kernels_stored_isa: what the two builds of the stored-form attention
 * kernels (kernels.h: kv_dot_stored, kv_axpy_stored) share. kernels_stored.c
 * is compiled at the build's baseline (AVX2, 8 values a vector) and calls
 * kernels_stored_avx512.c (16 a vector, compiled for AVX-512 alone) when
 * the active level (cpu.h) has it. Inline: each file compiles these under
 * its own target flags. */
#ifndef KV_KERNELS_STORED_ISA_H
#define KV_KERNELS_STORED_ISA_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "model/kernels.h"

/* x_j as a float (the portable path and the AVX2 tails). */
static inline float kv_stored_value_at(const uint8_t *x, kv_precision p, int j)
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

/* Where value j of a row starts in its bytes (j even for u4). */
static inline size_t kv_stored_offset(kv_precision p, int j)
{
    return p == KV_PREC_U8 ? (size_t)j : p == KV_PREC_U4 ? (size_t)j / 2 : 2 * (size_t)j;
}

/* Asks for bytes [from, to) of the row `ahead` bytes past row x, a cache
 * line at a time. The kernels ask, as they read each row, for the row of
 * the next call's (the rows after their nx: attn_stored.c's next run of
 * slots), so the misses of the next run overlap this run's work, a few
 * lines per row rather than a burst that fills the miss buffers. A
 * prefetch never faults: the address may lie past the cache's rows, so it
 * is formed as an integer, not as a pointer beyond them. */
static inline void kv_stored_ask(const uint8_t *x, size_t ahead, size_t from, size_t to)
{
    uintptr_t at = (uintptr_t)x + ahead;
    for (size_t b = from; b < to; b += 64)
        __builtin_prefetch((const void *)(at + b));
}

/* Row t's dot product with query vector i into out (kv_dot_stored), or,
 * with e, its score (kv_dot_stored_groups). */
static inline void kv_stored_put(float *out, size_t os, int i, int t, float dot,
                                 const kv_stored_groups *e)
{
    float *o = out + (size_t)i * os + (size_t)t;
    if (!e) {
        *o = dot;
        return;
    }
    const kv_qgroup *g = e->g + (size_t)t * e->stride;
    float r = g->scale * dot + g->min * e->qsum[i];
    float v = e->add ? *o + r : r;
    *o = e->scaled ? v * e->out_scale : v;
}

/* Runs f(P, ...) with P the precision p as a constant: the kernels are
 * always-inline, so each precision gets its own copy with the widening of
 * its values chosen at compile time rather than once per vector. */
#define KV_STORED_AT_PRECISION(p, f, ...)                                                          \
    do {                                                                                           \
        switch (p) {                                                                               \
        case KV_PREC_U8:                                                                           \
            f(KV_PREC_U8, __VA_ARGS__);                                                            \
            break;                                                                                 \
        case KV_PREC_U4:                                                                           \
            f(KV_PREC_U4, __VA_ARGS__);                                                            \
            break;                                                                                 \
        case KV_PREC_BF16:                                                                         \
            f(KV_PREC_BF16, __VA_ARGS__);                                                          \
            break;                                                                                 \
        default:                                                                                   \
            f(KV_PREC_F16, __VA_ARGS__);                                                           \
        }                                                                                          \
    } while (0)

#if defined(__AVX2__)
#include <immintrin.h>

/* Lane k of the result: the sum of the eight lanes of v[k] (v[k] beyond
 * n: zeros), by pairwise adds. */
static inline __m256 kv_stored_sums8(const __m256 *v, int n)
{
    __m256 z = _mm256_setzero_ps(), w[8];
    for (int k = 0; k < 8; k++)
        w[k] = k < n ? v[k] : z;
    __m256 a = _mm256_hadd_ps(_mm256_hadd_ps(w[0], w[1]), _mm256_hadd_ps(w[2], w[3]));
    __m256 b = _mm256_hadd_ps(_mm256_hadd_ps(w[4], w[5]), _mm256_hadd_ps(w[6], w[7]));
    return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
}
#endif

/* kernels.h's kv_dot_stored and kv_axpy_stored at the AVX-512 levels;
 * only to be called on a CPU that has AVX-512F, BW and VL. */
void kv_dot_stored_avx512(const float *q, size_t q_stride, int nq, const uint8_t *x,
                          size_t x_stride, int nx, kv_precision p, int n,
                          const kv_stored_groups *e, float *out, size_t out_stride);
void kv_axpy_stored_avx512(float *y, size_t y_stride, int ny, const float *a, size_t a_stride,
                           const uint8_t *x, size_t x_stride, int nx, kv_precision p, int n,
                           const kv_stored_groups *e);

#endif
