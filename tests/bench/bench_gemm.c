/* bench_gemm: prefill's BF16 GEMM (bf16 mode, BF16 weights) on random
 * data, each way kvbench could run it, in GFLOP/s (a multiply and an add
 * counted as two) of wall time and of CPU time:
 *
 *   pool+oneDNN  kv_matmul: the pool's workers run single-threaded oneDNN
 *                calls on blocks of output columns (what prefill runs)
 *   oneDNN-omp   one oneDNN call on --threads OpenMP threads, the pool idle
 *   own-tile     the level's own vdpbf16ps 4x4 tile (kernels_avx512bf16.c)
 *                on the pool, as prefill ran before oneDNN
 *   sgemm-f32    kv_matmul in f32 mode on the weights widened to F32
 *                (OpenBLAS single-threaded on the pool: f32 mode)
 *
 *   build/tests/bench_gemm [--threads 2] [--rows 512,2048]
 *                          [--shapes 3072x1024,1024x3072] [--rounds 3]
 *
 * Shapes are weight rows x columns (Qwen3-0.6B's MLP up and down by
 * default), --rows the activation rows of one call. The ways run one
 * after another within each round, rounds alternate, and each figure is
 * the best round: on a shared machine only the interleaved comparison and
 * the per-CPU-second rates mean much. Needs the avx512bf16 level. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "model/cpu.h"
#include "model/gemm_dnnl.h"
#include "model/kernels.h"
#include "model/kernels_isa.h"
#include "util/pool.h"

enum { WAY_POOL_DNNL, WAY_OMP_DNNL, WAY_OWN_TILE, WAY_SGEMM, WAYS };
static const char *const way_names[WAYS] = {"pool+oneDNN", "oneDNN-omp", "own-tile", "sgemm-f32"};

static void usage(void)
{
    fprintf(stderr, "usage: bench_gemm [--threads N] [--rows M,..] [--shapes RxC,..] "
                    "[--rounds N]\n");
    exit(2);
}

typedef struct problem {
    kv_pool *pool;
    int threads, m;
    kv_weight w, w32; /* BF16, and the same values in F32 */
    float *x, *y, *scratch;
    uint16_t *x16;
} problem;

typedef struct tile_job {
    const problem *p;
    int block;
} tile_job;

static void tile_task(void *ctx, int task, int worker)
{
    (void)worker;
    const tile_job *j = ctx;
    const kv_weight *w = &j->p->w;
    int r0 = task * j->block, r1 = r0 + j->block < w->rows ? r0 + j->block : w->rows;
    kv_kernels_avx512bf16.gemm_bf16(w, r0, r1, j->p->x16, j->p->m, (size_t)w->cols, j->p->y,
                                    (size_t)w->rows);
}

static int run_way(const problem *p, int way)
{
    const kv_weight *w = &p->w;
    switch (way) {
    case WAY_POOL_DNNL:
        kv_matmul(p->pool, w, p->x, p->m, KV_COMPUTE_BF16, p->y, p->scratch);
        return 0;
    case WAY_OMP_DNNL: {
        kv_pack_bf16(p->x, (size_t)p->m * (size_t)w->cols, p->x16); /* as kv_matmul does */
        kv_dnnl_product prod = {.dt = KV_DTYPE_BF16, .m = p->m, .n = w->rows, .k = w->cols,
                                .a = p->x16, .b = w->data, .lda = (size_t)w->cols,
                                .ldb = (size_t)w->cols, .y = p->y, .ldy = (size_t)w->rows};
        return kv_dnnl_matmul(p->threads, &prod) ? 0 : -1;
    }
    case WAY_OWN_TILE: {
        kv_pack_bf16(p->x, (size_t)p->m * (size_t)w->cols, p->x16);
        tile_job j = {.p = p, .block = 64};
        kv_pool_run(p->pool, (w->rows + j.block - 1) / j.block, tile_task, &j);
        return 0;
    }
    default:
        kv_matmul(p->pool, &p->w32, p->x, p->m, KV_COMPUTE_F32, p->y, p->scratch);
        return 0;
    }
}

int main(int argc, char **argv)
{
    int threads = 2, rounds = 3, ms[16] = {512, 2048}, nm = 2;
    int shapes[16] = {3072, 1024, 1024, 3072}, ns = 4;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            usage();
        if (!strcmp(argv[i], "--threads"))
            threads = atoi(v);
        else if (!strcmp(argv[i], "--rows"))
            nm = bench_parse_list(v, ms, 16, 0, usage);
        else if (!strcmp(argv[i], "--shapes"))
            ns = bench_parse_list(v, shapes, 16, 1, usage);
        else if (!strcmp(argv[i], "--rounds"))
            rounds = atoi(v);
        else
            usage();
        i++;
    }
    kv_error err;
    kv_pool *pool = threads > 0 ? kv_pool_new(threads, &err) : NULL;
    if (!pool || rounds < 1) {
        fprintf(stderr, "bench_gemm: %s\n", pool ? "--rounds must be >= 1" : err.msg);
        return 1;
    }
    if (kv_isa_active() < KV_ISA_AVX512BF16) {
        fprintf(stderr, "bench_gemm: needs the avx512bf16 level (this run: %s)\n",
                kv_isa_name(kv_isa_active()));
        return 1;
    }
    printf("%-10s %5s %-12s %10s %10s\n", "shape", "rows", "way", "GFLOP/s", "per CPU-s");
    for (int s = 0; s + 1 < ns; s += 2)
        for (int mi = 0; mi < nm; mi++) {
            int rows = shapes[s], cols = shapes[s + 1], m = ms[mi];
            size_t n = (size_t)rows * (size_t)cols, xn = (size_t)m * (size_t)cols;
            problem p = {.pool = pool, .threads = threads, .m = m};
            uint16_t *w16 = malloc(n * 2);
            float *w32 = malloc(n * 4);
            p.x = malloc(xn * 4);
            p.x16 = malloc(xn * 2);
            p.y = malloc((size_t)m * (size_t)rows * 4);
            if (!w16 || !w32 || !p.x || !p.x16 || !p.y) {
                fprintf(stderr, "bench_gemm: out of memory for %dx%d\n", rows, cols);
                return 1;
            }
            srand(1);
            for (size_t i = 0; i < n; i++) {
                w16[i] = kv_f32_to_bf16(bench_near_one());
                w32[i] = kv_bf16_to_f32(w16[i]);
            }
            for (size_t i = 0; i < xn; i++)
                p.x[i] = kv_bf16_to_f32(kv_f32_to_bf16(bench_near_one()));
            p.w = (kv_weight){.dtype = KV_DTYPE_BF16, .data = w16, .rows = rows, .cols = cols};
            p.w32 = (kv_weight){.dtype = KV_DTYPE_F32, .data = w32, .rows = rows, .cols = cols};
            bench_best best[WAYS];
            double gflop = bench_gflop(n, m);
            for (int k = 0; k < WAYS; k++) {
                best[k] = BENCH_BEST_NONE;
                if (run_way(&p, k) != 0) { /* warm up: primitives, pages */
                    fprintf(stderr, "bench_gemm: oneDNN declined %dx%d\n", rows, cols);
                    return 1;
                }
            }
            for (int r = 0; r < rounds; r++)
                for (int k0 = 0; k0 < WAYS; k0++) {
                    int k = (k0 + r) % WAYS; /* each round starts with another way */
                    bench_timer t = bench_start(true);
                    run_way(&p, k);
                    bench_stop(&t, &best[k]);
                }
            for (int k = 0; k < WAYS; k++)
                printf("%5dx%-4d %5d %-12s %10.1f %10.1f\n", rows, cols, m, way_names[k],
                       gflop / best[k].wall, gflop / best[k].cpu);
            fflush(stdout);
            free(w16), free(w32), free(p.x), free(p.x16), free(p.y);
        }
    kv_pool_free(pool);
    return 0;
}
