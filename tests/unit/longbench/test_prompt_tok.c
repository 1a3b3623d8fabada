/* datasets/prompt with a tokenizer: pred.py's middle truncation and the chat
 * rules of each protocol.
 *
 * - On the real Qwen3 tokenizer (tests/data/tokenizer/qwen3): byte-for-byte
 *   equality with tests/data/datasets/prompts_expected.jsonl, made by
 *   make_expected.py beside it from upstream's dataset2prompt.json and the
 *   Python reference tokenizer (NUL characters included:
 *   tests/data/datasets/nul/).
 * - On the committed toy tokenizer (always): the rules as invariants. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "longbench/jsonl.h"
#include "util/jsonstr.h"
#include "longbench/prompt.h"
#include "support/testutil.h"

/* The sample with _id `id` from path (via the loader's ids selection). */
static lb_sample load_one(const char *path, const char *id)
{
    kv_str ids[] = {kv_str_c(id)};
    lb_loader_options o = {.ids = ids, .n_ids = 1};
    kv_error err;
    lb_loader *l = lb_loader_open(path, &o, &err);
    cr_assert(l, "%s", err.msg);
    lb_sample s;
    cr_assert_eq(lb_loader_next(l, &s, &err), 1, "%s", err.msg);
    lb_loader_close(l);
    return s;
}

static const char *str(cJSON *o, const char *key)
{
    cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    cr_assert(cJSON_IsString(v), "expected file: no %s", key);
    return v->valuestring;
}

Test(prompt_tok, qwen3_matches_the_reference_byte_for_byte)
{
    char *tokdir = tu_data("tokenizer/qwen3");
    kv_error err;
    kv_tokenizer *t = kv_tokenizer_load(tokdir, &err);
    cr_assert(t, "%s", err.msg);
    char *exp_path = tu_source("tests/data/datasets/prompts_expected.jsonl");
    lb_jsonl *r = lb_jsonl_open(exp_path);
    cr_assert(r);
    int n = 0, truncated = 0, chat = 0, nuls = 0;
    while (lb_jsonl_next(r) == 1) {
        cJSON *e = cJSON_Parse(r->line);
        cr_assert(e);
        const char *file = str(e, "file");
        char *path = tu_source(file);
        lb_sample s = load_one(path, str(e, "id"));
        lb_prompt_options o = {.max_length =
                                   (long)cJSON_GetObjectItem(e, "max_length")->valuedouble};
        cr_assert_eq(lb_protocol_parse(str(e, "protocol"), &o.protocol, &err), 0);
        lb_prompt p;
        cr_assert_eq(lb_prompt_build(lb_task_find(str(e, "task")), &s, t, &o, &p, &err), 0, "%s",
                     err.msg);
        /* the expected prompt with its length: it may hold NULs, which cJSON cuts */
        kv_error jerr;
        json_t *exact = kv_json_load(r->line, r->len, &jerr);
        cr_assert(exact, "%s", jerr.msg);
        const json_t *want = json_object_get(exact, "prompt");
        size_t want_n = json_string_length(want);
        cr_assert_eq(p.len, want_n, "%s %s %s: %zu bytes, want %zu", file, s.id.p,
                     str(e, "protocol"), p.len, want_n);
        cr_assert(memcmp(p.text, json_string_value(want), p.len) == 0, "%s %s: prompt differs",
                  file, s.id.p);
        nuls += memchr(p.text, '\0', p.len) != NULL;
        json_decref(exact);
        cr_assert_eq(p.n_ids, (size_t)cJSON_GetObjectItem(e, "n_tokens")->valuedouble);
        cr_assert_eq(p.truncated, cJSON_IsTrue(cJSON_GetObjectItem(e, "truncated")));
        cr_assert_eq(p.chat, cJSON_IsTrue(cJSON_GetObjectItem(e, "chat")));
        truncated += p.truncated;
        chat += p.chat;
        n++;
        lb_prompt_free(&p);
        lb_sample_free(&s);
        free(path);
        cJSON_Delete(e);
    }
    cr_assert_geq(n, 30);
    cr_assert_geq(nuls, 8, "prompts with NUL characters are covered");
    cr_assert(truncated > 0 && truncated < n, "both truncated and whole prompts are covered");
    cr_assert(chat > 0 && chat < n, "both chat and plain prompts are covered");
    lb_jsonl_close(r);
    kv_tokenizer_free(t);
    free(exp_path);
    free(tokdir);
}

/* ---- invariants on the committed toy tokenizer ---------------------------------- */

static kv_tokenizer *toy(void)
{
    char *dir = tu_source("tests/data/tokenizer/toy");
    kv_error err;
    kv_tokenizer *t = kv_tokenizer_load(dir, &err);
    cr_assert(t, "%s", err.msg);
    free(dir);
    return t;
}

static lb_sample sample_of(const char *task)
{
    char rel[128];
    snprintf(rel, sizeof rel, "datasets/samples/%s.jsonl", task);
    char *path = tu_source(rel);
    kv_error err;
    lb_loader *l = lb_loader_open(path, NULL, &err);
    lb_sample s;
    cr_assert_eq(lb_loader_next(l, &s, &err), 1, "%s", err.msg);
    lb_loader_close(l);
    free(path);
    return s;
}

/* pred.py's cut computed here from the tokenizer directly. */
static char *cut(kv_tokenizer *t, const char *text, long max_length, size_t *n_raw)
{
    int32_t *ids;
    kv_error err;
    cr_assert_eq(kv_tokenizer_encode(t, text, strlen(text), &ids, n_raw, &err), 0);
    if (*n_raw <= (size_t)max_length) {
        free(ids);
        return strdup(text);
    }
    size_t half = (size_t)max_length / 2;
    /* Python slices: ids[:half] + ids[-half:], where ids[-0:] is all of ids */
    size_t tail = half ? *n_raw - half : 0;
    char *a = kv_tokenizer_decode(t, ids, half, true);
    char *b = kv_tokenizer_decode(t, ids + tail, *n_raw - tail, true);
    char *out = NULL;
    cr_assert_neq(asprintf(&out, "%s%s", a, b), -1);
    free(a);
    free(b);
    free(ids);
    return out;
}

static const char chat_head[] = "<|im_start|>user\n";
static const char chat_tail[] = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";

static void check(kv_tokenizer *t, const char *task_name, lb_protocol proto, long max_length,
                  bool want_chat)
{
    const lb_task *task = lb_task_find(task_name);
    lb_sample s = sample_of(task_name);
    char *formatted;
    size_t flen, n_raw;
    kv_error err;
    cr_assert_eq(lb_prompt_format(task, &s, &formatted, &flen, &err), 0);
    char *inner = cut(t, formatted, max_length ? max_length : 1L << 40, &n_raw);
    lb_prompt_options o = {.protocol = proto, .max_length = max_length};
    lb_prompt p;
    cr_assert_eq(lb_prompt_build(task, &s, t, &o, &p, &err), 0, "%s", err.msg);
    cr_assert_eq(p.n_raw, n_raw);
    cr_assert_eq(p.truncated, max_length > 0 && n_raw > (size_t)max_length);
    cr_assert_eq(p.chat, want_chat, "%s under %s", task_name, lb_protocol_name(proto));
    char *want = NULL;
    cr_assert_neq(
        asprintf(&want, "%s%s%s", want_chat ? chat_head : "", inner, want_chat ? chat_tail : ""),
        -1);
    cr_assert_str_eq(p.text, want, "truncation happens before the chat template");
    int32_t *ids;
    size_t n;
    cr_assert_eq(kv_tokenizer_encode(t, p.text, p.len, &ids, &n, &err), 0);
    cr_assert_eq(p.n_ids, n, "ids are the final text re-tokenised");
    cr_assert(memcmp(p.ids, ids, n * sizeof *ids) == 0);
    free(ids);
    free(want);
    free(inner);
    free(formatted);
    lb_prompt_free(&p);
    lb_sample_free(&s);
}

Test(prompt_tok, truncation_and_chat_rules_per_protocol)
{
    kv_tokenizer *t = toy();
    /* longbench: chat for qasper, not for the few-shot and code tasks. */
    check(t, "qasper", LB_PROTOCOL_LONGBENCH, 24, true);
    check(t, "trec", LB_PROTOCOL_LONGBENCH, 24, false);
    check(t, "samsum", LB_PROTOCOL_LONGBENCH, 24, false);
    check(t, "lcc", LB_PROTOCOL_LONGBENCH, 0, false);
    /* nncf: chat everywhere. */
    check(t, "trec", LB_PROTOCOL_NNCF, 24, true);
    check(t, "lcc", LB_PROTOCOL_NNCF, 0, true);
    check(t, "qasper", LB_PROTOCOL_NNCF, 25, true); /* odd budget: int(25/2) per side */
    /* max_length 1: half = 0, and pred.py's ids[:0] + ids[-0:] is the whole prompt */
    check(t, "qasper", LB_PROTOCOL_LONGBENCH, 1, true);
    check(t, "trec", LB_PROTOCOL_LONGBENCH, 1, false);
    /* Under budget nothing is cut. */
    check(t, "qasper", LB_PROTOCOL_LONGBENCH, 1000000, true);
    kv_tokenizer_free(t);
}

Test(prompt_tok, truncated_prompt_keeps_both_ends)
{
    kv_tokenizer *t = toy();
    lb_sample s = sample_of("qasper");
    lb_prompt_options o = {.protocol = LB_PROTOCOL_LONGBENCH, .max_length = 40};
    lb_prompt p;
    kv_error err;
    cr_assert_eq(lb_prompt_build(lb_task_find("qasper"), &s, t, &o, &p, &err), 0, "%s", err.msg);
    cr_assert(p.truncated);
    cr_assert(strstr(p.text, "You are given a scientific"), "%s", p.text);
    cr_assert(strstr(p.text, "Answer:<|im_end|>"), "%s", p.text);
    cr_assert_null(strstr(p.text, "Method"), "the middle (the article) is cut: %s", p.text);
    lb_prompt_free(&p);
    lb_sample_free(&s);
    kv_tokenizer_free(t);
}

/* pred.py: samsum adds the id of "\n" to EOS; NNCF adds it on every task. */
Test(prompt_tok, stop_tokens_per_protocol)
{
    char *dir = tu_data("tokenizer/qwen3");
    kv_error err;
    kv_tokenizer *t = kv_tokenizer_load(dir, &err);
    cr_assert(t, "%s", err.msg);
    int32_t out[2];
    const lb_task *qasper = lb_task_find("qasper"), *samsum = lb_task_find("samsum");
    cr_assert_eq(lb_stop_tokens(t, qasper, LB_PROTOCOL_LONGBENCH, out), 1);
    cr_assert_eq(out[0], 151645, "<|im_end|>");
    cr_assert_eq(lb_stop_tokens(t, samsum, LB_PROTOCOL_LONGBENCH, out), 2);
    cr_assert_eq(out[1], 198, "Qwen's single-newline token (docs/longbench.md)");
    cr_assert_eq(lb_stop_tokens(t, qasper, LB_PROTOCOL_NNCF, out), 2);
    cr_assert_eq(out[1], 198);
    kv_tokenizer_free(t);
    free(dir);
}

Test(prompt_tok, sample_paths)
{
    char *dir = tu_mkdtemp();
    char *p = lb_sample_path(dir, lb_task_find("trec"));
    char *want = NULL;
    cr_assert_neq(asprintf(&want, "%s/trec.jsonl", dir), -1);
    cr_assert_str_eq(p, want, "nothing there: the plain name, so the error names it");
    free(p);
    free(want);
    char *data = NULL, *file = NULL;
    cr_assert_neq(asprintf(&data, "%s/data", dir), -1);
    cr_assert_neq(asprintf(&file, "%s/data/trec.jsonl", dir), -1);
    mkdir(data, 0777);
    fclose(fopen(file, "w"));
    p = lb_sample_path(dir, lb_task_find("trec"));
    cr_assert_str_eq(p, file, "data.zip's layout");
    free(p);
    p = lb_sample_path(dir, lb_task_find("v2_rag"));
    cr_assert(strstr(p, "/data.json"));
    free(p);
    tu_rmtree(dir);
    free(dir);
    free(data);
    free(file);
}
