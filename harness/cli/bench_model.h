/* kvbench bench model: prefill and decode throughput of the engine, and its
 * peak memory. Its command, kb_bench_model_cmd (bench.h), parses the
 * options into kb_bench_model_opts; tests/bench/bench_model.c runs the same
 * command as a standalone program.
 */
#ifndef KB_BENCH_MODEL_H
#define KB_BENCH_MODEL_H

#include <stdbool.h>

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
    bool prefill_stats;      /* the prefill collects H2O's and SnapKV's statistics */
    bool json;
} kb_bench_model_opts;

int kb_bench_model(const kb_bench_model_opts *o);

#endif
