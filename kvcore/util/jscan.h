/* kv_jscan: a small pull scanner over JSON text, for the two parts of a
 * tokenizer.json that are too big for a DOM: the model's vocab (150k
 * entries) and merges (150k pairs). Building cJSON nodes for them costs a
 * million allocations; scanning them in place costs none.
 *
 * Every function skips leading whitespace, returns 0 / -1, and on failure
 * leaves a message in j->err naming what was expected (kv_jscan_line gives
 * the line for the caller's message).
 */
#ifndef KV_JSCAN_H
#define KV_JSCAN_H

#include <stdbool.h>
#include <stddef.h>

typedef struct kv_jscan {
    const char *s;
    size_t n, pos;
    const char *err;
} kv_jscan;

void kv_jscan_init(kv_jscan *j, const char *s, size_t n);

/* The next non-space character (0 at the end), not consumed. */
char kv_jscan_peek(kv_jscan *j);

/* Consumes character c. */
int kv_jscan_eat(kv_jscan *j, char c);

/* Decodes the string at the cursor (escapes included) into *buf, grown as
 * needed and NUL-terminated; *len gets its length. */
int kv_jscan_string(kv_jscan *j, char **buf, size_t *cap, size_t *len);

/* Reads a number. */
int kv_jscan_number(kv_jscan *j, double *v);

/* Skips one value of any kind (checked only for balanced brackets: callers
 * hand skipped text to a full parser). */
int kv_jscan_skip(kv_jscan *j);

/* Skips one value, checking that it is valid JSON. */
int kv_jscan_value(kv_jscan *j);

/* What the value at the cursor is, for messages: "a string", "a number",
 * "an array", "an object", "a boolean", "null". */
const char *kv_jscan_kind(kv_jscan *j);

/* After the first element or member: consumes ',' and returns true, or the
 * closing character and returns false (then *done is set); -1 otherwise via
 * j->err. */
int kv_jscan_next(kv_jscan *j, char close, bool *more);

/* 1-based line number of the cursor. */
size_t kv_jscan_line(const kv_jscan *j);

/* For byte scanners that cut JSON text without parsing it (a value's extent,
 * its members): feeds byte c and returns true when c is outside strings,
 * i.e. structural. */
typedef struct kv_jbytes {
    bool in_string, escaped;
} kv_jbytes;

static inline bool kv_jbytes_outside(kv_jbytes *s, int c)
{
    if (s->in_string) {
        if (s->escaped)
            s->escaped = false;
        else if (c == '\\')
            s->escaped = true;
        else if (c == '"')
            s->in_string = false;
        return false;
    }
    s->in_string = c == '"';
    return !s->in_string;
}

#endif
