/* kernels: the arithmetic of the forward pass.
 *
 * A kv_weight is a row-major [rows][cols] matrix in F32, F16 or BF16, kept in
 * its file dtype. Decode multiplies one vector by every weight (kv_gemv):
 * memory-bound, so 16-bit weights are widened in registers (AVX2/FMA/F16C)
 * and each byte is read once, rows split over OpenMP threads. Prefill
 * multiplies many rows (kv_matmul): compute-bound, so weights are widened
 * block by block into F32 scratch and handed to OpenBLAS sgemm.
 */
#ifndef KV_KERNELS_H
#define KV_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "pool.h"
#include "safetensors.h"

typedef struct kv_weight {
    kv_dtype dtype; /* F32, F16 or BF16 */
    const void *data;
    int rows, cols;
} kv_weight;

/* Up to this many input rows kv_matmul runs one GEMV per row, reading 16-bit
 * weights directly; beyond it, widening + sgemm is faster. */
#define KV_GEMV_MAX_ROWS 4

/* Threads of the pools created from now on (kv_model_load); n <= 0: the
 * number of online CPUs, which kv_get_threads then reports. OpenBLAS is
 * called single-threaded from the pool's threads. */
void kv_set_threads(int n);
int kv_get_threads(void);

static inline float kv_bf16_to_f32(uint16_t h)
{
    union {
        uint32_t u;
        float f;
    } v = {(uint32_t)h << 16};
    return v.f;
}
float kv_f16_to_f32(uint16_t h);

/* Work (multiply-adds) below which a loop stays on one thread: waking the
 * team costs microseconds on an idle machine and far more on a busy one. */
#define KV_PARALLEL_MIN_WORK 65536

/* Parallel work runs on pool p; p may be NULL (the calling thread only). */

/* y[r] = W[r] . x for every row r. */
void kv_gemv(kv_pool *p, const kv_weight *w, const float *x, float *y);

/* Several GEMVs of one input vector (q/k/v, gate/up) as one job:
 * ys[i][r] = ws[i][r] . x (1 <= n <= 8). All ws have x's length as cols. */
void kv_gemv_many(kv_pool *p, int n, const kv_weight *const *ws, const float *x, float *const *ys);

/* The batched GEMV of decode: ys[i][b][r] = ws[i][r] . xs[b] for `batch`
 * input rows xs[batch][cols] (1 <= n <= 8). Each weight row is read once for
 * all input rows; row b's results are bit-identical to kv_gemv_many on
 * xs[b] alone. */
void kv_gemv_batch(kv_pool *p, int n, const kv_weight *const *ws, const float *xs, int batch,
                   float *const *ys);

/* Widens rows [row0, row0 + n) of w into dst ([n][cols] floats). */
void kv_widen_rows(kv_pool *p, const kv_weight *w, int row0, int n, float *dst);

/* Floats of scratch one worker of p needs in kv_matmul over w (0 for F32). */
size_t kv_matmul_scratch(const kv_pool *p, const kv_weight *w);

/* y[i][r] = W[r] . x[i] for n input rows of w->cols floats; y rows are
 * w->rows floats apart. scratch: kv_pool_threads(p) * kv_matmul_scratch(p, w)
 * floats for widening 16-bit weights (unused for F32 weights). */
void kv_matmul(kv_pool *p, const kv_weight *w, const float *x, int n, float *y, float *scratch);

/* out = x / rms(x) * w over n floats (out may alias x). */
void kv_rmsnorm(float *out, const float *x, const float *w, int n, float eps);

/* In place: x = softmax(x) over n floats. */
void kv_softmax(float *x, int n);

/* In place over n floats: g = silu(g) * u, the gated FFN activation. */
void kv_silu_mul(float *g, const float *u, size_t n);

/* dot product of n floats. */
float kv_dot(const float *a, const float *b, int n);

/* y += a * x over n floats. */
void kv_axpy(float *y, float a, const float *x, int n);

#endif
