/* Reports: scores.csv, summary.md and a self-contained report.html.
 *
 * Input is a table of per-(config, task) results for one or more runs: the
 * runner scores each predictions/<config>/<task>.jsonl (through the scorer
 * module) and saves the rows as scores.json in the run folder; `kvbench report`
 * rebuilds every output from run.json + scores.json alone, so reports can be
 * redone, compared across nights, and tested on hand-made data.
 *
 * Every output records the kvbench version, model, model hash, protocol,
 * compute mode and every config's parameters, so a number can be traced to
 * how it was made.
 */
#ifndef KB_REPORT_H
#define KB_REPORT_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "report/bootstrap.h"
#include "util/error.h"
#include "score/score.h"

/* One sample's score within a row, what intervals and pairings need. */
typedef struct kb_sample_score {
    kv_str id;    /* the sample's "_id" (owned, NUL-terminated too): what pairs it
                   * across configs and runs */
    double score; /* the task's metric for this sample, 0..1 */
    long length;  /* the sample's "length" field, -1 when absent */
} kb_sample_score;

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
    /* Per-sample scores (file order): n of them, or none for a scores.json
     * written before kvbench kept them (its rows get no intervals). */
    kb_sample_score *samples;
    size_t n_samples;
    /* LongBench-E tasks: the scores by length bucket (kb_task_result) */
    size_t bucket_n[KB_N_BUCKETS];
    double bucket[KB_N_BUCKETS];
    /* Filled when a run is loaded (harness/report/rowstats.h); NaN when the row has
     * no per-sample scores, or (delta_*) no full-cache row to pair with. */
    kb_interval ci;    /* 95 % bootstrap interval of score */
    double delta_full; /* mean of (this - full cache) on the samples both have */
    kb_interval delta_ci;
    size_t n_paired;    /* samples shared with the full-cache row */
    double *boot;       /* KB_BOOT_RESAMPLES resampled scores (NULL: none) */
    double *boot_delta; /* the same for delta_full */
    /* The samples the run will have for this task once finished, set for a
     * run that has not finished (report/incomplete.h); 0: not known */
    long n_expected;
} kb_score_row;

typedef struct kb_report_run {
    char *name; /* the run folder's base name */
    char *dir;
    char *kvbench_version;
    char *model;
    char *model_hash;
    char *protocol;
    char *compute; /* "f32" or "bf16" (runs from before the modes: "f32") */
    char *data;    /* the run's data folder (run.json), NULL when not recorded */
    bool unfinished; /* run.json "finished" is null: stopped (or still running) */
    cJSON *configs; /* run.json matrix.configs: name, hash, budget, params */
    cJSON *tasks;   /* run.json matrix.tasks: every task the run was asked for, so that
                       one without a score (--empty-tasks missing, or not run yet)
                       shows as "–" instead of vanishing from the table */
    kb_score_row *rows;
    size_t n_rows;
    struct kb_length_view *lengths; /* scores by context length, built when loaded (report.c);
                                       NULL when the run has no per-length view */
} kb_report_run;

/* Saves rows as <dir>/scores.json (atomically). */
int kb_scores_save(const char *dir, const kb_score_row *rows, size_t n, kv_error *err);

/* Builds the rows of a run folder from its predictions: the score and the
 * per-sample scores (with each line's "id" and "length") from the scorer, n
 * and the means from the lines' prompt_tokens, kept_tokens, prefill_s and
 * decode_s. Rows are sorted by config (run.json order) and task (LongBench
 * order). Caller frees with kb_score_rows_free. */
int kb_scores_from_predictions(const char *dir, kb_task_scorer scorer, void *ctx,
                               kb_score_row **rows, size_t *n, kv_error *err);
void kb_score_rows_free(kb_score_row *rows, size_t n);

/* Loads run.json and scores.json of a run folder. */
int kb_report_run_load(const char *dir, kb_report_run *run, kv_error *err);
void kb_report_run_free(kb_report_run *run);
/* Keeps the rows for which keep() holds, in their order, and the configs
 * that still have rows (the report a run writes is of its own matrix;
 * scores.json holds every config of the folder). Intervals stay those of the rows loaded; the per-length view is
 * rebuilt. -1 on OOM. */
int kb_report_run_select(kb_report_run *run, bool (*keep)(const kb_score_row *r, const void *ctx),
                         const void *ctx);

/* A (config, task) whose score moved by at least the threshold between a
 * baseline run and this one. With per-sample scores on both sides the move is
 * the paired mean difference (after - before) on the samples both runs
 * scored, with its paired bootstrap interval; a scores.json from before
 * per-sample scores gives the plain difference and no interval. */
typedef struct kb_change {
    const char *config;
    const char *task;
    double before, after;               /* the two scores as reported */
    double delta;                       /* paired: on the shared samples */
    kb_interval ci;                     /* NaN when unpaired */
    size_t n_shared, n_before, n_after; /* samples (n_shared 0: unpaired) */
    bool paired;
    /* -1 regression, +1 improvement: |delta| >= threshold and the paired
     * interval excludes 0 (unpaired: the threshold alone); 0 within noise */
    int verdict;
} kb_change;

/* Every (config, task) of `run` with |delta| >= threshold against
 * `baseline`: regressions first, then improvements, then moves within noise,
 * largest first. Caller frees the array (the strings belong to run).
 * *n_partial (may be NULL) receives how many (config, task) pairs of the two
 * runs hold different samples (compared on the shared ones). */
int kb_report_compare(const kb_report_run *run, const kb_report_run *baseline, double threshold,
                      kb_change **out, size_t *n, size_t *n_partial);

typedef struct kb_report_options {
    const kb_report_run *baseline; /* NULL: no comparison */
    double threshold;              /* points; a drop this large is a regression */
} kb_report_options;

int kb_report_write_csv(FILE *f, const kb_report_run *runs, size_t n);
/* The category and overall averages of every config, with their intervals
 * and paired differences to the full cache (harness/report/rowstats.h). */
int kb_report_write_averages_csv(FILE *f, const kb_report_run *runs, size_t n);
int kb_report_write_markdown(FILE *f, const kb_report_run *runs, size_t n,
                             const kb_report_options *opt);
/* The score table of one run (configs x tasks, averages, delta to the full
 * cache) as summary.md prints it: what `kvbench run` shows at its end. */
int kb_report_write_table(FILE *f, const kb_report_run *run);
int kb_report_write_html(FILE *f, const kb_report_run *runs, size_t n,
                         const kb_report_options *opt);

/* Writes scores.csv, averages.csv, summary.md and report.html into dir (each
 * atomically). */
int kb_report_write(const char *dir, const kb_report_run *runs, size_t n,
                    const kb_report_options *opt, kv_error *err);

#endif
