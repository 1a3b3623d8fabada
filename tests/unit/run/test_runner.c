/* The driver loop over a fake backend (no engine): one prefill per sample for
 * all configs, the same predictions as separate runs, clean stop + resume,
 * shards + merge, limits, and scores/report written at the end. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "run/runner.h"
#include "rundir/merge.h"
#include "score/score.h"
#include "support/testutil.h"
#include "tokenizer/tokenizer.h"
#include "util/file.h"

typedef struct fake {
    const kb_matrix *m;
    long prefills, decodes;
    long stop_after_decodes; /* 0: never */
    volatile sig_atomic_t *stop;
    size_t last_n_configs; /* configs the last prefill was asked for */
    int report_fd;         /* > 0: one byte per decode, for the kill test */
} fake;

/* What the fake model reads from the prompt the runner built: the sample's
 * context says "ANSWER=a1;INDEX=4;" (see write_task), so the prompt reached
 * the model whole and in order. */
typedef struct fake_state {
    long index;
    char answer[16];
    long prompt_tokens;
} fake_state;

static kv_tokenizer *tokenizer; /* the tiny test model's, loaded once */

static long task_size(const char *task)
{
    return strcmp(task, "trec") == 0 ? 7 : strcmp(task, "qasper") == 0 ? 5 : -1;
}

/* data/<task>.jsonl: n LongBench records whose context holds the answer;
 * trec's class list makes its classification score exact. */
static void write_task(const char *data, const char *task)
{
    char *path;
    cr_assert_geq(asprintf(&path, "%s/%s.jsonl", data, task), 0);
    FILE *f = fopen(path, "w");
    cr_assert(f, "%s", path);
    free(path);
    for (long i = 0; i < task_size(task); i++)
        fprintf(f,
                "{\"_id\": \"%s-%03ld\", \"input\": \"which?\", \"context\": "
                "\"ANSWER=a%ld;INDEX=%ld;\", \"answers\": [\"a%ld\"], \"length\": %ld, "
                "\"dataset\": \"%s\", \"language\": \"en\", \"all_classes\": %s}\n",
                task, i, i % 3, i, i % 3, 100 + i, task,
                strcmp(task, "trec") == 0 ? "[\"a0\", \"a1\", \"a2\"]" : "null");
    fclose(f);
}

static int f_prefill(void *ctx, const int32_t *ids, size_t n_ids, size_t n_context,
                     const kb_gen_limits *g, const size_t *configs, size_t n, void **state,
                     kv_error *err)
{
    (void)configs, (void)g;
    if (n_context == 0 || n_context >= n_ids)
        return kv_fail(err, "the prompt has no context and question parts (%zu of %zu)", n_context,
                       n_ids);
    fake *f = ctx;
    f->prefills++;
    f->last_n_configs = n;
    size_t len;
    char *text = kv_tokenizer_decode_len(tokenizer, ids, n_ids, true, &len);
    const char *a = text ? strstr(text, "ANSWER=") : NULL;
    const char *x = text ? strstr(text, "INDEX=") : NULL;
    if (!a || !x) {
        free(text);
        return kv_fail(err, "the prompt lost the sample's context");
    }
    fake_state *st = calloc(1, sizeof *st);
    snprintf(st->answer, sizeof st->answer, "%.*s", (int)strcspn(a + 7, ";"), a + 7);
    st->index = atol(x + 6);
    st->prompt_tokens = (long)n_ids;
    free(text);
    *state = st;
    return 0;
}

/* Deterministic per (sample, config): right unless the budget is small and
 * the sample index is unlucky; the full cache is always right. */
static int f_decode(void *ctx, void *state, size_t config, kb_decode_result *out, kv_error *err)
{
    (void)err;
    fake *f = ctx;
    fake_state *st = state;
    const kb_config *cfg = &f->m->configs[config];
    f->decodes++;
    if (f->stop && f->stop_after_decodes && f->decodes == f->stop_after_decodes)
        *f->stop = 1; /* as if SIGINT arrived in the middle of a sample */
    bool right = cfg->budget < 0 || (st->index + cfg->budget / 16) % 3 != 0;
    /* a wrong answer holds a NUL byte, as a token for byte 0x00 decodes to */
    static const char wrong[] = "wrong\0 after a NUL";
    out->text = right ? strdup(st->answer) : memcpy(malloc(sizeof wrong), wrong, sizeof wrong);
    out->text_len = right ? 0 : sizeof wrong - 1;
    out->kept_tokens = cfg->budget < 0 ? st->prompt_tokens : cfg->budget;
    out->generated_tokens = 2;
    if (f->report_fd > 0 && write(f->report_fd, "d", 1) != 1)
        _exit(7);
    return 0;
}

static void f_free(void *ctx, void *state)
{
    (void)ctx;
    free(state);
}

/* What LongBench's metrics give these lines (classification with trec's
 * three classes, qa_f1 for qasper): 1 for the exact answer, 0 for the
 * wrong one (no class and no word in common). */
static double exact_share(const kb_pred_lines *l, double *per)
{
    double hits = 0;
    for (size_t i = 0; i < l->n; i++) {
        per[i] = kv_str_eq(l->line[i].pred, l->line[i].answers[0]);
        hits += per[i];
    }
    return l->n ? 100.0 * hits / (double)l->n : 0;
}

static kb_runner_backend backend(fake *f, const kb_matrix *m)
{
    if (!tokenizer) {
        char *dir = tu_source("tests/data/models/qwen3-bf16");
        kv_error e;
        tokenizer = kv_tokenizer_load(dir, &e);
        cr_assert(tokenizer, "%s", e.msg);
        free(dir);
    }
    f->m = m;
    return (kb_runner_backend){.ctx = f,
                               .tok = tokenizer,
                               .max_positions = 4096,
                               .prefill = f_prefill,
                               .decode = f_decode,
                               .prefill_free = f_free};
}

static kv_error err;

/* A matrix over trec and qasper whose data is written into out/data. */
static void matrix(kb_matrix *m, const char *out, const char *configs, const char *extra)
{
    char text[4096], data[1024];
    snprintf(data, sizeof data, "%s/data", out);
    mkdir(data, 0777);
    write_task(data, "trec");
    write_task(data, "qasper");
    snprintf(text, sizeof text,
             "{\"name\": \"r\", \"model\": \"m\", \"output\": \"%s\", \"data\": \"%s\", "
             "\"tasks\": [\"trec\", \"qasper\"], \"configs\": [%s]%s}",
             out, data, configs, extra);
    cr_assert_eq(kb_matrix_parse(text, NULL, m, &err), 0, "%s", err.msg);
}

#define THREE                                                                                      \
    "{\"algorithm\": \"h2o\", \"start_size\": 4, \"recent_size\": 4, \"intermediate_size\": 8}, "  \
    "{\"algorithm\": \"snapkv\", \"start_size\": 4, \"recent_size\": 4, \"intermediate_size\": "   \
    "40}"

static kb_runner_stats run(const kb_matrix *m, kb_shard shard, fake *f)
{
    kb_runner_options o = {.shard = shard};
    kb_runner_backend b = backend(f, m);
    kb_runner_stats st;
    cr_assert_eq(kb_runner_run(m, &o, "test", "hash0", &b, f->stop, NULL, &st, &err), 0, "%s",
                 err.msg);
    return st;
}

/* A prediction file without the timing fields (which no two runs share). */
static char *lines_without_times(const char *dir, const char *config, const char *task)
{
    char *path;
    cr_assert_geq(asprintf(&path, "%s/predictions/%s/%s.jsonl", dir, config, task), 0);
    kb_pred_lines l;
    cr_assert_eq(kb_pred_lines_read(path, &l, &err), 0, "%s", err.msg);
    char *all = strdup("");
    for (size_t i = 0; i < l.n; i++) {
        json_t *o = json_loads(l.text[i], JSON_ALLOW_NUL, NULL);
        json_object_del(o, "prefill_s");
        json_object_del(o, "decode_s");
        char *t = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER), *grown;
        json_decref(o);
        cr_assert_geq(asprintf(&grown, "%s%s\n", all, t), 0);
        free(all);
        free(t);
        all = grown;
    }
    kb_pred_lines_free(&l);
    free(path);
    return all;
}

static void expect_same_predictions(const char *a, const char *b, const kb_matrix *m)
{
    const char *tasks[] = {"trec", "qasper"};
    for (size_t c = 0; c < m->n_configs; c++)
        for (int t = 0; t < 2; t++) {
            char *x = lines_without_times(a, m->configs[c].name, tasks[t]);
            char *y = lines_without_times(b, m->configs[c].name, tasks[t]);
            cr_assert_str_eq(x, y, "%s/%s", m->configs[c].name, tasks[t]);
            free(x);
            free(y);
        }
}

/* Each test runs in its own folder, tu_dir; those that compare with an
 * uninterrupted, unsharded run make it with run_reference, in a folder of
 * its own. The suite's .fini removes both, also after a failed assertion. */
static struct {
    char *dir;
    kb_matrix m;
} ref;

/* The matrix of THREE run whole in ref.dir; returns its run folder. */
static char *run_reference(void)
{
    ref.dir = tu_mkdtemp();
    matrix(&ref.m, ref.dir, THREE, "");
    fake f = {0};
    run(&ref.m, (kb_shard){0, 1}, &f);
    return kb_run_dir(ref.dir, "r", NULL);
}

static void remove_folders(void)
{
    kb_matrix_free(&ref.m);
    if (ref.dir)
        tu_rmtree(ref.dir);
    free(ref.dir);
    tu_dir_remove();
}

TestSuite(runner, .init = tu_dir_make, .fini = remove_folders);

Test(runner, one_prefill_per_sample_for_all_configs_and_a_report_at_the_end)
{
    kb_matrix m;
    matrix(&m, tu_dir, THREE, "");
    fake f = {0};
    kb_runner_stats st = run(&m, (kb_shard){0, 1}, &f);
    cr_assert_eq(f.prefills, 12, "one prefill per sample (7 + 5)");
    cr_assert_eq(f.decodes, 12 * 3, "one decode per sample and config");
    cr_assert_eq(f.last_n_configs, 3);
    cr_assert_eq(st.samples_done, 12);

    char *dir = kb_run_dir(tu_dir, "r", NULL);
    /* scores.json / report: one row per config x task, scores = the scorer on the files */
    kb_report_run r;
    cr_assert_eq(kb_report_run_load(dir, &r, &err), 0, "%s", err.msg);
    cr_assert_eq(r.n_rows, 6);
    for (size_t i = 0; i < r.n_rows; i++) {
        char *path;
        cr_assert_geq(
            asprintf(&path, "%s/predictions/%s/%s.jsonl", dir, r.rows[i].config, r.rows[i].task),
            0);
        kb_pred_lines l;
        cr_assert_eq(kb_pred_lines_read(path, &l, &err), 0);
        cr_assert_eq((long)l.n, task_size(r.rows[i].task));
        double per[64];
        cr_assert_leq(l.n, 64);
        cr_assert_eq(r.rows[i].score, kb_py_round(exact_share(&l, per), 2));
        cr_assert_str_eq(r.rows[i].metric,
                         strcmp(r.rows[i].task, "trec") == 0 ? "classification_score"
                                                               : "qa_f1_score");
        cr_assert_eq(r.rows[i].n, (long)l.n);
        /* the per-sample scores the intervals resample, kept in scores.json */
        cr_assert_eq(r.rows[i].n_samples, l.n);
        for (size_t j = 0; j < l.n; j++) {
            cr_assert(kv_str_eq(r.rows[i].samples[j].id, l.line[j].id));
            cr_assert_eq(r.rows[i].samples[j].score, per[j]);
        }
        cr_assert(!isnan(r.rows[i].ci.lo) && r.rows[i].ci.lo <= r.rows[i].score &&
                  r.rows[i].score <= r.rows[i].ci.hi);
        kb_pred_lines_free(&l);
        free(path);
    }
    cr_assert_eq(r.rows[0].score, 100.0, "the fake full cache is always right");
    /* the NUL of a wrong answer is written as \u0000, with the text after it */
    char *h2o;
    cr_assert_geq(asprintf(&h2o, "%s/predictions/%s/trec.jsonl", dir, r.rows[2].config), 0);
    char *lines = tu_slurp(h2o, NULL);
    cr_expect(strstr(lines, "\"pred\":\"wrong\\u0000 after a NUL\""), "%s", lines);
    free(lines);
    free(h2o);
    kb_report_run_free(&r);
    char *html;
    cr_assert_geq(asprintf(&html, "%s/report.html", dir), 0);
    cr_assert(kv_file_exists(html));
    free(html);

    /* the same command again: nothing to do */
    fake g = {0};
    st = run(&m, (kb_shard){0, 1}, &g);
    cr_assert_eq(g.prefills, 0);
    cr_assert_eq(st.samples_skipped, 12);

    /* separate runs of each config give the same predictions */
    for (size_t c = 1; c < m.n_configs; c++) {
        char *alone = tu_mkdtemp();
        char cfg[512];
        char *canon = kb_json_canonical(m.configs[c].params);
        snprintf(cfg, sizeof cfg, "%s", canon);
        free(canon);
        kb_matrix one;
        matrix(&one, alone, cfg, "");
        fake h = {0};
        run(&one, (kb_shard){0, 1}, &h);
        char *adir = kb_run_dir(alone, "r", NULL);
        expect_same_predictions(adir, dir, &one);
        free(adir);
        kb_matrix_free(&one);
        tu_rmtree(alone);
        free(alone);
    }
    free(dir);
    kb_matrix_free(&m);
}

Test(runner, a_stop_request_ends_between_samples_and_a_rerun_completes)
{
    kb_matrix m;
    matrix(&m, tu_dir, THREE, "");
    char *rdir = run_reference();

    volatile sig_atomic_t stop = 0;
    fake f = {.stop = &stop, .stop_after_decodes = 10}; /* in the middle of sample 4 */
    kb_runner_stats st = run(&m, (kb_shard){0, 1}, &f);
    cr_assert(st.stopped);
    cr_assert_eq(st.samples_done, 4, "the sample in flight is finished, then it stops");
    char *dir = kb_run_dir(tu_dir, "r", NULL);
    char *scores;
    cr_assert_geq(asprintf(&scores, "%s/scores.json", dir), 0);
    cr_assert_not(kv_file_exists(scores), "no report for an unfinished run");

    stop = 0;
    fake g = {0};
    st = run(&m, (kb_shard){0, 1}, &g);
    cr_assert_not(st.stopped);
    cr_assert_eq(f.prefills + g.prefills, 12, "no sample prefilled twice");
    cr_assert_eq(st.samples_skipped, 4);
    cr_assert(kv_file_exists(scores));
    expect_same_predictions(rdir, dir, &m);
    free(rdir);
    free(scores);
    free(dir);
    kb_matrix_free(&m);
}

Test(runner, the_report_of_a_stopped_run_says_so_and_marks_its_incomplete_cells)
{
    kb_matrix m;
    matrix(&m, tu_dir, THREE, "");
    volatile sig_atomic_t stop = 0;
    fake f = {.stop = &stop, .stop_after_decodes = 10}; /* trec's samples 0-3 of 7 */
    cr_assert(run(&m, (kb_shard){0, 1}, &f).stopped);
    char *dir = kb_run_dir(tu_dir, "r", NULL);
    tu_result r = tu_kvbench("report", dir, NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.err, "has not finished: 3 (config, task) cells hold fewer samples"), "%s",
              r.err);
    tu_result_free(&r);
    char *path;
    cr_assert_geq(asprintf(&path, "%s/summary.md", dir), 0);
    char *md = tu_slurp(path, NULL);
    cr_assert(strncmp(md, "# kvbench report (unfinished run)\n", 34) == 0, "%s", md);
    cr_assert(strstr(md, "— unfinished: the run stopped before its end; 3 cells marked"), "%s", md);
    cr_assert(strstr(md, "| full | full | – | 100.00 ±0.00 (4/7 done) |"), "%s", md);
    free(md);
    free(path);
    cr_assert_geq(asprintf(&path, "%s/report.html", dir), 0);
    char *html = tu_slurp(path, NULL);
    cr_assert(strstr(html, "<h1>kvbench report (unfinished run)</h1>"), "%s", html);
    cr_assert(strstr(html, ">4/7 done</span>"), "%s", html);
    free(html);
    free(path);
    /* finished, the same report has no mark */
    stop = 0;
    fake g = {0};
    run(&m, (kb_shard){0, 1}, &g);
    cr_assert_geq(asprintf(&path, "%s/summary.md", dir), 0);
    md = tu_slurp(path, NULL);
    cr_assert(strncmp(md, "# kvbench report\n", 17) == 0 && !strstr(md, "done)"), "%s", md);
    free(md);
    free(path);
    free(dir);
    kb_matrix_free(&m);
}

Test(runner, the_report_pages_the_samples_each_config_got_wrong)
{
    kb_matrix m;
    matrix(&m, tu_dir, THREE, "");
    fake f = {0};
    run(&m, (kb_shard){0, 1}, &f);
    char *dir = kb_run_dir(tu_dir, "r", NULL), *path;
    cr_assert_geq(asprintf(&path, "%s/wrong/trec.html", dir), 0);
    char *page = tu_slurp(path, NULL);
    /* the fake is wrong where (index + budget / 16) % 3 == 0: h2o (16) at 2 and 5 of trec's
     * 7, snapkv (48) at 0, 3 and 6 */
    char *h2o = strstr(page, ">h2o_s4_r4_i8: 2 of 7 samples below the full cache</h2>");
    char *snapkv = strstr(page, ">snapkv_s4_r4_i40: 3 of 7 samples below the full cache</h2>");
    cr_assert(h2o && snapkv && h2o < snapkv, "%s", page);
    cr_assert(strstr(h2o, "<td>trec-002</td><td class='num'>0.00 (1.00)</td>"), "%s", h2o);
    cr_assert(strstr(h2o, "<td>trec-005</td>") < snapkv, "%s", h2o);
    cr_assert(strstr(snapkv, "<td>trec-006</td>"), "%s", snapkv);
    /* the prompt from the data, the prediction (its NUL shown), the full cache's, the answers */
    cr_assert(strstr(h2o, "ANSWER=a2;INDEX=2;"), "%s", h2o);
    cr_assert(strstr(h2o, "<pre>wrong\\u0000 after a NUL</pre>"), "%s", h2o);
    cr_assert(strstr(h2o, "<td><pre>a2</pre></td></tr>"), "%s", h2o);
    free(page);
    free(path);
    cr_assert_geq(asprintf(&path, "%s/report.html", dir), 0);
    char *html = tu_slurp(path, NULL);
    cr_assert(strstr(html, "<a href='wrong/trec.html'>trec</a>"), "report.html links the page");
    free(html);
    free(path);
    free(dir);
    kb_matrix_free(&m);
}

Test(runner, shards_then_merge_equal_one_run)
{
    kb_matrix m;
    matrix(&m, tu_dir, THREE, "");
    char *rdir = run_reference();
    long prefills = 0;
    char *dirs[3];
    for (long i = 0; i < 3; i++) {
        fake f = {0};
        run(&m, (kb_shard){i, 3}, &f);
        prefills += f.prefills;
        dirs[i] = kb_run_dir(tu_dir, "r", &(kb_shard){i, 3});
    }
    cr_assert_eq(prefills, 12, "every sample in exactly one shard");
    char *merged = kb_run_dir(tu_dir, "r", NULL);
    size_t n_files;
    cr_assert_eq(kb_run_merge((const char *const *)dirs, 3, merged, false, NULL, &n_files, &err), 0,
                 "%s", err.msg);
    cr_assert_eq(n_files, 6);
    expect_same_predictions(rdir, merged, &m);
    /* the same command unsharded on the merged run: nothing left to do but
     * the scores and the report */
    fake g = {0};
    kb_runner_stats st = run(&m, (kb_shard){0, 1}, &g);
    cr_assert_eq(g.prefills, 0);
    cr_assert_eq(st.samples_skipped, 12);
    char *scores;
    cr_assert_geq(asprintf(&scores, "%s/scores.json", merged), 0);
    cr_assert(kv_file_exists(scores));
    free(scores);
    /* a line of shard 1 copied into shard 0's folder is refused at resume
     * (merged, the sample would count twice) */
    char *from, *to, *line;
    cr_assert_geq(asprintf(&from, "%s/predictions/full/trec.jsonl", dirs[1]), 0);
    cr_assert_geq(asprintf(&to, "%s/predictions/full/trec.jsonl", dirs[0]), 0);
    size_t len;
    cr_assert_not_null(line = tu_slurp(from, &len));
    FILE *f = fopen(to, "a");
    cr_assert_not_null(f);
    fwrite(line, 1, strcspn(line, "\n") + 1, f);
    fclose(f);
    kb_runner_options o = {.shard = {0, 3}};
    kb_runner_backend b = backend(&g, &m);
    cr_assert_lt(kb_runner_run(&m, &o, "test", "hash0", &b, NULL, NULL, &st, &err), 0);
    cr_assert(strstr(err.msg, "which shard 1 of 3 runs, not this folder's shard 0"), "%s", err.msg);
    free(from), free(to), free(line);
    for (int i = 0; i < 3; i++)
        free(dirs[i]);
    free(rdir);
    free(merged);
    kb_matrix_free(&m);
}

Test(runner, limits_and_a_grown_matrix)
{
    kb_matrix m;
    matrix(&m, tu_dir, "", ", \"limit\": 3");
    fake f = {0};
    run(&m, (kb_shard){0, 1}, &f);
    cr_assert_eq(f.prefills, 6, "3 samples of each task");
    kb_matrix_free(&m);
    /* add two configs: every sample is prefilled again, for just those two */
    matrix(&m, tu_dir, THREE, ", \"limit\": 3");
    fake g = {0};
    run(&m, (kb_shard){0, 1}, &g);
    cr_assert_eq(g.prefills, 6);
    cr_assert_eq(g.decodes, 12);
    cr_assert_eq(g.last_n_configs, 2);
    kb_matrix_free(&m);
    /* a task the data folder has no file for: the error names it and the file */
    char text[1024];
    snprintf(text, sizeof text,
             "{\"name\": \"r2\", \"model\": \"m\", \"output\": \"%s\", \"data\": \"%s/data\", "
             "\"tasks\": [\"lcc\"]}",
             tu_dir, tu_dir);
    cr_assert_eq(kb_matrix_parse(text, NULL, &m, &err), 0);
    kb_runner_options o = {.shard = {0, 1}};
    kb_runner_backend b = backend(&g, &m);
    kb_runner_stats st;
    cr_assert_lt(kb_runner_run(&m, &o, "test", "hash0", &b, NULL, NULL, &st, &err), 0);
    cr_assert(strncmp(err.msg, "lcc: ", 5) == 0 && strstr(err.msg, "/data/lcc.jsonl"), "%s",
              err.msg);
    kb_matrix_free(&m);
}

/* Whether a report file of the run folder names a config. */
static bool report_names(const char *dir, const char *file, const char *config)
{
    char *text = tu_slurp_in(dir, file);
    bool found = strstr(text, config) != NULL;
    free(text);
    return found;
}

Test(runner, a_rerun_with_another_sweep_keeps_the_older_configs_scores)
{
    kb_matrix m;
    matrix(&m, tu_dir, THREE, ", \"limit\": 2");
    fake f = {0};
    run(&m, (kb_shard){0, 1}, &f);
    char *h2o = strdup(m.configs[1].name), *snapkv = strdup(m.configs[2].name);
    kb_matrix_free(&m);
    /* the same run name, a sweep without h2o */
    matrix(&m, tu_dir,
           "{\"algorithm\": \"snapkv\", \"start_size\": 4, \"recent_size\": 4, "
           "\"intermediate_size\": 40}",
           ", \"limit\": 2");
    fake g = {0};
    run(&m, (kb_shard){0, 1}, &g);
    cr_assert_eq(g.decodes, 0, "snapkv was done, so was the full cache");
    char *dir = kb_run_dir(tu_dir, "r", NULL);
    kb_report_run r;
    cr_assert_eq(kb_report_run_load(dir, &r, &err), 0, "%s", err.msg);
    cr_assert_eq(r.n_rows, 6, "scores.json: full, h2o and snapkv on 2 tasks");
    size_t n_h2o = 0;
    for (size_t i = 0; i < r.n_rows; i++)
        n_h2o += strcmp(r.rows[i].config, h2o) == 0;
    cr_assert_eq(n_h2o, 2);
    kb_report_run_free(&r);
    /* the run's own report is of its matrix */
    cr_assert(report_names(dir, "summary.md", snapkv));
    cr_assert(!report_names(dir, "summary.md", h2o));
    free(h2o);
    free(snapkv);
    free(dir);
    kb_matrix_free(&m);
}

/* The whole run of the matrix ctx, for tu_kill_at_random_points: the fake
 * reports each decode. */
static int run_killable(void *ctx, int report_fd)
{
    const kb_matrix *m = ctx;
    fake f = {.report_fd = report_fd};
    kb_runner_options o = {.shard = {0, 1}};
    kb_runner_backend b = backend(&f, m);
    kb_runner_stats st;
    return kb_runner_run(m, &o, "test", "hash0", &b, NULL, NULL, &st, &err) == 0 ? 0 : 9;
}

Test(runner, sigkill_at_random_points_then_rerun_equals_an_uninterrupted_run)
{
    kb_matrix m;
    matrix(&m, tu_dir, THREE, "");
    char *rdir = run_reference();
    unsigned seed = (unsigned)time(NULL);
    int status;
    int kills = tu_kill_at_random_points(run_killable, &m, 36 /* decodes */, 8, seed, &status);
    cr_assert_eq(status, 0, "seed %u", seed);
    fake g = {0};
    run(&m, (kb_shard){0, 1}, &g); /* the rerun that completes */
    cr_assert_geq(kills, 1);
    char *dir = kb_run_dir(tu_dir, "r", NULL);
    expect_same_predictions(rdir, dir, &m);
    free(dir);
    free(rdir);
    kb_matrix_free(&m);
}

/* Rewrites a prediction file with its lines in reverse order, leaving out
 * the line of sample `drop` (-1: none); or, when `swap` is set, in their
 * order with the "index" of the first two lines exchanged. */
static void reorder(const char *dir, const char *config, const char *task, long drop, bool swap)
{
    char *path;
    cr_assert_geq(asprintf(&path, "%s/predictions/%s/%s.jsonl", dir, config, task), 0);
    kb_pred_lines l;
    cr_assert_eq(kb_pred_lines_read(path, &l, &err), 0, "%s", err.msg);
    FILE *f = fopen(path, "w");
    for (size_t k = 0; k < l.n; k++) {
        size_t i = swap ? k : l.n - 1 - k;
        if (l.line[i].index == drop && !swap)
            continue;
        json_t *o = json_loads(l.text[i], JSON_ALLOW_NUL, NULL);
        if (swap && l.n > 1 && i < 2) /* the other one's index */
            json_object_set_new(o, "index", json_integer(l.line[1 - i].index));
        char *t = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
        fprintf(f, "%s\n", swap ? t : l.text[i]);
        free(t);
        json_decref(o);
    }
    fclose(f);
    kb_pred_lines_free(&l);
    free(path);
}

static int strcmp_ptr(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The lines of a prediction file without timings, sorted: what a run holds
 * whatever order its lines came in. */
static char *sorted_lines(const char *dir, const char *config, const char *task)
{
    char *all = lines_without_times(dir, config, task), *save = NULL;
    char *lines[64];
    size_t n = 0;
    for (char *t = strtok_r(all, "\n", &save); t && n < 64; t = strtok_r(NULL, "\n", &save))
        lines[n++] = t;
    qsort(lines, n, sizeof *lines, strcmp_ptr);
    char *out = strdup("");
    for (size_t i = 0; i < n; i++) {
        char *grown;
        cr_assert_geq(asprintf(&grown, "%s%s\n", out, lines[i]), 0);
        free(out);
        out = grown;
    }
    free(all);
    return out;
}

Test(runner, resume_goes_by_id_whatever_the_order_of_the_lines)
{
    kb_matrix m;
    matrix(&m, tu_dir, THREE, "");
    char *rdir = run_reference();
    fake f = {0};
    run(&m, (kb_shard){0, 1}, &f);
    char *dir = kb_run_dir(tu_dir, "r", NULL);
    const char *tasks[] = {"trec", "qasper"};
    /* every file in reverse order, sample 2 missing: only it is redone */
    for (size_t c = 0; c < m.n_configs; c++)
        for (int t = 0; t < 2; t++)
            reorder(dir, m.configs[c].name, tasks[t], 2, false);
    fake g = {0};
    kb_runner_stats st = run(&m, (kb_shard){0, 1}, &g);
    cr_assert_eq(g.prefills, 2, "sample 2 of each task, nothing else");
    cr_assert_eq(g.last_n_configs, m.n_configs);
    cr_assert_eq(st.samples_skipped, 10);
    for (size_t c = 0; c < m.n_configs; c++)
        for (int t = 0; t < 2; t++) {
            char *x = sorted_lines(rdir, m.configs[c].name, tasks[t]);
            char *y = sorted_lines(dir, m.configs[c].name, tasks[t]);
            cr_assert_str_eq(x, y, "%s/%s", m.configs[c].name, tasks[t]);
            free(x), free(y);
        }
    /* a line whose index is not its id's place in the data is refused */
    reorder(dir, "full", "qasper", -1, true);
    kb_runner_options o = {.shard = {0, 1}};
    kb_runner_backend b = backend(&g, &m);
    cr_assert_lt(kb_runner_run(&m, &o, "test", "hash0", &b, NULL, NULL, &st, &err), 0);
    cr_assert(strstr(err.msg, "/predictions/full/qasper.jsonl:1: sample \"qasper-004\" has index "
                              "3, but it is sample 4 of the task's data"),
              "%s", err.msg);
    free(dir), free(rdir);
    kb_matrix_free(&m);
}
