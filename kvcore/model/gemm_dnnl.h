/* gemm_dnnl: the large products of prefill through oneDNN's matmul.
 *
 * Why a library: on an AVX512_BF16 CPU oneDNN's brgemm kernels multiply
 * BF16 x BF16 -> F32 at ~89 % of a core's BF16 peak (512 x 1024 by 1024 x
 * 1536, one thread), kvbench's own 4 x 4 vdpbf16ps tile at ~10 %. It is what PyTorch and OpenVINO run on CPUs, and picks AMX tiles on Intel
 * CPUs that have them. Its F32 kernels measured slower than OpenBLAS's in
 * the engine, so f32 mode stays with OpenBLAS.
 *
 * Threading: kv_matmul splits the output columns into blocks and the pool's
 * workers each run single-threaded oneDNN calls on them (one OpenMP thread
 * per call, so no second team competes for the cores). The other scheme, one
 * call on oneDNN's own OpenMP threads while the pool waits, measured slower
 * on the shared 2-core machine kvbench is developed on (prefill 512, bf16:
 * 77 against 114-125 tokens per CPU-second): OpenMP's barrier waits for a
 * thread the OS has not scheduled, the pool's shared task counter does not.
 *
 * Primitives are created once per shape and kept for the life of the
 * process (a prefill has a handful of shapes). oneDNN runs only at the
 * avx512bf16 level (cpu.h): below it kvbench's own kernels and OpenBLAS run,
 * so KVBENCH_ISA=avx2 measures the AVX2 machine's path on any CPU.
 */
#ifndef KV_GEMM_DNNL_H
#define KV_GEMM_DNNL_H

#include <stdbool.h>
#include <stddef.h>

#include "model/safetensors.h"

/* One product y = scale A B^T: A is [m][k] with rows lda elements apart,
 * B is [n][k] with rows ldb apart (a weight matrix as kvbench stores it,
 * or attention's keys), y is [m][n] F32 with rows ldy apart. A and B are of
 * dtype dt. b_kn: B is [k][n] instead (attention's values), y = scale A B.
 * scale 0 stands for 1, so that a product that names none is unscaled.
 *
 * oneDNN 2.6 runs its brgemm kernels only on dense operands (lda = k, ldb =
 * k, or n with b_kn, ldy = n); other strides run its gemm:jit kernels. On
 * the projections' shapes both are fast (512 rows by Qwen3-0.6B's seven
 * matrices in blocks of 256 output columns on 2 threads, quiet machine:
 * 717 GFLOP/s into the strided y, 726 through a dense block copied out). */
typedef struct kv_dnnl_product {
    kv_dtype dt;
    int m, n, k;
    const void *a, *b;
    size_t lda, ldb;
    float *y;
    size_t ldy;
    bool b_kn;
    float scale;
} kv_dnnl_product;

/* Runs the product on `threads` OpenMP threads (1 from the pool's
 * workers); false (y untouched) when oneDNN does not take it at the active
 * level, so the caller runs its own kernels. Callable from several threads
 * at once. */
bool kv_dnnl_matmul(int threads, const kv_dnnl_product *p);

/* Whether kv_dnnl_matmul takes products of dtype dt at the active level:
 * BF16 at avx512bf16 (cheap; no primitive is created). */
bool kv_dnnl_usable(kv_dtype dt);

/* oneDNN's version and, per dtype, the implementation it picks for a
 * prefill-shaped product at the active level ("brg:avx512_core_bf16"), or
 * why it is not used: for `kvbench version --libraries`. */
void kv_dnnl_describe(char *buf, size_t size);

#endif
