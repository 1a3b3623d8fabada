#include "model/kernels.h"

#include <assert.h>
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/cpu.h"
#include "model/gemm_dnnl.h"
#include "model/kernels_isa.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#include "model/exp_poly.h"
#define KV_AVX2 1
#endif

/* The thread count new pools get; 0 = the number of online CPUs. A process
 * setting, like OMP_NUM_THREADS. */
static int default_threads;

void kv_set_threads(int n)
{
    default_threads = n > 0 ? n : 0;
}

int kv_get_threads(void)
{
    if (default_threads > 0)
        return default_threads;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

float kv_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    union {
        uint32_t u;
        float f;
    } v;
    if (exp == 0x1f)
        v.u = sign | 0x7f800000 | man << 13; /* inf / nan */
    else if (exp != 0)
        v.u = sign | (exp + 112) << 23 | man << 13;
    else if (man == 0)
        v.u = sign;
    else { /* subnormal: exact as man * 2^-24 */
        v.f = (float)man * 5.9604644775390625e-8f;
        v.u |= sign;
    }
    return v.f;
}

float kv_weight_at(const kv_weight *w, size_t i)
{
    switch (w->dtype) {
    case KV_DTYPE_BF16:
        return kv_bf16_to_f32(((const uint16_t *)w->data)[i]);
    case KV_DTYPE_F16:
        return kv_f16_to_f32(((const uint16_t *)w->data)[i]);
    default:
        return ((const float *)w->data)[i];
    }
}

/* Row r of w against x, one element at a time: the portable kernel, and the
 * fallback when there is no memory for the prepared copy of x. */
float kv_dot_row_scalar(const kv_weight *w, int r, const float *x)
{
    size_t base = (size_t)r * (size_t)w->cols;
    float s = 0;
    for (int c = 0; c < w->cols; c++)
        s += kv_weight_at(w, base + (size_t)c) * x[c];
    return s;
}

const char *kv_compute_name(kv_compute mode)
{
    return mode == KV_COMPUTE_BF16 ? "bf16" : "f32";
}

int kv_compute_parse(const char *s, kv_compute *out)
{
    if (strcmp(s, "f32") == 0)
        *out = KV_COMPUTE_F32;
    else if (strcmp(s, "bf16") == 0)
        *out = KV_COMPUTE_BF16;
    else
        return -1;
    return 0;
}

void kv_round_bf16(float *x, size_t n)
{
    size_t i = 0;
#ifdef KV_AVX2
    /* The scalar rounding vectorised: add 0x7fff plus the lowest kept bit,
     * clear the low half; NaN lanes keep their value (quietened). */
    const __m256i bias = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1),
                  hi = _mm256_set1_epi32((int)0xffff0000u), quiet = _mm256_set1_epi32(0x400000);
    for (; i + 8 <= n; i += 8) {
        __m256 f = _mm256_loadu_ps(x + i);
        __m256i u = _mm256_castps_si256(f);
        __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
        __m256i r = _mm256_and_si256(_mm256_add_epi32(u, _mm256_add_epi32(bias, lsb)), hi);
        __m256 nan = _mm256_cmp_ps(f, f, _CMP_UNORD_Q);
        __m256i qn = _mm256_and_si256(_mm256_or_si256(u, quiet), hi);
        _mm256_storeu_ps(x + i,
                         _mm256_blendv_ps(_mm256_castsi256_ps(r), _mm256_castsi256_ps(qn), nan));
    }
#endif
    for (; i < n; i++)
        x[i] = kv_bf16_to_f32(kv_f32_to_bf16(x[i]));
}

void kv_pack_bf16(const float *x, size_t n, uint16_t *dst)
{
    size_t i = 0;
#ifdef KV_AVX2
    /* kv_round_bf16's rounding, then the high halves packed: a prefill packs
     * every projection's input, as many elements as a GEMM row has FLOPs. */
    const __m256i bias = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1);
    for (; i + 16 <= n; i += 16) {
        __m256i h[2];
        for (int k = 0; k < 2; k++) {
            __m256 f = _mm256_loadu_ps(x + i + 8 * (size_t)k);
            __m256i u = _mm256_castps_si256(f);
            __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
            __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(bias, lsb)), 16);
            __m256i qn = _mm256_srli_epi32(_mm256_or_si256(u, _mm256_set1_epi32(0x400000)), 16);
            h[k] =
                _mm256_blendv_epi8(r, qn, _mm256_castps_si256(_mm256_cmp_ps(f, f, _CMP_UNORD_Q)));
        }
        /* packus interleaves 128-bit lanes: put them back in order */
        __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(h[0], h[1]), 0xd8);
        _mm256_storeu_si256((__m256i *)(dst + i), packed);
    }
#endif
    for (; i < n; i++)
        dst[i] = kv_f32_to_bf16(x[i]);
}

/* The kernels of the active level (cpu.h). */
static const kv_isa_kernels *isa_kernels(void)
{
    static const kv_isa_kernels *const table[KV_ISA_COUNT] = {
        [KV_ISA_AVX2] = &kv_kernels_avx2,
        [KV_ISA_AVX512] = &kv_kernels_avx512,
        [KV_ISA_AVX512BF16] = &kv_kernels_avx512bf16,
    };
    return table[kv_isa_active()];
}

#ifdef KV_AVX2
static inline float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
#endif

void kv_gemv(kv_pool *p, const kv_weight *w, const float *x, kv_compute mode, float *y)
{
    kv_gemv_many(p, 1, &w, x, mode, &y);
}

/* Weight bytes per GEMV task: small enough that a late thread finds work,
 * large enough that each task is one long sequential read (every task start
 * is a new stream the prefetcher has to pick up: 64 KB tasks ran ~15 %
 * slower than 256 KB ones). */
#define GEMV_TASK_BYTES (256 * 1024)

/* Rows per task are a multiple of every level's tile of weight rows in the
 * batched GEMV (2, 3 or 4), so that no task but a matrix's last ends in a
 * partial tile: 64-row tasks (BF16, 2048 columns) left one AVX2 tile in 22
 * a third empty. */
#define GEMV_TASK_ROWS_MULTIPLE 12

static int gemv_task_rows(const kv_weight *w)
{
    size_t row_bytes = (size_t)w->cols * (w->dtype == KV_DTYPE_F32 ? 4 : 2);
    size_t rows = GEMV_TASK_BYTES / (row_bytes ? row_bytes : 1);
    if (rows > GEMV_TASK_ROWS_MULTIPLE)
        rows -= rows % GEMV_TASK_ROWS_MULTIPLE;
    return rows < 4 ? 4 : rows > (size_t)w->rows ? w->rows : (int)rows;
}

/* ---- the decode GEMV, batched ----
 *
 * Decode multiplies every weight by B activation rows, one per sequence of
 * the batch (B = 1 for a single generation). The weights are what costs: a
 * task reads a few weight rows from memory, then dots them against all B
 * rows while they sit in L1 (the level's rows_batch tiles), so a step reads
 * each weight byte once whatever B is. Every (weight row, activation row)
 * pair gets the bits of the level's row kernel, so a row's result is
 * bit-identical to a batch of one: batching never changes a token. */

static void gemv_task(void *ctx, int task, int worker)
{
    (void)worker;
    const kv_gemv_step *j = ctx;
    int i = 0;
    while (task >= j->first[i + 1])
        i++;
    const kv_weight *w = j->ws[i];
    int r0 = (task - j->first[i]) * j->task_rows[i];
    int r1 = w->rows - r0 > j->task_rows[i] ? r0 + j->task_rows[i] : w->rows;
    if (j->batch == 1) /* one long stream, as the prefetcher likes it */
        j->k->rows(w, r0, r1, j->xs, j->xps, j->mode, j->ys[i]);
    else
        j->k->rows_batch(w, r0, r1, j->xs, j->xps, j->batch, j->mode, j->ys[i], (size_t)w->rows);
}

void kv_gemv_step_init(kv_gemv_step *s, int n, const kv_weight *const *ws, const float *xs,
                       int batch, kv_compute mode, float *const *ys, float *xps)
{
    assert(n >= 1 && n <= 8 && batch >= 1);
    *s = (kv_gemv_step){.n = n,
                        .batch = batch,
                        .ws = ws,
                        .ys = ys,
                        .xs = xs,
                        .xps = xps,
                        .cols = ws[0]->cols,
                        .mode = mode,
                        .k = isa_kernels()};
    for (int i = 0; i < n; i++) {
        s->task_rows[i] = gemv_task_rows(ws[i]);
        s->first[i + 1] = s->first[i] + (ws[i]->rows + s->task_rows[i] - 1) / s->task_rows[i];
    }
}

void kv_gemv_step_prepare(kv_gemv_step *s)
{
    _Static_assert(KV_PREPARED_BYTES_PER_ELEMENT == sizeof(float), "prepared x: one float each");
    size_t cols = (size_t)s->cols;
    for (int b = 0; b < s->batch; b++)
        s->k->prepare(s->xs + (size_t)b * cols, s->cols, s->mode, s->xps + (size_t)b * cols);
}

kv_pool_phase kv_gemv_step_phase(kv_gemv_step *s)
{
    return (kv_pool_phase){.n_tasks = s->first[s->n], .fn = gemv_task, .ctx = s};
}

size_t kv_gemv_step_work(const kv_gemv_step *s)
{
    size_t work = 0;
    for (int i = 0; i < s->n; i++)
        work += (size_t)s->ws[i]->rows * (size_t)s->ws[i]->cols * (size_t)s->batch;
    return work;
}

void kv_gemv_batch(kv_pool *p, int n, const kv_weight *const *ws, const float *xs, int batch,
                   kv_compute mode, float *const *ys)
{
    int cols = ws[0]->cols;
    size_t floats = (size_t)batch * (size_t)cols;
    /* 64-byte aligned: a 512-bit load of the prepared input that straddles
     * two cache lines costs two, and the F32 row kernel loads 128 bytes of
     * it per 64 bytes of BF16 weights (unaligned, f32-mode decode pulled
     * about half the bytes per cycle that bf16 mode's did) */
    _Alignas(64) float stack[4096];
    float *xps = floats <= 4096 ? stack : aligned_alloc(64, (floats * sizeof *xps + 63) / 64 * 64);
    if (!xps && batch > 1) {
        /* No room for every row's prepared copy: one row at a time, which
         * gives the same bits as the batch (and as kv_gemv). */
        for (int b = 0; b < batch; b++) {
            float *yb[8];
            for (int i = 0; i < n; i++)
                yb[i] = ys[i] + (size_t)b * (size_t)ws[i]->rows;
            kv_gemv_batch(p, n, ws, xs + (size_t)b * (size_t)cols, 1, mode, yb);
        }
        return;
    }
    if (!xps) { /* no room for the prepared copy: the scalar kernel needs none */
        for (int i = 0; i < n; i++)
            for (int r = 0; r < ws[i]->rows; r++)
                ys[i][r] = kv_dot_row_scalar(ws[i], r, xs);
        return;
    }
    kv_gemv_step s;
    kv_gemv_step_init(&s, n, ws, xs, batch, mode, ys, xps);
    kv_gemv_step_prepare(&s);
    /* Small matrices are not worth waking the other threads for. */
    kv_pool_phase ph = kv_gemv_step_phase(&s);
    kv_pool_run_phases(kv_gemv_step_work(&s) > KV_PARALLEL_MIN_WORK ? p : NULL, 1, &ph);
    if (xps != stack)
        free(xps);
}

void kv_gemv_many(kv_pool *p, int n, const kv_weight *const *ws, const float *x, kv_compute mode,
                  float *const *ys)
{
    kv_gemv_batch(p, n, ws, x, 1, mode, ys);
}

static void widen_range(const kv_weight *w, int row0, int n, float *dst)
{
    size_t cols = (size_t)w->cols, base = (size_t)row0 * cols;
    if (w->dtype == KV_DTYPE_F32) {
        memcpy(dst, (const float *)w->data + base, (size_t)n * cols * sizeof *dst);
        return;
    }
    for (int r = 0; r < n; r++) {
        size_t i = 0, off = base + (size_t)r * cols;
        float *d = dst + (size_t)r * cols;
#ifdef KV_AVX2
        const uint16_t *src = (const uint16_t *)w->data + off;
        if (w->dtype == KV_DTYPE_BF16)
            for (; i + 8 <= cols; i += 8) {
                __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(src + i)));
                _mm256_storeu_ps(d + i, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
            }
        else
            for (; i + 8 <= cols; i += 8)
                _mm256_storeu_ps(d + i,
                                 _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
#endif
        for (; i < cols; i++)
            d[i] = kv_weight_at(w, off + i);
    }
}

typedef struct widen_job {
    const kv_weight *w;
    int row0, n, per_task;
    float *dst;
} widen_job;

static void widen_task(void *ctx, int task, int worker)
{
    (void)worker;
    const widen_job *j = ctx;
    int r0 = task * j->per_task, n = j->n - r0 < j->per_task ? j->n - r0 : j->per_task;
    widen_range(j->w, j->row0 + r0, n, j->dst + (size_t)r0 * (size_t)j->w->cols);
}

void kv_widen_rows(kv_pool *p, const kv_weight *w, int row0, int n, float *dst)
{
    widen_job j = {.w = w, .row0 = row0, .n = n, .dst = dst};
    j.per_task = (int)(16384 / (size_t)w->cols) + 1;
    kv_pool_run((size_t)n * (size_t)w->cols > KV_PARALLEL_MIN_WORK ? p : NULL,
                (n + j.per_task - 1) / j.per_task, widen_task, &j);
}

/* Output columns (weight rows) per sgemm task. */
static int matmul_block(const kv_pool *p, const kv_weight *w)
{
    int threads = kv_pool_threads(p);
    int b = (w->rows + threads * 4 - 1) / (threads * 4);
    b = (b + 15) / 16 * 16;
    if (b < 64)
        b = 64;
    if (w->dtype != KV_DTYPE_F32 && b > 1024)
        b = 1024; /* bounds the per-worker widening scratch */
    return b < w->rows ? b : w->rows;
}

size_t kv_matmul_scratch(const kv_pool *p, const kv_weight *w)
{
    return w->dtype == KV_DTYPE_F32 ? 0 : (size_t)matmul_block(p, w) * (size_t)w->cols;
}

/* Whether kv_matmul multiplies BF16 weights by BF16 activations at this
 * level: oneDNN's kernels, or the level's own gemm_bf16. */
static bool bf16_gemm(const kv_weight *w, kv_compute mode)
{
    return mode == KV_COMPUTE_BF16 && w->dtype == KV_DTYPE_BF16 &&
           (kv_dnnl_usable(KV_DTYPE_BF16) || isa_kernels()->gemm_bf16);
}

bool kv_matmul_widens(const kv_weight *w, kv_compute mode)
{
    return w->dtype != KV_DTYPE_F32 && !bf16_gemm(w, mode);
}

bool kv_matmul_takes_bf16(const kv_weight *w, kv_compute mode)
{
    return bf16_gemm(w, mode);
}

typedef struct bf16_job {
    const kv_weight *const *ws;
    float *const *ys;
    const uint16_t *x16;
    int rows;
    int first[9], block[8]; /* each weight's first task and output columns per task */
    bool library;
    const kv_isa_kernels *k;
} bf16_job;

/* A block of one weight's output columns for every input row, on one
 * thread: oneDNN where it runs, else the level's BF16 GEMM. */
static void bf16_task(void *ctx, int task, int worker)
{
    (void)worker;
    const bf16_job *j = ctx;
    int i = 0;
    while (task >= j->first[i + 1])
        i++;
    const kv_weight *w = j->ws[i];
    int r0 = (task - j->first[i]) * j->block[i];
    int nr = w->rows - r0 < j->block[i] ? w->rows - r0 : j->block[i];
    size_t cols = (size_t)w->cols;
    kv_dnnl_product prod = {.dt = KV_DTYPE_BF16,
                            .m = j->rows,
                            .n = nr,
                            .k = w->cols,
                            .a = j->x16,
                            .b = (const uint16_t *)w->data + (size_t)r0 * cols,
                            .lda = cols,
                            .ldb = cols,
                            .y = j->ys[i] + r0,
                            .ldy = (size_t)w->rows};
    if (j->library && kv_dnnl_matmul(1, &prod))
        return;
    j->k->gemm_bf16(w, r0, r0 + nr, j->x16, j->rows, cols, j->ys[i], (size_t)w->rows);
}

void kv_matmul_bf16(kv_pool *p, int n, const kv_weight *const *ws, const uint16_t *x16, int rows,
                    float *const *ys)
{
    bf16_job j = {.ws = ws,
                  .ys = ys,
                  .x16 = x16,
                  .rows = rows,
                  .library = kv_dnnl_usable(KV_DTYPE_BF16),
                  .k = isa_kernels()};
    for (int i = 0; i < n; i++) {
        j.block[i] = matmul_block(p, ws[i]);
        j.first[i + 1] = j.first[i] + (ws[i]->rows + j.block[i] - 1) / j.block[i];
    }
    kv_pool_run(p, j.first[n], bf16_task, &j);
}

typedef struct matmul_job {
    const kv_weight *w;
    const float *x;
    const uint16_t *x16; /* x packed to BF16 for the BF16 GEMM, or NULL */
    int n, block;
    bool library;        /* oneDNN runs this product's dtype at this level */
    float *y, *scratch;
    size_t scratch_floats;
    const kv_isa_kernels *k;
} matmul_job;

/* Output columns [r0, r0 + nr) through oneDNN, single-threaded (the pool
 * spreads the blocks); false when it declines. */
static bool library_block(const matmul_job *j, int r0, int nr)
{
    const kv_weight *w = j->w;
    size_t cols = (size_t)w->cols, elt = j->x16 ? 2 : 4;
    kv_dnnl_product prod = {.dt = j->x16 ? KV_DTYPE_BF16 : KV_DTYPE_F32,
                            .m = j->n,
                            .n = nr,
                            .k = w->cols,
                            .a = j->x16 ? (const void *)j->x16 : (const void *)j->x,
                            .b = (const char *)w->data + (size_t)r0 * cols * elt,
                            .lda = cols,
                            .ldb = cols,
                            .y = j->y + r0,
                            .ldy = (size_t)w->rows};
    return kv_dnnl_matmul(1, &prod);
}

/* One block of output columns on one thread (oneDNN and OpenBLAS run
 * single-threaded; the pool spreads the blocks, so a thread the OS has not
 * scheduled does not hold up the others): oneDNN where it runs, else the
 * level's BF16 GEMM, or sgemm on F32 weights (16-bit ones widened first). */
static void matmul_task(void *ctx, int task, int worker)
{
    const matmul_job *j = ctx;
    const kv_weight *w = j->w;
    int r0 = task * j->block, nr = w->rows - r0 < j->block ? w->rows - r0 : j->block;
    if (j->library && library_block(j, r0, nr))
        return;
    if (j->x16 && j->k->gemm_bf16) {
        j->k->gemm_bf16(w, r0, r0 + nr, j->x16, j->n, (size_t)w->cols, j->y, (size_t)w->rows);
        return;
    }
    const float *b = (const float *)w->data + (size_t)r0 * (size_t)w->cols;
    if (w->dtype != KV_DTYPE_F32) {
        float *s = j->scratch + (size_t)worker * j->scratch_floats;
        widen_range(w, r0, nr, s);
        b = s;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, j->n, nr, w->cols, 1.0f, j->x, w->cols, b,
                w->cols, 0.0f, j->y + r0, w->rows);
}

static void gemv_rows(kv_pool *p, const kv_weight *w, const float *x, int n, kv_compute mode,
                      float *y)
{
    for (int i = 0; i < n; i++)
        kv_gemv(p, w, x + (size_t)i * (size_t)w->cols, mode, y + (size_t)i * (size_t)w->rows);
}

void kv_matmul(kv_pool *p, const kv_weight *w, const float *x, int n, kv_compute mode, float *y,
               float *scratch)
{
    if (n <= KV_GEMV_MAX_ROWS) {
        gemv_rows(p, w, x, n, mode, y);
        return;
    }
    matmul_job j = {.w = w,
                    .x = x,
                    .n = n,
                    .y = y,
                    .scratch = scratch,
                    .block = matmul_block(p, w),
                    .scratch_floats = kv_matmul_scratch(p, w),
                    .k = isa_kernels()};
    uint16_t *x16 = NULL;
    if (bf16_gemm(w, mode)) {
        /* Without memory for the packed copy: one GEMV per row (slow,
         * exact, no memory). */
        if (!(x16 = malloc((size_t)n * (size_t)w->cols * sizeof *x16))) {
            gemv_rows(p, w, x, n, mode, y);
            return;
        }
        kv_pack_bf16(x, (size_t)n * (size_t)w->cols, x16);
        j.x16 = x16;
        j.library = kv_dnnl_usable(KV_DTYPE_BF16);
    } else
        j.library = w->dtype == KV_DTYPE_F32 && kv_dnnl_usable(KV_DTYPE_F32);
    kv_pool_run(p, (w->rows + j.block - 1) / j.block, matmul_task, &j);
    free(x16);
}

#ifdef KV_AVX2
/* e^x for 8 floats, about 1 ulp: Cody-Waite reduction by ln 2 and Cephes'
 * polynomial. Softmax over an 8k prompt evaluates billions of
 * exponentials, and the scalar libm call would dominate attention. */
static inline __m256 exp8(__m256 x)
{
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(KV_EXP_LO)), _mm256_set1_ps(KV_EXP_HI));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(KV_EXP_LOG2E)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    x = _mm256_fnmadd_ps(n, _mm256_set1_ps(KV_EXP_LN2_HI), x);
    x = _mm256_fnmadd_ps(n, _mm256_set1_ps(KV_EXP_LN2_LO), x);
    __m256 y = _mm256_set1_ps(KV_EXP_P0);
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(KV_EXP_P1));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(KV_EXP_P2));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(KV_EXP_P3));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(KV_EXP_P4));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(KV_EXP_P5));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
    __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}
#endif

float kv_max(const float *x, int n)
{
    int i = 1;
    float mx = x[0];
#ifdef KV_AVX2
    /* max is exact in any order: the scalar loop's value (over a softmax's
     * scores the scalar loop was 5 % of a 2,048-token prefill, bf16 mode) */
    if (n >= 16) {
        __m256 a = _mm256_loadu_ps(x), b = _mm256_loadu_ps(x + 8);
        for (i = 16; i + 16 <= n; i += 16) {
            a = _mm256_max_ps(a, _mm256_loadu_ps(x + i));
            b = _mm256_max_ps(b, _mm256_loadu_ps(x + i + 8));
        }
        __m256 v = _mm256_max_ps(a, b);
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        mx = _mm_cvtss_f32(h);
    }
#endif
    for (; i < n; i++)
        mx = x[i] > mx ? x[i] : mx;
    return mx;
}

float kv_exp_shift(float *x, int n, float m)
{
    int i = 0;
    float sum = 0;
#ifdef KV_AVX2
    __m256 acc = _mm256_setzero_ps(), mv = _mm256_set1_ps(m);
    for (; i + 8 <= n; i += 8) {
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv));
        _mm256_storeu_ps(x + i, e);
        acc = _mm256_add_ps(acc, e);
    }
    sum = hsum8(acc);
#endif
    for (; i < n; i++) {
        x[i] = expf(x[i] - m);
        sum += x[i];
    }
    return sum;
}

void kv_softmax(float *x, int n)
{
    float inv = 1.0f / kv_exp_shift(x, n, kv_max(x, n));
    for (int i = 0; i < n; i++)
        x[i] *= inv;
}

void kv_silu_mul(float *g, const float *u, size_t n)
{
    size_t i = 0;
#ifdef KV_AVX2
    const __m256 one = _mm256_set1_ps(1.0f);
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(g + i);
        __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), v));
        __m256 s = _mm256_div_ps(v, _mm256_add_ps(one, e));
        _mm256_storeu_ps(g + i, _mm256_mul_ps(s, _mm256_loadu_ps(u + i)));
    }
#endif
    for (; i < n; i++)
        g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

void kv_rmsnorm(float *out, const float *x, const float *w, int n, float eps)
{
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    float r = 1.0f / sqrtf((float)(ss / n) + eps);
    for (int i = 0; i < n; i++)
        out[i] = x[i] * r * w[i];
}

float kv_dot(const float *a, const float *b, int n)
{
    int i = 0;
    float s = 0;
#ifdef KV_AVX2
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (; i + 16 <= n; i += 16) {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
    }
    for (; i + 8 <= n; i += 8)
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    s = hsum8(_mm256_add_ps(acc0, acc1));
#endif
    for (; i < n; i++)
        s += a[i] * b[i];
    return s;
}

void kv_axpy(float *y, float a, const float *x, int n)
{
    int i = 0;
#ifdef KV_AVX2
    __m256 av = _mm256_set1_ps(a);
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i,
                         _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
#endif
    for (; i < n; i++)
        y[i] += a * x[i];
}

#ifdef KV_AVX2
/* hsum8 of eight vectors at once, lane j = hsum8(v[j]), with hsum8's pairs
 * in hsum8's order: ((v0 + v4) + (v2 + v6)) + ((v1 + v5) + (v3 + v7)). */
static inline __m256 hsum8x8(const __m256 v[8])
{
    __m256 t[4]; /* t[j]: the four lane pairs of v[j] | those of v[j + 4] */
    for (int j = 0; j < 4; j++)
        t[j] = _mm256_add_ps(_mm256_permute2f128_ps(v[j], v[j + 4], 0x20),
                             _mm256_permute2f128_ps(v[j], v[j + 4], 0x31));
    /* c01: (s0 + s2, s1 + s3) of rows 0, 1 | 4, 5; c23: of rows 2, 3 | 6, 7 */
    __m256 c01 = _mm256_add_ps(_mm256_shuffle_ps(t[0], t[1], _MM_SHUFFLE(1, 0, 1, 0)),
                               _mm256_shuffle_ps(t[0], t[1], _MM_SHUFFLE(3, 2, 3, 2)));
    __m256 c23 = _mm256_add_ps(_mm256_shuffle_ps(t[2], t[3], _MM_SHUFFLE(1, 0, 1, 0)),
                               _mm256_shuffle_ps(t[2], t[3], _MM_SHUFFLE(3, 2, 3, 2)));
    return _mm256_add_ps(_mm256_shuffle_ps(c01, c23, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm256_shuffle_ps(c01, c23, _MM_SHUFFLE(3, 1, 3, 1)));
}

/* kv_dot's two accumulators, summed, for four rows b + j * stride. */
static inline void dot4_acc(const float *a, const float *b, size_t stride, int n, __m256 *out)
{
    __m256 e[4], o[4];
    for (int j = 0; j < 4; j++)
        e[j] = o[j] = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 a0 = _mm256_loadu_ps(a + i), a1 = _mm256_loadu_ps(a + i + 8);
        for (int j = 0; j < 4; j++) {
            e[j] = _mm256_fmadd_ps(a0, _mm256_loadu_ps(b + (size_t)j * stride + (size_t)i), e[j]);
            o[j] = _mm256_fmadd_ps(a1, _mm256_loadu_ps(b + (size_t)j * stride + (size_t)i + 8),
                                   o[j]);
        }
    }
    for (; i + 8 <= n; i += 8) {
        __m256 a0 = _mm256_loadu_ps(a + i);
        for (int j = 0; j < 4; j++)
            e[j] = _mm256_fmadd_ps(a0, _mm256_loadu_ps(b + (size_t)j * stride + (size_t)i), e[j]);
    }
    for (int j = 0; j < 4; j++)
        out[j] = _mm256_add_ps(e[j], o[j]);
}
#endif

void kv_dot8(const float *a, const float *b, size_t stride, int n, float scale, float *out)
{
    const kv_isa_kernels *k = isa_kernels();
    if (k->dot8 && k->dot8(a, b, stride, n, scale, out))
        return;
#ifdef KV_AVX2
    if (n % 8 == 0) { /* kv_dot has no scalar tail to add after its sum */
        __m256 v[8];
        dot4_acc(a, b, stride, n, v);
        dot4_acc(a, b + 4 * stride, stride, n, v + 4);
        _mm256_storeu_ps(out, _mm256_mul_ps(hsum8x8(v), _mm256_set1_ps(scale)));
        return;
    }
#endif
    for (int j = 0; j < 8; j++)
        out[j] = kv_dot(a, b + (size_t)j * stride, n) * scale;
}

void kv_axpy_rows(float *y, size_t y_stride, int ny, const float *a, size_t a_stride,
                  const float *x, size_t x_stride, int nx, int n)
{
    const kv_isa_kernels *k = isa_kernels();
    int i = k->axpy_rows ? k->axpy_rows(y, y_stride, ny, a, a_stride, x, x_stride, nx, n) : 0;
#ifdef KV_AVX2
    /* 32 floats of two outputs in eight registers while the rows pass: kv_axpy's
     * FMAs, without a load and a store of y per row */
    for (; i + 32 <= n; i += 32) {
        int h = 0;
        for (; h + 2 <= ny; h += 2) {
            float *y0 = y + (size_t)h * y_stride + i, *y1 = y0 + y_stride;
            const float *a0 = a + (size_t)h * a_stride, *a1 = a0 + a_stride;
            __m256 s0[4], s1[4];
            for (int k = 0; k < 4; k++) {
                s0[k] = _mm256_loadu_ps(y0 + 8 * k);
                s1[k] = _mm256_loadu_ps(y1 + 8 * k);
            }
            for (int j = 0; j < nx; j++) {
                const float *xj = x + (size_t)j * x_stride + i;
                __m256 b0 = _mm256_broadcast_ss(a0 + j), b1 = _mm256_broadcast_ss(a1 + j);
                for (int k = 0; k < 4; k++) {
                    __m256 xv = _mm256_loadu_ps(xj + 8 * k);
                    s0[k] = _mm256_fmadd_ps(b0, xv, s0[k]);
                    s1[k] = _mm256_fmadd_ps(b1, xv, s1[k]);
                }
            }
            for (int k = 0; k < 4; k++) {
                _mm256_storeu_ps(y0 + 8 * k, s0[k]);
                _mm256_storeu_ps(y1 + 8 * k, s1[k]);
            }
        }
        for (; h < ny; h++)
            for (int j = 0; j < nx; j++)
                kv_axpy(y + (size_t)h * y_stride + i, a[(size_t)h * a_stride + (size_t)j],
                        x + (size_t)j * x_stride + i, 32);
    }
#endif
    /* the rest as kv_axpy does it (8 lanes, then one at a time) */
    if (i < n)
        for (int h = 0; h < ny; h++)
            for (int j = 0; j < nx; j++)
                kv_axpy(y + (size_t)h * y_stride + i, a[(size_t)h * a_stride + (size_t)j],
                        x + (size_t)j * x_stride + i, n - i);
}
