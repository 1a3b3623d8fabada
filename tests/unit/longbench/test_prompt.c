/* datasets/prompt: template substitution byte for byte, protocols.
 *
 * Expected prompts are computed here independently of the registry: the
 * template is read from upstream's dataset2prompt.json
 * (tests/data/longbench/upstream) and filled with a plain find-and-replace,
 * which is what Python's str.format does for these templates. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "longbench/prompt.h"
#include "support/testutil.h"

/* The template of `task` in upstream's dataset2prompt.json. */
static char *upstream_template(const char *task)
{
    char *path = tu_data("longbench/upstream/dataset2prompt.json");
    char *json = tu_slurp(path, NULL);
    free(path);
    cJSON *obj = cJSON_Parse(json);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(obj, task);
    cr_assert(cJSON_IsString(t), "dataset2prompt.json has no template for %s", task);
    char *tmpl = strdup(t->valuestring);
    cJSON_Delete(obj);
    free(json);
    return tmpl;
}

/* Replaces the one occurrence of `key` in s (which must be there). */
static char *replace_once(char *s, const char *key, const char *value)
{
    char *at = strstr(s, key);
    if (!at)
        return s;
    char *out = NULL;
    cr_assert_neq(asprintf(&out, "%.*s%s%s", (int)(at - s), s, value, at + strlen(key)), -1);
    free(s);
    return out;
}

/* Fill {input} first, then {context}: a context can contain "{input}" (code),
 * an input never contains "{context}" in these files. */
static char *expected_prompt(const char *tmpl, const lb_sample *s)
{
    char *out = strdup(tmpl);
    const char *ci = strstr(out, "{context}"), *ii = strstr(out, "{input}");
    /* Replace the later placeholder first so that the earlier one's value is never scanned. */
    if (ii && ci && ii > ci) {
        out = replace_once(out, "{input}", s->input.p);
        out = replace_once(out, "{context}", s->context.p);
    } else {
        out = replace_once(out, "{context}", s->context.p);
        out = replace_once(out, "{input}", s->input.p);
    }
    return out;
}

static void check_file(const char *path, const char *task_name, const char *tmpl, int want_n)
{
    const lb_task *task = lb_task_find(task_name);
    cr_assert(task);
    kv_error err = {{0}};
    lb_loader *l = lb_loader_open(path, NULL, &err);
    cr_assert(l, "%s", err.msg);
    lb_sample s;
    int n = 0, rc;
    while ((rc = lb_loader_next(l, &s, &err)) == 1) {
        char *got;
        size_t len;
        cr_assert_eq(lb_prompt_format(task, &s, &got, &len, &err), 0, "%s", err.msg);
        char *want = expected_prompt(tmpl, &s);
        cr_assert_eq(len, strlen(want), "%s line %ld: length %zu, want %zu", path, s.lineno, len,
                     strlen(want));
        cr_assert(memcmp(got, want, len) == 0, "%s line %ld: prompt differs", path, s.lineno);
        free(got);
        free(want);
        lb_sample_free(&s);
        n++;
    }
    cr_assert_eq(rc, 0, "%s", err.msg);
    cr_assert_eq(n, want_n);
    lb_loader_close(l);
}

Test(prompt, official_head3_lines_equal_the_upstream_substitution)
{
    const char *tasks[] = {"multi_news", "multifieldqa_zh", "passage_retrieval_zh"};
    for (int i = 0; i < 3; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "longbench/%s.head3.jsonl", tasks[i]);
        char *path = tu_data(rel);
        char *tmpl = upstream_template(tasks[i]);
        check_file(path, tasks[i], tmpl, 3);
        free(path);
        free(tmpl);
    }
}

/* Every sample file shipped in datasets/samples against upstream's template. */
Test(prompt, shipped_samples_equal_the_upstream_substitution)
{
    const char *tasks[] = {"qasper", "multifieldqa_en", "hotpotqa",
                           "trec",   "samsum",          "passage_retrieval_en",
                           "lcc",    "repobench-p",     "multifieldqa_zh"};
    const int counts[] = {3, 2, 1, 2, 1, 1, 1, 1, 1};
    for (int i = 0; i < 9; i++) {
        char *tmpl = upstream_template(tasks[i]);
        char rel[128];
        snprintf(rel, sizeof rel, "datasets/samples/%s.jsonl", tasks[i]);
        char *path = tu_source(rel);
        check_file(path, tasks[i], tmpl, counts[i]);
        free(path);
        free(tmpl);
    }
}

/* Whole prompts written out by hand from dataset2prompt.json. */
static void check_literal(const char *task_name, const char *input, const char *context,
                          const char *want)
{
    lb_sample s = {.input = kv_str_c(input), .context = kv_str_c(context)};
    char *got;
    size_t len;
    kv_error err;
    cr_assert_eq(lb_prompt_format(lb_task_find(task_name), &s, &got, &len, &err), 0, "%s", err.msg);
    cr_assert_str_eq(got, want);
    cr_assert_eq(len, strlen(want));
    free(got);
}

Test(prompt, literal_templates)
{
    check_literal("trec", "Question: Why ?\nType:", "Q: A\nType: B",
                  "Please determine the type of the question below. Here are some examples of "
                  "questions.\n\nQ: A\nType: B\nQuestion: Why ?\nType:");
    check_literal("lcc", "", "int x = 1;\n",
                  "Please complete the code given below. \nint x = 1;\nNext line of code:\n");
    check_literal("repobench-p", "b()\n", "a()\n",
                  "Please complete the code given below. \na()\nb()\nNext line of code:\n");
    check_literal("passage_count", "", "P1\n\nP2",
                  "There are some paragraphs below sourced from Wikipedia. Some of them may be "
                  "duplicates. Please carefully read these paragraphs and determine how many "
                  "unique paragraphs there are after removing duplicates. In other words, how "
                  "many non-repeating paragraphs are there in total?\n\nP1\n\nP2\n\nPlease "
                  "enter the final count of unique paragraphs after removing duplicates. The "
                  "output format should only contain the number, such as 1, 2, 3, and so on."
                  "\n\nThe final answer is: ");
    check_literal(
        "vcsum", "", "甲：开会。",
        "下面有一段会议记录，请你阅读后，写一段总结，总结会议的内容。\n会议记录：\n甲：开会。"
        "\n\n会议总结：");
    /* Values are not re-parsed: placeholders inside a document stay literal. */
    check_literal("multifieldqa_en", "{context}?", "a {input} b {{x}}",
                  "Read the following text and answer briefly.\n\na {input} b {{x}}\n\nNow, "
                  "answer the following question based on the above text, only give me the "
                  "answer and do not output any other words.\n\nQuestion: {context}?\nAnswer:");
    check_literal("narrativeqa", "Q", "C",
                  "You are given a story, which can be either a novel or a movie script, and a "
                  "question. Answer the question asconcisely as you can, using a single phrase "
                  "if possible. Do not provide any explanation.\n\nStory: C\n\nNow, answer the "
                  "question based on the story asconcisely as you can, using a single phrase if "
                  "possible. Do not provide any explanation.\n\nQuestion: Q\n\nAnswer:");
}

Test(prompt, protocols)
{
    lb_protocol p;
    kv_error err;
    cr_assert_eq(lb_protocol_parse("longbench", &p, &err), 0);
    cr_assert_eq(p, LB_PROTOCOL_LONGBENCH);
    cr_assert_eq(lb_protocol_parse("nncf", &p, &err), 0);
    cr_assert_eq(p, LB_PROTOCOL_NNCF);
    cr_assert_eq(lb_protocol_parse("hf", &p, &err), -1);
    cr_assert(strstr(err.msg, "longbench, nncf"));
    const lb_task *trec = lb_task_find("trec"), *qasper = lb_task_find("qasper"),
                  *samsum = lb_task_find("samsum");
    cr_assert_not(lb_protocol_chat(LB_PROTOCOL_LONGBENCH, trec));
    cr_assert(lb_protocol_chat(LB_PROTOCOL_LONGBENCH, qasper));
    cr_assert(lb_protocol_chat(LB_PROTOCOL_NNCF, trec));
    cr_assert(lb_protocol_newline_stop(LB_PROTOCOL_LONGBENCH, samsum));
    cr_assert_not(lb_protocol_newline_stop(LB_PROTOCOL_LONGBENCH, qasper));
    cr_assert(lb_protocol_newline_stop(LB_PROTOCOL_NNCF, qasper));
}

/* LongBench v2: expected prompts made by tests/data/datasets/make_expected.py --v2
 * (v2 pred.py's strip + sequential replace in Python, upstream's prompts/0shot*.txt). */
Test(prompt, v2_substitution_equals_python)
{
    char *exp = tu_source("tests/data/datasets/v2_expected.jsonl");
    char *data = tu_source("datasets/samples/longbench-v2/data.json");
    char *text = tu_slurp(exp, NULL);
    int n = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *e = cJSON_Parse(line);
        cr_assert(e);
        const char *id = cJSON_GetObjectItem(e, "id")->valuestring;
        const lb_task *task = lb_task_find(cJSON_GetObjectItem(e, "task")->valuestring);
        cr_assert(task);
        kv_str ids[] = {kv_str_c(id)};
        lb_loader_options o = {.schema = LB_SCHEMA_V2, .ids = ids, .n_ids = 1};
        kv_error err;
        lb_loader *l = lb_loader_open(data, &o, &err);
        lb_sample s;
        cr_assert_eq(lb_loader_next(l, &s, &err), 1, "%s", err.msg);
        char *got;
        size_t len;
        cr_assert_eq(lb_prompt_format(task, &s, &got, &len, &err), 0, "%s", err.msg);
        cr_assert_str_eq(got, cJSON_GetObjectItem(e, "prompt")->valuestring, "%s %s", task->name,
                         id);
        free(got);
        lb_sample_free(&s);
        lb_loader_close(l);
        cJSON_Delete(e);
        n++;
    }
    cr_assert_eq(n, 8);
    free(text);
    free(exp);
    free(data);
}

/* Context and input with NUL characters ("\u0000", as in 4 of the official
 * passage_retrieval_zh samples) are substituted whole: the prompt is the
 * template around every byte of them. */
Test(prompt, nul_characters_are_substituted_whole)
{
    char *path = tu_source("tests/data/datasets/nul/passage_retrieval_zh.jsonl");
    const lb_task *t = lb_task_find("passage_retrieval_zh");
    const char *tmpl = t->prompt, *ci = strstr(tmpl, "{context}"), *ii = strstr(tmpl, "{input}");
    cr_assert(ci && ii && ci < ii);
    kv_error err;
    lb_loader *l = lb_loader_open(path, NULL, &err);
    cr_assert(l, "%s", err.msg);
    lb_sample s;
    int n = 0;
    while (lb_loader_next(l, &s, &err) == 1) {
        cr_assert(memchr(s.context.p, '\0', s.context.n), "the test line has NULs");
        char *got;
        size_t len;
        cr_assert_eq(lb_prompt_format(t, &s, &got, &len, &err), 0, "%s", err.msg);
        size_t pre = (size_t)(ci - tmpl), mid = (size_t)(ii - ci) - 9, post = strlen(ii + 7);
        cr_assert_eq(len, pre + s.context.n + mid + s.input.n + post);
        cr_expect(memcmp(got, tmpl, pre) == 0);
        cr_expect(memcmp(got + pre, s.context.p, s.context.n) == 0);
        cr_expect(memcmp(got + pre + s.context.n, ci + 9, mid) == 0);
        cr_expect(memcmp(got + pre + s.context.n + mid, s.input.p, s.input.n) == 0);
        cr_expect(memcmp(got + len - post, ii + 7, post) == 0);
        free(got);
        lb_sample_free(&s);
        n++;
    }
    cr_expect_eq(n, 2);
    lb_loader_close(l);
    free(path);
}

Test(prompt, v2_cot_answer_step_needs_the_cot)
{
    lb_sample s = {.context = kv_str_c("c"),
                   .input = kv_str_c("q"),
                   .choices = {kv_str_c("a"), kv_str_c("b"), kv_str_c("c"), kv_str_c("d")}};
    char *got;
    size_t len;
    kv_error err;
    const lb_task *t = lb_task_find("v2_cot_ans");
    cr_assert_eq(lb_prompt_format(t, &s, &got, &len, &err), -1);
    cr_assert(strstr(err.msg, "$COT$"), "%s", err.msg);
    s.cot = kv_str_c(" step 1; so (B) \n");
    cr_assert_eq(lb_prompt_format(t, &s, &got, &len, &err), 0, "%s", err.msg);
    cr_assert(strstr(got, "Let’s think step by step: step 1; so (B)\n\nBased on the above"), "%s",
              got);
    free(got);
    /* A v1 record has no choices. */
    lb_sample v1 = {.context = kv_str_c("c"), .input = kv_str_c("q")};
    cr_assert_eq(lb_prompt_format(lb_task_find("v2"), &v1, &got, &len, &err), -1);
    cr_assert(strstr(err.msg, "choice_A"), "%s", err.msg);
}
