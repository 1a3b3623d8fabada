/* kvbench bench model: prefill and decode throughput of the engine, and its
 * peak memory. cmd_bench.c declares the options of kb_bench_model_options
 * and dispatches the "model" kind to kb_bench_model_run; tests/bench/bench_model.c
 * is the same benchmark as a standalone program.
 */
#ifndef KB_BENCH_MODEL_H
#define KB_BENCH_MODEL_H

#include <stdbool.h>

#include "cli/cli.h"
#include "model/kernels.h"
#include "model/kvcache.h"

typedef struct kb_bench_model_opts {
    const char *model;
    int prompt_tokens[16]; /* prompt lengths to measure */
    int n_prompts;
    int gen_tokens; /* decode steps after each prompt */
    int repeats;    /* runs per prompt length (median reported) */
    int warmup;     /* unmeasured runs before them */
    int threads;    /* 0: default */
    int evict_keep; /* > 0: also decode after keeping this many slots per layer */
    kv_compute compute;
    kv_cache_quant quant;    /* the caches' precision (--kv-cache-precision ...) */
    bool against;            /* decode speed against caches at against_quant */
    kv_cache_quant against_quant;
    bool json;
} kb_bench_model_opts;

/* Options: --model, --prompt-tokens, --gen-tokens, --repeats, --warmup, --threads,
 * --compute, --evict-keep, --against, --json, and the cache precision's
 * (--kv-cache-precision, --key-quant, --key-group-size, --value-group-size;
 * the other eviction options are refused) (terminated by a NULL name). */
extern const kb_option kb_bench_model_options[];

/* Parses those options from args and runs the benchmark; an exit code. */
int kb_bench_model_run(const kb_args *args);

int kb_bench_model(const kb_bench_model_opts *o);

#endif
