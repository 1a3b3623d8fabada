/* kvbench report: scores.csv, averages.csv, summary.md and report.html from run folders. */
#include <stdio.h>
#include <stdlib.h>

#include "cli/cli.h"
#include "util/file.h"
#include "report/incomplete.h"
#include "report/report.h"
#include "run/taskdata.h"
#include "score/score.h"

static const kb_option options[] = {
    {"baseline", "RUN", "compare with this run (e.g. last night's) and flag regressions"},
    {"threshold", "POINTS",
     "a drop of at least this many points whose paired 95% interval excludes 0 is a regression "
     "(default 1.0)"},
    {"output", "DIR", "where to write (default: the run folder; needed for several runs)"},
    {"fail-on-regression", NULL, "exit 1 when a regression is found (for nightly jobs)"},
    {NULL, NULL, NULL},
};

/* A run folder whose scores.json is missing (a run stopped before scoring,
 * merged shards, a deleted file) gets it rebuilt from its predictions, as
 * the runner would have written it. Returns 0 when it is there now. */
static int ensure_scores(const char *dir, kv_error *err)
{
    char *path = kv_path_join(dir, "scores.json");
    char *run_json = kv_path_join(dir, "run.json");
    if (!path || !run_json) {
        free(path);
        free(run_json);
        return kv_fail(err, "out of memory");
    }
    bool missing = !kv_file_exists(path) && kv_file_exists(run_json);
    free(path);
    free(run_json);
    if (!missing)
        return 0; /* there, or no run folder: kb_report_run_load says which */
    fprintf(stderr, "kvbench: report: %s has no scores.json: scoring its predictions\n", dir);
    kb_scorer *scorer = NULL;
    kb_score_row *rows = NULL;
    size_t n = 0;
    int rc = kb_scorer_open(&scorer, err);
    if (rc == 0)
        rc = kb_scores_from_predictions(dir, kb_scorer_task, scorer, &rows, &n, err);
    if (rc == 0)
        rc = kb_scores_save(dir, rows, n, err);
    kb_score_rows_free(rows, n);
    kb_scorer_close(scorer);
    return rc;
}

/* The samples a task has where the report runs; -1 when its data is not
 * here (then the most any config has stands for it). */
static long task_size(void *ctx, const char *data, const char *task, kv_error *err)
{
    (void)ctx;
    return kb_task_size(data, task, err);
}

/* Loads a run folder for the report; an unfinished run's cells that lack
 * samples are marked, and the user told. */
static int load_run(const char *dir, kb_report_run *run, kv_error *err)
{
    if (ensure_scores(dir, err) < 0 || kb_report_run_load(dir, run, err) < 0)
        return -1;
    size_t n = kb_report_expect(run, &(kb_task_sizes){.count = task_size});
    if (run->unfinished)
        fprintf(stderr,
                "kvbench: report: %s has not finished: %zu (config, task) cell%s hold%s fewer "
                "samples than it will have (marked in the report); run it again to finish\n",
                dir, n, n == 1 ? "" : "s", n == 1 ? "s" : "");
    return 0;
}

static int run(const kb_args *a)
{
    double threshold = 1.0;
    if (kb_arg_double(a, "threshold", 0, 100, &threshold) < 0)
        return KB_EXIT_USAGE;
    const char *output = kb_arg(a, "output");
    if (!output && a->n_positional > 1) {
        kb_error("report: several runs need --output DIR");
        return KB_EXIT_USAGE;
    }
    if (!output)
        output = a->positional[0];
    size_t n = (size_t)a->n_positional;
    kb_report_run *runs = calloc(n, sizeof *runs);
    kb_report_run baseline = {0};
    kv_error err = {{0}};
    int rc = KB_EXIT_OK;
    if (!runs) {
        kb_error("report: out of memory");
        return KB_EXIT_FAIL;
    }
    size_t loaded = 0;
    for (; loaded < n; loaded++)
        if (load_run(a->positional[loaded], &runs[loaded], &err) < 0) {
            kb_error("report: %s", err.msg);
            rc = KB_EXIT_FAIL;
            break;
        }
    const char *base_dir = kb_arg(a, "baseline");
    bool have_base = false;
    if (rc == KB_EXIT_OK && base_dir) {
        if (load_run(base_dir, &baseline, &err) < 0) {
            kb_error("report: baseline: %s", err.msg);
            rc = KB_EXIT_FAIL;
        }
        have_base = rc == KB_EXIT_OK;
    }
    kb_report_options opt = {.baseline = have_base ? &baseline : NULL, .threshold = threshold};
    if (rc == KB_EXIT_OK && kb_report_write(output, runs, n, &opt, &err) < 0) {
        kb_error("report: %s", err.msg);
        rc = KB_EXIT_FAIL;
    }
    if (rc == KB_EXIT_OK) {
        printf("wrote %s/scores.csv, %s/averages.csv, %s/summary.md, %s/report.html\n", output,
               output, output, output);
        size_t regressions = 0;
        for (size_t i = 0; have_base && i < n; i++) {
            kb_change *ch = NULL;
            size_t n_ch = 0, n_partial = 0;
            kb_report_compare(&runs[i], &baseline, threshold, &ch, &n_ch, &n_partial);
            for (size_t j = 0; j < n_ch; j++)
                if (ch[j].verdict < 0) {
                    regressions++;
                    printf("regression: %s %s %s: %.2f -> %.2f (%+.2f", runs[i].name, ch[j].config,
                           ch[j].task, ch[j].before, ch[j].after, ch[j].delta);
                    if (ch[j].paired)
                        printf(", 95%% interval [%+.2f, %+.2f] on %zu shared samples", ch[j].ci.lo,
                               ch[j].ci.hi, ch[j].n_shared);
                    printf(")\n");
                }
            if (n_partial)
                printf("note: %s: %zu (config, task) pair%s cover%s different samples than %s; "
                       "compared on the shared ones\n",
                       runs[i].name, n_partial, n_partial == 1 ? "" : "s",
                       n_partial == 1 ? "s" : "", baseline.name);
            free(ch);
        }
        if (have_base)
            printf("%zu regression%s of at least %.2f points beyond noise against %s\n",
                   regressions, regressions == 1 ? "" : "s", threshold, baseline.name);
        if (regressions && kb_flag(a, "fail-on-regression"))
            rc = KB_EXIT_FAIL;
    }
    for (size_t i = 0; i < loaded; i++)
        kb_report_run_free(&runs[i]);
    free(runs);
    if (have_base)
        kb_report_run_free(&baseline);
    return rc;
}

const kb_command kb_cmd_report = {
    .name = "report",
    .summary = "build scores.csv, summary.md and report.html from runs",
    .usage = "kvbench report RUN... [--baseline RUN] [--threshold POINTS] [--output DIR]",
    .description =
        "Reads run.json and scores.json of each run folder (the runner writes scores.json\n"
        "after scoring; when it is missing, it is rebuilt from the predictions) and writes\n"
        "scores.csv (one row per model x config x task), averages.csv\n"
        "(category and overall averages with intervals), summary.md\n"
        "(configs x tasks with category and EN16 averages and the delta to the full cache)\n"
        "and report.html (self-contained: inline SVG charts of score vs cache budget and vs\n"
        "context length and a per-task heatmap; opens with no network). Scores carry 95%\n"
        "bootstrap intervals, differences to the full cache paired ones (2,000 resamples,\n"
        "fixed seed). With --baseline, a (config, task) that dropped by at least --threshold\n"
        "points on the samples both runs scored, with a paired interval that excludes 0, is\n"
        "a regression: listed and highlighted.",
    .options = options,
    .min_positional = 1,
    .max_positional = KB_MAX_POSITIONAL,
    .run = run,
};
