/* Reports from hand-made data: rows built from prediction files through a
 * scorer callback, scores.json round trip, the CSV / Markdown / HTML outputs,
 * and run-to-run comparison with regressions flagged. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "report/report.h"
#include "rundir/predfile.h"
#include "support/testutil.h"
#include "util/jsonstr.h"

static kv_error err;

/* Exact match, in percent: enough to check the plumbing around a scorer. */
static int exact_scorer(const char *task, const kb_scored_line *lines, size_t n,
                        kb_task_result *out, char *msg, size_t msg_n, void *ctx)
{
    (void)task;
    int *calls = ctx;
    (*calls)++;
    if (n == 0)
        return snprintf(msg, msg_n, "no lines"), -1;
    double hits = 0;
    for (size_t i = 0; i < n; i++) {
        out->sample_scores[i] = kv_str_eq(lines[i].pred, lines[i].answers[0]);
        hits += out->sample_scores[i];
    }
    out->score = 100.0 * hits / (double)n;
    out->metric = "exact";
    return 0;
}

/* A run with configs full, h2o and snapkv at budgets 64 and 128, tasks trec
 * and qasper, 3 samples each; config c gets `correct[c][task]` samples right. */
static const char *const cfgs[] = {"full", "h2o_s32_r16_i16", "h2o_s32_r16_i80",
                                   "snapkv_s32_r16_i16", "snapkv_s32_r16_i80"};
static const int correct[5][2] = {{3, 2}, {1, 1}, {2, 2}, {2, 1}, {3, 2}};

static char *make_run(const char *out, const char *name)
{
    char text[1024];
    snprintf(text, sizeof text,
             "{\"name\": \"%s\", \"model\": \"tiny\", \"tasks\": [\"qasper\", \"trec\"], "
             "\"sweep\": {\"algorithm\": [\"h2o\", \"snapkv\"], \"start_size\": 32, "
             "\"recent_size\": 16, \"intermediate_size\": [16, 80]}}",
             name);
    kb_matrix m;
    cr_assert_eq(kb_matrix_parse(text, NULL, &m, &err), 0, "%s", err.msg);
    for (int c = 0; c < 5; c++)
        cr_assert_str_eq(m.configs[c].name, cfgs[c]);
    kb_run_info info = {.kvbench_version = "0.1.0 (test)",
                        .model_hash = "0123456789abcdef",
                        .matrix = &m,
                        .shard = {0, 1}};
    char *dir = kb_run_dir(out, name, NULL);
    kb_run run;
    cr_assert_eq(kb_run_open(dir, &info, &run, &err), 0, "%s", err.msg);
    const char *tasks[] = {"trec", "qasper"};
    for (int c = 0; c < 5; c++)
        for (int t = 0; t < 2; t++) {
            kb_pred_file pf;
            cr_assert_eq(kb_pred_file_open(&run, cfgs[c], tasks[t], NULL, &pf, &err), 0);
            for (long i = 0; i < 3; i++) {
                char id[16];
                snprintf(id, sizeof id, "s%ld", i);
                kv_str answers[] = {kv_str_c("yes")};
                /* trec's classes make LongBench's classification score exact here */
                kv_str classes[] = {kv_str_c("yes"), kv_str_c("no")};
                kb_prediction p = {.id = kv_str_c(id),
                                   .index = i,
                                   .task = tasks[t],
                                   .config = cfgs[c],
                                   .pred = kv_str_c(i < correct[c][t] ? "yes" : "no"),
                                   .answers = answers,
                                   .n_answers = 1,
                                   .all_classes = t == 0 ? classes : NULL,
                                   .n_classes = 2,
                                   .prompt_tokens = 100 + 10 * i,
                                   .kept_tokens = 64,
                                   .generated_tokens = 1,
                                   .prefill_s = 1.0,
                                   .decode_s = 0.5};
                cr_assert_eq(kb_pred_file_append(&pf, &p, &err), 0, "%s", err.msg);
            }
            kb_pred_file_close(&pf);
        }
    kb_run_close(&run);
    kb_matrix_free(&m);
    return dir;
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

TestSuite(report, .init = tu_dir_make, .fini = tu_dir_remove);

Test(report, rows_from_predictions_and_scores_json_round_trip)
{
    char *dir = make_run(tu_dir, "night1");
    kb_score_row *rows;
    size_t n;
    int calls = 0;
    cr_assert_eq(kb_scores_from_predictions(dir, exact_scorer, &calls, &rows, &n, &err), 0, "%s",
                 err.msg);
    cr_assert_eq(n, 10);
    cr_assert_eq(calls, 10);
    /* sorted by config (run.json order), then task (LongBench order: qasper before trec) */
    cr_assert_str_eq(rows[0].config, "full");
    cr_assert_str_eq(rows[0].task, "qasper");
    cr_assert_str_eq(rows[1].task, "trec");
    cr_assert_str_eq(rows[2].config, "h2o_s32_r16_i16");
    for (size_t i = 0; i < n; i++) {
        int c = 0;
        while (strcmp(cfgs[c], rows[i].config))
            c++;
        int t = strcmp(rows[i].task, "trec") == 0 ? 0 : 1;
        cr_assert_float_eq(rows[i].score, 100.0 * correct[c][t] / 3.0, 1e-9);
        cr_assert_eq(rows[i].n, 3);
        cr_assert_float_eq(rows[i].prompt_tokens, 110.0, 1e-9);
        cr_assert_float_eq(rows[i].kept_tokens, 64.0, 1e-9);
        cr_assert_float_eq(rows[i].decode_s, 0.5, 1e-9);
    }
    cr_assert_eq(kb_scores_save(dir, rows, n, &err), 0, "%s", err.msg);
    kb_report_run r;
    cr_assert_eq(kb_report_run_load(dir, &r, &err), 0, "%s", err.msg);
    cr_assert_eq(r.n_rows, n);
    cr_assert_str_eq(r.name, "night1");
    cr_assert_str_eq(r.model_hash, "0123456789abcdef");
    for (size_t i = 0; i < n; i++) {
        cr_assert_str_eq(r.rows[i].config, rows[i].config);
        cr_assert_eq(r.rows[i].score, rows[i].score);
    }
    kb_report_run_free(&r);
    kb_score_rows_free(rows, n);
    free(dir);
}

/* Scoring a run reads each prediction line once: the reader parses it, and
 * resume's checks, the scorer and the report's means all use that parse. */
Test(report, scoring_a_run_parses_each_prediction_line_once)
{
    char *dir = make_run(tu_dir, "night1");
    kb_scorer *scorer;
    cr_assert_eq(kb_scorer_open(&scorer, &err), 0, "%s", err.msg);
    kb_score_row *rows;
    size_t n;
    long before = kv_json_loads();
    cr_assert_eq(kb_scores_from_predictions(dir, kb_scorer_task, scorer, &rows, &n, &err), 0, "%s",
                 err.msg);
    long lines = 0;
    for (size_t i = 0; i < n; i++)
        lines += rows[i].n;
    cr_assert_eq(lines, 5 * 2 * 3, "every file scored: %ld lines", lines);
    cr_assert_eq(kv_json_loads() - before, lines, "%ld parses for %ld lines",
                 kv_json_loads() - before, lines);
    /* and the scores are LongBench's: trec's exact class match */
    for (size_t i = 0; i < n; i++)
        if (strcmp(rows[i].task, "trec") == 0 && strcmp(rows[i].config, "full") == 0)
            cr_assert_float_eq(rows[i].score, 100.0 * correct[0][0] / 3.0, 0.01);
    kb_score_rows_free(rows, n);
    kb_scorer_close(scorer);
    free(dir);
}

static char *scored_run(const char *out, const char *name)
{
    char *dir = make_run(out, name);
    kb_score_row *rows;
    size_t n;
    int calls = 0;
    cr_assert_eq(kb_scores_from_predictions(dir, exact_scorer, &calls, &rows, &n, &err), 0);
    cr_assert_eq(kb_scores_save(dir, rows, n, &err), 0);
    kb_score_rows_free(rows, n);
    return dir;
}

Test(report, outputs_hold_the_numbers_and_the_provenance)
{
    char *dir = scored_run(tu_dir, "night1");
    tu_kvbench_ok("report", dir, NULL);

    char *csv = tu_slurp_in(dir, "scores.csv");
    cr_assert_eq(count(csv, "\n"), 1 + 10, "%s", csv);
    cr_assert(strstr(csv, "run,kvbench_version,model,model_hash,protocol,compute,config,"
                          "config_hash,budget,params,task,category,metric,score,n,"));
    /* h2o at budget 32+16+16 = 64 got 1 of 3 on trec */
    cr_assert(strstr(csv, ",64,\"{\"\"algorithm\"\":\"\"h2o\"\",\"\"intermediate_size\"\":16,"
                          "\"\"recent_size\"\":16,\"\"start_size\"\":32}\",trec,Few-shot,exact,"
                          "33.33,3,110.0,64.0,1.0000,0.5000,0.00,100.00,-66.67,-100.00,0.00,,,,,,\n"),
              "%s", csv);
    cr_assert(strstr(csv, "night1,0.1.0 (test),tiny,0123456789abcdef,longbench,f32,full,"));

    char *md = tu_slurp_in(dir, "summary.md");
    /* full: qasper 66.67 trec 100 -> avg 83.33; h2o_i16: 33.33, 33.33 -> 33.33, delta -50.00.
     * Of 3 samples, 2 right: a resample is all wrong with probability 1/27 > 2.5 %, all right
     * with 8/27, so the interval is [0, 100]: ±50; 3 right: no spread at all */
    cr_assert(strstr(md, "| full | full | 66.67 ±50.00 | 100.00 ±0.00 | 66.67 ±50.00 | "
                         "100.00 ±0.00 | **83.33** ±"),
              "%s", md);
    cr_assert(strstr(md, "| h2o_s32_r16_i16 | 64 | 33.33 ±50.00 | 33.33 ±50.00 | "), "%s", md);
    cr_assert(strstr(md, " | **33.33** ±"), "%s", md);
    cr_assert(strstr(md, " | -50.00 [-"), "%s", md);
    cr_assert(strstr(md, "| config | budget | qasper | trec | Single-Doc QA | Few-shot | **Avg** "
                         "| Δ full |"),
              "%s", md);
    cr_assert(strstr(md, "`0123456789abcdef`") && strstr(md, "0.1.0 (test)") &&
              strstr(md, "| longbench | f32 |"));

    char *html = tu_slurp_in(dir, "report.html");
    cr_assert_eq(count(html, "<svg"), 2, "two charts per run");
    cr_assert_eq(count(html, "<polyline"), 2, "one line per algorithm (h2o, snapkv)");
    cr_assert_eq(count(html, "<circle"), 4, "one point per config with a budget");
    cr_assert(strstr(html, "class='full'"), "the full cache is drawn");
    cr_assert_eq(count(html, "class='cell'"), 5 * 3, "heatmap: configs x (tasks + average)");
    /* self-contained: nothing to fetch, nothing to run */
    cr_assert_null(strstr(html, "<script"));
    cr_assert_null(strstr(html, "src="));
    /* links only to the report's own pages beside it: the wrong answers per task */
    cr_assert_eq(count(html, "href="), count(html, "href='wrong/"));
    cr_assert_null(strstr(html, "@import"));
    cr_assert(strstr(html, "0123456789abcdef") && strstr(html, "0.1.0 (test)"));
    free(csv);
    free(md);
    free(html);
    free(dir);
}

/* Tonight's scores with one cell lower and one higher than last night's. */
/* Moves one score. The per-sample lists go (they would no longer average to
 * the score), as in a scores.json from before kvbench kept them: such rows
 * compare on the threshold alone. */
static void edit_score(const char *dir, const char *config, const char *task, double delta)
{
    kb_report_run r;
    cr_assert_eq(kb_report_run_load(dir, &r, &err), 0, "%s", err.msg);
    for (size_t i = 0; i < r.n_rows; i++) {
        if (!strcmp(r.rows[i].config, config) && !strcmp(r.rows[i].task, task))
            r.rows[i].score += delta;
        for (size_t j = 0; j < r.rows[i].n_samples; j++)
            kv_str_free(&r.rows[i].samples[j].id);
        free(r.rows[i].samples);
        r.rows[i].samples = NULL;
        r.rows[i].n_samples = 0;
    }
    cr_assert_eq(kb_scores_save(dir, r.rows, r.n_rows, &err), 0);
    kb_report_run_free(&r);
}

/* Row 0 of a run as a LongBench v2 accuracy row: samples right, wrong,
 * wrong (33.33... %) and the score as written. */
static void save_accuracy_row(const char *dir, double score)
{
    kb_report_run r;
    cr_assert_eq(kb_report_run_load(dir, &r, &err), 0, "%s", err.msg);
    cr_assert_eq(r.rows[0].n_samples, 3);
    free(r.rows[0].metric);
    r.rows[0].metric = strdup("accuracy");
    for (size_t j = 0; j < 3; j++)
        r.rows[0].samples[j].score = j == 0;
    r.rows[0].score = score;
    cr_assert_eq(kb_scores_save(dir, r.rows, r.n_rows, &err), 0);
    kb_report_run_free(&r);
}

/* v2's accuracy is rounded to one decimal (result.py): 1 of 3 is 33.3, and
 * its per-sample scores still belong to the row; 33.4 is another row's. */
Test(report, an_accuracy_row_is_rounded_to_one_decimal)
{
    char *dir = scored_run(tu_dir, "v2");
    save_accuracy_row(dir, 33.3);
    kb_report_run r;
    cr_assert_eq(kb_report_run_load(dir, &r, &err), 0, "%s", err.msg);
    kb_report_run_free(&r);
    save_accuracy_row(dir, 33.4);
    cr_assert_lt(kb_report_run_load(dir, &r, &err), 0);
    cr_expect(strstr(err.msg, "not the row's score 33.40"), "%s", err.msg);
    free(dir);
}

Test(report, comparing_two_runs_flags_regressions_beyond_the_threshold)
{
    char *last = scored_run(tu_dir, "last");
    char *now = scored_run(tu_dir, "tonight");
    edit_score(now, "snapkv_s32_r16_i80", "qasper", -5.0);
    edit_score(now, "h2o_s32_r16_i16", "trec", +2.5);
    edit_score(now, "full", "trec", -0.5); /* below the threshold */

    kb_report_run a, b;
    cr_assert_eq(kb_report_run_load(now, &a, &err), 0);
    cr_assert_eq(kb_report_run_load(last, &b, &err), 0);
    kb_change *ch;
    size_t n;
    size_t n_partial;
    cr_assert_eq(kb_report_compare(&a, &b, 1.0, &ch, &n, &n_partial), 0);
    cr_assert_eq(n, 2);
    cr_assert_eq(n_partial, 0);
    cr_assert_str_eq(ch[0].config, "snapkv_s32_r16_i80"); /* regressions first */
    cr_assert_float_eq(ch[0].delta, -5.0, 1e-9);
    cr_assert(!ch[0].paired && ch[0].verdict == -1, "unpaired: the threshold decides");
    cr_assert_str_eq(ch[1].config, "h2o_s32_r16_i16");
    cr_assert_eq(ch[1].verdict, 1);
    free(ch);
    cr_assert_eq(kb_report_compare(&a, &b, 0.25, &ch, &n, NULL), 0);
    cr_assert_eq(n, 3);
    free(ch);
    kb_report_run_free(&a);
    kb_report_run_free(&b);

    tu_result r = tu_kvbench("report", now, "--baseline", last, "--fail-on-regression", NULL);
    cr_assert_eq(r.status, 1, "%s%s", r.out, r.err);
    cr_assert(strstr(r.out, "regression: tonight snapkv_s32_r16_i80 qasper: 66.67 -> 61.67 "
                            "(-5.00)"),
              "%s", r.out);
    cr_assert(strstr(r.out, "1 regression of at least 1.00 points beyond noise against last"), "%s",
              r.out);
    tu_result_free(&r);
    char *md = tu_slurp_in(now, "summary.md");
    cr_assert(strstr(md, "| **regression** | snapkv_s32_r16_i80 | qasper | 66.67 | 61.67 | -5.00 "
                         "| – | – |"),
              "%s", md);
    cr_assert(strstr(md, "| improvement | h2o_s32_r16_i16 | trec | 33.33 | 35.83 | +2.50 |"));
    cr_assert(strstr(md, "2 moves could not be paired"), "%s", md);
    char *html = tu_slurp_in(now, "report.html");
    cr_assert(strstr(html, "<td class='num reg'>61.67</td>"), "the regressed cell is marked");
    cr_assert_eq(count(html, "class='regcell'"), 1, "and outlined in the heatmap");
    cr_assert(strstr(html, "(baseline)"));
    free(md);
    free(html);

    /* without --fail-on-regression a regression is reported, not fatal */
    r = tu_kvbench("report", now, "--baseline", last, "--threshold", "10", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "0 regressions of at least 10.00 points beyond noise"), "%s", r.out);
    tu_result_free(&r);
    free(last);
    free(now);
}

/* (config, task) -> score of a run's scores.json, "config/task" keys. */
static double score_of(const char *dir, const char *config, const char *task)
{
    char *text = tu_slurp_in(dir, "scores.json");
    cJSON *j = cJSON_Parse(text);
    double v = NAN;
    const cJSON *r;
    cJSON_ArrayForEach(
        r, cJSON_GetObjectItem(
               j, "rows")) if (strcmp(cJSON_GetObjectItem(r, "config")->valuestring, config) == 0 &&
                               strcmp(cJSON_GetObjectItem(r, "task")->valuestring, task) == 0) v =
        cJSON_GetObjectItem(r, "score")->valuedouble;
    cJSON_Delete(j);
    free(text);
    return v;
}

Test(report, several_runs_need_an_output_and_missing_scores_are_rebuilt)
{
    char *a = scored_run(tu_dir, "a");
    char *b = make_run(tu_dir, "b"); /* no scores.json */
    tu_result r = tu_kvbench("report", a, b, NULL);
    cr_assert_eq(r.status, 2);
    cr_assert(strstr(r.err, "several runs need --output DIR"), "%s", r.err);
    tu_result_free(&r);
    char both[1024];
    snprintf(both, sizeof both, "%s/both", tu_dir);
    /* b has no scores.json: report scores its predictions with LongBench's
     * scorers, which agree here with the exact scorer that scored a */
    r = tu_kvbench("report", a, b, "--output", both, NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.err, "has no scores.json: scoring its predictions"), "%s", r.err);
    tu_result_free(&r);
    for (int c = 0; c < 5; c++)
        for (int t = 0; t < 2; t++) {
            const char *task = t ? "qasper" : "trec";
            cr_expect_float_eq(score_of(b, cfgs[c], task), score_of(a, cfgs[c], task), 0.005,
                               "%s %s", cfgs[c], task);
        }
    char *a2 = scored_run(tu_dir, "a2");
    r = tu_kvbench("report", a, a2, "--output", both, NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    char *csv = tu_slurp_in(both, "scores.csv");
    cr_assert_eq(count(csv, "\n"), 1 + 20);
    free(csv);
    tu_result_free(&r);
    free(a);
    free(a2);
    free(b);
}

Test(report, sixteen_english_tasks_give_the_en16_average)
{
    char *example = tu_source("tests/data/report/example");
    tu_kvbench_ok("report", example, "--output", tu_dir, NULL);
    char *csv = tu_slurp_in(tu_dir, "scores.csv");
    cr_assert_eq(count(csv, "\n"), 1 + 30 * 16);
    char *md = tu_slurp_in(tu_dir, "summary.md");
    cr_assert(strstr(md, "| **EN16** | Δ full |"), "16 English tasks: EN16");
    /* the full row of the example is the PyramidKV FullKV row (to the 0.5 steps of
     * 200 right-or-wrong samples); its mean is 663 / 16 = 41.44 */
    cr_assert(strstr(md, "| **41.44** ±"), "%.300s", md);
    char *html = tu_slurp_in(tu_dir, "report.html");
    cr_assert(strstr(html, "<h3>EN16 score vs KV cache budget</h3>"));
    /* 7 series: h2o/snapkv x sum/norm_sum, streaming, snapkv+kvcrush, snapkv+criticalkv;
     * then one line per config in the score-vs-length chart (3 LongBench-E buckets) */
    cr_assert_eq(count(html, "<polyline"), 7 + 30);
    cr_assert(strstr(html, "<h3>Score vs context length (LongBench-E buckets"));
    cr_assert_eq(count(html, "class='whisker'"), 29 + 30 * 3, "interval whiskers");
    cr_assert(strstr(md, "| config | 0-4k | 4-8k | 8k+ |"), "the per-length table");
    cr_assert_eq(count(html, "class='cell'"), 30 * 17);
    free(csv);
    free(md);
    free(html);
    free(example);
}

Test(report, en16_stays_the_headline_when_a_run_has_more_tasks)
{
    char *src = tu_source("tests/data/report/example");
    char *path;
    cr_assert_geq(asprintf(&path, "%s/run.json", src), 0);
    char *run_json = tu_slurp(path, NULL);
    free(path);
    cr_assert_geq(asprintf(&path, "%s/scores.json", src), 0);
    char *scores = tu_slurp(path, NULL);
    free(path);
    /* one more task (Chinese) for the full cache, scored 0 */
    char *end = strrchr(scores, ']');
    cr_assert_not_null(end);
    *end = '\0';
    cr_assert_geq(asprintf(&path, "%s/run.json", tu_dir), 0);
    FILE *f = fopen(path, "w");
    fputs(run_json, f);
    fclose(f);
    free(path);
    cr_assert_geq(asprintf(&path, "%s/scores.json", tu_dir), 0);
    f = fopen(path, "w");
    fprintf(f,
            "%s, {\"config\": \"full\", \"task\": \"lsht\", \"metric\": "
            "\"classification_score\", \"score\": 0, \"n\": 200}]}",
            scores);
    fclose(f);
    free(path);
    tu_kvbench_ok("report", tu_dir, NULL);
    char *md = tu_slurp_in(tu_dir, "summary.md");
    cr_assert(strstr(md, "| Avg (17) | **EN16** | Δ full |"), "%.400s", md);
    /* EN16 is still the 16 English tasks' mean; the 17-task mean is beside it */
    /* (a row without per-sample scores leaves the 17-task mean without an interval) */
    cr_assert(strstr(md, "| 39.00 | **41.44** ±"), "%s", md);
    free(md);
    free(run_json);
    free(scores);
    free(src);
}

/* ---- regressions need a paired interval that excludes 0 ---------------- */

enum { N_PAIRED = 200 };

/* Writes scores.json for a make_run folder: every (config, task) with 200
 * samples, sample i right when its rank ((37 i + 11 c + 5 t) mod 200) is below
 * 120 + 10 c. Then, in the row (config `moved`, task qasper), `down` samples
 * that were right turn wrong and `up` wrong ones right (spread over the
 * task), and the row keeps only its first `keep` samples. */
static char *paired_run(const char *out, const char *name, const char *moved, int down, int up,
                        int keep)
{
    char *dir = make_run(out, name);
    const char *tasks[] = {"trec", "qasper"};
    kb_score_row rows[10];
    size_t nr = 0;
    for (int c = 0; c < 5; c++)
        for (int t = 0; t < 2; t++) {
            bool hit = moved && !strcmp(cfgs[c], moved) && t == 1;
            int n = hit ? keep : N_PAIRED, d = hit ? down : 0, u = hit ? up : 0;
            kb_score_row *r = &rows[nr++];
            *r = (kb_score_row){.config = strdup(cfgs[c]),
                                .task = strdup(tasks[t]),
                                .metric = strdup("exact"),
                                .n = n,
                                .samples = calloc(N_PAIRED, sizeof *r->samples)};
            double sum = 0;
            for (int i = 0; i < n; i++) {
                bool right = (37 * i + 11 * c + 5 * t) % N_PAIRED < 120 + 10 * c;
                if (right && d > 0 && i % 3 == 0) {
                    right = false;
                    d--;
                } else if (!right && u > 0 && i % 3 == 0) {
                    right = true;
                    u--;
                }
                char id[16];
                snprintf(id, sizeof id, "s%03d", i);
                r->samples[i] = (kb_sample_score){{strdup(id), strlen(id)}, right, 1000};
                sum += right;
            }
            cr_assert_eq(d + u, 0, "the fixture moved every sample it was asked to");
            r->n_samples = (size_t)n;
            r->score = 100.0 * sum / n;
        }
    cr_assert_eq(kb_scores_save(dir, rows, nr, &err), 0, "%s", err.msg);
    for (size_t i = 0; i < nr; i++) {
        free(rows[i].config);
        free(rows[i].task);
        free(rows[i].metric);
        for (size_t j = 0; j < rows[i].n_samples; j++)
            kv_str_free(&rows[i].samples[j].id);
        free(rows[i].samples);
    }
    return dir;
}

static const kb_change *change_of(const kb_change *ch, size_t n, const char *config)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(ch[i].config, config) && !strcmp(ch[i].task, "qasper"))
            return &ch[i];
    return NULL;
}

Test(report, a_noise_only_baseline_is_not_flagged_while_a_real_drop_is)
{
    const char *cfg = "snapkv_s32_r16_i80";
    char *last = paired_run(tu_dir, "last", NULL, 0, 0, N_PAIRED);
    /* 10 samples lost, 6 gained: -2 points, what a rerun's noise can do */
    char *noisy = paired_run(tu_dir, "noisy", cfg, 10, 6, N_PAIRED);
    /* 24 samples lost, none gained: -12 points */
    char *dropped = paired_run(tu_dir, "dropped", cfg, 24, 0, N_PAIRED);

    kb_report_run base, a, b;
    cr_assert_eq(kb_report_run_load(last, &base, &err), 0, "%s", err.msg);
    cr_assert_eq(kb_report_run_load(noisy, &a, &err), 0, "%s", err.msg);
    cr_assert_eq(kb_report_run_load(dropped, &b, &err), 0, "%s", err.msg);
    kb_change *ch;
    size_t n, n_partial;
    cr_assert_eq(kb_report_compare(&a, &base, 1.0, &ch, &n, &n_partial), 0);
    cr_assert_eq(n, 1, "only the moved row moved");
    const kb_change *c = change_of(ch, n, cfg);
    cr_assert_not_null(c);
    /* the drop is past the threshold, which alone would flag it... */
    cr_assert_float_eq(c->delta, -2.0, 1e-9);
    cr_assert(c->paired && c->n_shared == N_PAIRED && n_partial == 0);
    /* ...but the paired interval holds 0: noise */
    cr_assert(c->ci.lo < 0 && c->ci.hi > 0, "[%f, %f]", c->ci.lo, c->ci.hi);
    cr_assert_eq(c->verdict, 0);
    free(ch);

    cr_assert_eq(kb_report_compare(&b, &base, 1.0, &ch, &n, NULL), 0);
    c = change_of(ch, n, cfg);
    cr_assert_not_null(c);
    cr_assert_float_eq(c->delta, -12.0, 1e-9);
    cr_assert_lt(c->ci.hi, 0);
    cr_assert_eq(c->verdict, -1);
    free(ch);
    kb_report_run_free(&base);
    kb_report_run_free(&a);
    kb_report_run_free(&b);

    tu_result r = tu_kvbench("report", noisy, "--baseline", last, "--fail-on-regression", NULL);
    cr_assert_eq(r.status, 0, "%s%s", r.out, r.err);
    cr_assert(strstr(r.out, "0 regressions of at least 1.00 points beyond noise"), "%s", r.out);
    tu_result_free(&r);
    char *md = tu_slurp_in(noisy, "summary.md");
    cr_assert(
        strstr(md, "| within noise | snapkv_s32_r16_i80 | qasper | 80.00 | 78.00 | -2.00 | ["),
        "%s", md);
    free(md);

    r = tu_kvbench("report", dropped, "--baseline", last, "--fail-on-regression", NULL);
    cr_assert_eq(r.status, 1, "%s%s", r.out, r.err);
    cr_assert(strstr(r.out,
                     "regression: dropped snapkv_s32_r16_i80 qasper: 80.00 -> 68.00 (-12.00, "
                     "95% interval [-"),
              "%s", r.out);
    cr_assert(strstr(r.out, "on 200 shared samples)"), "%s", r.out);
    tu_result_free(&r);
    char *html = tu_slurp_in(dropped, "report.html");
    cr_assert_eq(count(html, "class='regcell'"), 1, "the regressed cell is outlined");
    free(html);
    free(last);
    free(noisy);
    free(dropped);
}

Test(report, two_runs_are_compared_side_by_side)
{
    char *both;
    const char *cfg = "snapkv_s32_r16_i80";
    char *last = paired_run(tu_dir, "last", NULL, 0, 0, N_PAIRED);
    char *dropped = paired_run(tu_dir, "dropped", cfg, 24, 0, N_PAIRED); /* -12 points */
    cr_assert_geq(asprintf(&both, "%s/both", tu_dir), 0);
    tu_kvbench_ok("report", last, dropped, "--output", both, NULL);
    char *md = tu_slurp_in(both, "summary.md");
    char *side = strstr(md, "## Side by side");
    cr_assert(side, "%s", md);
    cr_assert(side < strstr(md, "## last —"), "the comparison comes before each run's details");
    cr_assert(strstr(side, "| config | tasks | last | dropped | Δ dropped − last |"), "%s", side);
    /* one row per config with both runs' means (trec unchanged, qasper -12: -6) */
    cr_assert(strstr(side, "| snapkv_s32_r16_i80 | mean | "), "%s", side);
    cr_assert(strstr(side, " | -6.00 |\n"), "%s", side);
    /* per task: the paired difference, its interval and the mark */
    cr_assert(strstr(side, "| qasper | snapkv_s32_r16_i80 | 80.00 | 68.00 | -12.00 [-"), "%s",
              side);
    cr_assert(strstr(side, "] ▼ |"), "%s", side);
    cr_assert(strstr(side, "| trec | full | "), "%s", side);
    char *html = tu_slurp_in(both, "report.html");
    cr_assert(strstr(html, "<h2>Side by side</h2>"));
    cr_assert(strstr(html, "<td class='num neg'>-12.00 ["), "%s", html);
    free(html);
    free(md);
    free(both);
    free(last);
    free(dropped);
}

Test(report, runs_over_different_samples_pair_the_shared_ones_and_say_so)
{
    const char *cfg = "snapkv_s32_r16_i80";
    char *last = paired_run(tu_dir, "last", NULL, 0, 0, N_PAIRED);
    /* the same predictions, 24 drops, but only the first 150 samples */
    char *part = paired_run(tu_dir, "part", cfg, 24, 0, 150);
    kb_report_run base, a;
    cr_assert_eq(kb_report_run_load(last, &base, &err), 0, "%s", err.msg);
    cr_assert_eq(kb_report_run_load(part, &a, &err), 0, "%s", err.msg);
    kb_change *ch;
    size_t n, n_partial;
    cr_assert_eq(kb_report_compare(&a, &base, 1.0, &ch, &n, &n_partial), 0);
    cr_assert_eq(n_partial, 1);
    const kb_change *c = change_of(ch, n, cfg);
    cr_assert_not_null(c);
    cr_assert_eq(c->n_shared, 150);
    cr_assert_eq(c->n_before, N_PAIRED);
    cr_assert_eq(c->n_after, 150);
    /* on the shared 150: 24 right answers lost, nothing else changed */
    cr_assert_float_eq(c->delta, -100.0 * 24 / 150, 1e-9);
    cr_assert_eq(c->verdict, -1);
    free(ch);
    kb_report_run_free(&base);
    kb_report_run_free(&a);
    tu_result r = tu_kvbench("report", part, "--baseline", last, NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "note: part: 1 (config, task) pair covers different samples than last; "
                            "compared on the shared ones"),
              "%s", r.out);
    tu_result_free(&r);
    char *md = tu_slurp_in(part, "summary.md");
    cr_assert(strstr(md, "1 (config, task) pair of the two runs cover different samples"), "%s",
              md);
    free(md);
    free(last);
    free(part);
}

/* A run folder may be renamed to anything: report.html's links to its
 * pages of wrong answers still lead to them (percent-encoded, so that a
 * quote does not end the attribute nor a '#' start a fragment). */
Test(report, links_to_pages_of_a_run_with_any_name_are_encoded)
{
    char *renamed, *both, *page;
    char *dir = scored_run(tu_dir, "night1");
    char *other = scored_run(tu_dir, "night2");
    cr_assert_geq(asprintf(&renamed, "%s/it's #2 ü", tu_dir), 0);
    cr_assert_eq(rename(dir, renamed), 0);
    cr_assert_geq(asprintf(&both, "%s/both", tu_dir), 0);
    tu_kvbench_ok("report", renamed, other, "--output", both, NULL);
    char *html = tu_slurp_in(both, "report.html");
    cr_assert(strstr(html, "<a href='wrong/it%27s%20%232%20%C3%BC/qasper.html'>qasper</a>"),
              "%s", html);
    cr_assert(strstr(html, "<a href='wrong/night2/qasper.html'>qasper</a>"), "%s", html);
    /* the page is where the decoded link says */
    cr_assert_geq(asprintf(&page, "%s/wrong/it's #2 ü/qasper.html", both), 0);
    cr_assert_eq(access(page, F_OK), 0, "%s", page);
    free(page);
    free(html);
    free(both);
    free(renamed);
    free(other);
    free(dir);
}
