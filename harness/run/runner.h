/* The runner: `kvbench run CONFIG.json`.
 *
 *   matrix.h    the config file -> kb_matrix (tasks, configs[0] = "full", names, hashes)
 *   rundir/     run folder, run.json, resumable prediction files, --shard, merge
 *   progress.h  terminal bar / log lines
 *   report.h    scores.json -> scores.csv, summary.md, report.html
 *   taskdata.h  a task's samples in file order
 *   backend.h   the model: the kvcore engine and eviction
 *   score.h     LongBench's scoring, the same as `kvbench score`
 *
 * kb_runner_run drives a kb_runner_backend through the loop:
 *
 *   for each task, for each sample (file order; --shard keeps index % N == I):
 *     skip it when every config's prediction file already has its _id;
 *     PREFILL ONCE with full attention, collecting the union of the attention
 *       statistics that the pending configs need (with a query-agnostic
 *       config: the context part only; the question part follows once on
 *       the full cache for the query-aware configs and once, batched, on the
 *       compressed caches of the query-agnostic ones);
 *     for each pending config (matrix order): fork the prefilled cache,
 *       compress it under the config (nothing for "full"), decode greedily
 *       with the policy active at every step, append one JSON line + fsync;
 *     poll the stop flag (SIGINT/SIGTERM) between samples.
 *   then score every (config, task), write scores.json and the report.
 *
 * Order is what makes "resume == uninterrupted": samples in file order,
 * configs in matrix order, files only ever grow by appending. A config's
 * prediction must not depend on which other configs share the prefill
 * (tests/e2e/test_run.c checks N configs together == N separate runs); a
 * query-agnostic config splits the prefill in two forwards, which moves the
 * query-aware configs' logits in the last bits only
 * (tests/e2e/test_query_agnostic.c checks their answers are unchanged).
 */
#ifndef KB_RUNNER_H
#define KB_RUNNER_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "matrix/matrix.h"
#include "tokenizer/tokenizer.h"
#include "run/progress.h"
#include "report/report.h"
#include "rundir/predfile.h"

/* Command-line overrides of the matrix file. NULL / 0: keep the file's. */
typedef struct kb_runner_options {
    kb_shard shard; /* {0, 1}: the whole run */
    const char *output;
    const char *name;
    long threads;
    long limit; /* overrides every task's limit */
    FILE *table; /* where the score table goes once the run is scored; NULL: nowhere */
    bool empty_tasks_missing; /* --empty-tasks missing (kb_matrix.empty_tasks_missing) */
} kb_runner_options;

/* Applies the overrides to m. Returns 0, or -1 on OOM. */
int kb_runner_apply_options(kb_matrix *m, const kb_runner_options *o);

/* What a run would do, for `--dry-run`: the run folder, the tasks with their
 * settings, and every config with its name, hash, budget and parameters. */
void kb_runner_plan_print(FILE *f, const kb_matrix *m, const kb_runner_options *o);

/* Warns once on f about configs whose parameters contradict each other
 * (kv_evict_params_warning), naming them and the fix; the plan and the run both
 * say it, before any work. Returns how many configs it named. */
size_t kb_runner_warn(FILE *f, const kb_matrix *m);

/* Reads every task's data as the run will (a missing or empty file, a
 * malformed line, a repeated _id: the error names it) and counts the
 * samples, before a run writes anything or for --dry-run. */
int kb_runner_check_data(const kb_matrix *m, long *samples, kv_error *err);

/* ---- the driver loop, engine-agnostic ------------------------------------
 *
 * kb_runner_run implements steps 2 (run folder) to 4 (scores, report) of the
 * design above. The runner owns everything but the model: it reads each
 * task's samples (datasets/longbench/sample.h), builds and tokenizes their prompts as
 * pred.py does (datasets/longbench/prompt.h), writes the predictions, and scores them
 * with kb_score_predictions (score.h), the path `kvbench score` takes. The
 * backend is the model alone, as lm-eval-harness's `LM` is: token ids in,
 * text out. harness/run/backend.c makes one of the kvcore engine and eviction;
 * tests/unit/run/test_runner.c drives the loop with a fake one (shared prefill
 * counted, resume, shards, report). */

/* How one sample's answers are generated. */
typedef struct kb_gen_limits {
    int max_new_tokens;
    const int32_t *stop_ids; /* ids that end the answer (not part of it) */
    int n_stop_ids;
} kb_gen_limits;

/* What decoding one config produced. text is malloc'd by the backend and
 * freed by the runner. */
typedef struct kb_decode_result {
    char *text;
    size_t text_len;  /* text may hold NUL bytes (a token for byte 0x00); 0: strlen(text) */
    long kept_tokens; /* KV entries per layer after the prefill eviction */
    long kept_context_tokens; /* of those, the context part's */
    long generated_tokens;
    double decode_s; /* decode_batch: seconds until this config left the batch */
} kb_decode_result;

/* The forwards of one sample after its prefill (decode_batch adds to them). */
typedef struct kb_forward_counts {
    long decode_steps;       /* batched decode forwards */
    long question_prefills;  /* the question part on the full cache, shared by the
                                query-aware configs, after a split prefill */
    long question_batches;   /* the question part on every query-agnostic config's
                                compressed cache, as one batched forward */
} kb_forward_counts;

/* The model. Configs are indices into the matrix the backend was opened
 * with (0: the full cache). */
typedef struct kb_runner_backend {
    void *ctx;
    const kv_tokenizer *tok; /* what prompts are tokenized and truncated with */
    long max_positions;      /* the model's context: the prompt budget a task does not set */
    /* Prefills the prompt ONCE with full attention, collecting the
     * statistics that all `configs` need; *state keeps the cache (and g) for
     * decoding. ids[0..n_context) are the context part (lb_prompt): when a
     * config is query-agnostic, only they are prefilled here, and the
     * question part follows in decode_batch. */
    int (*prefill)(void *ctx, const int32_t *ids, size_t n_ids, size_t n_context,
                   const kb_gen_limits *g, const size_t *configs, size_t n_configs,
                   void **state, kv_error *err);
    /* Forks the prefilled cache, compresses it under config `config` and
     * decodes greedily. Must leave *state as it was. */
    int (*decode)(void *ctx, void *state, size_t config, kb_decode_result *out, kv_error *err);
    /* Instead of decode, when set: decodes all n configs of the sample
     * together (outs[i] for configs[i]), one batched forward per step;
     * counts what it ran. Called once per prefill, it may release what
     * *state holds (prefill_free still follows). */
    int (*decode_batch)(void *ctx, void *state, const size_t *configs, size_t n,
                        kb_decode_result *outs, kb_forward_counts *counts, kv_error *err);
    void (*prefill_free)(void *ctx, void *state);
    /* Bytes one cached token takes in config's caches, all layers, a
     * quantised precision's group parameters counted (run.json records
     * them); NULL: not recorded. */
    double (*kv_bytes_per_token)(void *ctx, size_t config);
} kb_runner_backend;

typedef struct kb_runner_stats {
    long samples_done;    /* processed by this call */
    long samples_skipped; /* already on disk for every config */
    long prefills;
    long decodes;
    long decode_steps; /* decode_batch's batched forwards */
    long question_prefills; /* kb_forward_counts, summed */
    long question_batches;
    bool stopped; /* *stop was set: stopped between samples, resumable */
} kb_runner_stats;

/* Runs the matrix (apply kb_runner_apply_options first). version and
 * model_hash go to run.json. stop (may be NULL) is polled between samples:
 * set it from SIGINT/SIGTERM. progress may be NULL. When the run is complete
 * and unsharded, scores it and writes scores.json and the report into the
 * run folder (a task whose scoring needs jieba's data fails before any
 * inference when that data is missing). */
int kb_runner_run(const kb_matrix *m, const kb_runner_options *o, const char *version,
                  const char *model_hash, const kb_runner_backend *b, volatile sig_atomic_t *stop,
                  kb_progress *progress, kb_runner_stats *stats, kv_error *err);

#endif
