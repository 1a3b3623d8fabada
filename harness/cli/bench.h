/* The kinds of `kvbench bench`: each measures one part of kvbench and prints
 * what it measured. A kind is one command here, named "bench KIND", with
 * its options, help and run function in its file bench_KIND.c, and one line
 * in cmd_bench.c's list. */
#ifndef KB_BENCH_H
#define KB_BENCH_H

#include "cli/cli.h"
#include "util/pool.h"

/* Tokenizer load time and encode/decode throughput (--model, --file). */
extern const kb_command kb_bench_tokenizer_cmd;

/* Prefill and decode throughput of the engine, and its peak memory
 * (bench_model.h). */
extern const kb_command kb_bench_model_cmd;

/* Wall time of the full cache alone vs 1 + K configs decoded batched and one
 * after another, each with the prefill a run would do (--model,
 * --prompt-tokens, --gen-tokens, --configs K,K,.., --repeats, --threads,
 * --compute). */
extern const kb_command kb_bench_sweep_cmd;

/* This machine's limits, measured the way the engine runs: FP32 FMA and
 * BF16 dot-product throughput at the kernel level in use, and memory read
 * bandwidth (--threads, --repeats, --buffer-mib, --json). */
extern const kb_command kb_bench_machine_cmd;

/* What bench machine measures, as one figure each (median of `repeats`
 * runs on pool's threads, wall time): FP32 FMA GFLOP/s at the active kernel
 * level, BF16 dot-product GFLOP/s (0 at a level without BF16 arithmetic)
 * and DRAM read GB/s (over buffer_mib MiB; 0: bench machine's default).
 * The roofline other benches compare against. */
typedef struct kb_machine_limit {
    double fp32_gflops, bf16_gflops, read_gbps;
} kb_machine_limit;
int kb_machine_limits(kv_pool *pool, int repeats, long buffer_mib, kb_machine_limit *out);

/* The median of n values (sorts v). */
double kb_median(double *v, int n);

/* Parses "N,N,.." (at most max values, each in [lo, hi]) into out; the
 * number of values, or -1 after a one-line error naming --flag. */
int kb_parse_int_list(const char *s, const char *flag, int *out, int max, long lo, long hi);

#endif
