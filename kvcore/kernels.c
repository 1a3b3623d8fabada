#include "kernels.h"

#include <assert.h>
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
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

static float load1(const kv_weight *w, size_t i)
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
 * fallback when there is no memory for the permuted copy of x. */
static float dot_row_scalar(const kv_weight *w, int r, const float *x)
{
    size_t base = (size_t)r * (size_t)w->cols;
    float s = 0;
    for (int c = 0; c < w->cols; c++)
        s += load1(w, base + (size_t)c) * x[c];
    return s;
}

#ifdef KV_AVX2
#define INLINE static inline __attribute__((always_inline))

/* dtype is a compile-time constant at every call below (the callers are
 * instantiated per dtype), so the switch folds away. */
INLINE __m256 load8(kv_dtype dtype, const void *data, size_t i)
{
    const uint16_t *p = (const uint16_t *)data + i;
    switch (dtype) {
    case KV_DTYPE_BF16: {
        __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
        return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    }
    case KV_DTYPE_F16:
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
    default:
        return _mm256_loadu_ps((const float *)data + i);
    }
}

static inline float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Every GEMV kernel below reads ONE weight row at a time, front to back.
 * Reading four rows in step (four interleaved streams, each x load serving
 * four rows) measured half the bandwidth of a plain read loop on this
 * machine (5 vs 10 GB/s on a busy box, either thread count): the hardware
 * prefetcher follows one sequential stream per core far better than four.
 * A single row keeps the read loop's bandwidth; four accumulator pairs hide
 * the FMA latency so the core still has 2x headroom when DRAM is idle. */

/* Row r of a 16-bit or F32 matrix against x, widening in registers. */
INLINE float dot_row_t(kv_dtype dt, const kv_weight *w, int r, const float *x)
{
    size_t cols = (size_t)w->cols, base = (size_t)r * cols, c = 0;
    __m256 a[4];
    for (int k = 0; k < 4; k++)
        a[k] = _mm256_setzero_ps();
    for (; c + 32 <= cols; c += 32)
        for (int k = 0; k < 4; k++)
            a[k] = _mm256_fmadd_ps(load8(dt, w->data, base + c + 8 * k),
                                   _mm256_loadu_ps(x + c + 8 * k), a[k]);
    for (; c + 8 <= cols; c += 8)
        a[0] = _mm256_fmadd_ps(load8(dt, w->data, base + c), _mm256_loadu_ps(x + c), a[0]);
    float s = hsum8(_mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3])));
    for (; c < cols; c++)
        s += load1(w, base + c) * x[c];
    return s;
}

/* BF16 row r against x permuted in blocks of 16 (xp: the 8 even elements,
 * then the 8 odd ones). A 32-byte load holds 16 BF16 values; shifting each
 * 32-bit lane left by 16 yields the even ones as floats and masking off the
 * low half the odd ones, so no widening shuffle is needed: two cheap integer
 * ops feed two FMAs. */
static float dot_row_bf16(const kv_weight *w, int r, const float *x, const float *xp)
{
    size_t cols = (size_t)w->cols, c = 0;
    const uint16_t *p = (const uint16_t *)w->data + (size_t)r * cols;
    const __m256i hi = _mm256_set1_epi32((int)0xFFFF0000u);
    __m256 a[4], b[4];
    for (int k = 0; k < 4; k++)
        a[k] = b[k] = _mm256_setzero_ps();
#define BF16_STEP(k, cc)                                                                           \
    do {                                                                                           \
        __m256i v = _mm256_loadu_si256((const __m256i *)(p + (cc)));                               \
        a[k] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(v, 16)),                      \
                               _mm256_loadu_ps(xp + (cc)), a[k]);                                  \
        b[k] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(v, hi)),                       \
                               _mm256_loadu_ps(xp + (cc) + 8), b[k]);                              \
    } while (0)
    for (; c + 64 <= cols; c += 64)
        for (int k = 0; k < 4; k++)
            BF16_STEP(k, c + 16 * k);
    for (; c + 16 <= cols; c += 16)
        BF16_STEP(0, c);
#undef BF16_STEP
    __m256 s8 = _mm256_add_ps(_mm256_add_ps(a[0], b[0]), _mm256_add_ps(a[1], b[1]));
    s8 = _mm256_add_ps(s8, _mm256_add_ps(_mm256_add_ps(a[2], b[2]), _mm256_add_ps(a[3], b[3])));
    float s = hsum8(s8);
    for (; c < cols; c++)
        s += kv_bf16_to_f32(p[c]) * x[c];
    return s;
}

/* The block-of-16 even/odd permutation of x that dot_row_bf16 reads. */
static void permute16(const float *x, int n, float *xp)
{
    for (int c = 0; c + 16 <= n; c += 16)
        for (int j = 0; j < 8; j++) {
            xp[c + j] = x[c + 2 * j];
            xp[c + 8 + j] = x[c + 2 * j + 1];
        }
}

static float dot_row(const kv_weight *w, int r, const float *x, const float *xp)
{
    switch (w->dtype) {
    case KV_DTYPE_BF16:
        return dot_row_bf16(w, r, x, xp);
    case KV_DTYPE_F16:
        return dot_row_t(KV_DTYPE_F16, w, r, x);
    default:
        return dot_row_t(KV_DTYPE_F32, w, r, x);
    }
}
#else
static float dot_row(const kv_weight *w, int r, const float *x, const float *xp)
{
    (void)xp;
    return dot_row_scalar(w, r, x);
}

static void permute16(const float *x, int n, float *xp)
{
    (void)x, (void)n, (void)xp;
}
#endif

void kv_gemv(kv_pool *p, const kv_weight *w, const float *x, float *y)
{
    kv_gemv_many(p, 1, &w, x, &y);
}

/* Weight bytes per GEMV task: small enough that a late thread finds work,
 * large enough that each task is one long sequential read (every task start
 * is a new stream the prefetcher has to pick up: 64 KB tasks ran ~15 %
 * slower than 256 KB ones). */
#define GEMV_TASK_BYTES (256 * 1024)

static int gemv_task_rows(const kv_weight *w)
{
    size_t row_bytes = (size_t)w->cols * (w->dtype == KV_DTYPE_F32 ? 4 : 2);
    size_t rows = GEMV_TASK_BYTES / (row_bytes ? row_bytes : 1);
    return rows < 4 ? 4 : rows > (size_t)w->rows ? w->rows : (int)rows;
}

/* ---- the decode GEMV, batched ----
 *
 * Decode multiplies every weight by B activation rows, one per sequence of
 * the batch (B = 1 for a single generation). The weights are what costs: a
 * task reads one weight row from memory, then dots it against all B rows
 * while it sits in L1, so a step reads each weight byte once whatever B is.
 * Every (weight row, activation row) pair runs dot_row's arithmetic, so a
 * row's result is bit-identical to a batch of one: batching never changes a
 * token. ISA variants (AVX-512) belong in dot_row and gemv_task. */

typedef struct gemv_job {
    int n, batch;
    const kv_weight *const *ws;
    float *const *ys;
    const float *xs, *xps; /* [batch][cols], and their block-of-16 permutations */
    int cols;
    int first[9];     /* first task of each matrix; first[n] = all tasks */
    int task_rows[8]; /* rows per task of each matrix */
} gemv_job;

#ifdef KV_AVX2
/* BF16 rows w[0..NR) against activation rows 0..NB) (NR, NB: 1 or 2, constant
 * at every call): out[i * NB + b] = w[i] . x[b]. Each (row, activation)
 * pair has its own two accumulators -- the even and the odd lanes of each
 * block of 16, as dot_row_bf16 splits them -- summed at the end, so a pair's
 * result does not depend on which tile computed it: a batch of any size
 * gives every row the bits of a batch of one. A 2 x 2 tile widens each
 * weight vector once for two activations and loads each activation vector
 * once for two weight rows: 8 FMAs per 4 loads, 15 of the 16 registers,
 * and 8 independent chains that hide the FMA latency. */
INLINE void bf16_tile(int NR, int NB, const uint16_t *const *w, const float *const *xp,
                      const float *const *x, size_t cols, float *out)
{
    const __m256i hi = _mm256_set1_epi32((int)0xFFFF0000u);
    __m256 ae[2][2], ao[2][2];
    for (int i = 0; i < NR; i++)
        for (int b = 0; b < NB; b++)
            ae[i][b] = ao[i][b] = _mm256_setzero_ps();
    size_t c = 0;
    for (; c + 16 <= cols; c += 16) {
        __m256 xe[2], xo[2];
        for (int b = 0; b < NB; b++) {
            xe[b] = _mm256_loadu_ps(xp[b] + c);
            xo[b] = _mm256_loadu_ps(xp[b] + c + 8);
        }
        for (int i = 0; i < NR; i++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(w[i] + c));
            __m256 we = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
            __m256 wo = _mm256_castsi256_ps(_mm256_and_si256(v, hi));
            for (int b = 0; b < NB; b++) {
                ae[i][b] = _mm256_fmadd_ps(we, xe[b], ae[i][b]);
                ao[i][b] = _mm256_fmadd_ps(wo, xo[b], ao[i][b]);
            }
        }
    }
    for (int i = 0; i < NR; i++)
        for (int b = 0; b < NB; b++) {
            float sum = hsum8(_mm256_add_ps(ae[i][b], ao[i][b]));
            for (size_t t = c; t < cols; t++)
                sum += kv_bf16_to_f32(w[i][t]) * x[b][t];
            out[i * NB + b] = sum;
        }
}

/* bf16_tile(2, 2, ...) written out: the four activation vectors of a block
 * are pinned in registers (an empty asm), or the compiler re-loads them for
 * each weight row as FMA memory operands -- 12 loads per 8 FMAs, more than
 * the two loads per cycle the core has. Same arithmetic per pair. */
static void bf16_tile22(const uint16_t *const *w, const float *const *xp, const float *const *x,
                        size_t cols, float *out)
{
    const __m256i hi = _mm256_set1_epi32((int)0xFFFF0000u);
    __m256 e00 = _mm256_setzero_ps(), o00 = e00, e01 = e00, o01 = e00;
    __m256 e10 = e00, o10 = e00, e11 = e00, o11 = e00;
    size_t c = 0;
    for (; c + 16 <= cols; c += 16) {
        __m256 xe0 = _mm256_loadu_ps(xp[0] + c), xo0 = _mm256_loadu_ps(xp[0] + c + 8);
        __m256 xe1 = _mm256_loadu_ps(xp[1] + c), xo1 = _mm256_loadu_ps(xp[1] + c + 8);
        __asm__("" : "+x"(xe0), "+x"(xo0), "+x"(xe1), "+x"(xo1));
        __m256i v = _mm256_loadu_si256((const __m256i *)(w[0] + c));
        __m256 wo = _mm256_castsi256_ps(_mm256_and_si256(v, hi));
        __m256 we = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
        e00 = _mm256_fmadd_ps(we, xe0, e00);
        e01 = _mm256_fmadd_ps(we, xe1, e01);
        o00 = _mm256_fmadd_ps(wo, xo0, o00);
        o01 = _mm256_fmadd_ps(wo, xo1, o01);
        v = _mm256_loadu_si256((const __m256i *)(w[1] + c));
        wo = _mm256_castsi256_ps(_mm256_and_si256(v, hi));
        we = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
        e10 = _mm256_fmadd_ps(we, xe0, e10);
        e11 = _mm256_fmadd_ps(we, xe1, e11);
        o10 = _mm256_fmadd_ps(wo, xo0, o10);
        o11 = _mm256_fmadd_ps(wo, xo1, o11);
    }
    __m256 acc[4][2] = {{e00, o00}, {e01, o01}, {e10, o10}, {e11, o11}};
    for (int k = 0; k < 4; k++) {
        const uint16_t *wr = w[k / 2];
        const float *xr = x[k % 2];
        float sum = hsum8(_mm256_add_ps(acc[k][0], acc[k][1]));
        for (size_t t = c; t < cols; t++)
            sum += kv_bf16_to_f32(wr[t]) * xr[t];
        out[k] = sum;
    }
}

/* Rows [r0, r1) of a BF16 matrix against every activation row, two weight
 * rows at a time: they stay in L1 while every pair of activations passes.
 * A lone activation row (a batch of one) reads one weight row at a time:
 * one sequential stream is what the prefetcher follows best, and pairs of
 * rows measured ~12 % more CPU time than the one-row GEMV there. */
static void bf16_rows(const kv_weight *w, int r0, int r1, const float *xs, const float *xps,
                      int batch, float *y)
{
    size_t cols = (size_t)w->cols, rows = (size_t)w->rows;
    const uint16_t *data = w->data;
    int step = batch > 1 ? 2 : 1;
    for (int r = r0; r < r1; r += step) {
        int nr = r1 - r >= step ? step : 1;
        const uint16_t *wr[2] = {data + (size_t)r * cols, data + (size_t)(r + nr - 1) * cols};
        for (int b = 0; b < batch; b += 2) {
            int nb = batch - b >= 2 ? 2 : 1;
            const float *xp[2] = {xps + (size_t)b * cols, xps + (size_t)(b + nb - 1) * cols};
            const float *x[2] = {xs + (size_t)b * cols, xs + (size_t)(b + nb - 1) * cols};
            float out[4];
            if (nr == 2 && nb == 2)
                bf16_tile22(wr, xp, x, cols, out);
            else if (nr == 2)
                bf16_tile(2, 1, wr, xp, x, cols, out);
            else if (nb == 2)
                bf16_tile(1, 2, wr, xp, x, cols, out);
            else
                bf16_tile(1, 1, wr, xp, x, cols, out);
            for (int i = 0; i < nr; i++)
                for (int k = 0; k < nb; k++)
                    y[(size_t)(b + k) * rows + (size_t)(r + i)] = out[i * nb + k];
        }
    }
}
#endif

static void gemv_task(void *ctx, int task, int worker)
{
    (void)worker;
    const gemv_job *j = ctx;
    int i = 0;
    while (task >= j->first[i + 1])
        i++;
    const kv_weight *w = j->ws[i];
    int r0 = (task - j->first[i]) * j->task_rows[i];
    int r1 = w->rows - r0 > j->task_rows[i] ? r0 + j->task_rows[i] : w->rows;
    size_t cols = (size_t)j->cols, rows = (size_t)w->rows;
#ifdef KV_AVX2
    if (w->dtype == KV_DTYPE_BF16) {
        bf16_rows(w, r0, r1, j->xs, j->xps, j->batch, j->ys[i]);
        return;
    }
#endif
    for (int r = r0; r < r1; r++)
        for (int b = 0; b < j->batch; b++)
            j->ys[i][(size_t)b * rows + (size_t)r] =
                dot_row(w, r, j->xs + (size_t)b * cols, j->xps + (size_t)b * cols);
}

void kv_gemv_batch(kv_pool *p, int n, const kv_weight *const *ws, const float *xs, int batch,
                   float *const *ys)
{
    assert(n >= 1 && n <= 8 && batch >= 1);
    int cols = ws[0]->cols;
    gemv_job j = {.n = n, .batch = batch, .ws = ws, .ys = ys, .xs = xs, .cols = cols};
    size_t work = 0;
    for (int i = 0; i < n; i++) {
        j.task_rows[i] = gemv_task_rows(ws[i]);
        j.first[i + 1] = j.first[i] + (ws[i]->rows + j.task_rows[i] - 1) / j.task_rows[i];
        work += (size_t)ws[i]->rows * (size_t)ws[i]->cols * (size_t)batch;
    }
    size_t floats = (size_t)batch * (size_t)cols;
    float stack[4096], *xps = floats <= 4096 ? stack : malloc(floats * sizeof *xps);
    if (!xps) { /* no room for the permuted copies: the scalar kernel needs none */
        for (int i = 0; i < n; i++)
            for (int r = 0; r < ws[i]->rows; r++)
                for (int b = 0; b < batch; b++)
                    ys[i][(size_t)b * (size_t)ws[i]->rows + (size_t)r] =
                        dot_row_scalar(ws[i], r, xs + (size_t)b * (size_t)cols);
        return;
    }
    for (int b = 0; b < batch; b++)
        permute16(xs + (size_t)b * (size_t)cols, cols, xps + (size_t)b * (size_t)cols);
    j.xps = xps;
    /* Small matrices are not worth waking the other threads for. */
    kv_pool_run(work > KV_PARALLEL_MIN_WORK ? p : NULL, j.first[n], gemv_task, &j);
    if (xps != stack)
        free(xps);
}

void kv_gemv_many(kv_pool *p, int n, const kv_weight *const *ws, const float *x, float *const *ys)
{
    kv_gemv_batch(p, n, ws, x, 1, ys);
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
        if (w->dtype == KV_DTYPE_BF16)
            for (; i + 8 <= cols; i += 8)
                _mm256_storeu_ps(d + i, load8(KV_DTYPE_BF16, w->data, off + i));
        else
            for (; i + 8 <= cols; i += 8)
                _mm256_storeu_ps(d + i, load8(KV_DTYPE_F16, w->data, off + i));
#endif
        for (; i < cols; i++)
            d[i] = load1(w, off + i);
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

typedef struct matmul_job {
    const kv_weight *w;
    const float *x;
    int n, block;
    float *y, *scratch;
    size_t scratch_floats;
} matmul_job;

/* One block of output columns: sgemm on one thread (OpenBLAS stays
 * single-threaded; the pool spreads the blocks). */
static void matmul_task(void *ctx, int task, int worker)
{
    const matmul_job *j = ctx;
    const kv_weight *w = j->w;
    int r0 = task * j->block, nr = w->rows - r0 < j->block ? w->rows - r0 : j->block;
    const float *b = (const float *)w->data + (size_t)r0 * (size_t)w->cols;
    if (w->dtype != KV_DTYPE_F32) {
        float *s = j->scratch + (size_t)worker * j->scratch_floats;
        widen_range(w, r0, nr, s);
        b = s;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, j->n, nr, w->cols, 1.0f, j->x, w->cols, b,
                w->cols, 0.0f, j->y + r0, w->rows);
}

void kv_matmul(kv_pool *p, const kv_weight *w, const float *x, int n, float *y, float *scratch)
{
    if (n <= KV_GEMV_MAX_ROWS) {
        for (int i = 0; i < n; i++)
            kv_gemv(p, w, x + (size_t)i * (size_t)w->cols, y + (size_t)i * (size_t)w->rows);
        return;
    }
    matmul_job j = {.w = w,
                    .x = x,
                    .n = n,
                    .y = y,
                    .scratch = scratch,
                    .block = matmul_block(p, w),
                    .scratch_floats = kv_matmul_scratch(p, w)};
    kv_pool_run(p, (w->rows + j.block - 1) / j.block, matmul_task, &j);
}

#ifdef KV_AVX2
/* e^x for 8 floats, about 1 ulp: Cody-Waite reduction by ln 2 and Cephes'
 * polynomial. Softmax over an 8k prompt evaluates billions of
 * exponentials, and the scalar libm call would dominate attention. */
static inline __m256 exp8(__m256 x)
{
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.33654f)), _mm256_set1_ps(88.72283f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    x = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    x = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), x);
    __m256 y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
    __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}
#endif

void kv_softmax(float *x, int n)
{
    float mx = x[0];
    for (int i = 1; i < n; i++)
        mx = x[i] > mx ? x[i] : mx;
    int i = 0;
    float sum = 0;
#ifdef KV_AVX2
    __m256 acc = _mm256_setzero_ps(), m = _mm256_set1_ps(mx);
    for (; i + 8 <= n; i += 8) {
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), m));
        _mm256_storeu_ps(x + i, e);
        acc = _mm256_add_ps(acc, e);
    }
    sum = hsum8(acc);
#endif
    for (; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    float inv = 1.0f / sum;
    for (i = 0; i < n; i++)
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
