#include "tokenizer/pretok.h"
#include "util/strbuf.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

const char kv_pretok_gpt2_regex[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

typedef struct stage {
    pcre2_code *code;
    bool jit;
} stage;

struct kv_pretok {
    stage *stages;
    size_t n;
};

struct kv_pretok_state {
    pcre2_match_data **md;
    size_t n;
};

kv_pretok *kv_pretok_new(kv_error *err)
{
    kv_pretok *p = calloc(1, sizeof *p);
    if (!p)
        kv_fail(err, "out of memory");
    return p;
}

void kv_pretok_free(kv_pretok *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n; i++)
        pcre2_code_free(p->stages[i].code);
    free(p->stages);
    free(p);
}

static size_t rewrite_escape(kv_strbuf *b, const char *pat, size_t i)
{
    char c = pat[i + 1];
    if (c == 's') {
        kv_strbuf_puts(b, "\\p{White_Space}");
        return i + 2;
    }
    if (c == 'S') {
        kv_strbuf_puts(b, "\\P{White_Space}");
        return i + 2;
    }
    if (c == '\0') {
        kv_strbuf_add(b, pat + i, 1);
        return i + 1;
    }
    /* \p{..}, \x{..}: copy the braces whole so their letters are not rewritten */
    size_t end = i + 2;
    if ((c == 'p' || c == 'P' || c == 'x') && pat[end] == '{') {
        const char *close = strchr(pat + end, '}');
        if (close)
            end = (size_t)(close - pat) + 1;
    }
    kv_strbuf_add(b, pat + i, end - i);
    return end;
}

/* The body of (?i:...) starting at pat[i]: only literals and '|' are supported;
 * ASCII letters become [xX]. Returns the index after the closing ')', or 0 for
 * a construct this rewrite does not handle. */
static size_t rewrite_caseless(kv_strbuf *b, const char *pat, size_t i)
{
    kv_strbuf_add(b, "(?:", 3);
    for (; pat[i]; i++) {
        char c = pat[i];
        if (c == ')') {
            kv_strbuf_add(b, ")", 1);
            return i + 1;
        }
        if (c == '(' || c == '[' || c == '\\')
            return 0;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
            char cls[4] = {'[', (char)(c | 0x20), (char)(c & ~0x20), ']'};
            kv_strbuf_add(b, cls, 4);
        } else {
            kv_strbuf_add(b, &pat[i], 1);
        }
    }
    return 0;
}

/* Oniguruma pattern -> PCRE2 pattern (see the header for what changes). */
static char *rewrite(const char *pat, kv_error *err)
{
    kv_strbuf b = {0};
    kv_strbuf_puts(&b, "");
    bool in_class = false;
    for (size_t i = 0; pat[i];) {
        if (pat[i] == '\\') {
            i = rewrite_escape(&b, pat, i);
        } else if (in_class) {
            if (pat[i] == ']')
                in_class = false;
            else if (pat[i] == '[')
                break; /* nested class: refused below */
            kv_strbuf_add(&b, &pat[i++], 1);
        } else if (pat[i] == '[') {
            in_class = true;
            kv_strbuf_add(&b, &pat[i++], 1);
            /* a ']' or '^]' right after '[' is a literal member */
            if (pat[i] == '^')
                kv_strbuf_add(&b, &pat[i++], 1);
            if (pat[i] == ']')
                kv_strbuf_add(&b, &pat[i++], 1);
        } else if (strncmp(pat + i, "(?i:", 4) == 0) {
            size_t next = rewrite_caseless(&b, pat, i + 4);
            if (next == 0) {
                free(b.s);
                kv_fail(err, "pre-tokenizer regex: a (?i:...) group with classes, escapes or "
                             "nested groups is not supported");
                return NULL;
            }
            i = next;
        } else if (strncmp(pat + i, "(?i", 3) == 0) {
            free(b.s);
            kv_fail(err, "pre-tokenizer regex: the inline flag (?i) is only supported as a "
                         "(?i:...) group");
            return NULL;
        } else {
            kv_strbuf_add(&b, &pat[i++], 1);
        }
        if (in_class && pat[i] == '[') {
            free(b.s);
            kv_fail(err, "pre-tokenizer regex: nested character classes are not supported");
            return NULL;
        }
    }
    if (b.oom) {
        free(b.s);
        kv_fail(err, "out of memory");
        return NULL;
    }
    return b.s;
}

int kv_pretok_add(kv_pretok *p, const char *pattern, bool literal, kv_error *err)
{
    char *pat = literal ? strdup(pattern) : rewrite(pattern, err);
    if (!pat)
        return literal ? kv_fail(err, "out of memory") : -1;
    int code;
    PCRE2_SIZE at;
    uint32_t opts = PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0);
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, opts, &code, &at, NULL);
    free(pat);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        return kv_fail(err, "pre-tokenizer regex does not compile at offset %zu: %s", (size_t)at,
                       (const char *)msg);
    }
    stage *s = realloc(p->stages, (p->n + 1) * sizeof *s);
    if (!s) {
        pcre2_code_free(re);
        return kv_fail(err, "out of memory");
    }
    p->stages = s;
    /* Without JIT (an unsupported CPU) pcre2_match gives the same matches, slower. */
    s[p->n++] = (stage){re, pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) == 0};
    return 0;
}

kv_pretok_state *kv_pretok_state_new(const kv_pretok *p)
{
    kv_pretok_state *st = calloc(1, sizeof *st);
    if (!st)
        return NULL;
    st->md = calloc(p->n ? p->n : 1, sizeof *st->md);
    if (!st->md) {
        free(st);
        return NULL;
    }
    st->n = p->n;
    for (size_t i = 0; i < p->n; i++) {
        st->md[i] = pcre2_match_data_create(1, NULL);
        if (!st->md[i]) {
            kv_pretok_state_free(st);
            return NULL;
        }
    }
    return st;
}

void kv_pretok_state_free(kv_pretok_state *st)
{
    if (!st)
        return;
    for (size_t i = 0; i < st->n; i++)
        pcre2_match_data_free(st->md[i]);
    free(st->md);
    free(st);
}

typedef struct split_ctx {
    const kv_pretok *p;
    kv_pretok_state *st;
    kv_pretok_fn fn;
    void *ctx;
    kv_error *err;
} split_ctx;

static int emit(split_ctx *c, size_t level, const char *s, size_t n);

static size_t utf8_char_len(unsigned char b)
{
    return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
}

/* The next match at or after pos. JIT first; should a pattern need more than
 * the JIT's machine stack on some input, the interpreter (which keeps its
 * backtracking state on the heap) gives the same match. */
static int match(const stage *sg, const char *s, size_t n, size_t pos, pcre2_match_data *md)
{
    if (sg->jit) {
        int rc = pcre2_jit_match(sg->code, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc != PCRE2_ERROR_JIT_STACKLIMIT)
            return rc;
    }
    return pcre2_match(sg->code, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md,
                       NULL);
}

/* Splits s[0..n) by stage `level`, passing each match and each gap on. */
static int split_stage(split_ctx *c, size_t level, const char *s, size_t n)
{
    const stage *sg = &c->p->stages[level];
    pcre2_match_data *md = c->st->md[level];
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    size_t pos = 0, last = 0;
    while (pos < n) {
        int rc = match(sg, s, n, pos, md);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return kv_fail(c->err, "pre-tokenizer regex failed: %s", (const char *)msg);
        }
        size_t ms = ov[0], me = ov[1];
        if (me == ms) { /* an empty match splits nothing: step over one character */
            pos = ms + utf8_char_len((unsigned char)s[ms]);
            continue;
        }
        int r;
        if (ms > last && (r = emit(c, level + 1, s + last, ms - last)) != 0)
            return r;
        if ((r = emit(c, level + 1, s + ms, me - ms)) != 0)
            return r;
        last = pos = me;
    }
    return last < n ? emit(c, level + 1, s + last, n - last) : 0;
}

static int emit(split_ctx *c, size_t level, const char *s, size_t n)
{
    if (level == c->p->n)
        return c->fn(c->ctx, s, n);
    return split_stage(c, level, s, n);
}

int kv_pretok_split(const kv_pretok *p, kv_pretok_state *st, const char *s, size_t n,
                    kv_pretok_fn fn, void *ctx, kv_error *err)
{
    if (n == 0)
        return 0;
    split_ctx c = {p, st, fn, ctx, err};
    return emit(&c, 0, s, n);
}
