/* kvcore/chat: chat templates rendered as transformers renders them. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tokenizer/chat.h"
#include "util/file.h"
#include "support/testutil.h"
#include "tokenizer/tokenizer.h"

static kv_tokenizer *load_or_die(const char *dir)
{
    kv_error err = {{0}};
    kv_tokenizer *t = kv_tokenizer_load(dir, &err);
    cr_assert(t, "loading %s: %s", dir, err.msg);
    return t;
}

/* The tokenizer of a folder under tests/data. */
static kv_tokenizer *load_data(const char *rel)
{
    char *dir = tu_data(rel);
    kv_tokenizer *t = load_or_die(dir);
    free(dir);
    return t;
}

static char *render(const kv_tokenizer *t, const kv_chat_message *m, size_t n, bool gen, bool think)
{
    kv_error err = {{0}};
    char *s = kv_chat_render(t, m, n, gen, think, &err);
    cr_assert(s, "%s", err.msg);
    return s;
}

/* The rendering of a reference case: {"messages", "add_generation_prompt",
 * ["enable_thinking",] ...}. */
static char *render_case(const kv_tokenizer *t, const cJSON *j)
{
    const cJSON *msgs = cJSON_GetObjectItem(j, "messages"), *e;
    size_t n = (size_t)cJSON_GetArraySize(msgs), i = 0;
    kv_chat_message *m = calloc(n, sizeof *m);
    cJSON_ArrayForEach(e, msgs)
    {
        m[i].role = cJSON_GetObjectItem(e, "role")->valuestring;
        m[i++].content = cJSON_GetObjectItem(e, "content")->valuestring;
    }
    bool gen = cJSON_IsTrue(cJSON_GetObjectItem(j, "add_generation_prompt"));
    const cJSON *think = cJSON_GetObjectItem(j, "enable_thinking");
    char *text = render(t, m, n, gen, think ? cJSON_IsTrue(think) : true);
    free(m);
    return text;
}

/* ---- Qwen3: every case of tests/data/tokenizer/cases/chat_ref.jsonl ----- */

static void check_chat_case(const kv_tokenizer *t, const cJSON *j)
{
    const char *id = cJSON_GetObjectItem(j, "id")->valuestring;
    char *text = render_case(t, j);
    cr_expect_str_eq(text, cJSON_GetObjectItem(j, "text")->valuestring, "%s: text differs", id);
    int32_t *ids;
    size_t n_ids;
    kv_error err = {{0}};
    cr_assert_eq(kv_tokenizer_encode(t, text, strlen(text), &ids, &n_ids, &err), 0, "%s", err.msg);
    const cJSON *ref = cJSON_GetObjectItem(j, "ids"), *e;
    bool same = n_ids == (size_t)cJSON_GetArraySize(ref);
    size_t i = 0;
    cJSON_ArrayForEach(e, ref) same = same && ids[i++] == e->valueint;
    cr_expect(same, "%s: ids differ", id);
    free(ids);
    free(text);
}

/* Every line of tests/data/tokenizer/chat/NAME.jsonl, {"messages",
 * "add_generation_prompt", ["enable_thinking",] "text"}, renders to its text. */
static void check_render_file(const kv_tokenizer *t, const char *name)
{
    char rel[256];
    snprintf(rel, sizeof rel, "tokenizer/chat/%s.jsonl", name);
    char *path = tu_data(rel), *data = tu_slurp(path, NULL);
    int checked = 0;
    for (char *line = strtok(data, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        cr_assert(j, "%s: bad JSON line", path);
        char *text = render_case(t, j);
        cr_expect_str_eq(text, cJSON_GetObjectItem(j, "text")->valuestring, "%s: %s", path,
                         cJSON_GetObjectItem(j, "id")->valuestring);
        free(text);
        cJSON_Delete(j);
        checked++;
    }
    cr_expect_geq(checked, 100, "%s: only %d cases", path, checked);
    free(data);
    free(path);
}

Test(chat, random_conversations_match_jinja_qwen3)
{
    /* tests/data/tokenizer/chat/NAME.jsonl: rendered by Jinja2 as transformers
     * sets it up (tests/tools/render_chat_jinja.py) */
    kv_tokenizer *t = load_data("tokenizer/qwen3");
    check_render_file(t, "qwen3_random");
    kv_tokenizer_free(t);
}

Test(chat, random_conversations_match_jinja_toy)
{
    kv_tokenizer *t = load_data("tokenizer/toy");
    check_render_file(t, "toy");
    kv_tokenizer_free(t);
}

Test(chat, qwen3_matches_transformers)
{
    char *cases = tu_data("tokenizer/cases/chat_ref.jsonl");
    kv_tokenizer *t = load_data("tokenizer/qwen3");
    kv_error err = {{0}};
    cr_expect_str_eq(kv_chat_family(t, &err), "qwen3");
    char *data = tu_slurp(cases, NULL);
    int checked = 0;
    for (char *line = strtok(data, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        cr_assert(j);
        check_chat_case(t, j);
        cJSON_Delete(j);
        checked++;
    }
    cr_expect_geq(checked, 40);
    free(data);
    kv_tokenizer_free(t);
    free(cases);
}

Test(chat, qwen3_keeps_reasoning_of_the_turn_after_the_last_query)
{
    /* An assistant turn after the last user message keeps its <think> block;
     * earlier ones lose it (transformers' rendering of the Qwen3 template). */
    kv_tokenizer *t = load_data("tokenizer/qwen3");
    kv_chat_message m[] = {{"user", "Q1", 0},
                           {"assistant", "<think>\nr1\n</think>\n\nA1", 0},
                           {"user", "Q2", 0},
                           {"assistant", "<think>\n\nr2\n\n</think>\n\n\nA2", 0}};
    char *s = render(t, m, 4, false, true);
    cr_expect_str_eq(s, "<|im_start|>user\nQ1<|im_end|>\n"
                        "<|im_start|>assistant\nA1<|im_end|>\n"
                        "<|im_start|>user\nQ2<|im_end|>\n"
                        "<|im_start|>assistant\n<think>\nr2\n</think>\n\nA2<|im_end|>\n");
    free(s);
    kv_chat_message plain[] = {{"user", "Q", 0}, {"assistant", "A", 0}};
    s = render(t, plain, 2, false, true);
    cr_expect_str_eq(s, "<|im_start|>user\nQ<|im_end|>\n"
                        "<|im_start|>assistant\n<think>\n\n</think>\n\nA<|im_end|>\n");
    free(s);
    kv_tokenizer_free(t);
}

/* ---- other families, on the toy tokenizer with a given template ------- */

/* The toy tokenizer.json with a tokenizer_config.json holding this
 * template and bos_token, loaded from a folder made for it (removed once
 * loaded). */
static kv_tokenizer *load_with_template(const char *tpl, const char *bos)
{
    char *dir = tu_mkdtemp();
    char *src = tu_source("tests/data/tokenizer/toy/tokenizer.json");
    char *dst = kv_path_join(dir, "tokenizer.json");
    cr_assert_eq(symlink(src, dst), 0);
    cJSON *cfg = cJSON_CreateObject();
    cJSON_AddStringToObject(cfg, "chat_template", tpl);
    if (bos)
        cJSON_AddStringToObject(cfg, "bos_token", bos);
    char *text = cJSON_Print(cfg), *path = kv_path_join(dir, "tokenizer_config.json");
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    free(path);
    free(text);
    cJSON_Delete(cfg);
    free(dst);
    free(src);
    kv_tokenizer *t = load_or_die(dir);
    tu_rmtree(dir);
    free(dir);
    return t;
}

Test(chat, toy_template_of_the_tiny_models)
{
    kv_tokenizer *t = load_data("tokenizer/toy");
    kv_chat_message m[] = {{"system", "Be brief.", 0}, {"user", "Hi", 0}};
    char *s = render(t, m, 2, true, false);
    cr_expect_str_eq(s, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                        "<|im_start|>assistant\n<think>\n\n</think>\n\n");
    free(s);
    s = render(t, m + 1, 1, true, true);
    cr_expect_str_eq(s, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    free(s);
    kv_tokenizer_free(t);
}

Test(chat, qwen2_default_system_prompt)
{
    const char *tpl =
        "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
        "'<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}{{'<|im_"
        "start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor "
        "%}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
    kv_tokenizer *t = load_with_template(tpl, NULL);
    kv_chat_message m[] = {{"user", "Hi", 0}};
    char *s = render(t, m, 1, true, false);
    cr_expect_str_eq(s, "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    free(s);
    kv_chat_message sys[] = {{"system", "S", 0}, {"user", "Hi", 0}};
    s = render(t, sys, 2, false, true);
    cr_expect_str_eq(s, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
    free(s);
    kv_tokenizer_free(t);
}

Test(chat, llama3_headers_and_trimmed_content)
{
    const char *tpl =
        "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
        "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] "
        "| trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}"
        "{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
        "'<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";
    kv_tokenizer *t = load_with_template(tpl, "<|begin_of_text|>");
    kv_error err = {{0}};
    cr_expect_str_eq(kv_chat_family(t, &err), "llama3");
    kv_chat_message m[] = {{"system", " S \n", 0}, {"user", "\t Hi \xE3\x80\x80", 0}};
    char *s = render(t, m, 2, true, true);
    cr_expect_str_eq(s, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
                        "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                        "<|start_header_id|>assistant<|end_header_id|>\n\n");
    free(s);
    kv_tokenizer_free(t);
}

/* The same with a committed tokenizer_config.json
 * (tests/data/tokenizer/chat/NAME_config.json). */
static kv_tokenizer *load_with_config(const char *name)
{
    char rel[256];
    snprintf(rel, sizeof rel, "tests/data/tokenizer/chat/%s_config.json", name);
    char *cfg_path = tu_source(rel);
    char *text = tu_slurp(cfg_path, NULL);
    cJSON *cfg = cJSON_Parse(text);
    const cJSON *bos = cJSON_GetObjectItem(cfg, "bos_token");
    kv_tokenizer *t = load_with_template(cJSON_GetObjectItem(cfg, "chat_template")->valuestring,
                                         cJSON_IsString(bos) ? bos->valuestring : NULL);
    cJSON_Delete(cfg);
    free(text);
    free(cfg_path);
    return t;
}

Test(chat, random_conversations_match_jinja_qwen2_and_llama3)
{
    /* The templates in tests/data/tokenizer/chat/NAME_config.json are written
     * after Qwen2-Instruct's, Llama-3-Instruct's and Llama-3.1-Instruct's
     * (without tools); the renderings are Jinja2's. */
    static const char *const names[] = {"qwen2", "llama3", "llama31"};
    static const char *const families[] = {"chatml", "llama3", "llama3"};
    for (int i = 0; i < 3; i++) {
        kv_tokenizer *t = load_with_config(names[i]);
        kv_error err = {{0}};
        cr_expect_str_eq(kv_chat_family(t, &err), families[i]);
        check_render_file(t, names[i]);
        kv_tokenizer_free(t);
    }
}

Test(chat, llama3_tool_messages_are_refused)
{
    kv_tokenizer *t = load_with_config("llama31");
    kv_chat_message m[] = {{"user", "Hi", 0}, {"tool", "{}", 0}};
    kv_error err = {{0}};
    cr_expect_null(kv_chat_render(t, m, 2, true, true, &err));
    cr_expect(strstr(err.msg, "tool messages"), "%s", err.msg);
    kv_tokenizer_free(t);
}

Test(chat, unknown_template_or_no_template_is_an_error)
{
    /* a Qwen3-Thinking-2507-like template: reasoning_content, no enable_thinking */
    kv_tokenizer *tt = load_with_template("{%- for message in messages %}{{ '<|im_start|>' + "
                                       "message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
                                       "{%- set r = message.reasoning_content %}{%- endfor %}"
                                       "{{- '<|im_start|>assistant\\n<think>\\n' }}",
                                       NULL);
    kv_chat_message hi[] = {{"user", "Hi", 0}};
    kv_error e = {{0}};
    cr_expect_null(kv_chat_render(tt, hi, 1, true, true, &e));
    cr_expect(strstr(e.msg, "reasoning_content"), "%s", e.msg);
    kv_tokenizer_free(tt);

    kv_tokenizer *t = load_with_template("{{ messages[0].content }}", NULL);
    kv_chat_message m[] = {{"user", "Hi", 0}};
    kv_error err = {{0}};
    cr_expect_null(kv_chat_render(t, m, 1, true, true, &err));
    cr_expect(strstr(err.msg, "not a family kvbench knows"), "%s", err.msg);
    kv_tokenizer_free(t);

    t = load_data("tokenizer/bytes");
    cr_expect_null(kv_chat_render(t, m, 1, true, true, &err));
    cr_expect(strstr(err.msg, "no chat template"), "%s", err.msg);
    cr_expect_null(kv_chat_render(t, m, 0, true, true, &err), "no messages");
    kv_tokenizer_free(t);
}
