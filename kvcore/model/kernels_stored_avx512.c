/* kernels_stored_avx512: kv_dot_stored and kv_axpy_stored (kernels.h), and
 * their _groups forms, at the AVX-512 levels. As kernels_stored.c's AVX2 kernels, but 16 values are
 * widened to F32 a vector, so a row takes half the widening and FMA
 * instructions, and a tail of fewer than 16 values is read by masked loads
 * (its lanes beyond the row zero) rather than one value at a time.
 * Compiled for AVX-512F/BW/VL alone (meson.build); kernels_stored.c calls
 * it only when the active level (cpu.h) has them. */
#include "model/kernels_stored_isa.h"

#include <immintrin.h>
#include <stdbool.h>

/* The first r lanes of 16 (r >= 16: all). */
static inline __mmask16 lanes(int r)
{
    return r >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << r) - 1);
}

/* x_j .. x_{j+15} as floats, j a multiple of 16; r < 16: only the first r
 * are read, the other lanes are zero. */
static inline __attribute__((always_inline)) __m512 widen16(const uint8_t *x, const kv_precision p,
                                                            int j, int r)
{
    bool full = r >= 16;
    switch (p) {
    case KV_PREC_U8: {
        __m128i b = full ? _mm_loadu_si128((const __m128i *)(const void *)(x + j))
                         : _mm_maskz_loadu_epi8(lanes(r), x + j);
        return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b));
    }
    case KV_PREC_U4: { /* two codes a byte, the even one in the low nibble */
        const uint8_t *at = x + j / 2;
        __m128i b = full ? _mm_loadl_epi64((const __m128i *)(const void *)at)
                         : _mm_maskz_loadu_epi8(lanes((r + 1) / 2), at);
        __m128i m = _mm_set1_epi8(0x0f);
        __m128i codes =
            _mm_unpacklo_epi8(_mm_and_si128(b, m), _mm_and_si128(_mm_srli_epi16(b, 4), m));
        return _mm512_cvtepi32_ps(full ? _mm512_cvtepu8_epi32(codes)
                                       : _mm512_maskz_cvtepu8_epi32(lanes(r), codes));
    }
    case KV_PREC_BF16: {
        __m256i h = full ? _mm256_loadu_si256((const __m256i *)(const void *)(x + 2 * j))
                         : _mm256_maskz_loadu_epi16(lanes(r), x + 2 * j);
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    default: {
        __m256i h = full ? _mm256_loadu_si256((const __m256i *)(const void *)(x + 2 * j))
                         : _mm256_maskz_loadu_epi16(lanes(r), x + 2 * j);
        return _mm512_cvtph_ps(h);
    }
    }
}

/* q[j .. j+15], lanes from r on zero. */
static inline __m512 load16(const float *q, int j, int r)
{
    return r >= 16 ? _mm512_loadu_ps(q + j) : _mm512_maskz_loadu_ps(lanes(r), q + j);
}

/* One step of a dot_tile: 16 channels from j (r of them in a tail); at
 * the start of each cache line of the rows, that line of the rows `ahead`
 * bytes on is asked for (kv_stored_ask). */
static inline __attribute__((always_inline)) void
dot_step(__m512 *acc, const kv_precision p, const float *q, size_t qs, const int NQ,
         const uint8_t *x, size_t xs, const int NX, size_t ahead, int j, int r)
{
    size_t off = kv_stored_offset(p, j);
    if (off % 64 == 0)
        for (int t = 0; t < NX; t++)
            kv_stored_ask(x + (size_t)t * xs, ahead, off, off + 1);
    __m512 xv[8];
    for (int t = 0; t < NX; t++)
        xv[t] = widen16(x + (size_t)t * xs, p, j, r);
    for (int i = 0; i < NQ; i++) {
        __m512 qv = load16(q + (size_t)i * qs, j, r);
        for (int t = 0; t < NX; t++)
            acc[i * NX + t] = _mm512_fmadd_ps(qv, xv[t], acc[i * NX + t]);
    }
}

/* Lane k: the sum of the 16 lanes of v[k] (v[k] from n on: zeros). A tree
 * of shuffles: 128-bit quarters of two vectors, then their halves, then
 * pairs and single lanes within quarters, each level one add per pair of
 * shuffles (45 instructions for 16 vectors, where halving each to 8 lanes
 * and kv_stored_sums8's vhaddps took 74 micro-ops); the inputs go in in
 * the order the tree puts its sums out in (an involution, so its own
 * inverse). */
static inline __m512 sums16(const __m512 *v, int n)
{
    static const int order[16] = {0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15};
    __m512 a[16], b[8], c[4], d[2];
    for (int k = 0; k < 16; k++)
        a[k] = order[k] < n ? v[order[k]] : _mm512_setzero_ps();
    for (int k = 0; k < 8; k++) /* quarters: a[k]'s, a[k]'s, a[k+8]'s, a[k+8]'s */
        b[k] = _mm512_add_ps(_mm512_shuffle_f32x4(a[k], a[k + 8], 0x44),
                             _mm512_shuffle_f32x4(a[k], a[k + 8], 0xee));
    for (int k = 0; k < 4; k++) /* quarters: a[k], a[k+8], a[k+4], a[k+12] */
        c[k] = _mm512_add_ps(_mm512_shuffle_f32x4(b[k], b[k + 4], 0x88),
                             _mm512_shuffle_f32x4(b[k], b[k + 4], 0xdd));
    for (int k = 0; k < 2; k++) /* each quarter: two lanes of c[k]'s, two of c[k+2]'s */
        d[k] = _mm512_add_ps(_mm512_shuffle_ps(c[k], c[k + 2], 0x44),
                             _mm512_shuffle_ps(c[k], c[k + 2], 0xee));
    return _mm512_add_ps(_mm512_shuffle_ps(d[0], d[1], 0x88), _mm512_shuffle_ps(d[0], d[1], 0xdd));
}

/* Eight rows' scores for query vector i (kv_dot_stored_groups), their dot
 * products in dot and their groups' scales and mins in sc and mn. */
static inline void put8(float *out, const kv_stored_groups *e, int i, __m256 dot, __m256 sc,
                        __m256 mn)
{
    __m256 r = _mm256_fmadd_ps(sc, dot, _mm256_mul_ps(mn, _mm256_set1_ps(e->qsum[i])));
    __m256 v = e->add ? _mm256_add_ps(_mm256_loadu_ps(out), r) : r;
    _mm256_storeu_ps(out, e->scaled ? _mm256_mul_ps(v, _mm256_set1_ps(e->out_scale)) : v);
}

/* A tile of kv_dot_stored: NQ query vectors against NX rows (NQ NX <= 16
 * accumulators), each row widened once for all NQ and each query vector
 * loaded once for all NX; the accumulators summed into one vector
 * (sums16). With e (kv_dot_stored_groups) and eight rows, each half of it
 * is one query vector's, and the rows' scales and mins are applied to all
 * eight at once. */
static inline __attribute__((always_inline)) void
dot_tile(const kv_precision p, const float *q, size_t qs, const int NQ, const uint8_t *x, size_t xs,
         const int NX, size_t ahead, int n, float *out, size_t os, const kv_stored_groups *e)
{
    __m512 acc[16];
    for (int k = 0; k < NQ * NX; k++)
        acc[k] = _mm512_setzero_ps();
    int j = 0;
    for (; j + 16 <= n; j += 16)
        dot_step(acc, p, q, qs, NQ, x, xs, NX, ahead, j, 16);
    if (j < n)
        dot_step(acc, p, q, qs, NQ, x, xs, NX, ahead, j, n - j);
    __m512 sums = sums16(acc, NQ * NX);
    if (e && NX == 8) {
        const kv_qgroup *g = e->g;
        size_t gs = e->stride;
        __m256 sc = _mm256_setr_ps(g[0].scale, g[gs].scale, g[2 * gs].scale, g[3 * gs].scale,
                                   g[4 * gs].scale, g[5 * gs].scale, g[6 * gs].scale,
                                   g[7 * gs].scale),
               mn = _mm256_setr_ps(g[0].min, g[gs].min, g[2 * gs].min, g[3 * gs].min,
                                   g[4 * gs].min, g[5 * gs].min, g[6 * gs].min, g[7 * gs].min);
        put8(out, e, 0, _mm512_castps512_ps256(sums), sc, mn);
        if (NQ == 2)
            put8(out + os, e, 1,
                 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(sums), 1)), sc, mn);
        return;
    }
    float s[16];
    _mm512_storeu_ps(s, sums);
    for (int k = 0; k < NQ * NX; k++)
        kv_stored_put(out, os, k / NX, k % NX, s[k], e);
}

/* Tiles of four query vectors against four rows, of two and one against
 * eight (at most 16 accumulators of the 32 registers). */
#define DOT_ROWS_4 4
#define DOT_ROWS_2 8
#define DOT_ROWS_1 8
#include "model/kernels_stored_rows.h"

/* A tile of kv_axpy_stored: NY outputs of W x 16 channels from j (r of
 * them in the last vector) held in registers while the nx rows pass, each
 * row widened once for all NY. With e (kv_axpy_stored_groups) each row's
 * a_it scale_t is formed as the row passes and sum_t a_it min_t summed
 * beside, added at the end. */
static inline __attribute__((always_inline)) void
axpy_tile(const kv_precision p, float *y, size_t ys, const int NY, const float *a, size_t as,
          const uint8_t *x, size_t xs, int nx, int j, const int W, int r, const kv_stored_groups *e)
{
    __m512 acc[16], bias[2];
    for (int i = 0; i < NY; i++) {
        bias[i] = _mm512_setzero_ps();
        for (int w = 0; w < W; w++)
            acc[i * W + w] = load16(y + (size_t)i * ys, j + 16 * w, w == W - 1 ? r : 16);
    }
    size_t ahead = (size_t)nx * xs; /* the next call's rows: kv_stored_ask */
    /* in locals: read through e, the row's group was reloaded and tested
     * for NULL every row */
    const kv_qgroup *g = e ? e->g : NULL;
    size_t gs = e ? e->stride : 0;
    for (int t = 0; t < nx; t++) {
        kv_stored_ask(x + (size_t)t * xs, ahead, kv_stored_offset(p, j),
                      kv_stored_offset(p, j + 16 * (W - 1) + r));
        __m512 xv[8];
        for (int w = 0; w < W; w++)
            xv[w] = widen16(x + (size_t)t * xs, p, j + 16 * w, w == W - 1 ? r : 16);
        for (int i = 0; i < NY; i++) {
            __m512 av = _mm512_set1_ps(a[(size_t)i * as + (size_t)t]);
            if (e) {
                const kv_qgroup *gt = g + (size_t)t * gs;
                bias[i] = _mm512_fmadd_ps(av, _mm512_set1_ps(gt->min), bias[i]);
                av = _mm512_mul_ps(av, _mm512_set1_ps(gt->scale));
            }
            for (int w = 0; w < W; w++)
                acc[i * W + w] = _mm512_fmadd_ps(av, xv[w], acc[i * W + w]);
        }
    }
    for (int i = 0; i < NY; i++)
        for (int w = 0; w < W; w++)
            _mm512_mask_storeu_ps(y + (size_t)i * ys + (size_t)(j + 16 * w),
                                  lanes(w == W - 1 ? r : 16),
                                  e ? _mm512_add_ps(acc[i * W + w], bias[i]) : acc[i * W + w]);
}

/* kv_axpy_stored (e NULL) or kv_axpy_stored_groups at a constant p:
 * outputs two, or one, at a time over 128 channels (a u8 head in one pass
 * over its rows: each row's group applied once), then 64, then 16, then the
 * tail's. */
static inline __attribute__((always_inline)) void axpy_p(const kv_precision p, float *y, size_t ys,
                                                         int ny, const float *a, size_t as,
                                                         const uint8_t *x, size_t xs, int nx, int n,
                                                         const kv_stored_groups *e)
{
    for (int i = 0; i < ny;) {
        int c = ny - i >= 2 ? 2 : 1, j = 0;
        float *yi = y + (size_t)i * ys;
        const float *ai = a + (size_t)i * as;
        for (; j + 128 <= n; j += 128)
            c == 2 ? axpy_tile(p, yi, ys, 2, ai, as, x, xs, nx, j, 8, 16, e)
                   : axpy_tile(p, yi, ys, 1, ai, as, x, xs, nx, j, 8, 16, e);
        for (; j + 64 <= n; j += 64)
            c == 2 ? axpy_tile(p, yi, ys, 2, ai, as, x, xs, nx, j, 4, 16, e)
                   : axpy_tile(p, yi, ys, 1, ai, as, x, xs, nx, j, 4, 16, e);
        for (; j < n; j += 16)
            c == 2 ? axpy_tile(p, yi, ys, 2, ai, as, x, xs, nx, j, 1, n - j, e)
                   : axpy_tile(p, yi, ys, 1, ai, as, x, xs, nx, j, 1, n - j, e);
        i += c;
    }
}

void kv_dot_stored_avx512(const float *q, size_t q_stride, int nq, const uint8_t *x,
                          size_t x_stride, int nx, kv_precision p, int n,
                          const kv_stored_groups *e, float *out, size_t out_stride)
{
    if (e) /* each its own copy: the plain one has no epilogue */
        KV_STORED_AT_PRECISION(p, dot_p, q, q_stride, nq, x, x_stride, nx, n, e, out, out_stride);
    else
        KV_STORED_AT_PRECISION(p, dot_p, q, q_stride, nq, x, x_stride, nx, n, NULL, out,
                               out_stride);
}

void kv_axpy_stored_avx512(float *y, size_t y_stride, int ny, const float *a, size_t a_stride,
                           const uint8_t *x, size_t x_stride, int nx, kv_precision p, int n,
                           const kv_stored_groups *e)
{
    if (e)
        KV_STORED_AT_PRECISION(p, axpy_p, y, y_stride, ny, a, a_stride, x, x_stride, nx, n, e);
    else
        KV_STORED_AT_PRECISION(p, axpy_p, y, y_stride, ny, a, a_stride, x, x_stride, nx, n, NULL);
}
