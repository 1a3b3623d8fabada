/* bench_gemv: the decode GEMV's speed, kv_gemv_batch on random weights, in
 * GFLOP/s per thread (a multiply and an add counted as two) and in GB/s of
 * weights read (all threads), for batch sizes (input rows decoded together)
 * and matrix shapes.
 *
 *   build/tests/bench_gemv [--threads 1] [--dtype bf16|f16|f32]
 *                          [--compute f32|bf16] [--batches 1,4,8,17,32]
 *                          [--shapes 3072x1024,1024x3072,151936x1024]
 *                          [--peak GFLOPS] [--seconds 0.3]
 *
 * The default shapes are Qwen3-0.6B's MLP up (gate/up), down and LM head.
 * --compute bf16 (BF16 weights only) rounds the input rows to BF16 and runs
 * bf16 mode's kernels, as decode in that mode does.
 * KVBENCH_ISA=avx2 runs the AVX2 kernels on any CPU.
 * --peak (e.g. `kvbench bench machine`'s FP32 FMA figure per thread) adds
 * each rate as a fraction of it. Each figure is the best of the calls made
 * in --seconds (at least three calls): the machines this runs on are
 * shared, and the best call is the one least disturbed. To compare two
 * builds, run their binaries alternately. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "model/cpu.h"
#include "model/kernels.h"
#include "util/clock.h"
#include "util/pool.h"

static void usage(void)
{
    fprintf(stderr, "usage: bench_gemv [--threads N] [--dtype bf16|f16|f32] [--compute f32|bf16] "
                    "[--batches 1,4,...] [--shapes RxC,...] [--peak GFLOPS] [--seconds S]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    int threads = 1, batches[16] = {1, 4, 8, 17, 32}, nb = 5;
    int shapes[16] = {3072, 1024, 1024, 3072, 151936, 1024}, ns = 6;
    kv_dtype dtype = KV_DTYPE_BF16;
    kv_compute mode = KV_COMPUTE_F32;
    double peak = 0, seconds = 0.3;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            usage();
        if (!strcmp(argv[i], "--threads"))
            threads = atoi(v);
        else if (!strcmp(argv[i], "--batches"))
            nb = bench_parse_list(v, batches, 16, 0, usage);
        else if (!strcmp(argv[i], "--shapes"))
            ns = bench_parse_list(v, shapes, 16, 1, usage);
        else if (!strcmp(argv[i], "--peak"))
            peak = atof(v);
        else if (!strcmp(argv[i], "--seconds"))
            seconds = atof(v);
        else if (!strcmp(argv[i], "--compute")) {
            if (kv_compute_parse(v, &mode) != 0)
                usage();
        } else if (!strcmp(argv[i], "--dtype"))
            dtype = !strcmp(v, "f32")   ? KV_DTYPE_F32
                    : !strcmp(v, "f16") ? KV_DTYPE_F16
                    : !strcmp(v, "bf16") ? KV_DTYPE_BF16
                                         : (usage(), KV_DTYPE_F32);
        else
            usage();
        i++;
    }
    if (mode == KV_COMPUTE_BF16 && dtype != KV_DTYPE_BF16)
        usage(); /* bf16 mode multiplies BF16 weights only */
    kv_error err;
    kv_pool *pool = NULL;
    if (kv_isa_init(&err) != 0 || !(pool = kv_pool_new(threads, &err))) {
        fprintf(stderr, "bench_gemv: %s\n", err.msg);
        return 1;
    }
    int maxb = 0;
    for (int i = 0; i < nb; i++)
        maxb = batches[i] > maxb ? batches[i] : maxb;
    printf("%-14s %6s %12s %10s%s\n", "shape", "batch", "GFLOP/s/thr", "weight GB/s",
           peak > 0 ? "  of peak" : "");
    for (int s = 0; s + 1 < ns; s += 2) {
        int rows = shapes[s], cols = shapes[s + 1];
        size_t esize = dtype == KV_DTYPE_F32 ? 4 : 2, n = (size_t)rows * (size_t)cols;
        /* 64-byte aligned, as the model's weights are (kv_mem_alloc_huge) */
        void *data = aligned_alloc(64, (n * esize + 63) / 64 * 64);
        float *xs = malloc((size_t)maxb * (size_t)cols * sizeof *xs),
              *y = malloc((size_t)maxb * (size_t)rows * sizeof *y);
        if (!data || !xs || !y) {
            fprintf(stderr, "bench_gemv: out of memory for %dx%d\n", rows, cols);
            return 1;
        }
        srand(1);
        for (size_t i = 0; i < n; i++) {
            float v = bench_near_one();
            if (dtype == KV_DTYPE_F32)
                ((float *)data)[i] = v;
            else if (dtype == KV_DTYPE_BF16)
                ((uint16_t *)data)[i] = kv_f32_to_bf16(v);
            else
                ((uint16_t *)data)[i] = 0x3c00 | (uint16_t)(rand() & 0x3ff); /* F16 in [1, 2) */
        }
        for (size_t i = 0; i < (size_t)maxb * (size_t)cols; i++)
            xs[i] = bench_near_one();
        if (mode == KV_COMPUTE_BF16)
            kv_round_bf16(xs, (size_t)maxb * (size_t)cols);
        kv_weight w = {.dtype = dtype, .data = data, .rows = rows, .cols = cols};
        const kv_weight *ws[1] = {&w};
        float *ys[1] = {y};
        for (int bi = 0; bi < nb; bi++) {
            int batch = batches[bi];
            bench_best best = BENCH_BEST_NONE;
            double t_end = kv_clock_s() + seconds;
            kv_gemv_batch(pool, 1, ws, xs, batch, mode, ys); /* warm up */
            for (int calls = 0; calls < 3 || kv_clock_s() < t_end; calls++) {
                bench_timer t = bench_start(false);
                kv_gemv_batch(pool, 1, ws, xs, batch, mode, ys);
                bench_stop(&t, &best);
            }
            double gflops = bench_gflop(n, batch) / best.wall / threads;
            char shape[32];
            snprintf(shape, sizeof shape, "%dx%d", rows, cols);
            printf("%-14s %6d %12.2f %10.1f", shape, batch, gflops, (double)(n * esize) / best.wall / 1e9);
            if (peak > 0)
                printf("  %7.0f%%", 100 * gflops / peak);
            printf("\n");
            fflush(stdout);
        }
        free(data), free(xs), free(y);
    }
    kv_pool_free(pool);
    return 0;
}
