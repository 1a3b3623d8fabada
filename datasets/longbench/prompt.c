#include "longbench/prompt.h"
#include "util/strbuf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/chat.h"
#include "util/jsonstr.h"
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

static int format_braces(const lb_task *task, const char *t, const lb_sample *s, kv_strbuf *out,
                         kv_error *err)
{
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
static int format_dollars(const lb_task *task, const char *t, const lb_sample *s, kv_strbuf *out,
                          kv_error *err)
{
    if (!s->choices[0].p || !s->choices[1].p || !s->choices[2].p || !s->choices[3].p)
        return kv_fail(err, "task %s needs LongBench v2 records (choice_A..choice_D)", task->name);
    bool wants_cot = strstr(task->prompt, "$COT$") != NULL;
    if (wants_cot && !s->cot.p)
        return kv_fail(err, "task %s needs the output of the v2_cot step ($COT$)", task->name);
    const char *keys[] = {"$DOC$", "$Q$", "$C_A$", "$C_B$", "$C_C$", "$C_D$", "$COT$"};
    const kv_str values[] = {s->context,    s->input,      s->choices[0], s->choices[1],
                             s->choices[2], s->choices[3], s->cot};
    if (kv_strbuf_add(out, t, strlen(t)) < 0)
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

/* Template t (the task's, or its question part) with the sample substituted. */
static int format_template(const lb_task *task, const char *t, const lb_sample *s, char **text,
                           size_t *len, kv_error *err)
{
    kv_strbuf out = {0};
    if (kv_strbuf_add(&out, "", 0) < 0) /* an empty prompt is still a string */
        return kv_fail(err, "out of memory building a %s prompt", task->name);
    int rc = task->template_kind == LB_TEMPLATE_DOLLARS ? format_dollars(task, t, s, &out, err)
                                                        : format_braces(task, t, s, &out, err);
    if (rc < 0) {
        free(out.s);
        return -1;
    }
    *text = out.s;
    *len = out.len;
    return 0;
}

int lb_prompt_format(const lb_task *task, const lb_sample *s, char **text, size_t *len,
                     kv_error *err)
{
    return format_template(task, task->prompt, s, text, len, err);
}

/* How many bytes at the end of the formatted prompt are its question part:
 * the question part of the template, formatted on its own (kvpress formats
 * context and question apart), at most the whole prompt. */
static int question_bytes(const lb_task *task, const lb_sample *s, size_t prompt_len, size_t *q,
                          kv_error *err)
{
    char *text = NULL;
    if (format_template(task, task->prompt + lb_task_question_at(task), s, &text, q, err) < 0)
        return -1;
    free(text);
    if (*q > prompt_len)
        *q = prompt_len;
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

/* Where the question part starts in the truncated text new[0..nlen), the
 * first head_n bytes of which are the kept head: at the same distance from
 * the end when the question survived whole, else where it did in the head,
 * else the question's surviving part is the whole tail. */
static size_t cut_after_truncation(const char *old, size_t olen, size_t cut, const char *new,
                                   size_t nlen, size_t head_n)
{
    size_t q = olen - cut;
    if (q <= nlen - head_n && memcmp(new + nlen - q, old + cut, q) == 0)
        return nlen - q;
    return cut < head_n ? cut : head_n;
}

/* pred.py: half = int(max_length/2); prompt = decode(ids[:half]) + decode(ids[-half:]),
 * both with skip_special_tokens=True. v2's pred.py keeps ids[-max_len//2:], which
 * in Python is one more token when max_len is odd. Replaces *text. */
static int cut_middle(const kv_tokenizer *t, const int32_t *ids, size_t n, long max_length, bool v2,
                      char **text, size_t *len, size_t *cut, kv_error *err)
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
        *cut = cut_after_truncation(*text, *len, *cut, joined.s, joined.len, head_n);
        free(*text);
        *text = joined.s;
        *len = joined.len;
    } else {
        kv_strbuf_free(&joined);
    }
    return rc;
}

/* The last occurrence of needle[0..n) in hay[0..len), or NULL. */
static const char *last_occurrence(const char *hay, size_t len, const char *needle, size_t n)
{
    const char *found = NULL, *p = hay, *end = hay + len, *hit;
    if (!needle || n == 0)
        return NULL;
    while ((hit = memmem(p, (size_t)(end - p), needle, n))) {
        found = hit;
        p = hit + 1;
    }
    return found;
}

/* Where the question part text[cut..len) starts in the rendered chat: the
 * last place its text occurs (the end of turn follows it), its trailing
 * whitespace aside, since a template may trim the message (Llama 3). */
static int cut_after_chat(const char *text, size_t len, size_t cut, const char *chat,
                          size_t chat_len, size_t *out, kv_error *err)
{
    size_t q = len - cut;
    while (q > 0 && text[cut + q - 1] && strchr(" \t\n\r\f\v", text[cut + q - 1]))
        q--;
    if (q == 0) { /* no question text: it is all in the template's tail */
        const char *c = last_occurrence(chat, chat_len, text, len);
        *out = c ? (size_t)(c - chat) + len : chat_len;
        return 0;
    }
    const char *at = last_occurrence(chat, chat_len, text + cut, q);
    if (!at)
        return kv_fail(err, "the chat template changed the question's text; cannot find where the "
                            "question part starts");
    *out = (size_t)(at - chat);
    return 0;
}

static int apply_chat(const kv_tokenizer *t, bool enable_thinking, char **text, size_t *len,
                      size_t *cut, kv_error *err)
{
    kv_chat_message user = {.role = "user", .content = *text, .content_len = *len};
    size_t chat_len;
    char *chat = kv_chat_render_len(t, &user, 1, true, enable_thinking, &chat_len, err);
    if (!chat)
        return -1;
    if (cut_after_chat(*text, *len, *cut, chat, chat_len, cut, err) < 0) {
        free(chat);
        return -1;
    }
    free(*text);
    *text = chat;
    *len = chat_len;
    return 0;
}

/* The tokens before the first one that starts at or after byte cut of the
 * text they encode, counted from the end (an added BOS is not in the text;
 * the question part is whole at the end). At least one token is left to the
 * question: it is what the answer's first token is predicted from. */
static size_t context_tokens(const kv_tokenizer *t, const int32_t *ids, size_t n, size_t len,
                             size_t cut)
{
    size_t tail = 0, i = n;
    while (i > 0) {
        size_t b = 0;
        kv_tokenizer_token_bytes(t, ids[i - 1], &b);
        if (tail + b > len - cut)
            break;
        tail += b;
        i--;
    }
    return i == n && n > 0 ? n - 1 : i;
}

int lb_prompt_build(const lb_task *task, const lb_sample *s, const kv_tokenizer *t,
                    const lb_prompt_options *opts, lb_prompt *p, kv_error *err)
{
    memset(p, 0, sizeof *p);
    size_t q = 0;
    if (lb_prompt_format(task, s, &p->text, &p->len, err) < 0)
        return -1;
    /* The question part's first byte, followed through truncation and chat. */
    size_t cut = p->len;
    int rc = question_bytes(task, s, p->len, &q, err);
    cut -= q;
    /* pred.py: tokenizer(prompt) adds the special tokens (Llama-3: BOS; Qwen: none). */
    if (rc == 0)
        rc = kv_tokenizer_encode_special(t, p->text, p->len, &p->ids, &p->n_raw, err);
    if (rc == 0 && opts->max_length > 0 && p->n_raw > (size_t)opts->max_length) {
        rc = cut_middle(t, p->ids, p->n_raw, opts->max_length, task->family == LB_FAMILY_V2,
                        &p->text, &p->len, &cut, err);
        p->truncated = true;
    }
    p->chat = lb_protocol_chat(opts->protocol, task) && kv_tokenizer_chat_template(t) != NULL;
    if (rc == 0 && p->chat)
        rc = apply_chat(t, opts->enable_thinking, &p->text, &p->len, &cut, err);
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
    if (rc == 0)
        p->n_context = context_tokens(t, p->ids, p->n_ids, p->len, cut);
    if (rc < 0) {
        char where[200], id[160];
        snprintf(where, sizeof where, "%s sample %s", task->name,
                 s->id.p ? kv_json_quote_to(id, sizeof id, s->id.p, s->id.n) : "?");
        kv_fail_prefix(err, where);
        lb_prompt_free(p);
    }
    return rc;
}

int lb_split_encode(const kv_tokenizer *t, const char *text, size_t len, size_t cut, bool chat,
                    bool enable_thinking, int32_t **ids, size_t *n_ids, size_t *n_context,
                    kv_error *err)
{
    char *copy = malloc(len + 1);
    if (!copy)
        return kv_fail(err, "out of memory");
    memcpy(copy, text, len);
    copy[len] = '\0';
    int rc = chat ? apply_chat(t, enable_thinking, &copy, &len, &cut, err) : 0;
    if (rc == 0)
        rc = kv_tokenizer_encode(t, copy, len, ids, n_ids, err);
    if (rc == 0)
        *n_context = context_tokens(t, *ids, *n_ids, len, cut);
    free(copy);
    return rc;
}
