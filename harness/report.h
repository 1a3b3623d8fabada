/* Reports: scores.csv, summary.md and a self-contained report.html.
 *
 * Input is a table of per-(config, task) results for one or more runs: the
 * runner scores each predictions/<config>/<task>.jsonl (through the scorer
 * module) and saves the rows as scores.json in the run folder; `kvbench report`
 * rebuilds every output from run.json + scores.json alone, so reports can be
 * redone, compared across nights, and tested on hand-made data.
 *
 * Every output records the kvbench version, model, model hash, protocol and
 * every config's parameters, so a number can be traced to how it was made.
 */
#ifndef KB_REPORT_H
#define KB_REPORT_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdio.h>

#include "error.h"

typedef struct kb_score_row {
    char *config;
    char *task;
    char *metric;         /* "qa_f1_score", ... */
    double score;         /* LongBench's percentage, 0..100 */
    long n;               /* samples scored */
    double prompt_tokens; /* mean prompt length (after truncation, chat template) */
    double kept_tokens;   /* mean KV entries per layer after the prefill eviction */
    double prefill_s;     /* mean seconds per sample: the shared prefill */
    double decode_s;      /* mean seconds per sample: compress + decode of this config */
} kb_score_row;

typedef struct kb_report_run {
    char *name; /* the run folder's base name */
    char *dir;
    char *kvbench_version;
    char *model;
    char *model_hash;
    char *protocol;
    cJSON *configs; /* run.json matrix.configs: name, hash, budget, params */
    kb_score_row *rows;
    size_t n_rows;
} kb_report_run;

/* Saves rows as <dir>/scores.json (atomically). */
int kb_scores_save(const char *dir, const kb_score_row *rows, size_t n, kv_error *err);

/* Scores one task's prediction lines (parsed JSON, file order): *score in
 * percent, *metric the metric's name (static). Returns 0 or negative with a
 * message in err. This is where the scorer module plugs in. */
typedef int (*kb_task_scorer)(const char *task, const cJSON *const *lines, size_t n, double *score,
                              const char **metric, char *err, size_t err_n, void *ctx);

/* Builds the rows of a run folder from its predictions: the score from the
 * scorer, n and the means from the lines' prompt_tokens, kept_tokens,
 * prefill_s and decode_s. Rows are sorted by config (run.json order) and task
 * (LongBench order). Caller frees with kb_score_rows_free. */
int kb_scores_from_predictions(const char *dir, kb_task_scorer scorer, void *ctx,
                               kb_score_row **rows, size_t *n, kv_error *err);
void kb_score_rows_free(kb_score_row *rows, size_t n);

/* Loads run.json and scores.json of a run folder. */
int kb_report_run_load(const char *dir, kb_report_run *run, kv_error *err);
void kb_report_run_free(kb_report_run *run);

/* A (config, task) whose score moved by at least the threshold between a
 * baseline run and this one. */
typedef struct kb_change {
    const char *config;
    const char *task;
    double before, after; /* delta = after - before */
} kb_change;

/* Changes of `run` against `baseline` with |delta| >= threshold, regressions
 * (negative deltas) first, largest first. Caller frees the array (the strings
 * belong to run). */
int kb_report_compare(const kb_report_run *run, const kb_report_run *baseline, double threshold,
                      kb_change **out, size_t *n);

typedef struct kb_report_options {
    const kb_report_run *baseline; /* NULL: no comparison */
    double threshold;              /* points; a drop this large is a regression */
} kb_report_options;

int kb_report_write_csv(FILE *f, const kb_report_run *runs, size_t n);
int kb_report_write_markdown(FILE *f, const kb_report_run *runs, size_t n,
                             const kb_report_options *opt);
int kb_report_write_html(FILE *f, const kb_report_run *runs, size_t n,
                         const kb_report_options *opt);

/* Writes scores.csv, summary.md and report.html into dir (each atomically). */
int kb_report_write(const char *dir, const kb_report_run *runs, size_t n,
                    const kb_report_options *opt, kv_error *err);

#endif
