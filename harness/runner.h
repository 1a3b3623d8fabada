/* The runner: `kvbench run CONFIG.json`.
 *
 *   matrix.h    the config file -> kb_matrix (tasks, configs[0] = "full", names, hashes)
 *   results.h   run folder, run.json, resumable prediction files, --shard, merge
 *   progress.h  terminal bar / log lines
 *   report.h    scores.json -> scores.csv, summary.md, report.html
 *   backend.h   the real backend: datasets loader + pred.py prompts, kvcore
 *               engine and eviction, LongBench scorers
 *
 * kb_runner_run drives a kb_runner_backend through the loop:
 *
 *   for each task, for each sample (file order; --shard keeps index % N == I):
 *     skip it when every config's prediction file already has its _id;
 *     PREFILL ONCE with full attention, collecting the union of the attention
 *       statistics that the pending configs need;
 *     for each pending config (matrix order): fork the prefilled cache,
 *       compress it under the config (nothing for "full"), decode greedily
 *       with the policy active at every step, append one JSON line + fsync;
 *     poll the stop flag (SIGINT/SIGTERM) between samples.
 *   then score every (config, task), write scores.json and the report.
 *
 * Order is what makes "resume == uninterrupted": samples in file order,
 * configs in matrix order, files only ever grow by appending. A config's
 * prediction must not depend on which other configs share the prefill
 * (tests/test_run.c checks N configs together == N separate runs).
 */
#ifndef KB_RUNNER_H
#define KB_RUNNER_H

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>

#include "matrix.h"
#include "progress.h"
#include "report.h"
#include "results.h"

/* Command-line overrides of the matrix file. NULL / 0: keep the file's. */
typedef struct kb_runner_options {
    kb_shard shard; /* {0, 1}: the whole run */
    const char *output;
    const char *name;
    long threads;
    long limit; /* overrides every task's limit */
    bool empty_tasks_missing; /* --empty-tasks missing (kb_matrix.empty_tasks_missing) */
} kb_runner_options;

/* Applies the overrides to m. Returns 0, or -1 on OOM. */
int kb_runner_apply_options(kb_matrix *m, const kb_runner_options *o);

/* What a run would do, for `--dry-run`: the run folder, the tasks with their
 * settings, and every config with its name, hash, budget and parameters. */
void kb_runner_plan_print(FILE *f, const kb_matrix *m, const kb_runner_options *o);

/* ---- the driver loop, engine-agnostic ------------------------------------
 *
 * kb_runner_run implements steps 2 (run folder) to 4 (scores, report) of the
 * design above over a backend of callbacks; harness/backend.c makes one of
 * the engine, eviction, datasets and scorers. tests/test_runner.c drives
 * it with a fake backend (shared prefill counted, resume, shards, report). */

/* One LongBench sample as the runner needs it; the backend owns everything. */
typedef struct kb_sample {
    const char *id; /* "_id" */
    long index;     /* position in the task's file order, from 0 */
    const cJSON *answers;
    const cJSON *all_classes; /* may be NULL */
    long length;
    void *data; /* the backend's own (the record, for prompt building) */
} kb_sample;

/* What decoding one config produced. text is malloc'd by the backend and
 * freed by the runner. */
typedef struct kb_decode_result {
    char *text;
    size_t text_len;  /* text may hold NUL bytes (a token for byte 0x00); 0: strlen(text) */
    long kept_tokens; /* KV entries per layer after the prefill eviction */
    long generated_tokens;
    double decode_s; /* decode_batch: seconds until this config left the batch */
} kb_decode_result;

typedef struct kb_runner_backend {
    void *ctx;
    /* Opens a task's samples in file order (the runner applies the limit and
     * the shard); *n_samples: how many there are (for progress; -1 unknown). */
    int (*task_open)(void *ctx, const kb_task_spec *task, void **iter, long *n_samples,
                     kv_error *err);
    /* 1 with *s filled (valid until the next call), 0 at the end, <0 error. */
    int (*task_next)(void *ctx, void *iter, kb_sample *s, kv_error *err);
    void (*task_close)(void *ctx, void *iter);
    /* Builds the prompt and prefills ONCE with full attention, collecting the
     * statistics that all `configs` need; *state keeps the cache for decode. */
    int (*prefill)(void *ctx, const kb_task_spec *task, const kb_sample *s,
                   const kb_config *const *configs, size_t n_configs, void **state,
                   long *prompt_tokens, kv_error *err);
    /* Forks the prefilled cache, compresses it under cfg (params NULL: the
     * full cache) and decodes greedily. Must leave *state as it was. */
    int (*decode)(void *ctx, void *state, const kb_task_spec *task, const kb_sample *s,
                  const kb_config *cfg, kb_decode_result *out, kv_error *err);
    /* Instead of decode, when set: decodes all n configs of the sample
     * together (outs[i] for cfgs[i]), one batched forward per step;
     * *steps: how many such forwards ran. Called once per prefill, it may
     * release what *state holds (prefill_free still follows). */
    int (*decode_batch)(void *ctx, void *state, const kb_task_spec *task, const kb_sample *s,
                        const kb_config *const *cfgs, size_t n, kb_decode_result *outs,
                        long *steps, kv_error *err);
    void (*prefill_free)(void *ctx, void *state);
    /* Scores a task's lines after the run (NULL: no scores.json, no report). */
    kb_task_scorer scorer;
    void *scorer_ctx;
} kb_runner_backend;

typedef struct kb_runner_stats {
    long samples_done;    /* processed by this call */
    long samples_skipped; /* already on disk for every config */
    long prefills;
    long decodes;
    long decode_steps; /* decode_batch's batched forwards */
    bool stopped; /* *stop was set: stopped between samples, resumable */
} kb_runner_stats;

/* Runs the matrix (apply kb_runner_apply_options first). version and
 * model_hash go to run.json. stop (may be NULL) is polled between samples:
 * set it from SIGINT/SIGTERM. progress may be NULL. When the run is complete
 * and unsharded and the backend has a scorer, writes scores.json and the
 * report into the run folder. */
int kb_runner_run(const kb_matrix *m, const kb_runner_options *o, const char *version,
                  const char *model_hash, const kb_runner_backend *b, volatile sig_atomic_t *stop,
                  kb_progress *progress, kb_runner_stats *stats, kv_error *err);

#endif
