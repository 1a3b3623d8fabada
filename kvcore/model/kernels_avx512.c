/* The AVX-512F level: the AVX2 level's GEMV rows at twice the width. This
 * file is compiled with -mavx512f -mavx512bw -mavx512vl (kvcore/meson.build)
 * and only called on a CPU that has them (cpu.c). */
#include "model/kernels_avx512.h"

#include <immintrin.h>

#include "model/kernels_isa.h"

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

/* ---- the batched GEMV's tiles ----
 *
 * As in kernels_avx2.c: a tile of TR weight rows x TB activation rows runs
 * the row kernel's accumulator chains one after another (the same FMAs in
 * the same order per chain) and adds the chains' sums in the row kernel's
 * order, so each pair gets the bits of dot_row_bf16 / dot_row_t. The 32
 * registers hold a chain of 2 x 4 pairs with their activation vectors. A
 * partial tile repeats its last row (computed, not stored). */
#define TR 2
#define TB 4

/* dot_row_bf16 on a tile (kv_tile_fn): xp[b] is x[b] permuted. */
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
    const __m512i hi = _mm512_set1_epi32((int)0xFFFF0000u);
    __m512 ch[2][TR][TB]; /* chain k's a[k] + b[k] of each pair */
    size_t c64 = cols / 64 * 64, c32 = cols / 32 * 32;
#define BF16_TILE_STEP(at)                                                                         \
    do {                                                                                           \
        __m512 xe[TB], xo[TB];                                                                     \
        for (int b = 0; b < TB; b++) {                                                             \
            xe[b] = _mm512_loadu_ps(xp[b] + (at));                                                 \
            xo[b] = _mm512_loadu_ps(xp[b] + (at) + 16);                                            \
        }                                                                                          \
        for (int i = 0; i < TR; i++) {                                                             \
            __m512i v = _mm512_loadu_si512((const void *)(w[i] + (at)));                           \
            __m512 we = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));                             \
            __m512 wo = _mm512_castsi512_ps(_mm512_and_si512(v, hi));                              \
            for (int b = 0; b < TB; b++) {                                                         \
                ae[i][b] = _mm512_fmadd_ps(we, xe[b], ae[i][b]);                                   \
                ao[i][b] = _mm512_fmadd_ps(wo, xo[b], ao[i][b]);                                   \
            }                                                                                      \
        }                                                                                          \
    } while (0)
    for (int k = 0; k < 2; k++) {
        __m512 ae[TR][TB], ao[TR][TB];
        for (int i = 0; i < TR; i++)
            for (int b = 0; b < TB; b++)
                ae[i][b] = ao[i][b] = _mm512_setzero_ps();
        for (size_t c = 32 * (size_t)k; c < c64; c += 64)
            BF16_TILE_STEP(c);
        if (k == 0) /* chain 0 goes on over the blocks of 32 */
            for (size_t c = c64; c < c32; c += 32)
                BF16_TILE_STEP(c);
        for (int i = 0; i < TR; i++)
            for (int b = 0; b < TB; b++)
                ch[k][i][b] = _mm512_add_ps(ae[i][b], ao[i][b]);
    }
#undef BF16_TILE_STEP
    for (int i = 0; i < TR; i++)
        for (int b = 0; b < TB; b++) {
            float s = _mm512_reduce_add_ps(_mm512_add_ps(ch[0][i][b], ch[1][i][b]));
            for (size_t c = c32; c < cols; c++)
                s += kv_bf16_to_f32(w[i][c]) * x[b][c];
            y[b * TR + i] = s;
        }
}

/* dot_row_t on a tile of F32 or F16 rows (kv_tile_fn's). */
INLINE void tile_t(kv_dtype dt, const kv_weight *wm, const int *r, const float *const *x, float *y)
{
    size_t cols = (size_t)wm->cols, c64 = cols / 64 * 64, c16 = cols / 16 * 16;
    __m512 ch[4][TR][TB];
#define TILE_T_STEP(at)                                                                            \
    do {                                                                                           \
        __m512 xv[TB];                                                                             \
        for (int b = 0; b < TB; b++)                                                               \
            xv[b] = _mm512_loadu_ps(x[b] + (at));                                                  \
        for (int i = 0; i < TR; i++) {                                                             \
            __m512 wv = load16(dt, wm->data, (size_t)r[i] * cols + (at));                          \
            for (int b = 0; b < TB; b++)                                                           \
                a[i][b] = _mm512_fmadd_ps(wv, xv[b], a[i][b]);                                     \
        }                                                                                          \
    } while (0)
    for (int k = 0; k < 4; k++) {
        __m512 a[TR][TB];
        for (int i = 0; i < TR; i++)
            for (int b = 0; b < TB; b++)
                a[i][b] = _mm512_setzero_ps();
        for (size_t c = 16 * (size_t)k; c < c64; c += 64)
            TILE_T_STEP(c);
        if (k == 0)
            for (size_t c = c64; c < c16; c += 16)
                TILE_T_STEP(c);
        for (int i = 0; i < TR; i++)
            for (int b = 0; b < TB; b++)
                ch[k][i][b] = a[i][b];
    }
#undef TILE_T_STEP
    for (int i = 0; i < TR; i++)
        for (int b = 0; b < TB; b++) {
            float s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(ch[0][i][b], ch[1][i][b]),
                                                         _mm512_add_ps(ch[2][i][b], ch[3][i][b])));
            size_t base = (size_t)r[i] * cols;
            for (size_t c = c16; c < cols; c++)
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

void kv_avx512_rows_batch(const kv_weight *w, int r0, int r1, const float *xs, const void *xps,
                          int batch, kv_compute mode, float *y, size_t ldy)
{
    (void)mode;
    kv_tile_fn *tile = w->dtype == KV_DTYPE_BF16  ? bf16_tile
                       : w->dtype == KV_DTYPE_F16 ? f16_tile
                                                  : f32_tile;
    kv_rows_batch_tiles(tile, NULL, TR, TB, w, r0, r1, xs, xps, batch, y, ldy);
}

const kv_isa_kernels kv_kernels_avx512 = {.prepare = kv_avx512_prepare,
                                          .rows = kv_avx512_rows,
                                          .rows_batch = kv_avx512_rows_batch,
                                          .gemm_bf16 = NULL};
