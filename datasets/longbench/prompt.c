#include "longbench/prompt.h"
#include "util/strbuf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/chat.h"
#include "util/utf8.h"

int lb_protocol_parse(const char *name, lb_protocol *out, kv_error *err)
{
    if (strcmp(name, "longbench") == 0)
        *out = LB_PROTOCOL_LONGBENCH;
    else if (strcmp(name, "nncf") == 0)
        *out = LB_PROTOCOL_NNCF;
    else
        return kv_fail(err, "unknown protocol \"%s\" (known: longbench, nncf)", name);
    return 0;
}

const char *lb_protocol_name(lb_protocol p)
{
    return p == LB_PROTOCOL_NNCF ? "nncf" : "longbench";
}

bool lb_protocol_chat(lb_protocol p, const lb_task *task)
{
    return p == LB_PROTOCOL_NNCF ? true : task->chat;
}

bool lb_protocol_newline_stop(lb_protocol p, const lb_task *task)
{
    return p == LB_PROTOCOL_NNCF ? true : task->newline_stop;
}

size_t lb_stop_tokens(const kv_tokenizer *t, const lb_task *task, lb_protocol p, int32_t out[2])
{
    size_t n = 0;
    int32_t eos = kv_tokenizer_eos_id(t);
    if (eos >= 0)
        out[n++] = eos;
    int32_t *ids = NULL;
    size_t k = 0;
    if (lb_protocol_newline_stop(p, task) && kv_tokenizer_encode(t, "\n", 1, &ids, &k, NULL) == 0 &&
        k > 0 && ids[k - 1] != eos)
        out[n++] = ids[k - 1];
    free(ids);
    return n;
}

/* ---- template substitution -------------------------------------------------- */


/* The value of field `name` (of length n) in a v1 record, or NULL. */
static const kv_str *field(const lb_sample *s, const char *name, size_t n)
{
    if (n == 7 && memcmp(name, "context", 7) == 0)
        return &s->context;
    if (n == 5 && memcmp(name, "input", 5) == 0)
        return &s->input;
    return NULL;
}

int lb_template_check(const char *template, char *msg, size_t n)
{
    const lb_sample none = {0}; /* field() answers which names are fields */
    bool context = false;
    for (const char *t = template; (t = strpbrk(t, "{}"));) {
        if (t[0] == t[1]) { /* "{{" or "}}" */
            t += 2;
            continue;
        }
        const char *close = t[0] == '{' ? strchr(t, '}') : NULL;
        if (!close || !field(&none, t + 1, (size_t)(close - t - 1)))
            return snprintf(msg, n,
                            "unknown placeholder near \"%.20s\": a template has {context} and "
                            "{input} ({{ and }} for a brace)",
                            t),
                   -1;
        context |= close - t - 1 == 7;
        t = close + 1;
    }
    if (!context)
        return snprintf(msg, n,
                        "has no {context} placeholder: the long text the cache compresses goes "
                        "there"),
               -1;
    return 0;
}

static int format_braces(const lb_task *task, const lb_sample *s, kv_strbuf *out, kv_error *err)
{
    const char *t = task->prompt;
    while (*t) {
        size_t lit = strcspn(t, "{}");
        if (kv_strbuf_add(out, t, lit) < 0)
            return kv_fail(err, "out of memory building a %s prompt", task->name);
        t += lit;
        if (!*t)
            break;
        if (t[0] == t[1]) { /* "{{" or "}}": a literal brace */
            if (kv_strbuf_add(out, t, 1) < 0)
                return kv_fail(err, "out of memory building a %s prompt", task->name);
            t += 2;
            continue;
        }
        const char *close = t[0] == '{' ? strchr(t, '}') : NULL;
        const kv_str *value = close ? field(s, t + 1, (size_t)(close - t - 1)) : NULL;
        if (!value)
            return kv_fail(err,
                           "task %s: its template has a placeholder other than "
                           "{context} and {input} near \"%.20s\"",
                           task->name, t);
        if (kv_strbuf_add(out, value->p, value->n) < 0)
            return kv_fail(err, "out of memory building a %s prompt", task->name);
        t = close + 1;
    }
    return 0;
}

/* ---- LongBench v2: $DOC$ $Q$ $C_A$..$C_D$ $COT$ ------------------------------------ */

/* Python's text.replace(key, value): every occurrence, left to right. */
static int replace_all(kv_strbuf *text, const char *key, const char *value, size_t vlen)
{
    kv_strbuf out = {0};
    size_t klen = strlen(key);
    const char *p = text->s, *end = text->s + text->len, *hit;
    int rc = kv_strbuf_add(&out, "", 0);
    while (rc == 0 && (hit = memmem(p, (size_t)(end - p), key, klen))) {
        kv_strbuf_add(&out, p, (size_t)(hit - p));
        rc = kv_strbuf_add(&out, value, vlen); /* fails too when the first add did */
        p = hit + klen;
    }
    if (rc == 0)
        rc = kv_strbuf_add(&out, p, (size_t)(end - p));
    free(text->s);
    *text = out;
    return rc;
}

/* v2 pred.py: template.replace('$DOC$', context.strip()).replace('$Q$', question.strip())
 * .replace('$C_A$', choice_A.strip()) ... ; the CoT answer step also replaces $COT$. */
static int format_dollars(const lb_task *task, const lb_sample *s, kv_strbuf *out, kv_error *err)
{
    if (!s->choices[0].p || !s->choices[1].p || !s->choices[2].p || !s->choices[3].p)
        return kv_fail(err, "task %s needs LongBench v2 records (choice_A..choice_D)", task->name);
    bool wants_cot = strstr(task->prompt, "$COT$") != NULL;
    if (wants_cot && !s->cot.p)
        return kv_fail(err, "task %s needs the output of the v2_cot step ($COT$)", task->name);
    const char *keys[] = {"$DOC$", "$Q$", "$C_A$", "$C_B$", "$C_C$", "$C_D$", "$COT$"};
    const kv_str values[] = {s->context,    s->input,      s->choices[0], s->choices[1],
                             s->choices[2], s->choices[3], s->cot};
    if (kv_strbuf_add(out, task->prompt, strlen(task->prompt)) < 0)
        return kv_fail(err, "out of memory building a %s prompt", task->name);
    for (int i = 0; i < 7; i++) {
        if (i == 6 && !wants_cot)
            break;
        size_t a, b; /* v2's pred.py strips every field */
        kv_utf8_py_strip(values[i].p, values[i].n, &a, &b);
        if (replace_all(out, keys[i], values[i].p + a, b - a) < 0)
            return kv_fail(err, "out of memory building a %s prompt", task->name);
    }
    return 0;
}

int lb_prompt_format(const lb_task *task, const lb_sample *s, char **text, size_t *len,
                     kv_error *err)
{
    kv_strbuf out = {0};
    if (kv_strbuf_add(&out, "", 0) < 0) /* an empty prompt is still a string */
        return kv_fail(err, "out of memory building a %s prompt", task->name);
    int rc = task->template_kind == LB_TEMPLATE_DOLLARS ? format_dollars(task, s, &out, err)
                                                        : format_braces(task, s, &out, err);
    if (rc < 0) {
        free(out.s);
        return -1;
    }
    *text = out.s;
    *len = out.len;
    return 0;
}

/* ---- truncation and chat ------------------------------------------------------ */

void lb_prompt_free(lb_prompt *p)
{
    if (!p)
        return;
    free(p->text);
    free(p->ids);
    memset(p, 0, sizeof *p);
}

/* pred.py: half = int(max_length/2); prompt = decode(ids[:half]) + decode(ids[-half:]),
 * both with skip_special_tokens=True. v2's pred.py keeps ids[-max_len//2:], which
 * in Python is one more token when max_len is odd. Replaces *text. */
static int cut_middle(const kv_tokenizer *t, const int32_t *ids, size_t n, long max_length, bool v2,
                      char **text, size_t *len, kv_error *err)
{
    size_t half = (size_t)max_length / 2, tail_n = v2 ? (size_t)(max_length + 1) / 2 : half;
    if (tail_n == 0) /* max_length 1: Python's ids[-0:] is the whole list, not none of it */
        tail_n = n;
    size_t head_n = 0, tail_len = 0;
    char *head = kv_tokenizer_decode_len(t, ids, half, true, &head_n);
    char *tail = kv_tokenizer_decode_len(t, ids + n - tail_n, tail_n, true, &tail_len);
    kv_strbuf joined = {0};
    kv_strbuf_add(&joined, head ? head : "", head_n);
    int rc = head && tail && kv_strbuf_add(&joined, tail, tail_len) == 0
                 ? 0
                 : kv_fail(err, "out of memory truncating a prompt");
    free(head);
    free(tail);
    if (rc == 0) {
        free(*text);
        *text = joined.s;
        *len = joined.len;
    } else {
        kv_strbuf_free(&joined);
    }
    return rc;
}

static int apply_chat(const kv_tokenizer *t, bool enable_thinking, char **text, size_t *len,
                      kv_error *err)
{
    kv_chat_message user = {.role = "user", .content = *text, .content_len = *len};
    size_t chat_len;
    char *chat = kv_chat_render_len(t, &user, 1, true, enable_thinking, &chat_len, err);
    if (!chat)
        return -1;
    free(*text);
    *text = chat;
    *len = chat_len;
    return 0;
}

int lb_prompt_build(const lb_task *task, const lb_sample *s, const kv_tokenizer *t,
                    const lb_prompt_options *opts, lb_prompt *p, kv_error *err)
{
    memset(p, 0, sizeof *p);
    if (lb_prompt_format(task, s, &p->text, &p->len, err) < 0)
        return -1;
    /* pred.py: tokenizer(prompt) adds the special tokens (Llama-3: BOS; Qwen: none). */
    int rc = kv_tokenizer_encode_special(t, p->text, p->len, &p->ids, &p->n_raw, err);
    if (rc == 0 && opts->max_length > 0 && p->n_raw > (size_t)opts->max_length) {
        rc = cut_middle(t, p->ids, p->n_raw, opts->max_length, task->family == LB_FAMILY_V2,
                        &p->text, &p->len, err);
        p->truncated = true;
    }
    p->chat = lb_protocol_chat(opts->protocol, task) && kv_tokenizer_chat_template(t) != NULL;
    if (rc == 0 && p->chat)
        rc = apply_chat(t, opts->enable_thinking, &p->text, &p->len, err);
    if (rc == 0 && (p->truncated || p->chat)) { /* re-tokenise the final text */
        free(p->ids);
        p->ids = NULL;
        /* A rendered chat already holds its special tokens as text (Llama-3 writes
         * <|begin_of_text|>): encoding it without adding more is what
         * apply_chat_template(tokenize=True) does, and avoids the double BOS that
         * pred.py's tokenizer(chat_text) would give Llama-3. */
        rc = p->chat ? kv_tokenizer_encode(t, p->text, p->len, &p->ids, &p->n_ids, err)
                     : kv_tokenizer_encode_special(t, p->text, p->len, &p->ids, &p->n_ids, err);
    } else {
        p->n_ids = p->n_raw;
    }
    if (rc < 0) {
        char where[160];
        snprintf(where, sizeof where, "%s sample %s", task->name, s->id ? s->id : "?");
        kv_fail_prefix(err, where);
        lb_prompt_free(p);
    }
    return rc;
}
