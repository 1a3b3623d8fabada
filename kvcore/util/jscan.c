#include "util/jscan.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/utf8.h"
#include "util/vec.h"

void kv_jscan_init(kv_jscan *j, const char *s, size_t n)
{
    *j = (kv_jscan){s, n, 0, NULL};
}

static int value(kv_jscan *j, int depth, char **buf, size_t *cap);

static int fail(kv_jscan *j, const char *what)
{
    j->err = what;
    return -1;
}

char kv_jscan_peek(kv_jscan *j)
{
    while (j->pos < j->n) {
        char c = j->s[j->pos];
        /* pretty-printed files indent by runs of spaces: skip them 8 at a time */
        if (c == ' ' && j->n - j->pos >= 8 && memcmp(j->s + j->pos, "        ", 8) == 0)
            j->pos += 8;
        else if (c == ' ' || c == '\n' || c == '\r' || c == '\t')
            j->pos++;
        else
            return c;
    }
    return 0;
}

int kv_jscan_eat(kv_jscan *j, char c)
{
    if (kv_jscan_peek(j) != c) {
        static const char *const expected[] = {"expected '{'", "expected '}'", "expected '['",
                                               "expected ']'", "expected ':'", "expected ','"};
        const char *set = "{}[]:,", *p = strchr(set, c);
        return fail(j, p ? expected[p - set] : "unexpected character");
    }
    j->pos++;
    return 0;
}

static int hex4(kv_jscan *j, uint32_t *v)
{
    if (j->n - j->pos < 4)
        return fail(j, "a \\u escape needs four hex digits");
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = j->s[j->pos++];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0)
            return fail(j, "a \\u escape needs four hex digits");
        *v = *v << 4 | (uint32_t)d;
    }
    return 0;
}

/* \uXXXX, with a surrogate pair read as one code point; a lone surrogate
 * becomes U+FFFD, as in cJSON-free decoders that must produce valid UTF-8. */
static int unicode_escape(kv_jscan *j, uint32_t *cp)
{
    if (hex4(j, cp) != 0)
        return -1;
    if (*cp >= 0xDC00 && *cp <= 0xDFFF) {
        *cp = 0xFFFD;
    } else if (*cp >= 0xD800 && *cp <= 0xDBFF) {
        uint32_t lo;
        if (j->n - j->pos >= 6 && j->s[j->pos] == '\\' && j->s[j->pos + 1] == 'u') {
            size_t save = j->pos;
            j->pos += 2;
            if (hex4(j, &lo) != 0)
                return -1;
            if (lo >= 0xDC00 && lo <= 0xDFFF) {
                *cp = 0x10000 + ((*cp - 0xD800) << 10) + (lo - 0xDC00);
                return 0;
            }
            j->pos = save;
        }
        *cp = 0xFFFD;
    }
    return 0;
}

int kv_jscan_string(kv_jscan *j, char **buf, size_t *cap, size_t *len)
{
    if (kv_jscan_eat(j, '"') != 0)
        return fail(j, "expected a string");
    size_t o = 0;
    for (;;) {
        /* copy the plain run up to the next quote or backslash at once */
        size_t start = j->pos;
        while (j->pos < j->n && j->s[j->pos] != '"' && j->s[j->pos] != '\\' &&
               (unsigned char)j->s[j->pos] >= 0x20)
            j->pos++;
        if (j->pos >= j->n)
            return fail(j, "unterminated string");
        if ((unsigned char)j->s[j->pos] < 0x20) /* JSON (and Python's json) wants \uXXXX */
            return fail(j, "a control character in a string must be escaped");
        size_t run = j->pos - start;
        if (KV_VEC_RESERVE(*buf, *cap, o + run + 5, 64) != 0)
            return fail(j, "out of memory");
        memcpy(*buf + o, j->s + start, run);
        o += run;
        if (j->s[j->pos++] == '"')
            break;
        if (j->pos >= j->n)
            return fail(j, "unterminated string");
        char e = j->s[j->pos++];
        const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t", *p = strchr(from, e);
        if (e == 'u') {
            uint32_t cp;
            if (unicode_escape(j, &cp) != 0)
                return -1;
            o += kv_utf8_encode(cp, *buf + o);
        } else if (e && p) {
            (*buf)[o++] = to[p - from];
        } else {
            return fail(j, "invalid escape in a string");
        }
    }
    (*buf)[o] = '\0';
    *len = o;
    return 0;
}

int kv_jscan_number(kv_jscan *j, double *v)
{
    kv_jscan_peek(j);
    size_t start = j->pos;
    while (j->pos < j->n && j->s[j->pos] && strchr("+-0123456789.eE", j->s[j->pos]))
        j->pos++;
    size_t k = j->pos - start;
    if (k == 0 || k > 63)
        return fail(j, "expected a number");
    char tmp[64];
    memcpy(tmp, j->s + start, k);
    tmp[k] = '\0';
    char *end;
    *v = strtod(tmp, &end);
    return *end == '\0' ? 0 : fail(j, "expected a number");
}

int kv_jscan_skip(kv_jscan *j)
{
    size_t depth = 0;
    char *buf = NULL;
    size_t cap = 0, len;
    do {
        char c = kv_jscan_peek(j);
        if (c == '"') {
            if (kv_jscan_string(j, &buf, &cap, &len) != 0) {
                free(buf);
                return -1;
            }
        } else if (c == '{' || c == '[') {
            depth++;
            j->pos++;
        } else if (c == '}' || c == ']') {
            if (depth == 0) {
                free(buf);
                return fail(j, "unbalanced brackets");
            }
            depth--;
            j->pos++;
        } else if (c == 0) {
            free(buf);
            return fail(j, "unexpected end of the text");
        } else {
            j->pos++; /* numbers, literals, ':' and ',' inside containers */
            while (depth == 0 && j->pos < j->n && !strchr(",}] \t\r\n", j->s[j->pos]))
                j->pos++;
        }
    } while (depth > 0);
    free(buf);
    return 0;
}

static int literal(kv_jscan *j, const char *word)
{
    size_t k = strlen(word);
    if (j->n - j->pos < k || memcmp(j->s + j->pos, word, k) != 0)
        return fail(j, "expected a JSON value");
    j->pos += k;
    return 0;
}

/* Members or elements up to `close`, each checked by kv_jscan_value. */
static int container(kv_jscan *j, char close, int depth, char **buf, size_t *cap)
{
    j->pos++;
    if (kv_jscan_peek(j) == close) {
        j->pos++;
        return 0;
    }
    bool more = true;
    while (more) {
        size_t len;
        if (close == '}' && (kv_jscan_string(j, buf, cap, &len) != 0 || kv_jscan_eat(j, ':') != 0))
            return -1;
        if (value(j, depth + 1, buf, cap) != 0 || kv_jscan_next(j, close, &more) != 0)
            return -1;
    }
    return 0;
}

static int value(kv_jscan *j, int depth, char **buf, size_t *cap)
{
    if (depth > 512)
        return fail(j, "values nested more than 512 deep");
    size_t len;
    double v;
    switch (kv_jscan_peek(j)) {
    case '"':
        return kv_jscan_string(j, buf, cap, &len);
    case '{':
        return container(j, '}', depth, buf, cap);
    case '[':
        return container(j, ']', depth, buf, cap);
    case 't':
        return literal(j, "true");
    case 'f':
        return literal(j, "false");
    case 'n':
        return literal(j, "null");
    default:
        return kv_jscan_number(j, &v);
    }
}

int kv_jscan_value(kv_jscan *j)
{
    char *buf = NULL;
    size_t cap = 0;
    int rc = value(j, 0, &buf, &cap);
    free(buf);
    return rc;
}

const char *kv_jscan_kind(kv_jscan *j)
{
    switch (kv_jscan_peek(j)) {
    case '"':
        return "a string";
    case '{':
        return "an object";
    case '[':
        return "an array";
    case 't':
    case 'f':
        return "a boolean";
    case 'n':
        return "null";
    default:
        return "a number";
    }
}

int kv_jscan_next(kv_jscan *j, char close, bool *more)
{
    char c = kv_jscan_peek(j);
    if (c == ',' || c == close) {
        j->pos++;
        *more = c == ',';
        return 0;
    }
    return fail(j, close == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
}

size_t kv_jscan_line(const kv_jscan *j)
{
    size_t line = 1;
    for (const char *p = j->s; (p = memchr(p, '\n', (size_t)(j->s + j->pos - p))); p++)
        line++;
    return line;
}
