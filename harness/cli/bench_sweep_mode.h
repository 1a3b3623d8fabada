/* One mode of `kvbench bench sweep`, measured in this process as
 * `kvbench run` would run it for one sample after another: the full cache
 * alone, or the full cache + K eviction configs decoded batched or one after
 * another (bench_sweep_mode.c has the details). bench sweep runs each mode
 * in a process of its own (its internal --one-mode option), so that the
 * mode's first pass meets fresh memory as a one-sample run does, and its
 * later passes the memory the earlier ones freed, as a run's later samples
 * do. */
#ifndef KB_BENCH_SWEEP_MODE_H
#define KB_BENCH_SWEEP_MODE_H

#include <stdbool.h>

#include "evict/evict.h"
#include "model/model.h"
#include "util/error.h"

/* The configs next to the full cache: at most this many. */
#define KB_SWEEP_MAX_CONFIGS 32

/* What every mode is run with. */
typedef struct kb_sweep_opts {
    const char *model;
    int prompt, gen, threads;
    kv_compute compute;
    kv_evict_params cache; /* the configs' cache precision keys (--kv-cache-precision ...) */
} kb_sweep_opts;

/* What a mode's decode did, for its roofline: the counts, then the FLOPs and
 * bytes they make at this model's shapes (the machine limit divides them by
 * the machine's peaks). */
typedef struct kb_sweep_work {
    double passes;     /* weight passes: the batched forwards, or every row's
                          forwards one after another */
    double row_steps;  /* Σ over rows of their forwards */
    double slot_steps; /* Σ over rows, their forwards and the layers of the
                          slots attention read */
    double slot_bytes; /* the same, each slot weighted by its K and V bytes at
                          its cache's precision (group parameters included) */
    double proj_flops; /* projections and LM head: 2 per weight per row forward */
    double attn_flops; /* attention: 4 n_heads head_dim per attended slot */
    double bytes;      /* weights per weight pass + slot_bytes */
} kb_sweep_work;

/* One pass of a mode: its prefill and decode, as a run's sample. */
typedef struct kb_sweep_pass {
    double wall, cpu;            /* prefill + forks + decode */
    double prefill, prefill_cpu; /* of which the prefill, wall and CPU seconds */
    kb_sweep_work work;          /* the decode's */
    unsigned long long tokens;   /* FNV-1a of every row's new tokens, rows in order */
} kb_sweep_pass;

/* Loads the model and runs the mode n_passes times on prompts of its own
 * (pass p: the same random prompt in every mode): k = 0 the full cache
 * alone, else the full cache + the first k configs of the sweep, batched or
 * one after another. Fills out[0 .. n_passes). Returns 0, or -1 with err. */
int kb_sweep_mode_run(const kb_sweep_opts *o, int k, bool batched, int n_passes, kb_sweep_pass *out,
                      kv_error *err);

#endif
