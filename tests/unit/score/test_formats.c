/* Prediction files of kvpress and lm-evaluation-harness, and LongBench's
 * pred/ parent folder: the same predictions score the same in every format
 * (tests/data/formats/, tests/tools/make_format_fixtures.py), a parent folder
 * gives one table per model, and bad input is named by file, line and column. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "score/formats.h"
#include "support/testutil.h"

/* `kvbench score --format F DIR --output result.json`, parsed. */
static cJSON *result_of(const char *format, const char *rel, tu_result *r)
{
    char *dir = tu_data(rel), *tmp = tu_mkdtemp(), *out;
    cr_assert_geq(asprintf(&out, "%s/result.json", tmp), 0);
    *r = tu_kvbench("score", "--format", format, dir, "--output", out, NULL);
    cr_assert_eq(r->status, 0, "%s", r->err);
    char *text = tu_slurp(out, NULL);
    cJSON *j = cJSON_Parse(text);
    cr_assert(j, "%s", text);
    free(text);
    free(out);
    tu_rmtree(tmp);
    free(tmp);
    free(dir);
    return j;
}

static double task_score(const cJSON *j, const char *model, const char *task)
{
    const cJSON *m = cJSON_GetObjectItem(j, model);
    const cJSON *t = cJSON_GetObjectItem(m, task);
    cr_assert(cJSON_IsNumber(t), "%s/%s", model, task);
    return t->valuedouble;
}

Test(formats, every_format_scores_as_longbench_pred_files)
{
    tu_result r;
    cJSON *pred = result_of("longbench", "formats/pred", &r);
    cr_assert(strstr(r.out, "== model-a ==\n") && strstr(r.out, "== model-b ==\n"),
              "one table per model: %s", r.out);
    tu_result_free(&r);
    cJSON *kvpress = result_of("kvpress", "formats/kvpress", &r);
    tu_result_free(&r);
    cJSON *lmeval = result_of("lm-eval", "formats/lm-eval", &r);
    tu_result_free(&r);
    double qasper = task_score(pred, "model-a", "qasper"), trec = task_score(pred, "model-a", "trec");
    cr_assert_float_eq(qasper, 55.56, 1e-9);
    cr_assert_float_eq(trec, 75.0, 1e-9);
    cr_assert_float_eq(task_score(pred, "model-b", "qasper"), 88.89, 1e-9, "model-b's own");
    cr_assert_eq(task_score(kvpress, "longbench__qasper__org--model__knorm__0.50", "qasper"), qasper);
    cr_assert_eq(task_score(kvpress, "longbench__trec__org--model__knorm__0.50", "trec"), trec);
    cr_assert_eq(task_score(lmeval, "org__model", "qasper"), qasper);
    cr_assert_eq(task_score(lmeval, "org__model", "trec"), trec);
    cJSON_Delete(pred);
    cJSON_Delete(kvpress);
    cJSON_Delete(lmeval);
}

Test(formats, one_folder_or_file_is_one_table_and_the_csv_names_models)
{
    char *one = tu_data("formats/lm-eval/org__model"), *tmp = tu_mkdtemp(), *csv;
    tu_result r = tu_kvbench("score", "--format", "lm-eval", one, NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert_null(strstr(r.out, "=="), "a model's own folder: no heading: %s", r.out);
    cr_assert(strstr(r.out, "qasper                 qa_f1_score              3    55.56"), "%s",
              r.out);
    tu_result_free(&r);
    char *parent = tu_data("formats/pred");
    cr_assert_geq(asprintf(&csv, "%s/t.csv", tmp), 0);
    tu_kvbench_ok("score", parent, "--csv", csv, NULL);
    char *text = tu_slurp(csv, NULL);
    cr_assert(strncmp(text, "model,task,metric,n,score,", 26) == 0, "%s", text);
    cr_assert(strstr(text, "\nmodel-b,qasper,qa_f1_score,3,88.89,"), "%s", text);
    free(text);
    free(csv);
    free(parent);
    free(one);
    tu_rmtree(tmp);
    free(tmp);
}

static void expect_list(const char *repr, const char *json)
{
    kv_strbuf b = {0};
    kv_error err;
    cr_assert_eq(kb_py_list_to_json(repr, strlen(repr), &b, &err), 0, "%s: %s", repr, err.msg);
    cr_assert_str_eq(b.s, json, "%s", repr);
    kv_strbuf_free(&b);
}

static void expect_list_error(const char *repr, const char *msg)
{
    kv_strbuf b = {0};
    kv_error err;
    cr_assert_lt(kb_py_list_to_json(repr, strlen(repr), &b, &err), 0, "%s", repr);
    cr_assert_str_eq(err.msg, msg);
    kv_strbuf_free(&b);
}

Test(formats, python_and_numpy_list_reprs)
{
    expect_list("['a', \"b's\"]", "[\"a\",\"b's\"]");
    expect_list("['a' 'b'\n 'c']", "[\"a\",\"b\",\"c\"]"); /* numpy wraps long arrays */
    expect_list("['it\\'s', 'tab\\there', 'nl\\n', 'back\\\\slash']",
                "[\"it's\",\"tab\\there\",\"nl\\n\",\"back\\\\slash\"]");
    expect_list("['\\x00x', 'caf\\xe9', '\\u4e2d', '\\U0001f600', 'é']",
                "[\"\\u0000x\",\"café\",\"中\",\"😀\",\"é\"]");
    expect_list("[]", "[]");
    expect_list("", "null");
    expect_list("None", "null");
    expect_list_error("cat", "not a list (expected ['...', ...])");
    expect_list_error("['a', b]", "byte 7: expected a quoted string or ']'");
    expect_list_error("['a", "a string that does not end");
    expect_list_error("['\\q']", "byte 3: an escape Python's repr does not write");
}

/* A file with text in a temporary folder, scored in format f: the error. */
static char *score_error(const char *format, const char *name, const char *text)
{
    char *dir = tu_mkdtemp(), *path;
    cr_assert_geq(asprintf(&path, "%s/%s", dir, name), 0);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    tu_result r = tu_kvbench("score", "--format", format, path, NULL);
    cr_assert_eq(r.status, 1, "%s", r.out);
    char *want = strstr(r.err, path) ? strdup(strstr(r.err, path) + strlen(path)) : strdup(r.err);
    tu_result_free(&r);
    tu_rmtree(dir);
    free(dir);
    free(path);
    return want;
}

Test(formats, bad_input_is_named_by_file_line_and_column)
{
    char *e = score_error("kvpress", "predictions.csv", "task,answers\nqasper,['a']\n");
    cr_assert_str_eq(e, ": no column \"predicted_answer\" (kvpress's predictions.csv has "
                        "predicted_answer, answers, task)\n");
    free(e);
    e = score_error("kvpress", "predictions.csv",
                    "task,answers,predicted_answer\nqasper,['a'],x\nqasper,[a],y\n");
    cr_assert_str_eq(e, ":3: answers: byte 2: expected a quoted string or ']'\n");
    free(e);
    e = score_error("kvpress", "predictions.csv",
                    "task,answers,predicted_answer\nqasper,['a'],\"x\n");
    cr_assert_str_eq(e, ": line 3: a quoted field that does not end\n");
    free(e);
    e = score_error("kvpress", "predictions.csv", "task,answers,predicted_answer\nqasper,['a']\n");
    cr_assert_str_eq(e, ":2: 2 fields, the header has 3\n");
    free(e);
    e = score_error("lm-eval", "samples_qasper_2026.jsonl",
                    "{\"doc\": {\"answers\": [\"a\"]}, \"filtered_resps\": [\"a\"]}\n"
                    "{\"doc\": {\"answers\": [\"a\"]}}\n");
    cr_assert_str_eq(e, ":2: no \"filtered_resps\" (or \"resps\") text\n");
    free(e);
    tu_result r = tu_kvbench("score", "--format", "helm", ".", NULL);
    cr_assert_eq(r.status, 2);
    cr_assert(strstr(r.err, "--format: \"helm\" is none of longbench, kvpress, lm-eval"), "%s",
              r.err);
    tu_result_free(&r);
}
