#include "score/jieba.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/file.h"
#include "util/utf8.h"
#include "score/strmap.h"
#include "score/unicode.h"
#include "util/vec.h"

/* jieba's finalseg.MIN_FLOAT: the log-probability of anything unseen. */
#define MIN_FLOAT (-3.14e100)

/* HMM states, indexed in this order; ties in jieba's max() go to the larger
 * state letter, so each state also carries its letter. */
enum { B, M, E, S, N_STATES };
static const char state_letter[N_STATES] = {'B', 'M', 'E', 'S'};

typedef struct emit_entry {
    uint32_t cp; /* 0: empty slot (U+0000 never reaches the HMM) */
    double p[N_STATES];
} emit_entry;

struct kb_jieba {
    char *dict;      /* dict.txt, kept: the map's keys point into it */
    kb_strmap freq;  /* word or word prefix -> frequency (0 for a prefix only) */
    double logtotal; /* log(sum of every line's frequency) */
    double start[N_STATES];
    double trans[N_STATES][N_STATES];
    emit_entry *emit; /* open addressing on cp */
    size_t emit_cap;
};

const char *kb_jieba_default_dir(void)
{
    const char *env = getenv("KVBENCH_JIEBA_DIR");
    return env && *env ? env : KB_JIEBA_DEBIAN_DIR;
}

void kb_spans_free(kb_spans *s)
{
    free(s->v);
    *s = (kb_spans){0};
}

int kb_spans_push(kb_spans *s, size_t off, size_t len)
{
    if (KV_VEC_RESERVE(s->v, s->cap, s->n + 1, 64) < 0)
        return -1;
    s->v[s->n++] = (kb_span){off, len};
    return 0;
}

/* ---- loading ---------------------------------------------------------- */

static bool is_ascii_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* One dict.txt line, as gen_pfdict reads it: strip, split on ' ', word and
 * int(freq); every code-point prefix of the word becomes known (freq 0). */
static int add_dict_line(kb_jieba *j, char *line, size_t len, long lineno, int64_t *total,
                         const char *path, kv_error *err)
{
    while (len && is_ascii_space(line[0]))
        line++, len--;
    while (len && is_ascii_space(line[len - 1]))
        len--;
    char *sp = memchr(line, ' ', len);
    if (!sp)
        return kv_fail(err, "%s:%ld: expected 'word frequency [tag]'", path, lineno);
    size_t wlen = (size_t)(sp - line);
    char *fend = memchr(sp + 1, ' ', len - wlen - 1);
    if (!fend)
        fend = line + len;
    char num[32];
    size_t nlen = (size_t)(fend - sp - 1);
    if (nlen == 0 || nlen >= sizeof num)
        return kv_fail(err, "%s:%ld: bad frequency", path, lineno);
    memcpy(num, sp + 1, nlen);
    num[nlen] = '\0';
    char *end;
    errno = 0;
    long long freq = strtoll(num, &end, 10);
    if (*end || errno || freq < 0)
        return kv_fail(err, "%s:%ld: bad frequency '%s'", path, lineno, num);
    int added;
    kb_strmap_entry *e = kb_strmap_upsert(&j->freq, line, wlen, 0, &added);
    if (!e)
        return kv_fail(err, "out of memory reading %s", path);
    e->value = freq; /* a repeated word: the last line wins, as in the dict() */
    *total += freq;
    for (size_t i = 0; i < wlen;) {
        kv_utf8_next(line, wlen, &i);
        if (!kb_strmap_upsert(&j->freq, line, i, 0, &added))
            return kv_fail(err, "out of memory reading %s", path);
    }
    return 0;
}

static int load_dict(kb_jieba *j, const char *dir, kv_error *err)
{
    char *path = kv_path_join(dir, "dict.txt");
    if (!path)
        return kv_fail(err, "out of memory");
    size_t len;
    int rc = kv_file_read(path, &j->dict, &len, err);
    int64_t total = 0;
    long lineno = 0;
    for (size_t at = 0; rc == 0 && at < len;) {
        char *nl = memchr(j->dict + at, '\n', len - at);
        size_t end = nl ? (size_t)(nl - j->dict) : len;
        rc = add_dict_line(j, j->dict + at, end - at, ++lineno, &total, path, err);
        at = end + 1;
    }
    if (rc == 0 && total <= 0)
        rc = kv_fail(err, "%s: no words", path);
    j->logtotal = log((double)total);
    free(path);
    return rc;
}

/* A reader for the Python literals in finalseg/prob_*.py:
 *   P={'B': -0.26, ...}            (start)
 *   P={'B': {'E': -0.51, ...}, ...} (trans, emit: inner keys are one character) */
typedef struct pyreader {
    const char *s, *end, *path;
    kv_error *err;
} pyreader;

static void skip_ws(pyreader *r)
{
    while (r->s < r->end && (is_ascii_space(*r->s) || *r->s == ','))
        r->s++;
}

/* A quoted string that holds exactly one character. */
static int read_char_literal(pyreader *r, uint32_t *cp)
{
    skip_ws(r);
    if (r->s >= r->end || (*r->s != '\'' && *r->s != '"'))
        return kv_fail(r->err, "%s: expected a quoted character", r->path);
    char q = *r->s++;
    if (r->s < r->end && *r->s == '\\') {
        r->s++;
        int n = 0;
        if (r->s < r->end && *r->s == 'u')
            n = 4;
        else if (r->s < r->end && *r->s == 'U')
            n = 8;
        else if (r->s < r->end && *r->s == 'x')
            n = 2;
        if (n) {
            if (r->end - r->s < n + 1 || kv_hex_value(r->s + 1, (size_t)n, cp) < 0)
                return kv_fail(r->err, "%s: bad escape", r->path);
            r->s += n + 1;
        } else if (r->s < r->end) {
            *cp = (unsigned char)*r->s++; /* \\ \' \" */
        }
    } else {
        size_t i = 0;
        *cp = kv_utf8_next(r->s, (size_t)(r->end - r->s), &i);
        r->s += i;
    }
    if (r->s >= r->end || *r->s != q)
        return kv_fail(r->err, "%s: expected one character between quotes", r->path);
    r->s++;
    return 0;
}

static int expect(pyreader *r, char c)
{
    skip_ws(r);
    if (r->s >= r->end || *r->s != c)
        return kv_fail(r->err, "%s: expected '%c'", r->path, c);
    r->s++;
    return 0;
}

static int read_number(pyreader *r, double *v)
{
    skip_ws(r);
    char *end;
    /* strtod rounds correctly, as Python's float literal parsing does. */
    *v = strtod(r->s, &end);
    if (end == r->s || end > r->end)
        return kv_fail(r->err, "%s: expected a number", r->path);
    r->s = end;
    return 0;
}

static int state_index(uint32_t cp)
{
    for (int k = 0; k < N_STATES; k++)
        if ((uint32_t)state_letter[k] == cp)
            return k;
    return -1;
}

static int emit_slot(const kb_jieba *j, uint32_t cp)
{
    size_t mask = j->emit_cap - 1;
    for (size_t i = (cp * 2654435761u) & mask;; i = (i + 1) & mask)
        if (j->emit[i].cp == cp || j->emit[i].cp == 0)
            return (int)i;
}

static int emit_set(kb_jieba *j, int state, uint32_t cp, double p)
{
    if (cp == 0)
        return 0;
    int i = emit_slot(j, cp);
    if (j->emit[i].cp == 0) {
        j->emit[i].cp = cp;
        for (int k = 0; k < N_STATES; k++)
            j->emit[i].p[k] = MIN_FLOAT;
    }
    j->emit[i].p[state] = p;
    return 0;
}

/* Reads the file's `P={...}`: depth 1 fills start[], depth 2 calls `inner`. */
typedef int (*inner_fn)(kb_jieba *j, int state, uint32_t key, double p, pyreader *r);

static int read_table(kb_jieba *j, const char *dir, const char *name, inner_fn inner, kv_error *err)
{
    char *path = kv_path_join(dir, name);
    if (!path)
        return kv_fail(err, "out of memory");
    char *text = NULL;
    size_t len;
    int rc = kv_file_read(path, &text, &len, err);
    pyreader r = {text, text + len, path, err};
    const char *p = rc == 0 ? strstr(text, "P=") : NULL;
    if (rc == 0 && !p)
        rc = kv_fail(err, "%s: no 'P=' table", path);
    if (rc == 0) {
        r.s = p + 2;
        rc = expect(&r, '{');
    }
    while (rc == 0) {
        skip_ws(&r);
        if (r.s < r.end && *r.s == '}')
            break;
        uint32_t key;
        if ((rc = read_char_literal(&r, &key)) < 0 || (rc = expect(&r, ':')) < 0)
            break;
        int st = state_index(key);
        if (st < 0) {
            rc = kv_fail(err, "%s: unknown HMM state", path);
            break;
        }
        skip_ws(&r);
        if (!inner) {
            rc = read_number(&r, &j->start[st]);
            continue;
        }
        if ((rc = expect(&r, '{')) < 0)
            break;
        for (;;) {
            skip_ws(&r);
            if (r.s < r.end && *r.s == '}') {
                r.s++;
                break;
            }
            double v;
            if ((rc = read_char_literal(&r, &key)) < 0 || (rc = expect(&r, ':')) < 0 ||
                (rc = read_number(&r, &v)) < 0 || (rc = inner(j, st, key, v, &r)) < 0)
                break;
        }
    }
    free(text);
    free(path);
    return rc;
}

static int trans_inner(kb_jieba *j, int state, uint32_t key, double p, pyreader *r)
{
    int to = state_index(key);
    if (to < 0)
        return kv_fail(r->err, "%s: unknown HMM state", r->path);
    j->trans[state][to] = p;
    return 0;
}

static int emit_inner(kb_jieba *j, int state, uint32_t key, double p, pyreader *r)
{
    (void)r;
    return emit_set(j, state, key, p);
}

int kb_jieba_load(const char *dir, kb_jieba **out, kv_error *err)
{
    *out = NULL;
    if (!dir)
        dir = kb_jieba_default_dir();
    char *probe = kv_path_join(dir, "dict.txt");
    int present = probe && kv_file_exists(probe);
    free(probe);
    if (!present)
        return kv_fail(err,
                       "jieba's dictionary was not found in %s (dict.txt): the Chinese tasks "
                       "(multifieldqa_zh, dureader, vcsum) need it; install it with `apt-get "
                       "install python3-jieba`, or point $KVBENCH_JIEBA_DIR at a jieba folder",
                       dir);
    kb_jieba *j = calloc(1, sizeof *j);
    if (!j)
        return kv_fail(err, "out of memory");
    j->emit_cap = 1 << 16; /* jieba's tables hold ~7k characters per state */
    j->emit = calloc(j->emit_cap, sizeof *j->emit);
    for (int a = 0; a < N_STATES; a++)
        for (int b = 0; b < N_STATES; b++)
            j->trans[a][b] = MIN_FLOAT;
    int rc = j->emit ? 0 : kv_fail(err, "out of memory");
    if (rc == 0)
        rc = load_dict(j, dir, err);
    if (rc == 0)
        rc = read_table(j, dir, "finalseg/prob_start.py", NULL, err);
    if (rc == 0)
        rc = read_table(j, dir, "finalseg/prob_trans.py", trans_inner, err);
    if (rc == 0)
        rc = read_table(j, dir, "finalseg/prob_emit.py", emit_inner, err);
    if (rc < 0) {
        kb_jieba_free(j);
        return rc;
    }
    *out = j;
    return 0;
}

void kb_jieba_free(kb_jieba *j)
{
    if (!j)
        return;
    kb_strmap_free(&j->freq);
    free(j->dict);
    free(j->emit);
    free(j);
}

/* ---- segmentation ------------------------------------------------------ */

/* Scratch space for one cut, grown as needed. */
typedef struct work {
    const char *s; /* the whole text; spans are offsets into it */
    kb_spans *out;
    size_t *off; /* byte offset of each code point of the block, plus the end */
    uint32_t *cp;
    size_t *dag; /* DAG ends, flattened; dag_at[k]..dag_at[k+1] are node k's */
    size_t *dag_at;
    double *route_p;
    size_t *route_x;
    double *v;           /* Viterbi: [t][state] */
    unsigned char *bp;   /* Viterbi back pointers: [t][state] */
    unsigned char *path; /* the best state sequence */
    size_t cap, dag_cap;
} work;

static int work_reserve(work *w, size_t n)
{
    if (n + 1 <= w->cap)
        return 0;
    size_t cap = (n + 1) * 2;
    size_t *off = realloc(w->off, cap * sizeof *off);
    if (off)
        w->off = off;
    uint32_t *cp = realloc(w->cp, cap * sizeof *cp);
    if (cp)
        w->cp = cp;
    size_t *dag_at = realloc(w->dag_at, (cap + 1) * sizeof *dag_at);
    if (dag_at)
        w->dag_at = dag_at;
    double *rp = realloc(w->route_p, (cap + 1) * sizeof *rp);
    if (rp)
        w->route_p = rp;
    size_t *rx = realloc(w->route_x, (cap + 1) * sizeof *rx);
    if (rx)
        w->route_x = rx;
    double *v = realloc(w->v, cap * N_STATES * sizeof *v);
    if (v)
        w->v = v;
    unsigned char *bp = realloc(w->bp, cap * N_STATES);
    if (bp)
        w->bp = bp;
    unsigned char *path = realloc(w->path, cap);
    if (path)
        w->path = path;
    if (!off || !cp || !dag_at || !rp || !rx || !v || !bp || !path)
        return -1;
    w->cap = cap;
    return 0;
}

static void work_free(work *w)
{
    free(w->off);
    free(w->cp);
    free(w->dag);
    free(w->dag_at);
    free(w->route_p);
    free(w->route_x);
    free(w->v);
    free(w->bp);
    free(w->path);
}

/* Emits code points [a, b) of the current block as one token. */
static int yield(work *w, size_t a, size_t b)
{
    return kb_spans_push(w->out, w->off[a], w->off[b] - w->off[a]);
}

static int64_t freq_of(const kb_jieba *j, const work *w, size_t a, size_t b, bool *known)
{
    const kb_strmap_entry *e = kb_strmap_find(&j->freq, w->s + w->off[a], w->off[b] - w->off[a]);
    *known = e != NULL;
    return e ? e->value : 0;
}

static bool is_han(uint32_t c)
{
    return c >= 0x4E00 && c <= 0x9FD5;
}

/* jieba's re_han_default character class: [\u4E00-\u9FD5a-zA-Z0-9+#&\._%\-] */
static bool in_han_default(uint32_t c)
{
    return is_han(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '+' || c == '#' || c == '&' || c == '.' || c == '_' ||
           c == '%' || c == '-';
}

static bool is_alnum_ascii(uint32_t c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* finalseg's Viterbi over code points [a, b), all in U+4E00..U+9FD5. */
static int viterbi_cut(const kb_jieba *j, work *w, size_t a, size_t b)
{
    static const int prev[N_STATES][2] = {[B] = {E, S}, [M] = {M, B}, [E] = {B, M}, [S] = {S, E}};
    size_t n = b - a;
    double *v = w->v;
    for (size_t t = 0; t < n; t++) {
        int slot = emit_slot(j, w->cp[a + t]);
        const double *em = j->emit[slot].cp ? j->emit[slot].p : NULL;
        for (int y = 0; y < N_STATES; y++) {
            double e = em ? em[y] : MIN_FLOAT;
            if (t == 0) {
                v[y] = j->start[y] + e;
                continue;
            }
            /* max over (prob, letter) tuples: equal probabilities pick the larger letter */
            int best = -1;
            double bestp = 0;
            for (int k = 0; k < 2; k++) {
                int y0 = prev[y][k];
                double p = v[(t - 1) * N_STATES + y0] + j->trans[y0][y] + e;
                if (best < 0 || p > bestp ||
                    (p == bestp && state_letter[y0] > state_letter[best])) {
                    best = y0;
                    bestp = p;
                }
            }
            v[t * N_STATES + y] = bestp;
            w->bp[t * N_STATES + y] = (unsigned char)best;
        }
    }
    double pe = v[(n - 1) * N_STATES + E], ps = v[(n - 1) * N_STATES + S];
    int state = pe > ps ? E : S;
    for (size_t t = n; t-- > 0;) {
        w->path[t] = (unsigned char)state;
        if (t > 0)
            state = w->bp[t * N_STATES + state];
    }
    size_t begin = 0, next = 0;
    for (size_t t = 0; t < n; t++) {
        int pos = w->path[t];
        if (pos == B) {
            begin = t;
        } else if (pos == E) {
            if (yield(w, a + begin, a + t + 1) < 0)
                return -1;
            next = t + 1;
        } else if (pos == S) {
            if (yield(w, a + t, a + t + 1) < 0)
                return -1;
            next = t + 1;
        }
    }
    return next < n ? yield(w, a + next, b) : 0;
}

/* finalseg's re_skip split of a non-Chinese run: pieces matching
 * [a-zA-Z0-9]+(?:\.\d+)?%? and the text between them. */
static int skip_split(work *w, size_t a, size_t b)
{
    size_t gap = a;
    for (size_t i = a; i < b;) {
        if (!is_alnum_ascii(w->cp[i])) {
            i++;
            continue;
        }
        size_t m = i;
        while (m < b && is_alnum_ascii(w->cp[m]))
            m++;
        if (m + 1 < b && w->cp[m] == '.' && w->cp[m + 1] >= '0' && w->cp[m + 1] <= '9') {
            m += 2;
            while (m < b && w->cp[m] >= '0' && w->cp[m] <= '9')
                m++;
        }
        if (m < b && w->cp[m] == '%')
            m++;
        if (gap < i && yield(w, gap, i) < 0)
            return -1;
        if (yield(w, i, m) < 0)
            return -1;
        gap = i = m;
    }
    return gap < b ? yield(w, gap, b) : 0;
}

/* finalseg.cut: Chinese runs through the HMM, the rest split by re_skip. */
static int hmm_cut(const kb_jieba *j, work *w, size_t a, size_t b)
{
    for (size_t i = a; i < b;) {
        bool han = is_han(w->cp[i]);
        size_t e = i;
        while (e < b && is_han(w->cp[e]) == han)
            e++;
        int rc = han ? viterbi_cut(j, w, i, e) : skip_split(w, i, e);
        if (rc < 0)
            return -1;
        i = e;
    }
    return 0;
}

/* A run of single characters collected by __cut_DAG, code points [a, b). */
static int flush_buf(const kb_jieba *j, work *w, size_t a, size_t b)
{
    if (b - a == 1)
        return yield(w, a, b);
    bool known;
    if (freq_of(j, w, a, b, &known) == 0)
        return hmm_cut(j, w, a, b);
    for (size_t k = a; k < b; k++)
        if (yield(w, k, k + 1) < 0)
            return -1;
    return 0;
}

/* Appends one end index to the DAG's edge list, growing it. */
static int dag_push(work *w, size_t *used, size_t end)
{
    if (KV_VEC_RESERVE(w->dag, w->dag_cap, *used + 1, 256) < 0)
        return -1;
    w->dag[(*used)++] = end;
    return 0;
}

static int build_dag(const kb_jieba *j, work *w, size_t n)
{
    size_t used = 0;
    for (size_t k = 0; k < n; k++) {
        w->dag_at[k] = used;
        bool known = true;
        for (size_t i = k; i < n; i++) {
            int64_t f = freq_of(j, w, k, i + 1, &known);
            if (!known)
                break;
            if (f == 0)
                continue;
            if (dag_push(w, &used, i) < 0)
                return -1;
        }
        /* a character no word starts at is a word of its own */
        if (used == w->dag_at[k] && dag_push(w, &used, k) < 0)
            return -1;
    }
    w->dag_at[n] = used;
    return 0;
}

/* calc(): the most probable route, right to left; among equal log
 * probabilities the larger end index wins (Python's tuple max). */
static void best_route(const kb_jieba *j, work *w, size_t n)
{
    w->route_p[n] = 0;
    w->route_x[n] = 0;
    for (size_t idx = n; idx-- > 0;) {
        double best = 0;
        size_t bestx = 0;
        for (size_t d = w->dag_at[idx]; d < w->dag_at[idx + 1]; d++) {
            size_t x = w->dag[d];
            bool known;
            int64_t f = freq_of(j, w, idx, x + 1, &known);
            double p = (log((double)(f ? f : 1)) - j->logtotal) + w->route_p[x + 1];
            if (d == w->dag_at[idx] || p >= best) {
                best = p;
                bestx = x;
            }
        }
        w->route_p[idx] = best;
        w->route_x[idx] = bestx;
    }
}

/* __cut_DAG over one block of re_han_default characters, bytes [from, to). */
static int cut_dag(const kb_jieba *j, work *w, size_t from, size_t to)
{
    size_t n = 0;
    for (size_t i = from; i < to; n++) {
        if (work_reserve(w, n + 1) < 0)
            return -1;
        w->off[n] = i;
        w->cp[n] = kv_utf8_next(w->s, to, &i);
    }
    w->off[n] = to;
    if (build_dag(j, w, n) < 0)
        return -1;
    best_route(j, w, n);
    size_t buf = 0, x = 0;
    while (x < n) {
        size_t y = w->route_x[x] + 1;
        if (y - x > 1) {
            if (buf < x && flush_buf(j, w, buf, x) < 0)
                return -1;
            if (yield(w, x, y) < 0)
                return -1;
            buf = y;
        }
        x = y;
    }
    return buf < n ? flush_buf(j, w, buf, n) : 0;
}

/* Outside re_han_default blocks every character is a token, except that
 * "\r\n" stays one (re_skip_default = (\r\n|\s)). */
static int cut_other(work *w, size_t from, size_t to)
{
    for (size_t i = from; i < to;) {
        size_t at = i;
        if (w->s[i] == '\r' && i + 1 < to && w->s[i + 1] == '\n')
            i += 2;
        else
            kv_utf8_next(w->s, to, &i);
        if (kb_spans_push(w->out, at, i - at) < 0)
            return -1;
    }
    return 0;
}

int kb_jieba_cut(const kb_jieba *j, const char *s, size_t n, kb_spans *out)
{
    work w = {.s = s, .out = out};
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0;) {
        size_t at = i;
        bool han = in_han_default(kv_utf8_next(s, n, &i));
        size_t end = i;
        while (end < n) {
            size_t k = end;
            if (in_han_default(kv_utf8_next(s, n, &k)) != han)
                break;
            end = k;
        }
        rc = han ? cut_dag(j, &w, at, end) : cut_other(&w, at, end);
        i = end;
    }
    work_free(&w);
    return rc;
}
