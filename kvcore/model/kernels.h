/* kernels: the arithmetic of the forward pass.
 *
 * A kv_weight is a row-major [rows][cols] matrix in F32, F16 or BF16, kept in
 * its file dtype. Decode multiplies one vector by every weight (kv_gemv):
 * memory-bound, so 16-bit weights are widened in registers and each byte is
 * read once, rows split over the pool's threads. Prefill multiplies many
 * rows (kv_matmul): compute-bound, so weights are widened block by block
 * into F32 scratch and handed to OpenBLAS sgemm, or (BF16 mode on an
 * AVX512_BF16 CPU) multiplied as BF16 with vdpbf16ps.
 *
 * The GEMV and GEMM kernels exist once per instruction-set level (cpu.h,
 * kernels_isa.h); these functions run the active level's.
 *
 * Compute modes: KV_COMPUTE_F32 multiplies in FP32 (the reference's
 * exactness). KV_COMPUTE_BF16 is how PyTorch runs a bfloat16 model: matmul
 * inputs are BF16 (weights BF16, activations rounded to nearest even with
 * kv_round_bf16 before the call), products accumulated in FP32.
 */
#ifndef KV_KERNELS_H
#define KV_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/pool.h"
#include "model/kvquant.h"
#include "model/safetensors.h"

typedef enum kv_compute { KV_COMPUTE_F32, KV_COMPUTE_BF16 } kv_compute;

/* "f32" / "bf16", and back (-1 for another name). */
const char *kv_compute_name(kv_compute mode);
int kv_compute_parse(const char *s, kv_compute *out);

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

/* f rounded to BF16, round to nearest even (NaN stays NaN). */
static inline uint16_t kv_f32_to_bf16(float f)
{
    union {
        float f;
        uint32_t u;
    } v = {f};
    if ((v.u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)(v.u >> 16 | 0x40); /* quiet NaN */
    return (uint16_t)((v.u + 0x7fffu + (v.u >> 16 & 1u)) >> 16);
}

/* In place over n floats: x = the nearest BF16 value (ties to even). */
void kv_round_bf16(float *x, size_t n);

/* dst[i] = the BF16 bits of x[i], round to nearest even. */
void kv_pack_bf16(const float *x, size_t n, uint16_t *dst);

/* Work (multiply-adds) below which a loop stays on one thread: waking the
 * team costs microseconds on an idle machine and far more on a busy one. */
#define KV_PARALLEL_MIN_WORK 65536

/* Parallel work runs on pool p; p may be NULL (the calling thread only). */

/* In every product below, mode KV_COMPUTE_BF16 requires BF16 weights and
 * an x of BF16 values (kv_round_bf16). */

/* y[r] = W[r] . x for every row r. */
void kv_gemv(kv_pool *p, const kv_weight *w, const float *x, kv_compute mode, float *y);

/* Several GEMVs of one input vector (q/k/v, gate/up) as one job:
 * ys[i][r] = ws[i][r] . x (1 <= n <= 8). All ws have x's length as cols. */
void kv_gemv_many(kv_pool *p, int n, const kv_weight *const *ws, const float *x, kv_compute mode,
                  float *const *ys);

/* The batched GEMV of decode: ys[i][b][r] = ws[i][r] . xs[b] for `batch`
 * input rows xs[batch][cols] (1 <= n <= 8). Each weight row is read once for
 * all input rows; row b's results are bit-identical to kv_gemv_many on
 * xs[b] alone. */
void kv_gemv_batch(kv_pool *p, int n, const kv_weight *const *ws, const float *xs, int batch,
                   kv_compute mode, float *const *ys);

/* kv_gemv_batch as one phase of a larger pool job (kv_pool_run_phases), so
 * that decode runs a layer's serial steps and GEMVs as one job: the step is
 * set up first, its input prepared (kv_gemv_step_prepare) by the caller or
 * by the serial phase that computes it, then its phase runs. Same bits as
 * kv_gemv_batch. The fields are kernels.c's. */
typedef struct kv_gemv_step {
    int n, batch;
    const kv_weight *const *ws;
    float *const *ys;
    const float *xs; /* [batch][cols] */
    float *xps;      /* each row prepared for the level's row kernel */
    int cols;
    kv_compute mode;
    const struct kv_isa_kernels *k;
    int first[9];     /* first task of each matrix; first[n] = all tasks */
    int task_rows[8]; /* rows per task of each matrix */
} kv_gemv_step;

/* Sets up ys[i][b][r] = ws[i][r] . xs[b] (as kv_gemv_batch; ws and ys must
 * outlive the step). xps: batch * ws[0]->cols floats of scratch for the
 * prepared input. */
void kv_gemv_step_init(kv_gemv_step *s, int n, const kv_weight *const *ws, const float *xs,
                       int batch, kv_compute mode, float *const *ys, float *xps);

/* Prepares xs, once it holds the input (in BF16 mode: BF16 values). */
void kv_gemv_step_prepare(kv_gemv_step *s);

/* The step's tasks as a phase. */
kv_pool_phase kv_gemv_step_phase(kv_gemv_step *s);

/* Multiply-adds of the step (against KV_PARALLEL_MIN_WORK). */
size_t kv_gemv_step_work(const kv_gemv_step *s);

/* Widens rows [row0, row0 + n) of w into dst ([n][cols] floats). */
void kv_widen_rows(kv_pool *p, const kv_weight *w, int row0, int n, float *dst);

/* Floats of scratch one worker of p needs in kv_matmul over w (0 for F32). */
size_t kv_matmul_scratch(const kv_pool *p, const kv_weight *w);

/* Whether kv_matmul of more than KV_GEMV_MAX_ROWS rows in this mode reads
 * w as F32 (widening a 16-bit w for sgemm): a caller running many such
 * calls may widen w once itself. */
bool kv_matmul_widens(const kv_weight *w, kv_compute mode);

/* y[i][r] = W[r] . x[i] for n input rows of w->cols floats; y rows are
 * w->rows floats apart. scratch: kv_pool_threads(p) * kv_matmul_scratch(p, w)
 * floats for widening 16-bit weights (unused for F32 weights). */
void kv_matmul(kv_pool *p, const kv_weight *w, const float *x, int n, kv_compute mode, float *y,
               float *scratch);

/* Whether kv_matmul in this mode multiplies w as BF16 by BF16 inputs
 * (bf16 mode at a level with a BF16 GEMM: oneDNN's or the level's own),
 * so that a caller may hand it inputs already packed (kv_matmul_bf16). */
bool kv_matmul_takes_bf16(const kv_weight *w, kv_compute mode);

/* ys[i][r][c] = ws[i][c] . x16[r] for `rows` input rows packed to BF16
 * (kv_pack_bf16, [rows][cols]) and n <= 8 BF16 weights of `cols` columns,
 * as one parallel job: kv_matmul's product, for a caller that packs its
 * inputs while computing them (a prefill's row steps) instead of in a
 * pass of their own. Only where kv_matmul_takes_bf16. */
void kv_matmul_bf16(kv_pool *p, int n, const kv_weight *const *ws, const uint16_t *x16, int rows,
                    float *const *ys);

/* out = x / rms(x) * w over n floats (out may alias x). */
void kv_rmsnorm(float *out, const float *x, const float *w, int n, float eps);

/* In place: x = softmax(x) over n floats. */
void kv_softmax(float *x, int n);

/* The largest of n >= 1 floats. */
float kv_max(const float *x, int n);

/* In place over n floats: x = e^(x - m); returns their sum. The step of an
 * online softmax, which rescales when a later block raises the maximum. */
float kv_exp_shift(float *x, int n, float m);

/* In place over n floats: g = silu(g) * u, the gated FFN activation. */
void kv_silu_mul(float *g, const float *u, size_t n);

/* dot product of n floats. */
float kv_dot(const float *a, const float *b, int n);

/* y += a * x over n floats. */
void kv_axpy(float *y, float a, const float *x, int n);

/* The two halves of decode attention, for a run of cache slots at a time.
 * Each result has the bits of the kv_dot / kv_axpy calls it replaces (the
 * same FMAs per lane, the same order of sums), so the forward's logits do
 * not change; they are faster because a slot's row is read once for many
 * results and the horizontal sums of eight dot products share shuffles. */

/* out[j] = kv_dot(a, b + j * stride, n) * scale for j < 8. */
void kv_dot8(const float *a, const float *b, size_t stride, int n, float scale, float *out);

/* For each of ny outputs y_h = y + h * y_stride, the rows x_j = x + j *
 * x_stride taken in order j = 0..nx-1: y_h += a[h * a_stride + j] * x_j over
 * n floats, as nx calls of kv_axpy would. */
void kv_axpy_rows(float *y, size_t y_stride, int ny, const float *a, size_t a_stride,
                  const float *x, size_t x_stride, int nx, int n);

/* Decode attention over a KV cache's stored form (kvcache.h): n values x_j
 * of one row in precision p, read where they lie, never copied out --
 * KV_PREC_BF16/F16 16-bit values, KV_PREC_U8 codes one a byte, KV_PREC_U4
 * two a byte (kv_u4_pack, x starting at an even index). A u8/u4 group's
 * x^ = min + scale q is applied per group, by the caller (kv_dot_stored,
 * kv_axpy_stored: the codes as numbers) or by the _groups kernels, which
 * take each row's parameters: q . x^ = min sum(q) + scale (q . codes). The
 * sums run in another order than over F32 values. */

/* out[i * out_stride + t] = sum_j q_i[j] x_t[j] for the nq <= 8 vectors
 * q_i = q + i * q_stride and the nx rows x_t = x + t * x_stride (bytes). */
void kv_dot_stored(const float *q, size_t q_stride, int nq, const uint8_t *x, size_t x_stride,
                   int nx, kv_precision p, int n, float *out, size_t out_stride);

/* For the ny <= 8 outputs y_i = y + i * y_stride and the nx rows x_t = x +
 * t * x_stride (bytes): y_i[j] += sum_t a[i * a_stride + t] x_t[j], over
 * the rows in order t = 0..nx-1. */
void kv_axpy_stored(float *y, size_t y_stride, int ny, const float *a, size_t a_stride,
                    const uint8_t *x, size_t x_stride, int nx, kv_precision p, int n);

/* A u8/u4 group of channels of each row, by token (kvquant.h): row t's
 * parameters g[t * stride]. */
typedef struct kv_stored_groups {
    const kv_qgroup *g;
    size_t stride;
    const float *qsum; /* scores: sum of the group's channels of query vector i */
    bool add;          /* scores: add to out rather than set it */
    bool scaled;       /* scores: then multiply what out holds by out_scale */
    float out_scale;
} kv_stored_groups;

/* kv_dot_stored with the rows' group parameters applied, q . x^ = min
 * sum(q) + scale (q . codes): out[i * out_stride + t] (+)= scale_t dot_it
 * + min_t qsum[i], then (scaled) out *= out_scale: the attention's
 * 1/sqrt(d) applied as each score is stored, with the same roundings as a
 * pass over the scores after them. */
void kv_dot_stored_groups(const float *q, size_t q_stride, int nq, const uint8_t *x,
                          size_t x_stride, int nx, kv_precision p, int n,
                          const kv_stored_groups *e, float *out, size_t out_stride);

/* kv_axpy_stored with the rows' group parameters applied: y_i[j] += sum_t
 * (a_it scale_t) x_t[j], then sum_t a_it min_t. */
void kv_axpy_stored_groups(float *y, size_t y_stride, int ny, const float *a, size_t a_stride,
                           const uint8_t *x, size_t x_stride, int nx, kv_precision p, int n,
                           const kv_stored_groups *e);

#endif
