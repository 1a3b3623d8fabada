/* The run folder: run.json consistency on resume, prediction files that
 * survive interruption (truncated last line, SIGKILL at random points),
 * sharding, and merging shards (and refusing inconsistent ones). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rundir/merge.h"
#include "rundir/predfile.h"
#include "support/testutil.h"
#include "util/file.h"

static kv_error err;

static void matrix_from(kb_matrix *m, const char *configs)
{
    char text[2048];
    snprintf(text, sizeof text,
             "{\"name\": \"r\", \"model\": \"m\", \"tasks\": [\"trec\", \"qasper\"], "
             "\"configs\": [%s]}",
             configs);
    cr_assert_eq(kb_matrix_parse(text, NULL, m, &err), 0, "%s", err.msg);
}

static kb_run_info info_for(const kb_matrix *m, const char *model_hash, long i, long n)
{
    return (kb_run_info){
        .kvbench_version = "test", .model_hash = model_hash, .matrix = m, .shard = {i, n}};
}

/* The hash of the configs these tests name: "full", and "h2o" as
 * {"algorithm": "h2o"}. */
static void hash_for(const char *config, char hash[17])
{
    cJSON *h2o = cJSON_Parse("{\"algorithm\": \"h2o\"}");
    cr_assert_eq(kb_config_hash_json(strcmp(config, "full") == 0 ? NULL : h2o, hash), 0);
    cJSON_Delete(h2o);
}

/* The prediction of sample `index` for a config, as the runner would write
 * it (its texts in static buffers: valid until the next call). */
static kb_prediction pred_for(long index, const char *config)
{
    static char id[32], pred[64], hash[17];
    static kv_str answers[1];
    hash_for(config, hash);
    snprintf(id, sizeof id, "id%03ld", index);
    snprintf(pred, sizeof pred, "answer %ld by %s", index, config);
    answers[0] = kv_str_c("x");
    return (kb_prediction){.id = kv_str_c(id),
                           .index = index,
                           .task = "trec",
                           .config = config,
                           .config_hash = hash,
                           .pred = kv_str_c(pred),
                           .answers = answers,
                           .n_answers = 1,
                           .length = 100 + index,
                           .prompt_tokens = 50,
                           .kept_tokens = 20,
                           .generated_tokens = 3,
                           .prefill_s = 0.5,
                           .decode_s = 0.25};
}

/* Its line as a JSON tree, for tests that edit it by hand. */
static cJSON *line_for(long index, const char *config)
{
    kb_prediction p = pred_for(index, config);
    kv_strbuf b = {0};
    cr_assert_eq(kb_prediction_format(&p, &b), 0);
    cJSON *j = cJSON_Parse(b.s);
    kv_strbuf_free(&b);
    cr_assert_not_null(j);
    return j;
}

static void append(kb_pred_file *pf, long index, const char *config)
{
    kb_prediction p = pred_for(index, config);
    cr_assert_eq(kb_pred_file_append(pf, &p, &err), 0, "%s", err.msg);
}

static char *file_of(const char *dir, const char *config, const char *task)
{
    char *p;
    cr_assert_geq(asprintf(&p, "%s/predictions/%s/%s.jsonl", dir, config, task), 0);
    return p;
}

/* Writes text as predictions/<config>/<task>.jsonl of the run in dir. */
static char *plant(const char *dir, const char *config, const char *task, const char *text)
{
    char *pdir, *path = file_of(dir, config, task);
    cr_assert_geq(asprintf(&pdir, "%s/predictions/%s", dir, config), 0);
    cr_assert_eq(kv_mkdirs(pdir, &err), 0);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    free(pdir);
    return path;
}

/* Each test works in its own folder, tu_dir, and most in one run there,
 * opened by open_run. The suite's .fini closes that run and frees its
 * matrix (both zero where a test opened none) before the folder goes, so
 * a test whose assertion failed leaves nothing behind either. */
static struct {
    kb_matrix m;
    kb_run_info info;
    kb_run run;
} fx;

/* fx.run: the run of the matrix of configs (as matrix_from) for model "h",
 * opened in tu_dir. */
static void open_run(const char *configs)
{
    matrix_from(&fx.m, configs);
    fx.info = info_for(&fx.m, "h", 0, 1);
    cr_assert_eq(kb_run_open(tu_dir, &fx.info, &fx.run, &err), 0, "%s", err.msg);
}

static void close_run_and_dir(void)
{
    kb_run_close(&fx.run);
    kb_matrix_free(&fx.m);
    tu_dir_remove();
}

TestSuite(results, .init = tu_dir_make, .fini = close_run_and_dir);

Test(results, shard_parse_and_select)
{
    kb_shard s;
    cr_assert_eq(kb_shard_parse("1/4", &s, &err), 0);
    cr_assert_eq(s.index, 1);
    cr_assert_eq(s.count, 4);
    int picked = 0;
    for (long i = 0; i < 10; i++)
        if (kb_shard_selects(&s, i)) {
            cr_assert_eq(i % 4, 1);
            picked++;
        }
    cr_assert_eq(picked, 3);
    cr_assert_lt(kb_shard_parse("4/4", &s, &err), 0);
    cr_assert_str_eq(err.msg, "--shard: '4/4': need 0 <= I < N (shards are numbered from 0)");
    cr_assert_lt(kb_shard_parse("1/0", &s, &err), 0);
    cr_assert_lt(kb_shard_parse("x", &s, &err), 0);
    cr_assert_lt(kb_shard_parse("1/2/3", &s, &err), 0);
    /* every sample goes to exactly one of n shards */
    for (long i = 0; i < 50; i++) {
        int owners = 0;
        for (long k = 0; k < 7; k++)
            owners += kb_shard_selects(&(kb_shard){k, 7}, i);
        cr_assert_eq(owners, 1);
    }
}

Test(results, run_json_records_and_resume_checks)
{
    kb_matrix m, m2;
    matrix_from(&m, "{\"algorithm\": \"h2o\", \"start_size\": 4}");
    kb_run_info info = info_for(&m, "aaaa", 0, 1);
    kb_run run;
    cr_assert_eq(kb_run_open(tu_dir, &info, &run, &err), 0, "%s", err.msg);
    cr_assert_str_eq(kb_run_string(&run, "model_hash"), "aaaa");
    cr_assert_str_eq(kb_run_string(&run, "protocol"), "longbench");
    cr_assert_str_eq(kb_run_string(&run, "compute"), "f32");
    cr_assert_str_eq(kb_run_string(&run, "kvbench_version"), "test");
    cr_assert(cJSON_IsNull(kb_run_config(&run, "full")));
    cr_assert_not_null(kb_run_config(&run, "h2o_s4"));
    kb_run_close(&run);

    /* the same run again: fine */
    cr_assert_eq(kb_run_open(tu_dir, &info, &run, &err), 0, "%s", err.msg);
    kb_run_close(&run);
    /* another model: refused */
    kb_run_info other = info_for(&m, "bbbb", 0, 1);
    cr_assert_lt(kb_run_open(tu_dir, &other, &run, &err), 0);
    cr_assert(strstr(err.msg, "different model (hash aaaa, now bbbb)"), "%s", err.msg);
    /* the other compute mode: refused */
    cr_assert_eq(kb_matrix_parse("{\"name\": \"r\", \"model\": \"m\", \"compute\": \"bf16\", "
                                 "\"tasks\": [\"trec\", \"qasper\"], \"configs\": [{\"algorithm\": "
                                 "\"h2o\", \"start_size\": 4}]}",
                                 NULL, &m2, &err),
                 0, "%s", err.msg);
    kb_run_info bf16 = info_for(&m2, "aaaa", 0, 1);
    cr_assert_lt(kb_run_open(tu_dir, &bf16, &run, &err), 0);
    cr_assert(strstr(err.msg, "this run computed in f32, not bf16"), "%s", err.msg);
    kb_matrix_free(&m2);
    /* a config name that now means something else: refused */
    matrix_from(&m2, "{\"name\": \"h2o_s4\", \"algorithm\": \"h2o\", \"start_size\": 8}");
    kb_run_info changed = info_for(&m2, "aaaa", 0, 1);
    cr_assert_lt(kb_run_open(tu_dir, &changed, &run, &err), 0);
    cr_assert(strstr(err.msg, "config \"h2o_s4\" has a different hash"), "%s", err.msg);
    kb_matrix_free(&m2);
    /* a new config: added to run.json, old ones kept */
    matrix_from(&m2, "{\"algorithm\": \"snapkv\"}");
    kb_run_info grown = info_for(&m2, "aaaa", 0, 1);
    cr_assert_eq(kb_run_open(tu_dir, &grown, &run, &err), 0, "%s", err.msg);
    cr_assert_not_null(kb_run_config(&run, "h2o_s4"));
    cr_assert_not_null(kb_run_config(&run, "snapkv"));
    kb_run_close(&run);
    kb_matrix_free(&m2);
    kb_matrix_free(&m);
}

/* run.json's kv_bytes_per_token of config name, or -1. */
static double bytes_per_token(const kb_run *run, const char *name)
{
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(run->json, "kv_bytes_per_token"), name);
    return cJSON_IsNumber(b) ? b->valuedouble : -1;
}

/* run.json records each config's bytes per cached token when the run gives
 * them; a resume fills them in for configs of a run.json from before they
 * were recorded. */
Test(results, run_json_records_bytes_per_cached_token)
{
    char *dir = tu_mkdtemp();
    kb_matrix m;
    matrix_from(&m, "{\"algorithm\": \"h2o\", \"start_size\": 4}");
    kb_run_info info = info_for(&m, "aaaa", 0, 1);
    kb_run run;
    cr_assert_eq(kb_run_open(dir, &info, &run, &err), 0, "%s", err.msg);
    cr_expect_eq(bytes_per_token(&run, "full"), -1, "none given, none recorded");
    kb_run_close(&run);
    const double bytes[] = {229376, 60928};
    info.kv_bytes_per_token = bytes;
    cr_assert_eq(kb_run_open(dir, &info, &run, &err), 0, "%s", err.msg);
    cr_expect_eq(bytes_per_token(&run, "full"), 229376);
    cr_expect_eq(bytes_per_token(&run, "h2o_s4"), 60928);
    kb_run_close(&run);
    cr_assert_eq(kb_run_load(dir, &run, &err), 0, "%s", err.msg); /* as written */
    cr_expect_eq(bytes_per_token(&run, "h2o_s4"), 60928);
    kb_run_close(&run);
    kb_matrix_free(&m);
    /* a config new to the folder gets its own, the others keep theirs */
    matrix_from(&m, "{\"algorithm\": \"snapkv\"}");
    info = info_for(&m, "aaaa", 0, 1);
    const double more[] = {229376, 32256};
    info.kv_bytes_per_token = more;
    cr_assert_eq(kb_run_open(dir, &info, &run, &err), 0, "%s", err.msg);
    cr_expect_eq(bytes_per_token(&run, "snapkv"), 32256);
    cr_expect_eq(bytes_per_token(&run, "h2o_s4"), 60928);
    kb_run_close(&run);
    kb_matrix_free(&m);
    tu_rmtree(dir);
    free(dir);
}

Test(results, a_run_may_grow_its_limit_but_not_change_its_prompts)
{
    kb_matrix m;
    const char *texts[] = {
        "{\"name\": \"r\", \"model\": \"m\", \"limit\": 5, \"tasks\": [\"trec\"]}",
        "{\"name\": \"r\", \"model\": \"m\", \"limit\": 10, \"tasks\": [\"trec\"]}",
        "{\"name\": \"r\", \"model\": \"m\", \"limit\": 10, \"max_length\": 100, "
        "\"tasks\": [\"trec\"]}",
    };
    kb_run run;
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(kb_matrix_parse(texts[i], NULL, &m, &err), 0, "%s", err.msg);
        kb_run_info info = info_for(&m, "h", 0, 1);
        int rc = kb_run_open(tu_dir, &info, &run, &err);
        if (i < 2) {
            cr_assert_eq(rc, 0, "%s", err.msg);
            const cJSON *t = cJSON_GetArrayItem(
                cJSON_GetObjectItem(cJSON_GetObjectItem(run.json, "matrix"), "tasks"), 0);
            cr_assert_eq(cJSON_GetObjectItem(t, "limit")->valuedouble, i == 0 ? 5 : 10);
            kb_run_close(&run);
        } else {
            cr_assert_lt(rc, 0);
            cr_assert(strstr(err.msg, "task \"trec\" has a different max_length"), "%s", err.msg);
        }
        kb_matrix_free(&m);
    }
}

Test(results, truncated_last_line_is_dropped_and_redone)
{
    open_run("");
    kb_pred_file pf;
    cr_assert_eq(kb_pred_file_open(&fx.run, "full", "trec", NULL, &pf, &err), 0, "%s", err.msg);
    for (long i = 0; i < 3; i++)
        append(&pf, i, "full");
    kb_pred_file_close(&pf);
    char *path = file_of(tu_dir, "full", "trec");
    char *good = tu_slurp(path, NULL);

    /* what SIGKILL in the middle of write(2) leaves: a prefix of line 4 */
    cJSON *j = line_for(3, "full");
    char *text = cJSON_PrintUnformatted(j);
    FILE *f = fopen(path, "a");
    fwrite(text, 1, strlen(text) / 2, f);
    fclose(f);

    cr_assert_eq(kb_pred_file_open(&fx.run, "full", "trec", NULL, &pf, &err), 0, "%s", err.msg);
    cr_assert_eq(pf.n_dropped, 1);
    cr_assert_eq(pf.n_lines, 3);
    cr_assert(kb_pred_file_done(&pf, kv_str_c("id002")));
    cr_assert_not(kb_pred_file_done(&pf, kv_str_c("id003")));
    char *after = tu_slurp(path, NULL);
    cr_assert_str_eq(after, good, "the cut-short line must be gone, the rest untouched");
    free(after);
    /* redo it, and a duplicate is refused */
    append(&pf, 3, "full");
    kb_prediction again = pred_for(3, "full");
    cr_assert_lt(kb_pred_file_append(&pf, &again, &err), 0);
    cr_assert(strstr(err.msg, "\"id003\" is already there"), "%s", err.msg);
    kb_pred_file_close(&pf);

    /* a whole line without its '\n' is also redone: only '\n' commits a line */
    after = tu_slurp(path, NULL);
    size_t n = strlen(after);
    cr_assert_eq(truncate(path, (off_t)(n - 1)), 0);
    cr_assert_eq(kb_pred_file_open(&fx.run, "full", "trec", NULL, &pf, &err), 0, "%s", err.msg);
    cr_assert_eq(pf.n_lines, 3);
    cr_assert_eq(pf.n_dropped, 1);
    kb_pred_file_close(&pf);

    free(after);
    free(text);
    cJSON_Delete(j);
    free(good);
    free(path);
}

Test(results, damage_before_the_last_line_is_an_error)
{
    open_run("");
    char *path = plant(tu_dir, "full", "trec",
                       "{\"id\": \"a\", \"index\": 0}\n{\"id\": \"b\", \"index\": 1} junk\n"
                       "{\"id\": \"c\", \"index\": 2}\n");
    kb_pred_file pf;
    cr_assert_lt(kb_pred_file_open(&fx.run, "full", "trec", NULL, &pf, &err), 0);
    char want[1024];
    snprintf(want, sizeof want,
             "%s:2: not a prediction line (JSON object with \"id\" and \"index\"); the file is "
             "damaged before its last line: fix or delete it",
             path);
    cr_assert_str_eq(err.msg, want);
    free(path);
}

/* What `kvbench run` does per task: skip what is done, append the rest. The
 * child is killed at random points; the parent resumes until complete. */
enum { KILL_SAMPLES = 60, N_PRODUCED = 2 };
static const char *const produced[N_PRODUCED] = {"full", "h2o"}; /* configs of the matrix */

static void produce(const char *dir, const kb_matrix *m, int report_fd)
{
    kb_run_info info = info_for(m, "h", 0, 1);
    kb_run run;
    if (kb_run_open(dir, &info, &run, &err) < 0)
        _exit(3);
    kb_pred_file pf[4];
    for (int c = 0; c < N_PRODUCED; c++)
        if (kb_pred_file_open(&run, produced[c], "trec", NULL, &pf[c], &err) < 0)
            _exit(4);
    for (long i = 0; i < KILL_SAMPLES; i++)
        for (int c = 0; c < N_PRODUCED; c++) {
            char id[32];
            snprintf(id, sizeof id, "id%03ld", i);
            if (kb_pred_file_done(&pf[c], kv_str_c(id)))
                continue;
            kb_prediction p = pred_for(i, produced[c]);
            if (kb_pred_file_append(&pf[c], &p, &err) < 0)
                _exit(5);
            if (report_fd >= 0 && write(report_fd, "x", 1) != 1)
                _exit(6);
        }
    for (int c = 0; c < N_PRODUCED; c++)
        kb_pred_file_close(&pf[c]);
    kb_run_close(&run);
}

/* produce into tu_dir, of the matrix ctx, for tu_kill_at_random_points. */
static int produce_killable(void *ctx, int report_fd)
{
    produce(tu_dir, ctx, report_fd);
    return 0;
}

Test(results, sigkill_at_random_points_then_resume_equals_uninterrupted)
{
    kb_matrix m;
    matrix_from(&m, "{\"name\": \"h2o\", \"algorithm\": \"h2o\"}");
    char *ref = tu_mkdtemp();
    produce(ref, &m, -1);
    unsigned seed = (unsigned)time(NULL);
    int status;
    int kills = tu_kill_at_random_points(produce_killable, &m, KILL_SAMPLES * 2, 12, seed, &status);
    cr_assert_eq(status, 0, "producer failed (seed %u)", seed);
    produce(tu_dir, &m, -1); /* the final, uninterrupted resume */
    cr_assert_geq(kills, 1);
    for (int c = 0; c < N_PRODUCED; c++) {
        char *a = file_of(ref, produced[c], "trec"), *b = file_of(tu_dir, produced[c], "trec");
        char *x = tu_slurp(a, NULL), *y = tu_slurp(b, NULL);
        cr_assert_str_eq(x, y, "%s differs after %d kills (seed %u)", produced[c], kills, seed);
        free(a), free(b), free(x), free(y);
    }
    kb_matrix_free(&m);
    tu_rmtree(ref);
    free(ref);
}

/* Writes shard i/n of a run: the samples it selects, for each config. */
static void write_shard(const char *out, const kb_matrix *m, const char *hash, long i, long n,
                        long n_samples)
{
    kb_run_info info = info_for(m, hash, i, n);
    char *dir = kb_run_dir(out, "r", &info.shard);
    kb_run run;
    cr_assert_eq(kb_run_open(dir, &info, &run, &err), 0, "%s", err.msg);
    for (size_t c = 0; c < m->n_configs; c++) {
        kb_pred_file pf;
        cr_assert_eq(kb_pred_file_open(&run, m->configs[c].name, "trec", NULL, &pf, &err), 0);
        for (long s = 0; s < n_samples; s++)
            if (kb_shard_selects(&info.shard, s))
                append(&pf, s, m->configs[c].name);
        kb_pred_file_close(&pf);
    }
    cr_assert_eq(kb_run_mark_finished(&run, &err), 0, "%s", err.msg);
    kb_run_close(&run);
    free(dir);
}

static char **shard_list(const char *out, long n)
{
    char **dirs = calloc((size_t)n, sizeof *dirs);
    for (long i = 0; i < n; i++)
        dirs[i] = kb_run_dir(out, "r", &(kb_shard){i, n});
    return dirs;
}

static void free_list(char **dirs, long n)
{
    for (long i = 0; i < n; i++)
        free(dirs[i]);
    free(dirs);
}

Test(results, merged_shards_equal_an_unsharded_run)
{
    kb_matrix m;
    matrix_from(&m, "{\"name\": \"h2o\", \"algorithm\": \"h2o\"}");
    char *ref = tu_mkdtemp();
    write_shard(ref, &m, "h", 0, 1, 10);
    for (long i = 0; i < 3; i++)
        write_shard(tu_dir, &m, "h", i, 3, 10);
    char **dirs = shard_list(tu_dir, 3);
    char *merged = kb_run_dir(tu_dir, "r", NULL);
    size_t n_files = 0;
    cr_assert_eq(kb_run_merge((const char *const *)dirs, 3, merged, false, NULL, &n_files, &err), 0,
                 "%s", err.msg);
    cr_assert_eq(n_files, 2);
    char *refdir = kb_run_dir(ref, "r", NULL);
    for (size_t c = 0; c < m.n_configs; c++) {
        char *a = file_of(refdir, m.configs[c].name, "trec");
        char *b = file_of(merged, m.configs[c].name, "trec");
        char *x = tu_slurp(a, NULL), *y = tu_slurp(b, NULL);
        cr_assert_str_eq(x, y);
        free(a), free(b), free(x), free(y);
    }
    kb_run run;
    cr_assert_eq(kb_run_load(merged, &run, &err), 0);
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(run.json, "shard")));
    kb_run_close(&run);

    /* the CLI does the same from the run folder */
    tu_result r = tu_kvbench("merge", merged, NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "merged 3 shards"), "%s", r.out);
    tu_result_free(&r);

    free(refdir);
    free(merged);
    free_list(dirs, 3);
    kb_matrix_free(&m);
    tu_rmtree(ref);
    free(ref);
}

/* Shard i/2 of a run of m, its bytes per cached token recorded, finished. */
static void open_shard_with_bytes(const kb_matrix *m, long i, const double *bytes)
{
    kb_run_info info = info_for(m, "h", i, 2);
    info.kv_bytes_per_token = bytes;
    char *dir = kb_run_dir(tu_dir, "r", &info.shard);
    kb_run run;
    cr_assert_eq(kb_run_open(dir, &info, &run, &err), 0, "%s", err.msg);
    cr_assert_eq(kb_run_mark_finished(&run, &err), 0, "%s", err.msg);
    kb_run_close(&run);
    free(dir);
}

/* The merged run.json has the bytes per cached token of every config,
 * also of one that only shard 1 ran (resumed there with a grown matrix):
 * shard 0's run.json alone lacks it. */
Test(results, merged_run_json_has_every_shards_bytes_per_token)
{
    kb_matrix m, grown;
    matrix_from(&m, "{\"name\": \"h2o\", \"algorithm\": \"h2o\"}");
    matrix_from(&grown, "{\"name\": \"snapkv\", \"algorithm\": \"snapkv\"}");
    const double bytes[] = {229376, 60928}, more[] = {229376, 32256};
    open_shard_with_bytes(&m, 0, bytes);
    open_shard_with_bytes(&m, 1, bytes);
    open_shard_with_bytes(&grown, 1, more);
    char **dirs = shard_list(tu_dir, 2);
    char *merged = kb_run_dir(tu_dir, "r", NULL);
    size_t n_files;
    cr_assert_eq(kb_run_merge((const char *const *)dirs, 2, merged, false, NULL, &n_files, &err), 0,
                 "%s", err.msg);
    kb_run run;
    cr_assert_eq(kb_run_load(dirs[0], &run, &err), 0, "%s", err.msg);
    cr_assert_eq(bytes_per_token(&run, "snapkv"), -1, "shard 0 did not run snapkv");
    kb_run_close(&run);
    cr_assert_eq(kb_run_load(merged, &run, &err), 0, "%s", err.msg);
    cr_expect_eq(bytes_per_token(&run, "full"), 229376);
    cr_expect_eq(bytes_per_token(&run, "h2o"), 60928);
    cr_expect_eq(bytes_per_token(&run, "snapkv"), 32256);
    cr_expect_not_null(kb_run_config(&run, "snapkv"));
    kb_run_close(&run);
    free(merged);
    free_list(dirs, 2);
    kb_matrix_free(&grown);
    kb_matrix_free(&m);
}

static void expect_merge_refused_if(char **dirs, long n, const char *out, bool allow_unfinished,
                                    const char *needle)
{
    size_t n_files;
    cr_assert_lt(kb_run_merge((const char *const *)dirs, (size_t)n, out, allow_unfinished, NULL,
                              &n_files, &err),
                 0);
    cr_assert(strstr(err.msg, needle), "wanted \"%s\" in: %s", needle, err.msg);
}

static void expect_merge_refused(char **dirs, long n, const char *out, const char *needle)
{
    expect_merge_refused_if(dirs, n, out, true, needle);
}

Test(results, merge_refuses_inconsistent_shards)
{
    kb_matrix m, m2;
    matrix_from(&m, "{\"name\": \"h2o\", \"algorithm\": \"h2o\"}");
    matrix_from(&m2, "{\"name\": \"h2o\", \"algorithm\": \"h2o\", \"start_size\": 8}");
    char *merged = kb_run_dir(tu_dir, "r", NULL);
    char **dirs = shard_list(tu_dir, 2);

    /* different model */
    write_shard(tu_dir, &m, "h", 0, 2, 6);
    write_shard(tu_dir, &m, "OTHER", 1, 2, 6);
    expect_merge_refused(dirs, 2, merged, "different model hash");
    tu_rmtree(dirs[1]);
    /* a config called the same but different */
    write_shard(tu_dir, &m2, "h", 1, 2, 6);
    expect_merge_refused(dirs, 2, merged, "config \"h2o\" has a different hash");
    tu_rmtree(dirs[1]);
    /* a missing shard */
    expect_merge_refused(dirs, 1, merged, "1 shard folders for a run split into 2 shards");
    /* a shard given twice */
    write_shard(tu_dir, &m, "h", 1, 2, 6);
    char *twice[2] = {dirs[0], dirs[0]};
    expect_merge_refused(twice, 2, merged, "given twice");
    /* a shard still running (reopened: "finished" is reset) */
    kb_run_info again = info_for(&m, "h", 1, 2);
    kb_run running;
    cr_assert_eq(kb_run_open(dirs[1], &again, &running, &err), 0, "%s", err.msg);
    kb_run_close(&running);
    expect_merge_refused_if(dirs, 2, merged, false, "shard 1/2 has not finished");
    size_t n_files;
    cr_assert_eq(kb_run_merge((const char *const *)dirs, 2, merged, true, NULL, &n_files, &err), 0,
                 "%s", err.msg);
    /* a line in the wrong shard */
    char *bad = file_of(dirs[1], "h2o", "trec");
    FILE *f = fopen(bad, "a");
    cJSON *j = line_for(100, "h2o"); /* 100 % 2 == 0: belongs to shard 0 */
    char *t = cJSON_PrintUnformatted(j);
    fprintf(f, "%s\n", t);
    fclose(f);
    expect_merge_refused(dirs, 2, merged, "sample index 100 belongs to shard 0, not 1");
    /* and through the CLI: exit 1 with the reason */
    tu_result r =
        tu_kvbench("merge", dirs[0], dirs[1], "--output", merged, "--allow-unfinished", NULL);
    cr_assert_eq(r.status, 1);
    cr_assert(strstr(r.err, "kvbench: merge: ") && strstr(r.err, "belongs to shard 0"), "%s",
              r.err);
    tu_result_free(&r);

    free(t);
    cJSON_Delete(j);
    free(bad);
    free_list(dirs, 2);
    free(merged);
    kb_matrix_free(&m);
    kb_matrix_free(&m2);
}

/* ---- issue 17: locked and verified run folders ------------------------- */

Test(results, a_run_folder_is_locked_while_a_run_writes_it)
{
    open_run("");
    kb_run second;
    /* a flock belongs to the open file, so a second open in this process
     * conflicts as another process's would */
    cr_assert_lt(kb_run_open(tu_dir, &fx.info, &second, &err), 0);
    char host[256], want[600];
    gethostname(host, sizeof host);
    snprintf(want, sizeof want,
             "another kvbench run (pid %ld on host %s) is writing this run folder", (long)getpid(),
             host);
    cr_assert(strstr(err.msg, want), "%s", err.msg);
    cr_assert(strstr(err.msg, "--name"), "a way out: %s", err.msg);
    kb_run_close(&fx.run);
    cr_assert_eq(kb_run_open(tu_dir, &fx.info, &second, &err), 0, "released on close: %s", err.msg);
    kb_run_close(&second);
}

/* A line of the "full" trec file as text, with one field changed. */
static char *full_line(long index, const char *key, const char *value)
{
    cJSON *j = line_for(index, "full");
    if (key)
        cJSON_ReplaceItemInObject(j, key, cJSON_CreateString(value));
    char *text = cJSON_PrintUnformatted(j), *line;
    cr_assert_geq(asprintf(&line, "%s\n", text), 0);
    free(text);
    cJSON_Delete(j);
    return line;
}

static void expect_resume_refused(kb_run *run, const kb_idset *ids, const char *planted,
                                  const char *needle)
{
    char *good = full_line(0, NULL, NULL), *text;
    cr_assert_geq(asprintf(&text, "%s%s", good, planted), 0);
    char *path = plant(run->dir, "full", "trec", text);
    kb_pred_file pf;
    cr_assert_lt(kb_pred_file_open(run, "full", "trec", ids, &pf, &err), 0, "kept: %s", planted);
    char *at;
    cr_assert_geq(asprintf(&at, "%s:2: ", path), 0);
    cr_assert(strstr(err.msg, at), "file:line wanted: %s", err.msg);
    cr_assert(strstr(err.msg, needle), "wanted \"%s\" in: %s", needle, err.msg);
    cr_assert(strstr(err.msg, "remove that line (or the file) and run again"), "%s", err.msg);
    char *after = tu_slurp(path, NULL);
    cr_assert_str_eq(after, text, "a refused file is left as it was");
    free(after);
    free(at);
    free(path);
    free(text);
    free(good);
}

Test(results, resume_keeps_only_lines_of_this_task_config_and_data)
{
    open_run("{\"name\": \"h2o\", \"algorithm\": \"h2o\"}");
    kb_idset ids = {0};
    for (long i = 0; i < 5; i++) {
        char id[32];
        snprintf(id, sizeof id, "id%03ld", i);
        cr_assert_eq(kb_idset_add(&ids, kv_str_c(id)), 1);
    }
    char *line;
    line = full_line(1, "dataset", "qasper");
    expect_resume_refused(&fx.run, &ids, line,
                          "a line of task \"qasper\" in the file of task \"trec\"");
    free(line);
    line = full_line(1, "config", "h2o");
    expect_resume_refused(&fx.run, &ids, line,
                          "a line of config \"h2o\" in the file of config \"full\"");
    free(line);
    line = full_line(1, "config_hash", "0123456789abcdef");
    expect_resume_refused(&fx.run, &ids, line, "config hash 0123456789abcdef, but run.json gives");
    free(line);
    cJSON *j = line_for(1, "full");
    cJSON_DeleteItemFromObject(j, "config_hash");
    char *text1 = cJSON_PrintUnformatted(j);
    cr_assert_geq(asprintf(&line, "%s\n", text1), 0);
    expect_resume_refused(&fx.run, &ids, line,
                          "no config_hash (written by hand or by an older kvbench)");
    free(line), free(text1);
    cJSON_Delete(j);
    line = full_line(1, "id", "not-in-the-data");
    expect_resume_refused(&fx.run, &ids, line,
                          "sample \"not-in-the-data\" is not in the task's data");
    free(line);

    /* lines that belong are kept */
    char *a = full_line(0, NULL, NULL), *b = full_line(1, NULL, NULL), *text;
    cr_assert_geq(asprintf(&text, "%s%s", a, b), 0);
    free(plant(tu_dir, "full", "trec", text));
    kb_pred_file pf;
    cr_assert_eq(kb_pred_file_open(&fx.run, "full", "trec", &ids, &pf, &err), 0, "%s", err.msg);
    cr_assert_eq(pf.n_lines, 2);
    kb_pred_file_close(&pf);
    free(text), free(a), free(b);
    kb_idset_free(&ids);
}

Test(results, predictions_without_run_json_are_refused)
{
    matrix_from(&fx.m, "");
    fx.info = info_for(&fx.m, "h", 0, 1);
    char *line = full_line(0, NULL, NULL);
    free(plant(tu_dir, "full", "trec", line));
    cr_assert_lt(kb_run_open(tu_dir, &fx.info, &fx.run, &err), 0);
    cr_assert(strstr(err.msg, "predictions/ without run.json"), "%s", err.msg);
    cr_assert(strstr(err.msg, "move predictions/ away"), "a way out: %s", err.msg);
    free(line);
}

/* trec has 10 samples; the other task's data is not here (unchecked) */
static long ten_samples(void *ctx, const char *data, const char *task, kv_error *err)
{
    (void)ctx, (void)data, (void)err;
    return strcmp(task, "trec") == 0 ? 10 : -1;
}

Test(results, merge_checks_line_counts_against_the_data)
{
    kb_matrix m;
    matrix_from(&m, "{\"name\": \"h2o\", \"algorithm\": \"h2o\"}");
    char *merged = kb_run_dir(tu_dir, "r", NULL);
    char **dirs = shard_list(tu_dir, 2);
    kb_task_sizes sizes = {.count = ten_samples};
    size_t n_files;
    /* two finished shards of 10 samples: complete */
    write_shard(tu_dir, &m, "h", 0, 2, 10);
    write_shard(tu_dir, &m, "h", 1, 2, 10);
    cr_assert_eq(kb_run_merge((const char *const *)dirs, 2, merged, false, &sizes, &n_files, &err),
                 0, "%s", err.msg);
    /* shard 1 marked finished but its h2o file misses sample 9 */
    char *path = file_of(dirs[1], "h2o", "trec");
    char *text = tu_slurp(path, NULL);
    *strrchr(text, '\n') = '\0';
    *(strrchr(text, '\n') + 1) = '\0';
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    free(text);
    cr_assert_lt(kb_run_merge((const char *const *)dirs, 2, merged, false, &sizes, &n_files, &err),
                 0);
    cr_assert(strstr(err.msg, "the shards hold 9 lines, the data and limit give 10 samples"), "%s",
              err.msg);
    /* a (config, task) with no file in any shard */
    unlink(path);
    char *other = file_of(dirs[0], "h2o", "trec");
    unlink(other);
    cr_assert_lt(kb_run_merge((const char *const *)dirs, 2, merged, false, &sizes, &n_files, &err),
                 0);
    cr_assert(strstr(err.msg, "h2o/trec.jsonl: no shard has this file"), "%s", err.msg);
    free(other);
    free(path);
    free(merged);
    free_list(dirs, 2);
    kb_matrix_free(&m);
}
