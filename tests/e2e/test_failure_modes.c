/* What kvbench refuses and what it repairs, end to end (issue 17): a run
 * folder written by two runs at once, lines that do not belong, prediction
 * folders no matrix made, an empty task file, a budget above the prompt,
 * and eviction traces under "compact" positions. Runs use the committed
 * demo model and synthetic data, two samples, a few tokens. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "support/testutil.h"

/* Each test's folder, tu_dir, holds c.json, data/ (when copied) and runs/. */
TestSuite(failure, .init = tu_dir_make, .fini = tu_dir_remove, .timeout = 300);

/* c.json, a matrix on the demo model: tasks_json (a JSON list), 2 samples,
 * 4 new tokens, the full cache plus configs_json. data NULL: the shipped
 * synthetic data. */
static char *write_config_of(const char *data, const char *tasks_json, const char *configs_json)
{
    return tu_write_demo_matrix("c", data,
                                "\"limit\": 2,\n \"max_new_tokens\": 4, \"threads\": 1, "
                                "\"tasks\": %s,\n \"configs\": %s",
                                tasks_json, configs_json);
}

/* The same on synth_passkey alone. */
static char *write_config(const char *data, const char *configs_json)
{
    return write_config_of(data, "[\"synth_passkey\"]", configs_json);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert(f, "%s", path);
    fputs(text, f);
    fclose(f);
}

static cJSON *first_line(const char *path)
{
    char *text = tu_slurp(path, NULL);
    *strchr(text, '\n') = '\0';
    cJSON *j = cJSON_Parse(text);
    cr_assert(j, "%s", path);
    free(text);
    return j;
}

#define H2O                                                                                        \
    "[{\"name\": \"h2o\", \"algorithm\": \"h2o\", \"start_size\": 4, "                             \
    "\"recent_size\": 16, \"intermediate_size\": 12}]"

Test(failure, a_second_run_into_a_locked_folder_names_the_holder)
{
    char *cfg = write_config(NULL, H2O);
    char *runs = tu_at("runs"), *run = tu_at("runs/c"), *lock = tu_at("runs/c/run.lock");
    cr_assert_eq(mkdir(runs, 0777) | mkdir(run, 0777), 0);
    int fd = open(lock, O_RDWR | O_CREAT, 0666);
    cr_assert_eq(flock(fd, LOCK_EX), 0);
    cr_assert_eq(write(fd, "4242 nodeA\n", 11), 11);
    tu_result r = tu_kvbench("run", cfg, NULL);
    cr_assert_eq(r.status, 1, "%s", r.err);
    cr_assert(strstr(r.err, "another kvbench run (pid 4242 on host nodeA) is writing this run "
                            "folder"),
              "%s", r.err);
    tu_result_free(&r);
    close(fd); /* the holder ends: the folder is free again */
    tu_kvbench_ok("run", cfg, NULL);
    free(cfg), free(runs), free(run), free(lock);
}

Test(failure, resume_refuses_a_line_of_another_sample_and_reports_only_the_matrix)
{
    char *cfg = write_config(NULL, H2O);
    tu_kvbench_ok("run", cfg, NULL);
    char *scores = tu_at("runs/c/scores.json");
    char *before = tu_slurp(scores, NULL);

    /* a folder no matrix made, with lines of its own: never scored */
    char *bogus = tu_at("runs/c/predictions/bogus");
    cr_assert_eq(mkdir(bogus, 0777), 0);
    char *full = tu_at("runs/c/predictions/full/synth_passkey.jsonl");
    char *copy = tu_at("runs/c/predictions/bogus/synth_passkey.jsonl");
    char *text = tu_slurp(full, NULL);
    write_file(copy, text);
    unlink(scores);
    char *run = tu_at("runs/c");
    tu_result r = tu_kvbench("report", run, NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.err, "has no scores.json: scoring its predictions"), "%s", r.err);
    tu_result_free(&r);
    char *after = tu_slurp(scores, NULL);
    cr_assert_null(strstr(after, "bogus"), "%s", after);
    cr_assert_str_eq(after, before, "the rebuilt scores.json is the runner's");

    /* a line whose id is not in the data: refused with file:line, file kept */
    cJSON *j = first_line(full);
    cJSON_ReplaceItemInObject(j, "id", cJSON_CreateString("not-a-sample"));
    char *line = cJSON_PrintUnformatted(j), *damaged;
    cr_assert_geq(asprintf(&damaged, "%s%s\n", text, line), 0);
    write_file(full, damaged);
    r = tu_kvbench("run", cfg, NULL);
    cr_assert_eq(r.status, 1, "%s", r.err);
    char *want;
    cr_assert_geq(asprintf(&want, "%s:3: sample \"not-a-sample\" is not in the task's data", full),
                  0);
    cr_assert(strstr(r.err, want), "%s", r.err);
    tu_result_free(&r);
    char *now = tu_slurp(full, NULL);
    cr_assert_str_eq(now, damaged, "nothing written over");

    /* run.json gone: the predictions cannot be told apart from anyone's */
    write_file(full, text);
    char *run_json = tu_at("runs/c/run.json");
    unlink(run_json);
    r = tu_kvbench("run", cfg, NULL);
    cr_assert_eq(r.status, 1, "%s", r.err);
    cr_assert(strstr(r.err, "predictions/ without run.json"), "%s", r.err);
    tu_result_free(&r);
    free(now), free(want), free(damaged), free(line), free(after), free(text), free(before);
    cJSON_Delete(j);
    free(run), free(run_json), free(copy), free(full), free(bogus), free(scores), free(cfg);
}

Test(failure, an_empty_task_file_is_an_error_naming_it)
{
    char *data = tu_at("data");
    cr_assert_eq(mkdir(data, 0777), 0);
    char *file = tu_at("data/synth_passkey.jsonl");
    write_file(file, "\n");
    char *cfg = write_config(data, H2O);
    tu_result r = tu_kvbench("run", cfg, NULL);
    cr_assert_eq(r.status, 1, "%s", r.err);
    char *want;
    cr_assert_geq(asprintf(&want, "%s: empty task file (no samples)", file), 0);
    cr_assert(strstr(r.err, want), "%s", r.err);
    char *scores = tu_at("runs/c/scores.json");
    cr_assert(access(scores, F_OK) != 0, "no score of an empty task");
    tu_result_free(&r);
    r = tu_kvbench("run", cfg, "--empty-tasks", "zero", NULL);
    cr_assert_eq(r.status, 2, "%s", r.err);
    cr_assert(strstr(r.err, "--empty-tasks 'zero': want error or missing"), "%s", r.err);
    tu_result_free(&r);
    free(scores), free(want), free(cfg), free(file), free(data);
}

/* With --empty-tasks missing the empty task has no score: the run goes on,
 * and the averages are those of the task that has samples. */
Test(failure, an_empty_task_file_reported_as_missing)
{
    char *data = tu_at("data");
    cr_assert_eq(mkdir(data, 0777), 0);
    char *file = tu_at("data/synth_passkey.jsonl"), *kv = tu_at("data/synth_kv.jsonl");
    char *shipped = tu_source("datasets/synthetic/synth_kv.jsonl");
    write_file(file, "");
    char *text = tu_slurp(shipped, NULL);
    write_file(kv, text);
    char *cfg = write_config_of(data, "[\"synth_passkey\", \"synth_kv\"]", H2O);
    tu_result r = tu_kvbench("run", cfg, "--empty-tasks", "missing", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.err, "synth_passkey: no samples, reported as missing"), "%s", r.err);
    tu_result_free(&r);
    char *scores = tu_at("runs/c/scores.json"), *summary = tu_at("runs/c/summary.md");
    char *s = tu_slurp(scores, NULL), *md = tu_slurp(summary, NULL);
    cr_assert(strstr(s, "\"synth_kv\""), "%s", s);
    cr_assert_null(strstr(s, "\"synth_passkey\""), "no row, so no 0.00: %s", s);
    cJSON *root = cJSON_Parse(s);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(root, "rows")), 2,
                 "full and h2o on synth_kv: %s", s);
    cJSON_Delete(root);
    /* the task is still a column, of "–" in every row, and named under the
     * table; the averages are synth_kv's alone */
    char *header = strstr(md, "| config | budget | synth_passkey | synth_kv |");
    cr_assert_not_null(header, "%s", md);
    char *h2o = strstr(header, "\n| h2o | ");
    cr_assert_not_null(h2o, "%s", md);
    cr_assert(strncmp(strchr(h2o + 9, '|'), "| – |", 5) == 0, "%s", md);
    cr_assert(strstr(md, "– : no score of synth_passkey (an empty task file reported as missing"),
              "%s", md);
    cr_assert(strstr(md, "\n| full | full | – | 100.00 ±0.00 | 100.00 ±0.00 | **100.00**"), "%s",
              md);
    free(s), free(md), free(scores), free(summary), free(text), free(shipped), free(cfg),
        free(kv), free(file), free(data);
}

/* A budget of 10^8 is far above a 1-2k-token prompt: the config keeps every
 * token, so its answers are the full cache's, and nothing of 10^8 slots is
 * allocated (that would be gigabytes). */
Test(failure, a_budget_above_the_prompt_keeps_everything)
{
    char *cfg = write_config(NULL, "[{\"name\": \"huge\", \"algorithm\": \"h2o\", "
                                   "\"intermediate_size\": 100000000}]");
    tu_kvbench_ok("run", cfg, NULL);
    char *a = tu_at("runs/c/predictions/full/synth_passkey.jsonl");
    char *b = tu_at("runs/c/predictions/huge/synth_passkey.jsonl");
    cJSON *x = first_line(a), *y = first_line(b);
    cr_assert_str_eq(cJSON_GetObjectItem(y, "pred")->valuestring,
                     cJSON_GetObjectItem(x, "pred")->valuestring);
    cr_assert_eq(cJSON_GetObjectItem(y, "kept_tokens")->valuedouble,
                 cJSON_GetObjectItem(y, "prompt_tokens")->valuedouble);
    cJSON_Delete(x);
    cJSON_Delete(y);
    free(a), free(b), free(cfg);
}

/* With "compact" positions RoPE restarts at the compacted length, but the
 * trace must name tokens: at step k the newest kept token is the one just
 * generated, n_prompt - 1 + k, and no list names a token twice. */
static void check_compact_trace(const char *strategy)
{
    char *model = tu_source("tests/data/models/qwen3-bf16"), *trace = tu_at("trace.jsonl");
    tu_result r = tu_kvbench("generate", "--model", model, "--prompt",
                             "the passkey is 12345. remember it. the passkey is", "--eviction",
                             "h2o", "--strategy", strategy, "--group-size", "2", "--start-size",
                             "2", "--recent-size", "4", "--intermediate-size", "4", "--positions",
                             "compact", "--max-new-tokens", "6", "--trace", trace, "--json", NULL);
    cr_assert_eq(r.status, 0, "%s: %s", strategy, r.err);
    cJSON *out = cJSON_Parse(r.out);
    int n_prompt = cJSON_GetArraySize(cJSON_GetObjectItem(out, "prompt_ids"));
    int n_gen = cJSON_GetArraySize(cJSON_GetObjectItem(out, "generated_ids"));
    cr_assert_geq(n_gen, 4, "%s: the model stopped early", strategy);
    char *text = tu_slurp(trace, NULL);
    int steps = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        int step = cJSON_GetObjectItem(j, "step")->valueint;
        const cJSON *kept = cJSON_GetObjectItem(j, "kept_positions");
        const cJSON *sets = cJSON_IsArray(cJSON_GetArrayItem(kept, 0)) ? kept : NULL;
        for (int g = 0; g < (sets ? cJSON_GetArraySize(sets) : 1); g++) {
            const cJSON *list = sets ? cJSON_GetArrayItem(sets, g) : kept;
            int n = cJSON_GetArraySize(list), prev = -1;
            for (int i = 0; i < n; i++) {
                int p = cJSON_GetArrayItem(list, i)->valueint;
                cr_assert_gt(p, prev, "%s step %d: %d after %d\n%s", strategy, step, p, prev, line);
                prev = p;
            }
            cr_assert_eq(prev, n_prompt - 1 + step, "%s step %d: newest %d\n%s", strategy, step,
                         prev, line);
        }
        steps += step > 0;
        cJSON_Delete(j);
    }
    cr_assert_gt(steps, 0, "%s: no eviction while decoding", strategy);
    free(text);
    cJSON_Delete(out);
    tu_result_free(&r);
    free(model), free(trace);
}

Test(failure, compact_positions_trace_token_positions)
{
    check_compact_trace("per_token");
    check_compact_trace("per_group");
    check_compact_trace("per_head");
}

/* Shards marked finished whose files miss a line: merge checks the line
 * counts against the data (here 2 samples per task) and refuses. */
Test(failure, merge_refuses_finished_shards_with_missing_lines)
{
    char *cfg = write_config(NULL, H2O);
    for (int i = 0; i < 2; i++)
        tu_kvbench_ok("run", cfg, "--shard", i ? "1/2" : "0/2", NULL);
    char *run = tu_at("runs/c"), *merged = tu_at("merged");
    tu_result r = tu_kvbench("merge", run, "--output", merged, NULL);
    cr_assert_eq(r.status, 0, "complete shards merge: %s", r.err);
    tu_result_free(&r);
    char *file = tu_at("runs/c/shards/1-of-2/predictions/h2o/synth_passkey.jsonl");
    cr_assert_eq(truncate(file, 0), 0);
    r = tu_kvbench("merge", run, "--output", merged, NULL);
    cr_assert_eq(r.status, 1, "%s", r.out);
    cr_assert(strstr(r.err, "h2o/synth_passkey.jsonl: the shards hold 1 line, the data and limit "
                            "give 2 samples"),
              "%s", r.err);
    tu_result_free(&r);
    free(file), free(merged), free(run), free(cfg);
}

/* run.json keeps every config ever run in the folder; the runner's report
 * is of the matrix it ran. */
Test(failure, the_report_of_a_run_holds_its_matrix_and_scores_json_every_config)
{
    char *cfg = write_config(NULL, "[{\"name\": \"h2o\", \"algorithm\": \"h2o\", \"start_size\": 4, "
                                   "\"recent_size\": 16, \"intermediate_size\": 12}, "
                                   "{\"name\": \"gone\", \"algorithm\": \"h2o\", \"start_size\": 4, "
                                   "\"recent_size\": 8, \"intermediate_size\": 4}]");
    tu_kvbench_ok("run", cfg, NULL);
    char *scores = tu_at("runs/c/scores.json");
    char *text = tu_slurp(scores, NULL);
    cr_assert(strstr(text, "\"gone\""), "%s", text);
    free(text);
    free(write_config(NULL, H2O));
    tu_kvbench_ok("run", cfg, NULL);
    /* scores.json keeps every config of the folder: a changed sweep loses nothing */
    text = tu_slurp(scores, NULL);
    cr_assert(strstr(text, "\"gone\"") && strstr(text, "\"h2o\"") && strstr(text, "\"full\""),
              "%s", text);
    free(text);
    /* the run's own report is of its matrix; `kvbench report` of the folder shows all */
    char *summary = tu_at("runs/c/summary.md"), *run = tu_at("runs/c");
    text = tu_slurp(summary, NULL);
    cr_assert_null(strstr(text, "| gone |"), "%s", text);
    free(text);
    tu_kvbench_ok("report", run, NULL);
    text = tu_slurp(summary, NULL);
    cr_assert(strstr(text, "| gone |"), "%s", text);
    free(text);
    free(summary), free(run);
    free(scores), free(cfg);
}

/* A LongBench "_id" may hold "\u0000". Cut at the NUL, sample 0's id below
 * would be sample 1's and resume would take one for the other: it is
 * carried whole, written back as "\u0000", resumed and scored as its own. */
Test(failure, a_nul_in_an_id_is_predicted_resumed_and_scored)
{
    char *data = tu_at("data");
    cr_assert_eq(mkdir(data, 0777), 0);
    char *shipped = tu_source("datasets/synthetic/synth_passkey.jsonl");
    char *text = tu_slurp(shipped, NULL), *file = tu_at("data/synth_passkey.jsonl");
    char *id0 = strstr(text, "\"synth_passkey-0000\""), *edited;
    cr_assert(id0);
    *id0 = '\0';
    cr_assert_geq(asprintf(&edited, "%s\"synth_passkey-0001\\u0000\"%s", text, id0 + 20), 0);
    write_file(file, edited);
    char *cfg = write_config(data, H2O);
    tu_kvbench_ok("run", cfg, NULL);
    char *pred = tu_at("runs/c/predictions/h2o/synth_passkey.jsonl");
    char *lines = tu_slurp(pred, NULL);
    cr_assert(strstr(lines, "\"id\":\"synth_passkey-0001\\u0000\""), "%s", lines);
    cr_assert(strstr(lines, "\"id\":\"synth_passkey-0001\""), "%s", lines);
    tu_result r = tu_kvbench("run", cfg, NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.err, "0 samples done, 2 already on disk"), "%s", r.err);
    tu_result_free(&r);
    char *again = tu_slurp(pred, NULL);
    cr_assert_str_eq(again, lines, "resumed, nothing rewritten");
    char *scores = tu_at("runs/c/scores.json"), *run = tu_at("runs/c");
    char *s = tu_slurp(scores, NULL);
    cr_assert(strstr(s, "\"synth_passkey-0001\\u0000\""), "%s", s);
    cJSON *root = cJSON_Parse(s);
    cJSON *row = cJSON_GetArrayItem(cJSON_GetObjectItem(root, "rows"), 0);
    cr_assert_eq(cJSON_GetObjectItem(row, "n")->valuedouble, 2);
    cJSON_Delete(root);
    r = tu_kvbench("report", run, NULL); /* two ids, not one "appearing twice" */
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_result_free(&r);
    /* --ids names it as the data does; the id without the NUL is another */
    r = tu_kvbench("prompts", "--task", "synth_passkey", "--file", file, "--ids",
                   "synth_passkey-0001\\u0000", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "\"id\":\"synth_passkey-0001\\u0000\""), "%s", r.out);
    cr_assert_null(strchr(strchr(r.out, '\n') + 1, '\n'), "one sample: %s", r.out);
    tu_result_free(&r);
    free(s), free(scores), free(run), free(again), free(lines), free(pred), free(cfg);
    free(edited), free(file), free(text), free(shipped), free(data);
}

/* The first three samples of synth_passkey into data/, the third with the
 * first one's _id when repeat; returns the file's path. */
static char *three_samples(bool repeat)
{
    char *data = tu_at("data");
    mkdir(data, 0777);
    char *shipped = tu_source("datasets/synthetic/synth_passkey.jsonl");
    char *text = tu_slurp(shipped, NULL), *file = tu_at("data/synth_passkey.jsonl");
    char *end = text;
    for (int i = 0; i < 3; i++)
        end = strchr(end, '\n') + 1;
    *end = '\0';
    if (repeat) {
        char *third = strstr(text, "\"synth_passkey-0002\"");
        cr_assert(third);
        memcpy(third, "\"synth_passkey-0000\"", 20);
    }
    write_file(file, text);
    free(text), free(shipped), free(data);
    return file;
}

/* Issue 28: predictions are kept by _id, so a second sample with the same
 * _id was taken for done and silently dropped; sharded, merge then refused
 * forever. The run, each shard and merge now name the file, line and id. */
Test(failure, a_repeated_id_is_an_error_naming_file_line_and_id)
{
    char *file = three_samples(false), *data = tu_at("data");
    char *cfg = write_config(data, H2O);
    for (int i = 0; i < 2; i++)
        tu_kvbench_ok("run", cfg, "--shard", i ? "1/2" : "0/2", NULL);
    free(three_samples(true));
    char *want;
    cr_assert_geq(asprintf(&want,
                           "%s:3: _id \"synth_passkey-0000\" is also the _id of the sample at "
                           "index 0: a task's samples need distinct _ids",
                           file),
                  0);
    char *run = tu_at("runs/c"), *merged = tu_at("merged");
    tu_result r = tu_kvbench("merge", run, "--output", merged, NULL);
    cr_assert_eq(r.status, 1, "%s", r.err);
    cr_assert(strstr(r.err, want), "%s", r.err);
    tu_result_free(&r);
    r = tu_kvbench("run", cfg, "--name", "fresh", NULL);
    cr_assert_eq(r.status, 1, "%s", r.err);
    cr_assert(strstr(r.err, want), "%s", r.err);
    tu_result_free(&r);
    char *fresh = tu_at("runs/fresh/predictions/h2o/synth_passkey.jsonl");
    cr_assert(access(fresh, F_OK) != 0, "nothing predicted");
    r = tu_kvbench("run", cfg, "--name", "fresh", "--shard", "1/2", NULL);
    cr_assert_eq(r.status, 1, "%s", r.err);
    cr_assert(strstr(r.err, want), "%s", r.err);
    tu_result_free(&r);
    free(fresh), free(merged), free(run), free(want), free(cfg), free(data), free(file);
}

/* Runs `kvbench ARGS > /dev/full`: the output is lost, so is the command. */
static tu_result to_full_disk(const char *args)
{
    char *sh;
    cr_assert_geq(asprintf(&sh, "exec \"$KVBENCH\" %s > /dev/full", args), 0);
    char *argv[] = {"/bin/sh", "-c", sh, NULL};
    tu_result r = tu_run_argv(argv);
    free(sh);
    return r;
}

Test(failure, output_lost_on_a_full_disk_is_a_failure)
{
    char *shipped = tu_source("datasets/synthetic"), *args;
    cr_assert_geq(asprintf(&args, "prompts --task synth_passkey --dir '%s'", shipped), 0);
    tu_result r = to_full_disk(args);
    cr_assert_eq(r.status, 1, "%s", r.err);
    cr_assert(strstr(r.err, "kvbench: prompts: cannot write the output: No space left on device"),
              "%s", r.err);
    tu_result_free(&r);
    free(args);
    char *cfg = write_config(NULL, H2O);
    tu_kvbench_ok("run", cfg, NULL);
    char *preds = tu_at("runs/c/predictions/full");
    cr_assert_geq(asprintf(&args, "score '%s'", preds), 0);
    r = to_full_disk(args);
    cr_assert_eq(r.status, 1, "%s", r.err);
    cr_assert(strstr(r.err, "kvbench: score: cannot write the output: No space left on device"),
              "%s", r.err);
    tu_result_free(&r);
    free(args), free(preds), free(cfg), free(shipped);
}

/* A resume refused for a line that does not belong leaves run.json as it
 * was: a finished run stays finished. */
Test(failure, a_refused_resume_leaves_run_json_as_it_was)
{
    char *cfg = write_config(NULL, H2O);
    tu_kvbench_ok("run", cfg, NULL);
    char *run_json = tu_at("runs/c/run.json");
    char *full = tu_at("runs/c/predictions/h2o/synth_passkey.jsonl");
    char *before = tu_slurp(run_json, NULL), *text = tu_slurp(full, NULL), *damaged;
    cr_assert_geq(asprintf(&damaged, "%s%s", text, strstr(text, "\n") + 1), 0);
    write_file(full, damaged); /* the second line twice */
    free(write_config(NULL, "[{\"name\": \"h2o\", \"algorithm\": \"h2o\", \"start_size\": 4, "
                            "\"recent_size\": 16, \"intermediate_size\": 12}, {\"algorithm\": "
                            "\"streaming\", \"recent_size\": 16}]"));
    tu_result r = tu_kvbench("run", cfg, NULL);
    cr_assert_eq(r.status, 1, "%s", r.err);
    cr_assert(strstr(r.err, "appears twice"), "%s", r.err);
    tu_result_free(&r);
    char *after = tu_slurp(run_json, NULL);
    cr_assert_str_eq(after, before);
    free(after), free(damaged), free(text), free(before), free(full), free(run_json), free(cfg);
}

/* A UTF-8 byte order mark is named, not "expected a number". */
Test(failure, a_byte_order_mark_is_named)
{
    char *file = three_samples(false);
    char *text = tu_slurp(file, NULL), *bom;
    cr_assert_geq(asprintf(&bom, "\xEF\xBB\xBF%s", text), 0);
    write_file(file, bom);
    tu_result r = tu_kvbench("prompts", "--task", "synth_passkey", "--file", file, NULL);
    cr_assert_eq(r.status, 1, "%s", r.err);
    char *want;
    cr_assert_geq(asprintf(&want,
                           "kvbench: %s:1: the line starts with a UTF-8 byte order mark (BOM, "
                           "bytes EF BB BF), which JSON does not allow: save the file as UTF-8 "
                           "without BOM\n",
                           file),
                  0);
    cr_assert(strncmp(r.err, want, strlen(want)) == 0, "%s", r.err);
    tu_result_free(&r);
    free(want), free(bom), free(text), free(file);
}

/* Issue 28: NNCF's defaults rotate kept keys to slots 0..k-1 while new
 * tokens keep their absolute positions. The dry run, the run and generate
 * say so once, with the fix; the report marks the config. */
Test(failure, rerotation_with_absolute_positions_is_warned_about_once)
{
    const char *want = "kvbench: warning: config h2o: apply_rerotation with positions "
                       "\"absolute\" moves the kept keys to slots 0..k-1";
    char *cfg = write_config(NULL, H2O);
    for (int dry = 1; dry >= 0; dry--) {
        tu_result r = tu_kvbench("run", cfg, dry ? "--dry-run" : "--limit", dry ? NULL : "1", NULL);
        cr_assert_eq(r.status, 0, "%s", r.err);
        char *at1 = strstr(r.err, want);
        cr_assert(at1, "%s", r.err);
        cr_assert_null(strstr(at1 + strlen(want), "warning:"), "once: %s", r.err);
        tu_result_free(&r);
    }
    char *summary = tu_at("runs/c/summary.md");
    char *md = tu_slurp(summary, NULL);
    cr_assert(strstr(md, "\n⚠ h2o: apply_rerotation with positions \"absolute\""), "%s", md);
    cr_assert(strstr(md, "| h2o ⚠ | `"), "%s", md);
    cr_assert_null(strstr(md, "full ⚠"), "%s", md);
    free(md);
    /* coherent settings: nothing to say */
    free(write_config(NULL, "[{\"name\": \"h2o\", \"algorithm\": \"h2o\", \"positions\": "
                            "\"compact\"}]"));
    tu_result r = tu_kvbench("run", cfg, "--dry-run", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert_null(strstr(r.err, "warning"), "%s", r.err);
    tu_result_free(&r);
    char *model = tu_source("models/kvbench-retrieval");
    r = tu_kvbench("generate", "--model", model, "--prompt", "the pass key is", "--eviction",
                   "SnapKV", "--max-new-tokens", "2", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.err, "kvbench: warning: apply_rerotation with positions \"absolute\""),
              "%s", r.err);
    tu_result_free(&r);
    r = tu_kvbench("generate", "--model", model, "--prompt", "the pass key is", "--eviction",
                   "SnapKV", "--apply-rerotation", "false", "--max-new-tokens", "2", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert_null(strstr(r.err, "warning"), "%s", r.err);
    tu_result_free(&r);
    free(model), free(summary), free(cfg);
}

/* A copy of the demo model in tu_dir/model with config.json's architecture
 * replaced by arch (NULL: kept) and tokenizer.json by tokenizer (NULL:
 * kept); returns the folder. */
static char *model_copy(const char *arch, const char *tokenizer)
{
    char *model = tu_at("model"), *src = tu_source("models/kvbench-retrieval");
    cr_assert_eq(mkdir(model, 0777), 0);
    static const char *const files[] = {"config.json", "generation_config.json",
                                        "model.safetensors", "tokenizer.json",
                                        "tokenizer_config.json"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        char *from, *to;
        cr_assert_geq(asprintf(&from, "%s/%s", src, files[i]), 0);
        cr_assert_geq(asprintf(&to, "%s/%s", model, files[i]), 0);
        if (i == 0 && arch) {
            char *text = tu_slurp(from, NULL), *edited = strdup(text);
            char *a = strstr(text, "\"Qwen3ForCausalLM\""), *t = strstr(text, "\"qwen3\"");
            cr_assert(a && t, "%s", text);
            FILE *f = fopen(to, "w");
            *a = *t = '\0';
            fprintf(f, "%s\"%s\"%s\"%s\"%s", text, arch, a + 18, arch, t + 7);
            fclose(f);
            free(edited), free(text);
        } else if (i == 3 && tokenizer) {
            write_file(to, tokenizer);
        } else {
            cr_assert_eq(symlink(from, to), 0);
        }
        free(from), free(to);
    }
    free(src);
    return model;
}

/* The config's model replaced by model (write_config_of's file). */
static void use_model(const char *cfg, const char *model)
{
    char *text = tu_slurp(cfg, NULL), *m = strstr(text, "\"model\": \"") + 10, *edited;
    char *end = strchr(m, '"');
    *m = '\0';
    cr_assert_geq(asprintf(&edited, "%s%s%s", text, model, end), 0);
    write_file(cfg, edited);
    free(edited), free(text);
}

/* A dry run fails the way the run would, and expects it to fail; the run
 * fails before it creates the run folder. */
static void expect_refused(const char *cfg, const char *why)
{
    tu_result r = tu_kvbench("run", cfg, "--dry-run", NULL);
    cr_assert_eq(r.status, 1, "%s", r.err);
    cr_assert(strstr(r.err, why), "dry run: %s", r.err);
    tu_result_free(&r);
    r = tu_kvbench("run", cfg, NULL);
    cr_assert_eq(r.status, 1, "%s", r.err);
    cr_assert(strstr(r.err, why), "run: %s", r.err);
    tu_result_free(&r);
    char *run = tu_at("runs/c");
    cr_assert(access(run, F_OK) != 0, "%s: nothing left behind", why);
    free(run);
}

/* Issue 28: --dry-run reads the data, the model's architecture and its
 * tokenizer; a run that fails those checks leaves no run folder. */
Test(failure, dry_run_checks_data_architecture_and_tokenizer)
{
    char *file = three_samples(false), *data = tu_at("data");
    char *missing = tu_at("data/synth_kv.jsonl");
    char *cfg = write_config_of(data, "[\"synth_passkey\", \"synth_kv\"]", H2O);
    expect_refused(cfg, missing);
    cfg = (free(cfg), write_config(data, H2O));
    tu_result r = tu_kvbench("run", cfg, "--dry-run", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "checked: the data of 1 tasks (3 samples), the model's architecture "
                            "(qwen3) and tokenizer"),
              "%s", r.out);
    tu_result_free(&r);
    free(three_samples(true));
    expect_refused(cfg, "is also the _id of the sample at index 0");
    free(three_samples(false));
    char *model = model_copy("MambaForCausalLM", NULL);
    use_model(cfg, model);
    expect_refused(cfg, "unsupported architecture 'MambaForCausalLM'");
    tu_rmtree(model);
    free(model);
    model = model_copy(NULL, "{\"model\": {}}");
    use_model(cfg, model);
    expect_refused(cfg, "tokenizer.json");
    free(model), free(cfg), free(missing), free(data), free(file);
}

/* Issue 28: two models or compute modes without two files. The command
 * line's --model, --data, --compute, --tasks, --limit and --name replace
 * the file's, checked as the file's would be, and run.json records them. */
Test(failure, run_overrides_are_checked_and_recorded)
{
    char *cfg = write_config(NULL, H2O), *model = model_copy(NULL, NULL);
    char *shipped = tu_source("datasets/synthetic");
    tu_kvbench_ok("run", cfg, "--model", model, "--data", shipped, "--compute", "bf16", "--tasks",
                  "synth_kv", "--limit", "1", "--name", "other", NULL);
    char *run_json = tu_at("runs/other/run.json");
    char *pred = tu_at("runs/other/predictions/h2o/synth_kv.jsonl");
    cr_assert_eq(access(pred, F_OK), 0);
    char *text = tu_slurp(run_json, NULL);
    cJSON *j = cJSON_Parse(text), *m = cJSON_GetObjectItem(j, "matrix");
    cr_assert_str_eq(cJSON_GetObjectItem(j, "compute")->valuestring, "bf16");
    cr_assert_str_eq(cJSON_GetObjectItem(m, "model")->valuestring, model);
    cJSON *tasks = cJSON_GetObjectItem(m, "tasks");
    cr_assert_eq(cJSON_GetArraySize(tasks), 1);
    cJSON *t = cJSON_GetArrayItem(tasks, 0);
    cr_assert_str_eq(cJSON_GetObjectItem(t, "task")->valuestring, "synth_kv");
    cr_assert_eq(cJSON_GetObjectItem(t, "limit")->valueint, 1);
    char *got = cJSON_PrintUnformatted(cJSON_GetObjectItem(m, "overrides")), *want;
    cr_assert_geq(asprintf(&want,
                           "{\"model\":\"%s\",\"data\":\"%s\",\"compute\":\"bf16\",\"name\":"
                           "\"other\",\"tasks\":[\"synth_kv\"],\"limit\":1}",
                           model, shipped),
                  0);
    cr_assert_str_eq(got, want);
    tu_result r = tu_kvbench("run", cfg, "--tasks", "synth_kv,nope", "--dry-run", NULL);
    cr_assert_eq(r.status, 1, "%s", r.err);
    cr_assert(strstr(r.err, "c.json (with --tasks): tasks[1]: unknown task or group \"nope\""),
              "%s", r.err);
    tu_result_free(&r);
    r = tu_kvbench("run", cfg, "--compute", "fp16", "--dry-run", NULL);
    cr_assert_eq(r.status, 1, "%s", r.err);
    cr_assert(strstr(r.err, "c.json (with --compute): compute: must be \"f32\" or \"bf16\""), "%s",
              r.err);
    tu_result_free(&r);
    free(want), free(got), free(text), free(pred), free(run_json), free(shipped), free(model),
        free(cfg);
    cJSON_Delete(j);
}

/* Issue 28: the first Ctrl-C says the run finishes its sample, the second
 * stops at once. A random-weight model decoding 20,000 tokens makes one
 * sample take far longer than the test waits between the two. */
Test(failure, a_second_ctrl_c_stops_at_once)
{
    char *model = tu_source("tests/data/models/llama-f32"), *shipped = tu_source("datasets/synthetic");
    char *cfg = tu_at("c.json"), *err = tu_at("err"), *sh;
    FILE *f = fopen(cfg, "w");
    fprintf(f,
            "{\"model\": \"%s\", \"data\": \"%s\", \"output\": \"%s/runs\", \"limit\": 1, "
            "\"max_new_tokens\": 20000, \"threads\": 1, \"tasks\": [\"synth_passkey\"]}\n",
            model, shipped, tu_dir);
    fclose(f);
    cr_assert_geq(asprintf(&sh,
                           "\"$KVBENCH\" run '%s' 2> '%s' & pid=$!\n"
                           "(sleep 60; kill -KILL $pid) 2>/dev/null & watchdog=$!\n"
                           "n=0; until grep -q 'task 1/1' '%s' || [ $n -ge 300 ]; do sleep 0.1; "
                           "n=$((n+1)); done\n"
                           "kill -INT $pid\n"
                           "n=0; until grep -q 'finishing the current sample' '%s' || [ $n -ge 100 ]; "
                           "do sleep 0.1; n=$((n+1)); done\n"
                           "kill -INT $pid\n"
                           "wait $pid; rc=$?; kill $watchdog 2>/dev/null; exit $rc\n",
                           cfg, err, err, err),
                  0);
    char *argv[] = {"/bin/sh", "-c", sh, NULL};
    tu_result r = tu_run_argv(argv);
    char *log = tu_slurp(err, NULL);
    cr_assert_eq(r.status, 130, "%s", log);
    cr_assert(strstr(log, "kvbench: run: finishing the current sample, then stopping (Ctrl-C "
                          "again to stop at once)"),
              "%s", log);
    cr_assert(strstr(log, "kvbench: run: stopped at once; run the same command again to resume"),
              "%s", log);
    cr_assert_null(strstr(log, "samples done"), "the sample was not finished: %s", log);
    tu_result_free(&r);
    free(log), free(sh), free(err), free(cfg), free(shipped), free(model);
}

/* Issue 28: a resumed run's first progress line shows the share already
 * done, not 0 %. */
Test(failure, a_resumed_runs_first_progress_line_shows_the_done_share)
{
    char *cfg = write_config(NULL, H2O);
    tu_kvbench_ok("run", cfg, NULL);
    tu_result r = tu_kvbench("run", cfg, "--limit", "3", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    char *first = strstr(r.err, "progress: ");
    cr_assert(first, "%s", r.err);
    cr_assert(strncmp(strstr(first, "samples") - 4, "2/3 samples 66.7%", 17) == 0, "%s", r.err);
    cr_assert(strstr(r.err, "1 samples done, 2 already on disk"), "%s", r.err);
    tu_result_free(&r);
    free(cfg);
}

/* Issue 28: a compression_ratio config keeps int(n * (1 - r)) of each
 * prompt's n tokens, as kvpress's presses do. */
Test(failure, a_compression_ratio_keeps_its_share_of_each_prompt)
{
    char *cfg = write_config(NULL, "[{\"name\": \"half\", \"algorithm\": \"SnapKV\", \"start_size\": 4, "
                                   "\"recent_size\": 32, \"compression_ratio\": 0.5, "
                                   "\"apply_rerotation\": false}]");
    tu_kvbench_ok("run", cfg, NULL);
    char *path = tu_at("runs/c/predictions/half/synth_passkey.jsonl");
    char *text = tu_slurp(path, NULL);
    int lines = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"), lines++) {
        cJSON *j = cJSON_Parse(line);
        long n = (long)cJSON_GetObjectItem(j, "prompt_tokens")->valuedouble;
        long kept = (long)cJSON_GetObjectItem(j, "kept_tokens")->valuedouble;
        cr_expect_gt(n, 1000);
        cr_expect_eq(kept, n / 2, "%ld of %ld", kept, n);
        cJSON_Delete(j);
    }
    cr_assert_eq(lines, 2);
    char *summary = tu_at("runs/c/summary.md"), *md = tu_slurp(summary, NULL);
    cr_assert(strstr(md, "| half | per prompt |"), "%s", md);
    free(md), free(summary), free(text), free(path), free(cfg);
}

/* The same in kvbench generate: --compression-ratio keeps its share of the
 * prompt at the prompt's eviction (the trace's first line). */
Test(failure, generate_keeps_a_compression_ratios_share_of_the_prompt)
{
    char *model = tu_source("models/kvbench-retrieval"), *trace = tu_at("trace.jsonl");
    char prompt[2048] = "";
    for (int i = 0; i < 40; i++)
        strcat(prompt, "the grass is green. ");
    tu_result r = tu_kvbench("generate", "--model", model, "--prompt", prompt, "--eviction",
                             "snapkv", "--start-size", "4", "--recent-size", "8",
                             "--compression-ratio", "0.75", "--apply-rerotation", "false",
                             "--max-new-tokens", "2", "--trace", trace, "--json", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cJSON *out = cJSON_Parse(r.out);
    int n_prompt = cJSON_GetArraySize(cJSON_GetObjectItem(out, "prompt_ids"));
    cr_assert_gt(n_prompt, 100);
    cJSON *first = first_line(trace);
    int kept = cJSON_GetArraySize(cJSON_GetObjectItem(first, "kept_positions"));
    cr_assert_eq(cJSON_GetObjectItem(first, "step")->valueint, 0);
    cr_assert_eq(kept, (int)(n_prompt * 0.25), "%d of %d", kept, n_prompt);
    cJSON_Delete(first);
    cJSON_Delete(out);
    tu_result_free(&r);
    free(trace), free(model);
}
