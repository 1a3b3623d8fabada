#include "prompt.h"

#include <stdlib.h>
#include <string.h>

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

/* ---- template substitution -------------------------------------------------- */

/* A growable byte buffer. */
typedef struct buf {
    char *p;
    size_t len, cap;
} buf;

static int buf_add(buf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p)
            return -1;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

/* The value of field `name` (of length n) in a v1 record, or NULL. */
static const char *field(const lb_sample *s, const char *name, size_t n)
{
    if (n == 7 && memcmp(name, "context", 7) == 0)
        return s->context;
    if (n == 5 && memcmp(name, "input", 5) == 0)
        return s->input;
    return NULL;
}

static int format_braces(const lb_task *task, const lb_sample *s, buf *out, kv_error *err)
{
    const char *t = task->prompt;
    while (*t) {
        size_t lit = strcspn(t, "{}");
        if (buf_add(out, t, lit) < 0)
            return kv_fail(err, "out of memory building a %s prompt", task->name);
        t += lit;
        if (!*t)
            break;
        if (t[0] == t[1]) { /* "{{" or "}}": a literal brace */
            if (buf_add(out, t, 1) < 0)
                return kv_fail(err, "out of memory building a %s prompt", task->name);
            t += 2;
            continue;
        }
        const char *close = t[0] == '{' ? strchr(t, '}') : NULL;
        const char *value = close ? field(s, t + 1, (size_t)(close - t - 1)) : NULL;
        if (!value)
            return kv_fail(err, "task %s: its template has a placeholder other than "
                                "{context} and {input} near \"%.20s\"",
                           task->name, t);
        if (buf_add(out, value, strlen(value)) < 0)
            return kv_fail(err, "out of memory building a %s prompt", task->name);
        t = close + 1;
    }
    return 0;
}

int lb_prompt_format(const lb_task *task, const lb_sample *s, char **text, size_t *len,
                     kv_error *err)
{
    if (task->template_kind != LB_TEMPLATE_BRACES)
        return kv_fail(err, "task %s: LongBench v2 records are not read by this loader yet",
                       task->name);
    buf out = {0};
    if (buf_add(&out, "", 0) < 0) /* an empty prompt is still a string */
        return kv_fail(err, "out of memory building a %s prompt", task->name);
    if (format_braces(task, s, &out, err) < 0) {
        free(out.p);
        return -1;
    }
    *text = out.p;
    *len = out.len;
    return 0;
}
