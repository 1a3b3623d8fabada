/* The runner: `kvbench run CONFIG.json` — design, and what is left to wire.
 *
 * WHAT EXISTS (this branch)
 *   matrix.h    the config file -> kb_matrix (tasks, configs[0] = "full", names, hashes)
 *   results.h   run folder, run.json, resumable prediction files, --shard, merge
 *   progress.h  terminal bar / log lines
 *   report.h    scores.json -> scores.csv, summary.md, report.html
 *   hash.h      kb_hash_model (the model hash in run.json)
 *   taskset.h   task groups/categories (stand-in: back it with datasets/tasks.h)
 *   kb_runner_plan_print below (`kvbench run CONFIG --dry-run`)
 *   kb_runner_run below: steps 2 (run folder) to 4 (scores, report) over a
 *               backend of callbacks, tested with a fake engine
 *               (tests/test_runner.c: one prefill per sample for N configs,
 *               same predictions as separate runs, stop + resume, shards)
 *
 * So wiring = writing one kb_runner_backend adapter (task_open/next/close from
 * the datasets loader, prefill/decode/prefill_free from engine + eviction,
 * scorer from the scorers) and calling kb_runner_run from cmd_run.c in place
 * of its "not wired in yet" error, with a SIGINT/SIGTERM handler that sets the
 * stop flag (the one static a signal handler needs).
 *
 * WIRING (the lead, once engine/tokenizer/eviction/datasets/scorers are merged)
 *
 *  1. Hooks into the matrix: kb_matrix_hooks.validate_eviction = the eviction
 *     module's "parse from cJSON, reject unknown keys" function (adapter to
 *     int (*)(const cJSON *, char *err, size_t n); keep messages "KEY: ..." so
 *     the matrix prefixes the key path); task_known / task_group and the
 *     bodies of taskset.c -> lb_task_find / lb_tasks_of / lb_task_is_english16
 *     (category strings: keep the LongBench table names used by reports).
 *
 *  2. Setup, once per process:
 *       kb_matrix_load(path, &hooks, &m, &err);          apply CLI overrides
 *       model dir = m.model if it is a folder, else fetch ORG/NAME into models/
 *       kb_hash_model(dir, hash, &err);                  load model + tokenizer once
 *       parse every configs[i].params with the eviction parser -> policy[i]
 *       (configs[0].params == NULL is the full cache: no policy)
 *       dir = kb_run_dir(m.output, m.run_name, &shard);
 *       kb_run_open(dir, &(kb_run_info){KB_VERSION " (" KB_GIT_VERSION ")", hash, &m, shard},
 *                   &run, &err);                         refuses a different model/config
 *       install SIGINT/SIGTERM handlers that only set a flag (checked between
 *       samples); SIGKILL/power loss are covered by the line protocol anyway.
 *
 *  3. The loop (one prefill per sample, shared by every config):
 *       for each task t in m.tasks:
 *         open kb_pred_file pf[c] for every config c       (recovers cut-short lines)
 *         kb_progress_task(...)
 *         for each sample s (file order, index i; stop after t.limit):
 *           if !kb_shard_selects(&shard, i): continue
 *           if every pf[c] has s._id: kb_progress_skip(p, 1); continue
 *           prompt = datasets' prompt builder (template, middle truncation to
 *                    t.max_length or the model default, chat rule of m.protocol)
 *           PREFILL ONCE with full attention, collecting the union of the
 *             attention statistics the pending configs need (H2O: all rows;
 *             SnapKV: last max(window_size) rows; per-head where required)
 *             -> base cache + stats + first-token logits; time it (prefill_s)
 *           for each config c whose pf[c] lacks s._id:
 *             cache = fork(base)                   (c == full: decode the base directly,
 *                                                   or a fork if others still need it)
 *             policy[c]: score from the shared stats, compress (kept_tokens = its
 *               per-layer length after compression), then greedy decode with the
 *               policy active at every step, up to t.max_new_tokens or the task's
 *               own, stopping per protocol (samsum / nncf newline rule)
 *             line = kb_prediction_json(&(kb_prediction){id, i, task, config name,
 *                      pred text, answers, all_classes, length, prompt_tokens,
 *                      kept_tokens, generated_tokens, prefill_s, decode_s});
 *             kb_pred_file_append(&pf[c], line, &err)     one write + fsync
 *           kb_progress_sample(p, prompt_tokens + generated tokens of all configs)
 *           if the stop flag is set: close files, exit 130 (rerun resumes)
 *       Order matters for "resume == uninterrupted": samples in file order, configs
 *       in matrix order; each file only ever grows by appending in sample order.
 *       Count prefills (kb_runner_stats.prefills does) so the shared-prefill test
 *       can assert one prefill per sample for N configs.
 *       REQUIREMENT on the backend: a config's prediction must not depend on which
 *       other configs share the prefill (a sample killed half-way is redone for
 *       the configs it lacks only; the statistics collected for a union of configs
 *       must give each config exactly what it would get alone). The shared-prefill
 *       test "N configs == N separate runs" is what checks this on the real engine.
 *
 *  4. After the loop (unsharded runs; for shards: after `kvbench merge`):
 *       kb_scores_from_predictions(dir, scorer_adapter, ctx, &rows, &n, &err)
 *         scorer_adapter: the scorer module's per-task function over the parsed
 *         lines (pred, answers, all_classes, dataset), returning LongBench's
 *         percentage and the metric name
 *       kb_scores_save(dir, rows, n, &err);
 *       kb_report_run_load(dir, &r, &err); kb_report_write(dir, &r, 1, &opt, &err);
 *
 * TESTS STILL TO WRITE WITH THE ENGINE (issue 9 "Done when")
 *   - end to end on the tiny model: files, row counts, scores == `kvbench score`
 *   - SIGKILL at random points + resume == uninterrupted (results layer already
 *     tested that way in tests/test_results.c)
 *   - N configs: one prefill per sample (counted), predictions == N separate runs
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
} kb_runner_options;

/* Applies the overrides to m. Returns 0, or -1 on OOM. */
int kb_runner_apply_options(kb_matrix *m, const kb_runner_options *o);

/* What a run would do, for `--dry-run`: the run folder, the tasks with their
 * settings, and every config with its name, hash, budget and parameters. */
void kb_runner_plan_print(FILE *f, const kb_matrix *m, const kb_runner_options *o);

/* ---- the driver loop, engine-agnostic ------------------------------------
 *
 * kb_runner_run implements steps 2 (run folder) to 4 (scores, report) of the
 * design above over a backend of callbacks; the lead's adapters turn the
 * engine, eviction, datasets and scorers into one. tests/test_runner.c drives
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
    long kept_tokens; /* KV entries per layer after the prefill eviction */
    long generated_tokens;
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
