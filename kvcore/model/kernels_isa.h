/* kernels_isa: the kernels that exist once per instruction-set level
 * (cpu.h), gathered in one table per level. kernels.c picks the table of
 * the active level and does the threading; each kernels_<level>.c is
 * compiled for its level alone and is only called on a CPU that has it.
 *
 * A GEMV goes in two steps: prepare turns the input vector x into the
 * layout the level's row kernel reads (its permutation of x, or x packed
 * to BF16), once per call; rows then computes y[r] = W[r] . x for a range
 * of rows, on any thread.
 */
#ifndef KV_KERNELS_ISA_H
#define KV_KERNELS_ISA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/kernels.h"

/* Bytes of prepared input a level may need per element of x. */
#define KV_PREPARED_BYTES_PER_ELEMENT 4

typedef struct kv_isa_kernels {
    /* Writes the prepared form of x[0..cols) to xp (cols * 4 bytes).
     * mode KV_COMPUTE_BF16: x holds BF16 values (kv_round_bf16). */
    void (*prepare)(const float *x, int cols, kv_compute mode, void *xp);
    /* y[r] = W[r] . x for r in [r0, r1); x and its prepared form xp.
     * mode KV_COMPUTE_BF16: W is BF16 and x holds BF16 values. */
    void (*rows)(const kv_weight *w, int r0, int r1, const float *x, const void *xp,
                 kv_compute mode, float *y);
    /* The batched GEMV of decode: y[b * ldy + r] = W[r] . x_b for r in
     * [r0, r1) and `batch` input rows x_b = xs + b * cols, prepared at
     * xps + b * cols * KV_PREPARED_BYTES_PER_ELEMENT. Tiles of weight rows
     * x input rows read each weight vector once for several x_b, and every
     * result has the bits rows() gives for x_b alone (same accumulators,
     * same order of sums), so batching never changes a token. */
    void (*rows_batch)(const kv_weight *w, int r0, int r1, const float *xs, const void *xps,
                       int batch, kv_compute mode, float *y, size_t ldy);
    /* Prefill in BF16 mode, or NULL (widen to F32 + sgemm, exact for BF16
     * inputs): y[i * ldy + r] = W[r] . x[i] for i < n, r in [r0, r1); x rows
     * are BF16 packed with kv_pack_bf16, ldx elements apart. W is BF16. */
    void (*gemm_bf16)(const kv_weight *w, int r0, int r1, const uint16_t *x, int n, size_t ldx,
                      float *y, size_t ldy);
    /* Decode attention's slot-run kernels (kernels.h) at this level, or
     * NULL: kernels.c's AVX2 ones. Each result has the bits of those (the
     * same FMAs per lane, the same order of sums). dot8 does kv_dot8 when n
     * is a multiple of its width and returns whether it did; axpy_rows does
     * kv_axpy_rows over the first lanes, a multiple of 32, and returns how
     * many: kernels.c does the rest. */
    bool (*dot8)(const float *a, const float *b, size_t stride, int n, float scale, float *out);
    int (*axpy_rows)(float *y, size_t y_stride, int ny, const float *a, size_t a_stride,
                     const float *x, size_t x_stride, int nx, int n);
} kv_isa_kernels;

extern const kv_isa_kernels kv_kernels_avx2, kv_kernels_avx512, kv_kernels_avx512bf16;

/* The cache lines [at, end) that a tile prefetches, one at a time spread
 * over its work; it leaves `at` past the ones it did. */
typedef struct kv_prefetch {
    const char *at, *end;
} kv_prefetch;

/* The streams of a tile whose columns go in blocks of `block` up to cmain
 * (at least one block: a tile with no whole step has its streams run once). */
static inline int kv_tile_streams(size_t cmain, size_t block, int per_block)
{
    size_t blocks = (cmain + block - 1) / block;
    return (blocks > 0 ? (int)blocks : 1) * per_block;
}

/* Before the n-th last stream of a tile (a pass over its columns):
 * prefetches that stream's share, 1 / n of the lines left in pf. Issued in
 * one bunch before the tile, the prefetches stalled it (perf, bench_gemv BF16
 * 3072 x 1024, batch 17: 60 % of kv_rows_batch_tiles' 9 % of the samples on
 * the instruction after the prefetch); spread over the streams, batch 16 ran
 * 5 % faster and batch 4 15 % (1 thread, 2 Dec 2026, AVX512_BF16 machine),
 * and the LM head's 151936 x 1024 at batch 17 5-23 % (DRAM-bound: noisy). */
static inline void kv_prefetch_share(kv_prefetch *pf, int n)
{
    size_t lines = (size_t)(pf->end - pf->at) / 64;
    size_t share = n > 1 ? (lines + (size_t)n - 1) / (size_t)n : lines;
    for (; share > 0; share--, pf->at += 64)
        __builtin_prefetch(pf->at);
}

/* One tile of a level's rows_batch: out[b * tr + i] = W[r[i]] . x[b] for
 * its tr weight rows and tb input rows (xp[b]: x[b] prepared); r, x and xp
 * have an entry for each. It prefetches the lines of pf (the weight rows of
 * the next tile) while it computes. */
typedef void kv_tile_fn(const kv_weight *w, const int *r, const float *const *x,
                        const void *const *xp, kv_prefetch *pf, float *out);

#define KV_TILE_MAX 8

/* The input rows of the next tile when `left` remain, tiles of tb at most:
 * with narrow tiles, the rows spread evenly over the fewest tiles, since a
 * narrow tile runs slower per pair the narrower it is (a 3x1 AVX2 tile 20.7
 * GFLOP/s, 3x2 29.8). At tb = 4, 17 rows run as 4 + 4 + 3 + 3 + 3, which
 * bench_gemv (BF16 3072 x 1024, 1 thread, AVX512_BF16 machine, 2 Dec 2026)
 * measured 1 % faster than 4 + 4 + 4 + 3 + 2, and 9 as 3 + 3 + 3 1 % faster
 * than 4 + 3 + 2; at tb = 3 the split is the same as full tiles then two of
 * 2 for 4 left. Without narrow tiles, full tiles. */
static inline int kv_tile_rows(int left, int tb, bool narrow)
{
    if (!narrow || left <= tb)
        return left < tb ? left : tb;
    int tiles = (left + tb - 1) / tb;
    return (left + tiles - 1) / tiles;
}

/* rows_batch (above) in tiles of tr weight rows x tb input rows (each at
 * most KV_TILE_MAX), in the order that keeps a tile's weight rows in L1
 * while every input row passes (the other order, a tile's input rows in L1
 * while the weight rows pass, measured 10-17 % slower with AVX2 3x3 tiles).
 * A partial tile of weight rows repeats its last row (computed, not
 * stored). Where the level has narrow tiles (narrow[n - 1]: tr x n, for
 * n < tb), a batch runs as kv_tile_rows spreads it; where narrow is NULL, a
 * partial tile of input rows runs the full tile with its last row repeated.
 * Inline: it runs in each level's file, under that file's target flags. */
static inline void kv_rows_batch_tiles(kv_tile_fn *tile, kv_tile_fn *const *narrow, int tr, int tb,
                                       const kv_weight *w, int r0, int r1, const float *xs,
                                       const void *xps, int batch, float *y, size_t ldy)
{
    size_t cols = (size_t)w->cols, row_bytes = cols * (w->dtype == KV_DTYPE_F32 ? 4 : 2);
    int tiles = (batch + tb - 1) / tb;
    for (int r = r0; r < r1; r += tr) {
        int nr = r1 - r < tr ? r1 - r : tr, rr[KV_TILE_MAX];
        for (int i = 0; i < tr; i++)
            rr[i] = r + (i < nr ? i : nr - 1);
        /* The next tr weight rows are prefetched from DRAM, in slices over
         * the tiles of these (each tile spreads its slice over its streams):
         * the prefetcher does not follow a tile's strided reads of several
         * rows in time (BF16 3072 x 1024, 17 input rows, 1 thread: 22
         * GFLOP/s without, 25 with). */
        int pn = r1 - (r + tr) < tr ? r1 - (r + tr) : tr;
        const char *pf = (const char *)w->data + (pn > 0 ? (size_t)(r + tr) * row_bytes : 0);
        size_t pf_end = pn > 0 ? (size_t)pn * row_bytes : 0, pf_at = 0;
        size_t slice = (pf_end / (size_t)tiles + 63) / 64 * 64;
        for (int b0 = 0, nb; b0 < batch; b0 += nb) {
            size_t e = pf_at + slice < pf_end ? pf_at + slice : pf_end;
            kv_prefetch slice_pf = {pf + pf_at, pf + e};
            pf_at = e;
            nb = kv_tile_rows(batch - b0, tb, narrow != NULL);
            int wide = nb < tb && narrow ? nb : tb;
            const float *x[KV_TILE_MAX];
            const void *xp[KV_TILE_MAX];
            for (int b = 0; b < wide; b++) {
                size_t row = (size_t)(b0 + (b < nb ? b : nb - 1));
                x[b] = xs + row * cols;
                xp[b] = xps ? (const char *)xps + row * cols * KV_PREPARED_BYTES_PER_ELEMENT : NULL;
            }
            float out[KV_TILE_MAX * KV_TILE_MAX];
            (wide < tb ? narrow[wide - 1] : tile)(w, rr, x, xp, &slice_pf, out);
            for (int b = 0; b < nb; b++)
                for (int i = 0; i < nr; i++)
                    y[(size_t)(b0 + b) * ldy + (size_t)(r + i)] = out[b * tr + i];
        }
    }
}

/* In a level's file: the kv_tile_fn of each dtype for tiles of tr x tb,
 * bf16_tile_<tb>, f16_tile_<tb> and f32_tile_<tb>, each calling that file's
 * tile(tr, tb, dtype, w, r, x, xp, pf, out) (inlined, under its target flags). */
#define KV_TILE_FN(name, dt, tr, tb)                                                               \
    static void name##_##tb(const kv_weight *w, const int *r, const float *const *x,               \
                            const void *const *xp, kv_prefetch *pf, float *out)                    \
    {                                                                                              \
        tile(tr, tb, dt, w, r, x, xp, pf, out);                                                    \
    }
#define KV_TILE_FNS(tr, tb)                                                                        \
    KV_TILE_FN(bf16_tile, KV_DTYPE_BF16, tr, tb)                                                   \
    KV_TILE_FN(f16_tile, KV_DTYPE_F16, tr, tb)                                                     \
    KV_TILE_FN(f32_tile, KV_DTYPE_F32, tr, tb)

/* Of a level's three tables of tiles (tile i: tb = i + 1), w's dtype's. */
static inline kv_tile_fn *const *kv_tiles_of(const kv_weight *w, kv_tile_fn *const *bf16,
                                             kv_tile_fn *const *f16, kv_tile_fn *const *f32)
{
    return w->dtype == KV_DTYPE_BF16 ? bf16 : w->dtype == KV_DTYPE_F16 ? f16 : f32;
}

/* The portable dot product of row r of w with x (tails and fallbacks). */
float kv_dot_row_scalar(const kv_weight *w, int r, const float *x);

/* Element i of w as a float. */
float kv_weight_at(const kv_weight *w, size_t i);

#endif
