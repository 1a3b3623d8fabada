/* What the matrix benchmarks (bench_gemm, bench_gemv) share: their list
 * options, their random operands and how they time a call. */
#ifndef BENCH_UTIL_H
#define BENCH_UTIL_H

#include <stdbool.h>
#include <stddef.h>

/* Comma-separated positive integers ("512,2048"), or with pairs set
 * RxC pairs ("3072x1024,1024x3072") as two integers each, into out (at most
 * max integers; the rest are dropped); the number of integers. A malformed
 * list or a value that is not positive calls usage, which exits. */
int bench_parse_list(const char *s, int *out, int max, int pairs, void (*usage)(void));

/* A uniform random value in [0.5, 1.5] (rand()): operands near 1 keep
 * every product normal, where subnormals would be slow. */
float bench_near_one(void);

/* The least wall and CPU seconds one call has taken so far: on a shared
 * machine the best call is the one least disturbed. */
typedef struct bench_best {
    double wall, cpu;
} bench_best;
#define BENCH_BEST_NONE ((bench_best){1e30, 1e30})

/* A call being timed: bench_start before it, bench_stop after. The CPU
 * clock is a system call per read, which halved the rate of a 0.1 ms
 * GEMV on the pool (bench_gemv, 3072x1024 BF16, batch 1): with_cpu false
 * leaves it unread, and best->cpu alone. */
typedef struct bench_timer {
    double wall, cpu; /* cpu < 0: not measured */
} bench_timer;
bench_timer bench_start(bool with_cpu);
/* Keeps the call's times in *best where they are the least. */
void bench_stop(const bench_timer *t, bench_best *best);

/* GFLOP of a matrix product over `weights` weights and `rows` input rows:
 * a multiply and an add counted as two. */
double bench_gflop(size_t weights, int rows);

#endif
