/* User tasks: a config's own task (file, template, metric) is checked as a
 * built-in task is, with errors that name the file and key; it then runs,
 * scores with its metric and reports like any other, and a run folder
 * rescored without its config still knows it (run.json records it).
 * `kvbench tasks` lists the built-in tasks, the groups and a config's own. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "longbench/tasks.h"
#include "longbench/usertask.h"
#include "matrix/matrix.h"
#include "support/testutil.h"

static kb_matrix m;
static kv_error err;

#define TEMPLATE "\"template\": \"Find the pass key.\\n\\n{context}\\n\\n{input}\""

static int parse(const char *text)
{
    memset(&err, 0, sizeof err);
    return kb_matrix_parse(text, "t", &m, &err);
}

/* The tasks list must fail with exactly this message. */
static void expect_error(const char *tasks, const char *msg)
{
    char text[2048];
    snprintf(text, sizeof text, "{\"model\": \"m\", \"tasks\": %s}", tasks);
    cr_assert_lt(parse(text), 0, "accepted: %s", text);
    cr_assert_str_eq(err.msg, msg);
}

static char *write_in(const char *dir, const char *name, const char *text)
{
    char *path;
    cr_assert_geq(asprintf(&path, "%s/%s", dir, name), 0);
    FILE *f = fopen(path, "w");
    cr_assert(f, "%s", path);
    fputs(text, f);
    fclose(f);
    return path;
}

TestSuite(usertask, .init = tu_dir_make, .fini = tu_dir_remove);

Test(usertask, a_definition_is_a_task_like_the_built_in_ones)
{
    cr_assert_eq(parse("{\"model\": \"m\", \"tasks\": [\"trec\", {\"task\": \"mytask\", \"file\": "
                       "\"my.jsonl\", " TEMPLATE ", \"metric\": \"qa_f1\", \"language\": \"en\", "
                       "\"limit\": 3}]}"),
                 0, "%s", err.msg);
    cr_assert_eq(m.n_tasks, 2);
    cr_assert_null(m.tasks[0].user);
    const lb_task *t = lb_task_find("mytask");
    cr_assert(t && t == m.tasks[1].user);
    cr_assert_eq(t->family, LB_FAMILY_USER);
    cr_assert_str_eq(t->metric, "qa_f1_score", "LongBench's short name is metrics.py's");
    cr_assert_eq(t->max_new_tokens, 64, "the default");
    cr_assert(t->chat && !t->first_line);
    cr_assert_str_eq(t->prompt, "Find the pass key.\n\n{context}\n\n{input}");
    cr_assert_str_eq(lb_user_task_file(t), "my.jsonl");
    cr_assert_eq(m.tasks[1].limit, 3);
    /* run.json records the definition */
    cJSON *j = kb_matrix_to_json(&m);
    cJSON *entry = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "tasks"), 1);
    cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(entry, "template")), t->prompt);
    cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(entry, "metric")), "qa_f1_score");
    cr_assert_null(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "tasks"), 0),
                                       "template"),
                   "a built-in task's entry is as before");
    cJSON_Delete(j);
    kb_matrix_free(&m);
    /* metrics.py's names work too, and max_new_tokens is the task's own */
    cr_assert_eq(parse("{\"model\": \"m\", \"tasks\": [{\"task\": \"mytask\", \"file\": \"f\", "
                       TEMPLATE ", \"metric\": \"rouge_score\", \"max_new_tokens\": 200, "
                       "\"chat\": false, \"first_line\": true}]}"),
                 0, "%s", err.msg);
    t = lb_task_find("mytask");
    cr_assert_str_eq(t->metric, "rouge_score");
    cr_assert_eq(t->max_new_tokens, 200);
    cr_assert(!t->chat && t->first_line);
    kb_matrix_free(&m);
}

Test(usertask, mistakes_name_the_key)
{
    expect_error("[{\"task\": \"mine\", \"file\": \"f\", " TEMPLATE ", \"metric\": \"f1\"}]",
                 "tasks[0].metric: unknown metric \"f1\" (LongBench's: qa_f1, qa_f1_zh, rouge, "
                 "rouge_zh, classification, retrieval, retrieval_zh, count, code_sim)");
    expect_error("[\"trec\", {\"task\": \"mine\", \"file\": \"f\", \"template\": \"Q: {input}\", "
                 "\"metric\": \"qa_f1\"}]",
                 "tasks[1].template: has no {context} placeholder: the long text the cache "
                 "compresses goes there");
    expect_error("[{\"task\": \"mine\", \"file\": \"f\", \"template\": \"{context} {question}\", "
                 "\"metric\": \"qa_f1\"}]",
                 "tasks[0].template: unknown placeholder near \"{question}\": a template has "
                 "{context} and {input} ({{ and }} for a brace)");
    expect_error("[{\"task\": \"qasper\", \"file\": \"f\", " TEMPLATE ", \"metric\": \"qa_f1\"}]",
                 "tasks[0].task: \"qasper\" is a built-in task or group: a user task needs a name "
                 "of its own (see `kvbench tasks`)");
    expect_error("[{\"task\": \"en16\", \"file\": \"f\", " TEMPLATE ", \"metric\": \"qa_f1\"}]",
                 "tasks[0].task: \"en16\" is a built-in task or group: a user task needs a name "
                 "of its own (see `kvbench tasks`)");
    expect_error("[{\"task\": \"../x\", \"file\": \"f\", " TEMPLATE ", \"metric\": \"qa_f1\"}]",
                 "tasks[0].task: \"../x\" cannot name a file (letters, digits, '.', '_', '-'; "
                 "not starting with '.' or '-')");
    expect_error("[{\"task\": \"mine\", \"file\": \"f\", " TEMPLATE "}]",
                 "tasks[0]: a user task needs \"metric\" (a task of one's own has file, template "
                 "and metric)");
    expect_error("[{\"task\": \"mine\", \"file\": \"f\", " TEMPLATE
                 ", \"metric\": \"qa_f1\", \"language\": \"fr\"}]",
                 "tasks[0].language: must be \"en\", \"zh\" or \"code\"");
    expect_error("[{\"task\": \"mine\", \"file\": \"f\", " TEMPLATE
                 ", \"metric\": \"qa_f1\", \"chat\": 1}]",
                 "tasks[0].chat: must be true or false");
    expect_error("[{\"task\": \"mine\", \"file\": \"f\", " TEMPLATE
                 ", \"metric\": \"accuracy\"}]",
                 "tasks[0].metric: unknown metric \"accuracy\" (LongBench's: qa_f1, qa_f1_zh, "
                 "rouge, rouge_zh, classification, retrieval, retrieval_zh, count, code_sim)");
    expect_error("[{\"task\": \"mine\", \"file\": \"f\", " TEMPLATE ", \"metric\": \"qa_f1\"}, "
                 "{\"task\": \"mine\", \"file\": \"f\", " TEMPLATE ", \"metric\": \"qa_f1\"}]",
                 "tasks[1]: task \"mine\" is listed twice");
}

Test(usertask, the_file_is_found_beside_the_config_or_named_in_the_error)
{
    char *data;
    cr_assert_geq(asprintf(&data, "%s/data", tu_dir), 0);
    cr_assert_eq(mkdir(data, 0777), 0);
    free(write_in(data, "mine.jsonl", ""));
    char *path = write_in(tu_dir, "c.json",
                          "{\"model\": \"Org/Name\", \"tasks\": [{\"task\": \"mine\", \"file\": "
                          "\"data/mine.jsonl\", " TEMPLATE ", \"metric\": \"qa_f1\"}]}");
    cr_assert_eq(kb_matrix_load(path, &m, &err), 0, "%s", err.msg);
    char *want;
    cr_assert_geq(asprintf(&want, "%s/mine.jsonl", data), 0);
    cr_assert_str_eq(lb_user_task_file(lb_task_find("mine")), want);
    cr_assert_eq(lb_task_find("mine"), m.tasks[0].user);
    kb_matrix_free(&m);
    free(want);
    free(path);
    path = write_in(tu_dir, "d.json",
                    "{\"model\": \"Org/Name\", \"tasks\": [\"trec\", {\"task\": \"mine\", "
                    "\"file\": \"data/missing.jsonl\", " TEMPLATE ", \"metric\": \"qa_f1\"}]}");
    cr_assert_lt(kb_matrix_load(path, &m, &err), 0);
    cr_assert_geq(asprintf(&want,
                           "%s: tasks[1]: file: 'data/missing.jsonl' is no file (from the working "
                           "folder, nor from %s/)",
                           path, tu_dir),
                  0);
    cr_assert_str_eq(err.msg, want);
    free(want);
    free(path);
    free(data);
}

/* A config with the shipped user task over the demo model. */
static char *user_config(const char *dir)
{
    char *model = tu_source("models/kvbench-retrieval");
    char *file = tu_source("datasets/user/my_passkey.jsonl");
    char text[4096];
    snprintf(text, sizeof text,
             "{\"name\": \"u\", \"model\": \"%s\", \"output\": \"%s/runs\", \"limit\": 2, "
             "\"tasks\": [{\"task\": \"my_passkey\", \"file\": \"%s\", \"template\": \"There is "
             "a pass key hidden in the text below. Find it and remember it.\\n\\n{context}\\n\\n"
             "{input}\", \"metric\": \"count\", \"max_new_tokens\": 8, \"chat\": false}], "
             "\"configs\": [{\"name\": \"snapkv\", \"algorithm\": \"snapkv\", \"start_size\": 4, "
             "\"recent_size\": 32, \"intermediate_size\": 92, \"window_size\": 32, "
             "\"apply_rerotation\": false}]}",
             model, dir, file);
    free(model);
    free(file);
    return write_in(dir, "u.json", text);
}

Test(usertask, runs_scores_and_reports_without_its_config, .timeout = 300)
{
    char *cfg = user_config(tu_dir);
    tu_result r = tu_kvbench("run", cfg, NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "my_passkey"), "the table has the task: %s", r.out);
    tu_result_free(&r);
    char *run, *scores, *pred;
    cr_assert_geq(asprintf(&run, "%s/runs/u", tu_dir), 0);
    cr_assert_geq(asprintf(&scores, "%s/scores.json", run), 0);
    cr_assert_geq(asprintf(&pred, "%s/predictions/snapkv/my_passkey.jsonl", run), 0);
    char *lines = tu_slurp(pred, NULL);
    cr_assert(strstr(lines, "\"id\":\"my_passkey-0000\"") &&
                  strstr(lines, "\"id\":\"my_passkey-0008\""),
              "the task's own file, first 2 samples: %s", lines);
    free(lines);
    char *text = tu_slurp(scores, NULL);
    cr_assert(strstr(text, "\"task\":\t\"my_passkey\"") &&
                  strstr(text, "\"metric\":\t\"count_score\""),
              "%s", text);
    free(text);
    /* rescored by a process that never saw the config: run.json defines the task */
    cr_assert_eq(unlink(scores), 0);
    tu_kvbench_ok("report", run, NULL);
    text = tu_slurp(scores, NULL);
    cr_assert(strstr(text, "\"metric\":\t\"count_score\""), "%s", text);
    free(text);
    /* a changed template in the same run folder would mix two tasks: refused */
    char *edited = tu_slurp(cfg, NULL);
    char *at = strstr(edited, "There is a pass key");
    cr_assert(at);
    memcpy(at, "Here", 4);
    free(write_in(tu_dir, "u.json", edited));
    free(edited);
    r = tu_kvbench("run", cfg, NULL);
    cr_assert_eq(r.status, 1);
    cr_assert(strstr(r.err, "task \"my_passkey\" has a different template"), "%s", r.err);
    tu_result_free(&r);
    free(run);
    free(scores);
    free(pred);
    free(cfg);
}

Test(usertask, kvbench_tasks_lists_tasks_groups_and_a_configs_own)
{
    tu_result r = tu_kvbench("tasks", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "qasper ") && strstr(r.out, "qa_f1_score"), "%s", r.out);
    cr_assert(strstr(r.out, "en16         16 tasks: narrativeqa qasper"), "%s", r.out);
    cr_assert(strstr(r.out, "longbench_e  13 tasks: qasper_e"), "%s", r.out);
    tu_result_free(&r);
    char *cfg = user_config(tu_dir);
    r = tu_kvbench("tasks", cfg, NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "defines 1 task:"), "%s", r.out);
    cr_assert(strstr(r.out, "my_passkey               user          user             count_score"),
              "%s", r.out);
    cr_assert(strstr(r.out, "datasets/user/my_passkey.jsonl"), "%s", r.out);
    tu_result_free(&r);
    /* a bad definition: the run's own error */
    char *bad = write_in(tu_dir, "bad.json",
                         "{\"model\": \"Org/Name\", \"tasks\": [{\"task\": \"x\", \"file\": "
                         "\"f.jsonl\", \"template\": \"{input}\", \"metric\": \"qa_f1\"}]}");
    r = tu_kvbench("tasks", bad, NULL);
    cr_assert_eq(r.status, 1);
    cr_assert(strstr(r.err, "bad.json: tasks[0].template: has no {context} placeholder"), "%s",
              r.err);
    tu_result_free(&r);
    free(bad);
    free(cfg);
}

Test(usertask, the_quick_start_sweeps_budgets_over_a_user_task)
{
    char *path = tu_source("configs/quickstart.json"), *file = tu_source("datasets/user/my_passkey.jsonl");
    cr_assert_eq(kb_matrix_load(path, &m, &err), 0, "%s", err.msg);
    cr_assert_eq(m.n_tasks, 2);
    cr_assert_null(m.tasks[0].user, "synth_kv is built in");
    cr_assert_str_eq(m.tasks[1].name, "my_passkey");
    cr_assert(m.tasks[1].user);
    char *real = realpath(lb_user_task_file(m.tasks[1].user), NULL);
    cr_assert_str_eq(real, file, "found beside the config");
    free(real);
    cr_assert_eq(m.n_configs, 7);
    for (size_t i = 1; i < 7; i++)
        cr_assert_eq(m.configs[i].budget, 64L << ((i - 1) % 3), "%s", m.configs[i].name);
    kb_matrix_free(&m);
    free(path);
    free(file);
}
