#include "util/jsonstr.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "util/utf8.h"

static atomic_long loads;

long kv_json_loads(void)
{
    return atomic_load(&loads);
}

json_t *kv_json_load(const char *text, size_t n, kv_error *err)
{
    atomic_fetch_add_explicit(&loads, 1, memory_order_relaxed);
    size_t ok = kv_utf8_valid_prefix(text, n);
    if (ok < n) {
        kv_fail(err, "invalid UTF-8 at byte %zu (0x%02X)", ok + 1, (unsigned char)text[ok]);
        return NULL;
    }
    json_error_t e;
    json_t *v = json_loadb(text, n, JSON_ALLOW_NUL | JSON_DECODE_ANY, &e);
    if (!v)
        kv_fail(err, "not valid JSON at byte %d: %s", e.position > 0 ? e.position : 1, e.text);
    return v;
}

static size_t line_of(const char *text, size_t at)
{
    size_t line = 1;
    for (size_t i = 0; i < at; i++)
        line += text[i] == '\n';
    return line;
}

/* Where the JSON string whose body starts at text[at] ends (its closing quote). */
static size_t string_end(const char *text, size_t n, size_t at)
{
    while (at < n && text[at] != '"')
        at += text[at] == '\\' ? 2 : 1;
    return at;
}

/* Whether the string closed at text[at] is an object key (a ':' follows). */
static bool is_key(const char *text, size_t n, size_t at)
{
    for (at++; at < n && strchr(" \t\r\n", text[at]); at++)
        ;
    return at < n && text[at] == ':';
}

int kv_json_check_names(const char *path, const char *text, size_t n, kv_error *err)
{
    size_t ok = kv_utf8_valid_prefix(text, n);
    const char *nul = memchr(text, '\0', ok);
    if (nul)
        return kv_fail(err, "%s:%zu: a NUL byte, which is not JSON text", path,
                       line_of(text, (size_t)(nul - text)));
    if (ok < n)
        return kv_fail(err, "%s:%zu: invalid UTF-8 at byte %zu (0x%02X)", path, line_of(text, ok),
                       ok + 1, (unsigned char)text[ok]);
    bool in_string = false;
    size_t start = 0, key = 0, key_n = 0; /* the string now read; the last key */
    for (size_t i = 0; i < n; i++) {
        if (text[i] == '"') {
            in_string = !in_string;
            if (in_string)
                start = i + 1;
            else if (is_key(text, n, i))
                key = start, key_n = i - start;
        } else if (in_string && text[i] == '\\') {
            if (n - i >= 6 && memcmp(text + i + 1, "u0000", 5) == 0) {
                if (is_key(text, n, string_end(text, n, start)))
                    return kv_fail(err, "%s:%zu: a key holds \\u0000 (NUL), which keys cannot hold",
                                   path, line_of(text, i));
                /* the key it is under ("name", "tasks"...), as errors say file:line: key */
                return kv_fail(err,
                               "%s:%zu: %.*s%sa string holds \\u0000 (NUL), which names and "
                               "paths cannot hold",
                               path, line_of(text, i), (int)key_n, text + key, key_n ? ": " : "");
            }
            i++; /* the escaped character cannot end the string */
        }
    }
    return 0;
}

int kv_json_take(const json_t *v, kv_str *out)
{
    size_t n = json_string_length(v);
    char *p = malloc(n + 1);
    if (!p)
        return -1;
    memcpy(p, json_string_value(v), n);
    p[n] = '\0';
    *out = (kv_str){p, n};
    return 0;
}

int kv_json_quote(kv_strbuf *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    kv_strbuf_add(b, "\"", 1);
    size_t i = 0;
    while (i < n) {
        /* copy the longest run that needs no escape at once */
        size_t run = 0, bad = 0;
        while (i + run < n) {
            unsigned char c = (unsigned char)s[i + run];
            if (c < 0x20 || c == '"' || c == '\\')
                break;
            size_t k =
                c < 0x80 ? 1 : kv_utf8_seq((const unsigned char *)s + i + run, n - i - run, &bad);
            if (k == 0)
                break;
            run += k;
        }
        kv_strbuf_add(b, s + i, run);
        i += run;
        if (i >= n)
            break;
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            char esc[2] = {'\\', (char)c};
            kv_strbuf_add(b, esc, 2);
            i++;
        } else if (c < 0x20) { /* Python's json.dumps: short forms where JSON has them */
            static const char shorts[] = "\b\f\n\r\t", letters[] = "bfnrt";
            const char *p = memchr(shorts, c, 5);
            char esc[6] = {'\\', p ? letters[p - shorts] : 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            kv_strbuf_add(b, esc, p ? 2 : 6);
            i++;
        } else { /* ill-formed UTF-8: one U+FFFD per maximal subpart, as decode does */
            kv_utf8_seq((const unsigned char *)s + i, n - i, &bad);
            kv_strbuf_add(b, "\xEF\xBF\xBD", 3);
            i += bad;
        }
    }
    return kv_strbuf_add(b, "\"", 1);
}

cJSON *kv_json_text(const char *s, size_t n)
{
    kv_strbuf b = {0};
    cJSON *v = kv_json_quote(&b, s, n) == 0 ? cJSON_CreateRaw(b.s) : NULL;
    kv_strbuf_free(&b);
    return v;
}

const char *kv_json_quote_to(char *buf, size_t size, const char *s, size_t n)
{
    kv_strbuf b = {0};
    kv_json_quote(&b, s, n);
    snprintf(buf, size, "%s", b.oom ? "(out of memory)" : b.s);
    kv_strbuf_free(&b);
    return buf;
}

kv_str kv_unescape_nul(char *id)
{
    char *w = id;
    for (const char *r = id; *r;)
        if (strncmp(r, "\\u0000", 6) == 0) {
            *w++ = '\0';
            r += 6;
        } else {
            *w++ = *r++;
        }
    return (kv_str){id, (size_t)(w - id)};
}
