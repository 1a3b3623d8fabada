/* kvbench bench machine: the limits the engine's speed is judged against,
 * measured the way the engine runs (its thread pool, its kernel level), so
 * that a speed table can state them from the same run:
 *
 *   fp32  FMA throughput: independent fused multiply-add chains held in
 *         registers, 256-bit at the avx2 level, 512-bit at the AVX-512 ones
 *         (GFLOP/s, a multiply and an add counted as two);
 *   bf16  vdpbf16ps throughput (two BF16 products added into each FP32
 *         lane), at the avx512bf16 level only: below it there is no BF16
 *         arithmetic and the bf16 mode widens to FP32, so its limit is fp32;
 *   read  memory read bandwidth: a streaming sum over a buffer several times
 *         the last-level cache, so that every pass comes from DRAM (GB/s).
 *
 * Each figure is timed --repeats times (median, min, max). The loops check
 * their own results against a scalar recurrence, so a compiler that dropped
 * or merged work would make the bench fail rather than report a peak that
 * was never reached. Each level's loop carries its own target attribute
 * (like the kernels, a -march=x86-64-v3 build carries the AVX-512 loops) and
 * runs only on a CPU that has that level. */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/bench.h"
#include "util/clock.h"
#include "model/cpu.h"
#include "model/kernels.h"
#include "util/pool.h"

/* One task is FMA_ITERS steps of every chain: about a millisecond, short
 * enough for the pool to balance, long enough that its overhead is noise. */
#define FMA_ITERS       (1L << 18)
#define TASKS_PER_THREAD 32
#define READ_CHUNK      (1L << 20) /* bytes one task reads */

/* The FMA recurrence every chain runs: x <- x * A + B (a fixed point near 1,
 * no overflow, no denormals). */
#define FMA_A 0.9999f
#define FMA_B 1e-4f
#define FMA_X0 0.5f

/* Each loop stores its chains' final values in out (one float per lane):
 * the caller checks their sum. */
__attribute__((target("avx2,fma"))) static void fma_avx2(long iters, float *out)
{
    /* 12 chains: two FMA pipes × a latency of 4–5 cycles need ≥ 10 in flight. */
    __m256 a = _mm256_set1_ps(FMA_A), b = _mm256_set1_ps(FMA_B);
    __m256 x[12];
    for (int i = 0; i < 12; i++)
        x[i] = _mm256_set1_ps(FMA_X0);
    for (long k = 0; k < iters; k++)
        for (int i = 0; i < 12; i++)
            x[i] = _mm256_fmadd_ps(x[i], a, b);
    for (int i = 0; i < 12; i++)
        _mm256_storeu_ps(out + 8 * i, x[i]);
}

__attribute__((target("avx512f"))) static void fma_avx512(long iters, float *out)
{
    __m512 a = _mm512_set1_ps(FMA_A), b = _mm512_set1_ps(FMA_B);
    __m512 x[16];
    for (int i = 0; i < 16; i++)
        x[i] = _mm512_set1_ps(FMA_X0);
    for (long k = 0; k < iters; k++)
        for (int i = 0; i < 16; i++)
            x[i] = _mm512_fmadd_ps(x[i], a, b);
    for (int i = 0; i < 16; i++)
        _mm512_storeu_ps(out + 16 * i, x[i]);
}

/* Every lane adds 1·1 + 1·1 per step: exact in FP32 up to 2^24, so the
 * result is known. */
__attribute__((target("avx512f,avx512bf16"))) static void dpbf16(long iters, float *out)
{
    __m512bh one = (__m512bh)_mm512_set1_epi16(0x3f80); /* BF16 1.0 */
    __m512 x[16];
    for (int i = 0; i < 16; i++)
        x[i] = _mm512_setzero_ps();
    for (long k = 0; k < iters; k++)
        for (int i = 0; i < 16; i++)
            x[i] = _mm512_dpbf16_ps(x[i], one, one);
    for (int i = 0; i < 16; i++)
        _mm512_storeu_ps(out + 16 * i, x[i]);
}

/* Sums n floats (a multiple of 32) from p into out[0..8). */
__attribute__((target("avx2"))) static void read_avx2(const float *p, long n, float *out)
{
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (long i = 0; i < n; i += 32) {
        s0 = _mm256_add_ps(s0, _mm256_load_ps(p + i));
        s1 = _mm256_add_ps(s1, _mm256_load_ps(p + i + 8));
        s2 = _mm256_add_ps(s2, _mm256_load_ps(p + i + 16));
        s3 = _mm256_add_ps(s3, _mm256_load_ps(p + i + 24));
    }
    _mm256_storeu_ps(out, _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
}

typedef enum loop_kind { LOOP_FMA_AVX2, LOOP_FMA_AVX512, LOOP_DPBF16, LOOP_READ } loop_kind;

/* Floating-point operations one step of a loop does (all chains). */
static double flops_per_step(loop_kind k)
{
    switch (k) {
    case LOOP_FMA_AVX2: return 12 * 8 * 2;
    case LOOP_FMA_AVX512: return 16 * 16 * 2;
    case LOOP_DPBF16: return 16 * 16 * 4; /* two products and two adds per lane */
    case LOOP_READ: break;
    }
    return 0;
}

/* What every task of an FMA or BF16 loop must return: its chains' sum. */
static double expected_sum(loop_kind k, long iters)
{
    if (k == LOOP_DPBF16)
        return 16.0 * 16 * 2 * (double)iters;
    float x = FMA_X0;
    for (long i = 0; i < iters; i++)
        x = fmaf(x, FMA_A, FMA_B);
    return (double)x * (k == LOOP_FMA_AVX2 ? 12 * 8 : 16 * 16);
}

typedef struct job {
    loop_kind kind;
    const float *buf; /* LOOP_READ */
    double *result;   /* per task */
} job;

static void run_task(void *ctx, int task, int worker)
{
    (void)worker;
    job *j = ctx;
    float out[16 * 16] = {0}; /* the widest loop's chains × lanes */
    switch (j->kind) {
    case LOOP_FMA_AVX2: fma_avx2(FMA_ITERS, out); break;
    case LOOP_FMA_AVX512: fma_avx512(FMA_ITERS, out); break;
    case LOOP_DPBF16: dpbf16(FMA_ITERS, out); break;
    case LOOP_READ:
        read_avx2(j->buf + (size_t)task * (READ_CHUNK / sizeof(float)), READ_CHUNK / sizeof(float),
                  out);
        break;
    }
    double sum = 0;
    for (int i = 0; i < 16 * 16; i++)
        sum += out[i];
    j->result[task] = sum;
}

typedef struct figure {
    double v[64];   /* per run: GFLOP/s or GB/s of wall time */
    double cpu[64]; /* per run: the same per second of CPU time the process got */
    int n;
} figure;

/* Times `repeats` runs of n_tasks tasks of kind k; each run's rate (work /
 * wall seconds / 1e9) into f, and per CPU second: on a shared machine the
 * wall rate is what the neighbours left, the CPU rate what a core does. Fails when a task's result is not the one the
 * loop must produce. */
static int measure(kv_pool *pool, loop_kind k, const float *buf, int n_tasks, int repeats,
                   figure *f)
{
    double *result = calloc((size_t)n_tasks, sizeof *result);
    if (!result) {
        kb_error("bench machine: out of memory");
        return -1;
    }
    job j = {.kind = k, .buf = buf, .result = result};
    double want = k == LOOP_READ ? 0 : expected_sum(k, FMA_ITERS);
    double work = k == LOOP_READ ? (double)n_tasks * READ_CHUNK
                                 : (double)n_tasks * FMA_ITERS * flops_per_step(k);
    if (k == LOOP_READ)
        kv_pool_run(pool, n_tasks, run_task, &j); /* untimed: page faults, TLB */
    f->n = 0;
    for (int r = 0; r < repeats && r < 64; r++) {
        double t0 = kv_clock_s(), c0 = kv_clock_cpu_s();
        kv_pool_run(pool, n_tasks, run_task, &j);
        f->cpu[f->n] = work / (kv_clock_cpu_s() - c0) / 1e9;
        f->v[f->n++] = work / (kv_clock_s() - t0) / 1e9;
        for (int t = 0; t < n_tasks; t++)
            if (result[t] != want) {
                kb_error("bench machine: a measuring loop returned %.17g instead of %.17g; "
                         "its figure would be void",
                         result[t], want);
                free(result);
                return -1;
            }
    }
    free(result);
    return 0;
}

static void report(const char *measure, const char *isa, const char *unit, int threads,
                   figure *f, bool json)
{
    double med = kb_median(f->v, f->n), cpu = kb_median(f->cpu, f->n); /* both sort */
    if (json)
        printf("{\"measure\":\"%s\",\"isa\":\"%s\",\"threads\":%d,\"unit\":\"%s\","
               "\"median\":%.2f,\"min\":%.2f,\"max\":%.2f,\"runs\":%d,"
               "\"per_cpu_s_median\":%.2f}\n",
               measure, isa, threads, unit, med, f->v[0], f->v[f->n - 1], f->n, cpu);
    else
        printf("%-6s %-11s %3d threads  %8.2f %-7s (min %.2f, max %.2f, %d runs; %.2f per "
               "cpu-s)\n",
               measure, isa, threads, med, unit, f->v[0], f->v[f->n - 1], f->n, cpu);
    fflush(stdout);
}

/* The last-level cache's size, or 0 when the system does not say. */
static long llc_bytes(void)
{
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE), l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return l3 > 0 ? l3 : l2 > 0 ? l2 : 0;
}

/* The read buffer: mib MiB, or (mib = 0) eight times the LLC and at least
 * 512 MiB, so that no pass can be served from cache; whole tasks. */
static size_t read_buffer_bytes(long mib)
{
    long llc = llc_bytes();
    size_t bytes = mib > 0 ? (size_t)mib << 20
                           : (size_t)(8 * llc > (512L << 20) ? 8 * llc : 512L << 20);
    return (bytes + READ_CHUNK - 1) / READ_CHUNK * READ_CHUNK;
}

int kb_machine_limits(kv_pool *pool, int repeats, long buffer_mib, kb_machine_limit *out)
{
    int nt = kv_pool_threads(pool);
    loop_kind fma = kv_isa_active() >= KV_ISA_AVX512 ? LOOP_FMA_AVX512 : LOOP_FMA_AVX2;
    size_t bytes = read_buffer_bytes(buffer_mib);
    figure f;
    if (measure(pool, fma, NULL, nt * TASKS_PER_THREAD, repeats, &f) != 0)
        return -1;
    out->fp32_gflops = kb_median(f.v, f.n);
    out->bf16_gflops = 0;
    if (kv_isa_active() >= KV_ISA_AVX512BF16) {
        if (measure(pool, LOOP_DPBF16, NULL, nt * TASKS_PER_THREAD, repeats, &f) != 0)
            return -1;
        out->bf16_gflops = kb_median(f.v, f.n);
    }
    float *buf = aligned_alloc(64, bytes);
    if (!buf) {
        kb_error("bench: cannot allocate the %zu MiB read buffer (--buffer-mib)", bytes >> 20);
        return -1;
    }
    memset(buf, 0, bytes);
    int rc = measure(pool, LOOP_READ, buf, (int)(bytes / READ_CHUNK), repeats, &f);
    free(buf);
    if (rc != 0)
        return -1;
    out->read_gbps = kb_median(f.v, f.n);
    return 0;
}

static int run(const kb_args *a)
{
    long threads = 0, repeats = 5, mib = 0;
    if (kb_arg_long(a, "threads", 1, 1024, &threads) != 0 ||
        kb_arg_long(a, "repeats", 1, 64, &repeats) != 0 ||
        kb_arg_long(a, "buffer-mib", 1, 1 << 20, &mib) != 0)
        return KB_EXIT_USAGE;
    bool json = kb_flag(a, "json");
    kv_error err;
    if (kv_isa_init(&err) != 0) {
        kb_error("%s", err.msg);
        return KB_EXIT_FAIL;
    }
    kv_set_threads((int)threads);
    kv_pool *pool = kv_pool_new(kv_get_threads(), &err);
    if (!pool) {
        kb_error("%s", err.msg);
        return KB_EXIT_FAIL;
    }
    int nt = kv_pool_threads(pool);
    kv_isa isa = kv_isa_active();
    size_t bytes = read_buffer_bytes(mib);
    fprintf(stderr, "# kernels %s, %d threads; last-level cache %ld KiB, read buffer %zu MiB\n",
            kv_isa_name(isa), nt, llc_bytes() >> 10, bytes >> 20);
    figure f;
    int rc = 0;
    loop_kind fma = isa >= KV_ISA_AVX512 ? LOOP_FMA_AVX512 : LOOP_FMA_AVX2;
    const char *fma_isa = fma == LOOP_FMA_AVX512 ? "avx512" : "avx2";
    if (measure(pool, fma, NULL, nt * TASKS_PER_THREAD, (int)repeats, &f) != 0)
        rc = KB_EXIT_FAIL;
    else
        report("fp32", fma_isa, "GFLOP/s", nt, &f, json);
    if (rc == 0 && isa >= KV_ISA_AVX512BF16) {
        if (measure(pool, LOOP_DPBF16, NULL, nt * TASKS_PER_THREAD, (int)repeats, &f) != 0)
            rc = KB_EXIT_FAIL;
        else
            report("bf16", "avx512bf16", "GFLOP/s", nt, &f, json);
    } else if (rc == 0) {
        if (json)
            printf("{\"measure\":\"bf16\",\"isa\":\"%s\",\"threads\":%d,\"unit\":\"GFLOP/s\","
                   "\"median\":null,\"note\":\"no BF16 arithmetic at this level: bf16 mode "
                   "widens to FP32\"}\n",
                   kv_isa_name(isa), nt);
        else
            printf("bf16   %-11s %3d threads      none: no BF16 arithmetic at this level (the "
                   "bf16 mode widens to FP32)\n",
                   kv_isa_name(isa), nt);
    }
    float *buf = rc == 0 ? aligned_alloc(64, bytes) : NULL;
    if (rc == 0 && !buf) {
        kb_error("bench machine: cannot allocate the %zu MiB read buffer (--buffer-mib)",
                 bytes >> 20);
        rc = KB_EXIT_FAIL;
    }
    if (rc == 0) {
        memset(buf, 0, bytes); /* zeros: the sum every task must return */
        if (measure(pool, LOOP_READ, buf, (int)(bytes / READ_CHUNK), (int)repeats, &f) != 0)
            rc = KB_EXIT_FAIL;
        else
            report("read", "avx2", "GB/s", nt, &f, json);
    }
    free(buf);
    kv_pool_free(pool);
    return rc;
}

static const kb_option options[] = {
    {"threads", "N", "threads (default: all cores)"},
    {"repeats", "N", "runs per figure; the median is reported (default 5)"},
    {"buffer-mib", "N", "read-bandwidth buffer (default: 8x the last-level cache, at least 512)"},
    {"json", NULL, "print one JSON object per figure"},
    {NULL, NULL, NULL},
};

const kb_command kb_bench_machine_cmd = {
    .name = "bench machine",
    .summary = "FP32 and BF16 arithmetic peak at the kernel level in use, memory read bandwidth",
    .usage = "kvbench bench machine [options]",
    .description = "FP32 FMA and BF16 dot-product GFLOP/s at the kernel level in use, memory "
                   "read GB/s.",
    .options = options,
    .run = run,
};
