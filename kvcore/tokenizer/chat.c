#include "tokenizer/chat.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/utf8.h"
#include "util/strbuf.h"

typedef enum family { FAM_QWEN3, FAM_CHATML, FAM_LLAMA3 } family;

/* What the template's text says about how to render. */
typedef struct style {
    family fam;
    bool think_block;     /* chatml: "<think>\n\n</think>\n\n" on enable_thinking=false */
    bool grouped_tools;   /* chatml: tool results go in one user turn as <tool_response> */
    char *default_system; /* chatml: system prompt used when messages[0] is not system */
    bool knowledge_date;  /* llama3: Llama-3.1's system block */
    char *date;           /* llama3.1: its date_string default */
} style;

static void style_free(style *s)
{
    free(s->default_system);
    free(s->date);
}

/* ---- the output string: a kv_strbuf, checked for oom once at the end ---- */

typedef kv_strbuf out;

static void put(out *o, const char *s, size_t n)
{
    kv_strbuf_add(o, s, n);
}

static void puts_(out *o, const char *s)
{
    kv_strbuf_puts(o, s);
}

/* ---- reading the template ----------------------------------------------- */

/* The Jinja string literal starting at s (after its opening quote q), with
 * \n, \t, \\ and quote escapes undone, up to `end` (excluded); NULL when the
 * literal closes before `end` appears. */
static char *literal_until(const char *s, char q, const char *end)
{
    const char *stop = strstr(s, end);
    if (!stop)
        return NULL;
    out o = {0};
    puts_(&o, "");
    for (const char *p = s; p < stop; p++) {
        if (*p == q) {
            free(o.s);
            return NULL;
        }
        if (*p == '\\' && p + 1 < stop) {
            p++;
            char c = *p == 'n' ? '\n' : *p == 't' ? '\t' : *p;
            put(&o, &c, 1);
        } else {
            put(&o, p, 1);
        }
    }
    if (o.oom) {
        free(o.s);
        return NULL;
    }
    return o.s;
}

/* Qwen2's default system prompt: a literal '<|im_start|>system\nTEXT<|im_end|>'
 * (as opposed to one that concatenates messages[0]'s content). */
static char *default_system(const char *tpl)
{
    static const char head[] = "<|im_start|>system\\n";
    for (const char *p = strstr(tpl, head); p; p = strstr(p + 1, head)) {
        char q = p > tpl ? p[-1] : 0;
        if (q != '\'' && q != '"')
            continue;
        char *text = literal_until(p + strlen(head), q, "<|im_end|>");
        if (text)
            return text;
    }
    return NULL;
}

/* Llama-3.1's `set date_string = "26 Jul 2024"`. */
static char *date_default(const char *tpl)
{
    const char *p = strstr(tpl, "set date_string = ");
    if (!p)
        return NULL;
    p += strlen("set date_string = ");
    if (*p != '"' && *p != '\'')
        return NULL;
    char q = *p;
    const char *e = strchr(p + 1, q);
    return e ? strndup(p + 1, (size_t)(e - p - 1)) : NULL;
}

static int analyse(const kv_tokenizer *t, style *s, kv_error *err)
{
    memset(s, 0, sizeof *s);
    const char *tpl = kv_tokenizer_chat_template(t);
    if (!tpl)
        return kv_fail(err, "the model has no chat template (tokenizer_config.json has no "
                            "chat_template)");
    if (strstr(tpl, "<|start_header_id|>")) {
        s->fam = FAM_LLAMA3;
        if (strstr(tpl, "strftime_now"))
            return kv_fail(err, "chat template: a Llama-3 template that writes today's date "
                                "(strftime_now) is not supported: the prompt would change daily");
        if (strstr(tpl, "Cutting Knowledge Date")) {
            s->knowledge_date = true;
            s->date = date_default(tpl);
            if (!s->date)
                return kv_fail(err, "chat template: Llama-3.1 template without a date_string "
                                    "default is not supported");
        }
        return 0;
    }
    if (strstr(tpl, "<|im_start|>")) {
        /* The think rules must be the ones implemented here: Qwen3's, or the
         * empty block on enable_thinking=false alone. A template that thinks
         * otherwise (Qwen3-Thinking-2507 opens <think> itself) is refused. */
        bool no_think = strstr(tpl, "enable_thinking is defined and enable_thinking is false");
        if (strstr(tpl, "reasoning_content")) {
            if (!no_think || !strstr(tpl, "last_query_index"))
                return kv_fail(err, "chat template: a Qwen template with reasoning_content that "
                                    "is not Qwen3's is not supported");
            s->fam = FAM_QWEN3;
            return 0;
        }
        if (strstr(tpl, "<think>") && !no_think)
            return kv_fail(err, "chat template: a ChatML template with <think> rules other than "
                                "enable_thinking=false is not supported");
        s->fam = FAM_CHATML;
        s->think_block = no_think;
        s->grouped_tools = strstr(tpl, "<tool_response>") != NULL;
        s->default_system = default_system(tpl);
        return 0;
    }
    return kv_fail(err, "chat template of tokenizer_config.json is not a family kvbench knows "
                        "(Qwen3, ChatML/Qwen2, Llama-3)");
}

const char *kv_chat_family(const kv_tokenizer *t, kv_error *err)
{
    style s;
    int rc = analyse(t, &s, err);
    style_free(&s);
    if (rc != 0)
        return NULL;
    return s.fam == FAM_QWEN3 ? "qwen3" : s.fam == FAM_CHATML ? "chatml" : "llama3";
}

/* ---- Python string helpers the templates use ----------------------------- */

static bool is(const char *role, const char *want)
{
    return strcmp(role, want) == 0;
}

/* A view of part of a string. */
typedef struct span {
    const char *s;
    size_t n;
} span;

static span whole(const char *s)
{
    return (span){s, strlen(s)};
}

/* A message's content with its length: it may hold NUL bytes. */
static span content_of(const kv_chat_message *m)
{
    return m->content_len ? (span){m->content, m->content_len} : whole(m->content);
}

static bool starts_with(span v, const char *p)
{
    size_t k = strlen(p);
    return v.n >= k && memcmp(v.s, p, k) == 0;
}

static bool ends_with(span v, const char *p)
{
    size_t k = strlen(p);
    return v.n >= k && memcmp(v.s + v.n - k, p, k) == 0;
}

static span lstrip_nl(span v)
{
    while (v.n > 0 && v.s[0] == '\n')
        v.s++, v.n--;
    return v;
}

static span rstrip_nl(span v)
{
    while (v.n > 0 && v.s[v.n - 1] == '\n')
        v.n--;
    return v;
}

/* Jinja's trim is Python's str.strip(). */
static span trim(span v)
{
    size_t a, b;
    kv_utf8_py_strip(v.s, v.n, &a, &b);
    return (span){v.s + a, b - a};
}

/* The text after the last occurrence of sep in v (all of v when absent). */
static span after_last(span v, const char *sep)
{
    size_t k = strlen(sep);
    for (size_t i = v.n; i >= k; i--)
        if (memcmp(v.s + i - k, sep, k) == 0)
            return (span){v.s + i, v.n - i};
    return v;
}

/* The text before the first occurrence of sep in v (all of v when absent). */
static span before_first(span v, const char *sep)
{
    size_t k = strlen(sep);
    for (size_t i = 0; i + k <= v.n; i++)
        if (memcmp(v.s + i, sep, k) == 0)
            return (span){v.s, i};
    return v;
}

static void put_span(out *o, span v)
{
    put(o, v.s, v.n);
}

/* ---- the families ------------------------------------------------------- */

static void chatml_turn(out *o, const char *role, span content)
{
    puts_(o, "<|im_start|>");
    puts_(o, role);
    puts_(o, "\n");
    put_span(o, content);
    puts_(o, "<|im_end|>\n");
}

/* A run of tool results becomes one user turn of <tool_response> blocks. */
static void tool_turn(out *o, const kv_chat_message *m, size_t n, size_t i)
{
    if (i == 0 || !is(m[i - 1].role, "tool"))
        puts_(o, "<|im_start|>user");
    puts_(o, "\n<tool_response>\n");
    put_span(o, content_of(&m[i]));
    puts_(o, "\n</tool_response>");
    if (i + 1 == n || !is(m[i + 1].role, "tool"))
        puts_(o, "<|im_end|>\n");
}

static void generation_prompt(out *o, bool think_block, bool enable_thinking)
{
    puts_(o, "<|im_start|>assistant\n");
    if (think_block && !enable_thinking)
        puts_(o, "<think>\n\n</think>\n\n");
}

/* The index of the last real user query: tool results wrapped as
 * <tool_response> do not count (Qwen3's ns.last_query_index). */
static size_t last_query(const kv_chat_message *m, size_t n)
{
    for (size_t i = n; i-- > 0;)
        if (is(m[i].role, "user") && !(starts_with(content_of(&m[i]), "<tool_response>") &&
                                       ends_with(content_of(&m[i]), "</tool_response>")))
            return i;
    return n - 1;
}

static void qwen3_assistant(out *o, const kv_chat_message *m, size_t n, size_t i, size_t lastq)
{
    span content = content_of(&m[i]), reasoning = {"", 0};
    if (memmem(content.s, content.n, "</think>", 8)) {
        span all = content;
        content = lstrip_nl(after_last(all, "</think>"));
        reasoning = lstrip_nl(after_last(rstrip_nl(before_first(all, "</think>")), "<think>"));
    }
    puts_(o, "<|im_start|>assistant\n");
    if (i > lastq && (i + 1 == n || reasoning.n > 0)) {
        puts_(o, "<think>\n");
        put_span(o, rstrip_nl(lstrip_nl(reasoning)));
        puts_(o, "\n</think>\n\n");
        put_span(o, lstrip_nl(content));
    } else {
        put_span(o, content);
    }
    puts_(o, "<|im_end|>\n");
}

static void render_qwen3(out *o, const kv_chat_message *m, size_t n, bool gen, bool thinking)
{
    if (is(m[0].role, "system"))
        chatml_turn(o, "system", content_of(&m[0]));
    size_t lastq = last_query(m, n);
    for (size_t i = 0; i < n; i++) {
        if (is(m[i].role, "user") || (is(m[i].role, "system") && i > 0))
            chatml_turn(o, m[i].role, content_of(&m[i]));
        else if (is(m[i].role, "assistant"))
            qwen3_assistant(o, m, n, i, lastq);
        else if (is(m[i].role, "tool"))
            tool_turn(o, m, n, i);
    }
    if (gen)
        generation_prompt(o, true, thinking);
}

static void render_chatml(out *o, const style *s, const kv_chat_message *m, size_t n, bool gen,
                          bool thinking)
{
    if (s->default_system && !is(m[0].role, "system"))
        chatml_turn(o, "system", whole(s->default_system));
    for (size_t i = 0; i < n; i++) {
        if (s->grouped_tools && is(m[i].role, "tool"))
            tool_turn(o, m, n, i);
        else
            chatml_turn(o, m[i].role, content_of(&m[i]));
    }
    if (gen)
        generation_prompt(o, s->think_block, thinking);
}

static void llama3_turn(out *o, const char *role, span content)
{
    puts_(o, "<|start_header_id|>");
    puts_(o, role);
    puts_(o, "<|end_header_id|>\n\n");
    put_span(o, trim(content));
    puts_(o, "<|eot_id|>");
}

static void render_llama3(out *o, const style *s, const char *bos, const kv_chat_message *m,
                          size_t n, bool gen)
{
    puts_(o, bos ? bos : "");
    size_t first = 0;
    if (s->knowledge_date) { /* Llama-3.1: the system turn always comes first */
        span system = {"", 0};
        if (is(m[0].role, "system"))
            system = trim(content_of(&m[0])), first = 1;
        puts_(o, "<|start_header_id|>system<|end_header_id|>\n\n");
        puts_(o, "Cutting Knowledge Date: December 2023\nToday Date: ");
        puts_(o, s->date);
        puts_(o, "\n\n");
        put_span(o, system);
        puts_(o, "<|eot_id|>");
    }
    for (size_t i = first; i < n; i++)
        llama3_turn(o, m[i].role, content_of(&m[i]));
    if (gen)
        puts_(o, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

char *kv_chat_render(const kv_tokenizer *t, const kv_chat_message *msgs, size_t n,
                     bool add_generation_prompt, bool enable_thinking, kv_error *err)
{
    size_t len;
    return kv_chat_render_len(t, msgs, n, add_generation_prompt, enable_thinking, &len, err);
}

char *kv_chat_render_len(const kv_tokenizer *t, const kv_chat_message *msgs, size_t n,
                         bool add_generation_prompt, bool enable_thinking, size_t *len,
                         kv_error *err)
{
    if (n == 0) {
        kv_fail(err, "chat template: no messages to render");
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        if (!msgs[i].role || !msgs[i].content) {
            kv_fail(err, "chat template: message %zu has no role or no content", i);
            return NULL;
        }
    style s;
    if (analyse(t, &s, err) != 0) {
        style_free(&s);
        return NULL;
    }
    for (size_t i = 0; s.fam == FAM_LLAMA3 && i < n; i++)
        if (is(msgs[i].role, "tool") || is(msgs[i].role, "ipython")) {
            style_free(&s);
            kv_fail(err, "chat template: Llama-3 tool messages (message %zu) are not supported", i);
            return NULL;
        }
    out o = {0};
    puts_(&o, "");
    if (s.fam == FAM_QWEN3)
        render_qwen3(&o, msgs, n, add_generation_prompt, enable_thinking);
    else if (s.fam == FAM_CHATML)
        render_chatml(&o, &s, msgs, n, add_generation_prompt, enable_thinking);
    else
        render_llama3(&o, &s, kv_tokenizer_bos_token(t), msgs, n, add_generation_prompt);
    style_free(&s);
    if (o.oom) {
        free(o.s);
        kv_fail(err, "chat template: out of memory");
        return NULL;
    }
    *len = o.len;
    return o.s;
}
