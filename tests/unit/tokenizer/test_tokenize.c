/* `kvbench tokenize` and `kvbench bench tokenizer`: the command-line side of
 * the tokenizer. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/testutil.h"

static char *toy_dir(void)
{
    return tu_source("tests/data/tokenizer/toy");
}

Test(tokenize, text_prints_ids_as_one_json_line)
{
    char *dir = toy_dir();
    tu_result r = tu_kvbench("tokenize", "--model", dir, "--text",
                             "The quick brown fox jumps over "
                             "the lazy dog.",
                             NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    /* ids of toy_cases.jsonl's toy-00 */
    cr_expect_str_eq(r.out, "{\"ids\": [275, 220, 483, 367, 488, 328, 475, 220, 464, 296, 293, "
                            "269, 277, 420, 334, 70, 13]}\n");
    tu_result_free(&r);
    free(dir);
}

Test(tokenize, decode_and_skip_special)
{
    char *dir = toy_dir();
    tu_result r =
        tu_kvbench("tokenize", "--model", dir, "--decode", "--text", "[497, 275, 498]", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_expect_str_eq(r.out, "{\"text\": \"<|im_start|>The<|im_end|>\"}\n");
    tu_result_free(&r);
    r = tu_kvbench("tokenize", "--model", dir, "--decode", "--skip-special", "--text", "497,275",
                   NULL);
    cr_expect_str_eq(r.out, "{\"text\": \"The\"}\n");
    tu_result_free(&r);
    free(dir);
}

Test(tokenize, nul_bytes_and_escapes_survive_the_round_trip)
{
    char *dir = toy_dir(), *tmp = tu_mkdtemp();
    char path[4096];
    snprintf(path, sizeof path, "%s/nul.txt", tmp);
    FILE *f = fopen(path, "wb");
    fwrite("x\0y\"\\\t", 1, 6, f);
    fclose(f);
    tu_result r = tu_kvbench("tokenize", "--model", dir, "--file", path, NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cJSON *j = cJSON_Parse(r.out);
    cr_assert(j, "%s", r.out);
    char *ids = cJSON_PrintUnformatted(cJSON_GetObjectItem(j, "ids"));
    tu_result d = tu_kvbench("tokenize", "--model", dir, "--decode", "--text", ids, NULL);
    cr_assert_eq(d.status, 0, "%s", d.err);
    cr_expect_str_eq(d.out, "{\"text\": \"x\\u0000y\\\"\\\\\\t\"}\n");
    tu_result_free(&d);
    free(ids);
    cJSON_Delete(j);
    tu_result_free(&r);
    tu_rmtree(tmp);
    free(tmp);
    free(dir);
}

/* A "\u0000" in a --jsonl field is part of the text: the ids are those of
 * the same bytes given as a file, and decoding writes the NUL back. */
Test(tokenize, jsonl_text_keeps_nul_characters)
{
    char *dir = toy_dir(), *tmp = tu_mkdtemp();
    char raw[4096], jsonl[4096];
    snprintf(raw, sizeof raw, "%s/raw.txt", tmp);
    snprintf(jsonl, sizeof jsonl, "%s/in.jsonl", tmp);
    FILE *f = fopen(raw, "wb");
    fwrite("The\0The", 1, 7, f);
    fclose(f);
    f = fopen(jsonl, "w");
    fputs("{\"id\": \"a\\u0000b\", \"text\": \"The\\u0000The\"}\n", f);
    fclose(f);
    tu_result a = tu_kvbench("tokenize", "--model", dir, "--file", raw, NULL);
    tu_result b = tu_kvbench("tokenize", "--model", dir, "--jsonl", jsonl, NULL);
    cr_assert_eq(a.status, 0, "%s", a.err);
    cr_assert_eq(b.status, 0, "%s", b.err);
    char want[4096];
    snprintf(want, sizeof want, "{\"id\": \"a\\u0000b\", %s", a.out + 1);
    cr_expect_str_eq(b.out, want);
    cJSON *j = cJSON_Parse(a.out);
    cr_assert_gt(cJSON_GetArraySize(cJSON_GetObjectItem(j, "ids")), 2, "%s", a.out);
    cJSON_Delete(j);
    tu_result_free(&a);
    tu_result_free(&b);
    tu_rmtree(tmp);
    free(tmp);
    free(dir);
}

Test(tokenize, jsonl_copies_ids_and_reads_the_field)
{
    char *dir = toy_dir(), *tmp = tu_mkdtemp();
    char path[4096];
    snprintf(path, sizeof path, "%s/in.jsonl", tmp);
    FILE *f = fopen(path, "w");
    fputs("{\"id\": \"a\", \"body\": \"The\"}\n\n{\"id\": 7, \"body\": \"<think>\"}\n", f);
    fclose(f);
    tu_result r = tu_kvbench("tokenize", "--model", dir, "--jsonl", path, "--field", "body", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_expect_str_eq(r.out, "{\"id\": \"a\", \"ids\": [275]}\n{\"id\": 7, \"ids\": [501]}\n");
    tu_result_free(&r);
    r = tu_kvbench("tokenize", "--model", dir, "--jsonl", path, NULL);
    cr_expect_eq(r.status, 1);
    cr_expect(strstr(r.err, "in.jsonl:1: no string field \"text\""), "%s", r.err);
    tu_result_free(&r);
    tu_rmtree(tmp);
    free(tmp);
    free(dir);
}

Test(tokenize, chat_renders_the_template_first)
{
    char *dir = toy_dir();
    tu_result r =
        tu_kvbench("tokenize", "--model", dir, "--chat", "--no-think", "--text", "The", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cJSON *j = cJSON_Parse(r.out);
    cr_assert(j, "%s", r.out);
    cr_expect_str_eq(cJSON_GetObjectItem(j, "text")->valuestring,
                     "<|im_start|>user\nThe<|im_end|>\n<|im_start|>assistant\n<think>\n\n"
                     "</think>\n\n");
    const cJSON *ids = cJSON_GetObjectItem(j, "ids");
    cr_expect_eq(cJSON_GetArrayItem(ids, 0)->valueint, 497);
    cr_expect_eq(cJSON_GetArrayItem(ids, 3)->valueint, 275);
    cJSON_Delete(j);
    tu_result_free(&r);
    free(dir);
}

Test(tokenize, chat_jsonl_of_qwen3_matches_transformers)
{
    char *cases = tu_data("tokenizer/cases/chat_ref.jsonl");
    char *dir = tu_data("tokenizer/qwen3");
    tu_result r = tu_kvbench("tokenize", "--model", dir, "--chat", "--jsonl", cases, NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    char *ref = tu_slurp(cases, NULL);
    char *save_out, *save_ref;
    char *o = strtok_r(r.out, "\n", &save_out), *w = strtok_r(ref, "\n", &save_ref);
    int lines = 0;
    for (; o && w; o = strtok_r(NULL, "\n", &save_out), w = strtok_r(NULL, "\n", &save_ref)) {
        cJSON *got = cJSON_Parse(o), *want = cJSON_Parse(w);
        const char *id = cJSON_GetObjectItem(want, "id")->valuestring;
        cr_expect_str_eq(cJSON_GetObjectItem(got, "id")->valuestring, id);
        cr_expect(
            cJSON_Compare(cJSON_GetObjectItem(got, "ids"), cJSON_GetObjectItem(want, "ids"), true),
            "%s: ids differ", id);
        cJSON_Delete(got);
        cJSON_Delete(want);
        lines++;
    }
    cr_expect(!o && !w, "one output line per input line");
    cr_expect_geq(lines, 40);
    free(ref);
    tu_result_free(&r);
    free(dir);
    free(cases);
}

Test(tokenize, usage_and_load_errors)
{
    char *dir = toy_dir();
    tu_result r = tu_kvbench("tokenize", "--text", "x", NULL);
    cr_expect_eq(r.status, 2);
    cr_expect(strstr(r.err, "kvbench: tokenize: --model DIR is required"), "%s", r.err);
    tu_result_free(&r);
    r = tu_kvbench("tokenize", "--model", dir, "--text", "x", "--file", "y", NULL);
    cr_expect_eq(r.status, 2);
    tu_result_free(&r);
    r = tu_kvbench("tokenize", "--model", "/nonexistent", "--text", "x", NULL);
    cr_expect_eq(r.status, 1);
    cr_expect(strstr(r.err, "kvbench: /nonexistent/tokenizer.json"), "%s", r.err);
    tu_result_free(&r);
    free(dir);
}

Test(bench, tokenizer_reports_load_time_and_speed)
{
    char *dir = toy_dir(), *file = tu_source("tests/data/tokenizer/toy_cases.jsonl");
    tu_result r = tu_kvbench("bench", "tokenizer", "--model", dir, "--file", file, "--seconds", "0",
                             "--json", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cJSON *j = cJSON_Parse(r.out);
    cr_assert(j, "%s", r.out);
    cr_expect_gt(cJSON_GetObjectItem(j, "tokens")->valuedouble, 1000);
    cr_expect_gt(cJSON_GetObjectItem(j, "load_s")->valuedouble, 0);
    cr_expect_gt(cJSON_GetObjectItem(j, "encode_tokens_per_s")->valuedouble, 0);
    cJSON_Delete(j);
    tu_result_free(&r);
    free(file);
    free(dir);
}

Test(bench, model_needs_a_model_and_unknown_kinds_are_refused)
{
    tu_result r = tu_kvbench("bench", "model", NULL);
    cr_expect_eq(r.status, 2);
    cr_expect(strstr(r.err, "--model DIR is required"), "%s", r.err);
    tu_result_free(&r);
    r = tu_kvbench("bench", "nonsense", NULL);
    cr_expect_eq(r.status, 2);
    cr_expect(strstr(r.err, "unknown kind 'nonsense'"), "%s", r.err);
    tu_result_free(&r);
}
