/* `kvbench prompts`: one JSON line per sample, selections, protocols, errors. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/testutil.h"

static char *samples, *toy;

static void setup(void)
{
    samples = tu_source("datasets/samples");
    toy = tu_source("tests/data/tokenizer/toy");
}

static void teardown(void)
{
    free(samples);
    free(toy);
}

TestSuite(prompts_cmd, .init = setup, .fini = teardown);

/* The JSON objects of r.out, one per line; returns how many. */
static int parse_lines(const char *out, cJSON **objs, int max)
{
    int n = 0;
    for (const char *l = out; *l && n < max;) {
        const char *e = strchr(l, '\n');
        cr_assert(e, "every line ends with a newline");
        objs[n] = cJSON_ParseWithLength(l, (size_t)(e - l));
        cr_assert(objs[n], "not JSON: %.*s", (int)(e - l), l);
        n++;
        l = e + 1;
    }
    return n;
}

Test(prompts_cmd, json_lines_with_the_documented_keys)
{
    tu_result r = tu_kvbench("prompts", "--task", "trec", "--dir", samples, "--model", toy,
                             "--max-length", "24", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cJSON *o[8];
    int n = parse_lines(r.out, o, 8);
    cr_assert_eq(n, 2);
    for (int i = 0; i < n; i++) {
        cr_assert_eq(strlen(cJSON_GetObjectItem(o[i], "id")->valuestring), 48);
        cr_assert_str_eq(cJSON_GetObjectItem(o[i], "task")->valuestring, "trec");
        cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(o[i], "n_tokens")));
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(o[i], "truncated")));
        cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(o[i], "chat")), "trec: no chat (pred.py)");
        cr_assert(cJSON_IsString(cJSON_GetObjectItem(o[i], "prompt")));
        cJSON_Delete(o[i]);
    }
    cr_assert(strstr(r.err, "2 prompts of trec (2 truncated to 24 tokens, protocol longbench)"),
              "%s", r.err);
    tu_result_free(&r);
}

Test(prompts_cmd, nncf_protocol_limit_and_ids)
{
    tu_result r = tu_kvbench("prompts", "--task", "trec", "--dir", samples, "--model", toy,
                             "--protocol", "nncf", "--limit", "1", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cJSON *o[4];
    cr_assert_eq(parse_lines(r.out, o, 4), 1);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(o[0], "chat")));
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(o[0], "truncated")));
    cr_assert(strncmp(cJSON_GetObjectItem(o[0], "prompt")->valuestring, "<|im_start|>user\n", 17) ==
              0);
    cJSON_Delete(o[0]);
    tu_result_free(&r);
    /* --data is the new spelling of --dir (issue 28: fetch's --dir wrote,
     * prompts' --dir read): both read the same prompts */
    tu_result d = tu_kvbench("prompts", "--task", "trec", "--data", samples, "--model", toy,
                             "--protocol", "nncf", "--limit", "1", NULL);
    tu_result o2 = tu_kvbench("prompts", "--task", "trec", "--dir", samples, "--model", toy,
                              "--protocol", "nncf", "--limit", "1", NULL);
    cr_assert_eq(d.status, 0, "%s", d.err);
    cr_assert_str_eq(d.out, o2.out);
    tu_result_free(&d);
    tu_result_free(&o2);
    r = tu_kvbench("prompts", "--task", "qasper", "--dir", samples, "--ids",
                   "1e3c2e6cc2ac5fc4d1bc0b3e2b3c3ad2b2a0c7a0aab0e0b1,nope", NULL);
    cr_assert_eq(r.status, 1);
    cr_assert(strstr(r.err, "no sample has _id"), "%s", r.err);
    tu_result_free(&r);
}

Test(prompts_cmd, without_a_model_the_template_only)
{
    tu_result r = tu_kvbench("prompts", "--task", "lcc", "--dir", samples, NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cJSON *o[2];
    cr_assert_eq(parse_lines(r.out, o, 2), 1);
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(o[0], "n_tokens")));
    cr_assert_str_eq(
        cJSON_GetObjectItem(o[0], "prompt")->valuestring,
        "Please complete the code given below. \ndef mean(xs):\n    total = 0\n    for x "
        "in xs:\n        total += x\nNext line of code:\n");
    cJSON_Delete(o[0]);
    tu_result_free(&r);
}

Test(prompts_cmd, errors)
{
    tu_result r = tu_kvbench("prompts", "--task", "nope", "--dir", samples, NULL);
    cr_assert_eq(r.status, 2);
    cr_assert(strstr(r.err, "unknown task \"nope\""), "%s", r.err);
    tu_result_free(&r);
    r = tu_kvbench("prompts", "--task", "trec", NULL);
    cr_assert_eq(r.status, 2);
    tu_result_free(&r);
    r = tu_kvbench("prompts", "--task", "trec", "--dir", samples, "--protocol", "hf", NULL);
    cr_assert_eq(r.status, 2);
    tu_result_free(&r);
    char *bad = tu_source("tests/meson.build"); /* not JSONL: line 1 is reported */
    r = tu_kvbench("prompts", "--task", "trec", "--file", bad, NULL);
    cr_assert_eq(r.status, 1);
    cr_assert(strstr(r.err, "meson.build:1: not valid JSON"), "%s", r.err);
    tu_result_free(&r);
    free(bad);
}

Test(prompts_cmd, list_shows_every_task)
{
    tu_result r = tu_kvbench("prompts", "--list", NULL);
    cr_assert_eq(r.status, 0);
    const char *names[] = {"narrativeqa", "repobench-p", "qasper_e",    "repobench-p_e",
                           "v2",          "synth_passkey", "synth_kv"};
    for (int i = 0; i < 7; i++)
        cr_assert(strstr(r.out, names[i]), "%s missing", names[i]);
    tu_result_free(&r);
}

Test(prompts_cmd, skip_bad_lines_reports_the_count)
{
    char *dir = tu_mkdtemp(), *path = NULL;
    cr_assert_neq(asprintf(&path, "%s/trec.jsonl", dir), -1);
    char *good = tu_source("datasets/samples/trec.jsonl");
    char *text = tu_slurp(good, NULL);
    FILE *f = fopen(path, "wb");
    fprintf(f, "%s{\"broken\": \n%s", text, text);
    fclose(f);
    tu_result r = tu_kvbench("prompts", "--task", "trec", "--dir", dir, NULL);
    cr_assert_eq(r.status, 1);
    cr_assert(strstr(r.err, "trec.jsonl:3: not valid JSON"), "%s", r.err);
    tu_result_free(&r);
    r = tu_kvbench("prompts", "--task", "trec", "--dir", dir, "--skip-bad-lines", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cJSON *o[8];
    int n = parse_lines(r.out, o, 8);
    cr_assert_eq(n, 4);
    for (int i = 0; i < n; i++)
        cJSON_Delete(o[i]);
    cr_assert(strstr(r.err, "skipped 1 malformed line; the last: "), "%s", r.err);
    cr_assert(strstr(r.err, "trec.jsonl:3: not valid JSON"), "%s", r.err);
    tu_result_free(&r);
    tu_rmtree(dir);
    free(dir);
    free(path);
    free(good);
    free(text);
}
