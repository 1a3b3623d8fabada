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

#include <stddef.h>
#include <stdint.h>

#include "kernels.h"

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
    /* Prefill in BF16 mode, or NULL (widen to F32 + sgemm, exact for BF16
     * inputs): y[i * ldy + r] = W[r] . x[i] for i < n, r in [r0, r1); x rows
     * are BF16 packed with kv_pack_bf16, ldx elements apart. W is BF16. */
    void (*gemm_bf16)(const kv_weight *w, int r0, int r1, const uint16_t *x, int n, size_t ldx,
                      float *y, size_t ldy);
} kv_isa_kernels;

extern const kv_isa_kernels kv_kernels_avx2, kv_kernels_avx512, kv_kernels_avx512bf16;

/* The portable dot product of row r of w with x (tails and fallbacks). */
float kv_dot_row_scalar(const kv_weight *w, int r, const float *x);

/* Element i of w as a float. */
float kv_weight_at(const kv_weight *w, size_t i);

#endif
