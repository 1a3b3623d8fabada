#include "score/metrics.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "score/strmap.h"
#include "score/unicode.h"
#include "util/vec.h"

/* Python's default recursion limit: rouge's recursive LCS backtrack raises
 * RecursionError past it, and metrics.py turns that into a score of 0. */
#define PY_RECURSION_LIMIT 1000
/* Frames on the stack when rouge's _recon is first called under eval.py. */
#define ROUGE_FRAMES    9
#define ROUGE_ZH_FRAMES 10

typedef struct u32vec {
    uint32_t *v;
    size_t n, cap;
} u32vec;

struct kb_metrics {
    const kb_jieba *jieba;
    pcre2_code *re_digits, *re_paragraph, *re_paragraph_zh;
    pcre2_match_data *md;
    kb_text pred, gt;       /* sanitised inputs */
    kb_text t1, t2, t3, t4; /* normalisation stages */
    kb_spans sp1, sp2;      /* tokens */
    kb_strmap map;
    u32vec a, b;             /* code points for difflib */
    u32vec words_h, words_r; /* rouge: word ids of hypothesis and reference */
    u32vec sent_h, sent_r;   /* rouge: where each sentence's words end */
    u32vec row1, row2;       /* rouge: rolling LCS rows */
    uint32_t *table;
    size_t table_cap;
    uint64_t stamp;
};

static const char *const metric_names[KB_N_METRICS] = {
    [KB_QA_F1] = "qa_f1_score",
    [KB_QA_F1_ZH] = "qa_f1_zh_score",
    [KB_ROUGE] = "rouge_score",
    [KB_ROUGE_ZH] = "rouge_zh_score",
    [KB_CLASSIFICATION] = "classification_score",
    [KB_RETRIEVAL] = "retrieval_score",
    [KB_RETRIEVAL_ZH] = "retrieval_zh_score",
    [KB_COUNT] = "count_score",
    [KB_CODE_SIM] = "code_sim_score",
    [KB_ACCURACY] = "accuracy",
};

const char *kb_metric_name(kb_metric m)
{
    return (unsigned)m < KB_N_METRICS ? metric_names[m] : NULL;
}

int kb_metric_from_name(const char *name, kb_metric *out)
{
    for (int i = 0; i < KB_N_METRICS; i++)
        if (strcmp(name, metric_names[i]) == 0) {
            *out = (kb_metric)i;
            return 0;
        }
    return -1;
}

bool kb_metric_needs_jieba(kb_metric m)
{
    return m == KB_QA_F1_ZH || m == KB_ROUGE_ZH;
}

/* ---- small vectors ------------------------------------------------------ */

static int vec_reserve(u32vec *v, size_t n)
{
    return KV_VEC_RESERVE(v->v, v->cap, n, 64);
}

static int vec_push(u32vec *v, uint32_t x)
{
    if (v->n == v->cap && vec_reserve(v, v->n + 1) < 0)
        return -1;
    v->v[v->n++] = x;
    return 0;
}

static void vec_free(u32vec *v)
{
    free(v->v);
}

/* ---- setup ---------------------------------------------------------------- */

static pcre2_code *compile(const char *pattern)
{
    int code;
    PCRE2_SIZE at;
    return pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &code,
                         &at, NULL);
}

int kb_metrics_new(const kb_jieba *jieba, kb_metrics **out, kv_error *err)
{
    kb_metrics *m = calloc(1, sizeof *m);
    *out = NULL;
    if (!m)
        return kv_fail(err, "out of memory");
    m->jieba = jieba;
    /* Python's re \d is any decimal digit (Nd); PCRE2 with UCP agrees. */
    m->re_digits = compile("\\d+");
    m->re_paragraph = compile("Paragraph (\\d+)");
    m->re_paragraph_zh = compile("\xe6\xae\xb5\xe8\x90\xbd(\\d+)"); /* 段落 */
    m->md = pcre2_match_data_create(4, NULL);
    if (!m->re_digits || !m->re_paragraph || !m->re_paragraph_zh || !m->md) {
        kb_metrics_free(m);
        return kv_fail(err, "cannot set up the scorers' regular expressions (PCRE2)");
    }
    *out = m;
    return 0;
}

void kb_metrics_free(kb_metrics *m)
{
    if (!m)
        return;
    pcre2_code_free(m->re_digits);
    pcre2_code_free(m->re_paragraph);
    pcre2_code_free(m->re_paragraph_zh);
    pcre2_match_data_free(m->md);
    kb_text *texts[] = {&m->pred, &m->gt, &m->t1, &m->t2, &m->t3, &m->t4};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
        kb_text_free(texts[i]);
    kb_spans_free(&m->sp1);
    kb_spans_free(&m->sp2);
    kb_strmap_free(&m->map);
    u32vec *vecs[] = {&m->a,      &m->b,      &m->words_h, &m->words_r,
                      &m->sent_h, &m->sent_r, &m->row1,    &m->row2};
    for (size_t i = 0; i < sizeof vecs / sizeof vecs[0]; i++)
        vec_free(vecs[i]);
    free(m->table);
    free(m);
}

/* ---- shared pieces ------------------------------------------------------- */

/* Whitespace-separated tokens of t (Python's str.split()), appended to out. */
static int split_ws(const kb_text *t, kb_spans *out)
{
    size_t start = 0;
    bool in_word = false;
    for (size_t i = 0; i < t->len;) {
        size_t at = i;
        bool ws = kv_utf8_py_isspace(kv_utf8_next(t->data, t->len, &i));
        if (ws && in_word) {
            if (kb_spans_push(out, start, at - start) < 0)
                return -1;
            in_word = false;
        } else if (!ws && !in_word) {
            start = at;
            in_word = true;
        }
    }
    return in_word ? kb_spans_push(out, start, t->len - start) : 0;
}

/* metrics.py's f1_score over two token lists (multiset overlap). */
static double f1_tokens(kb_metrics *m, const char *pb, const kb_spans *p, const char *gb,
                        const kb_spans *g)
{
    kb_strmap_clear(&m->map);
    int added;
    for (size_t i = 0; i < p->n; i++) {
        kb_strmap_entry *e = kb_strmap_upsert(&m->map, pb + p->v[i].off, p->v[i].len, 0, &added);
        if (!e)
            return 0.0;
        e->value++;
    }
    size_t same = 0;
    for (size_t i = 0; i < g->n; i++) {
        kb_strmap_entry *e = kb_strmap_find(&m->map, gb + g->v[i].off, g->v[i].len);
        if (e && e->value > 0) {
            e->value--;
            same++;
        }
    }
    if (same == 0)
        return 0.0;
    double precision = 1.0 * (double)same / (double)p->n;
    double recall = 1.0 * (double)same / (double)g->n;
    return (2 * precision * recall) / (precision + recall);
}

/* ---- qa_f1_score ----------------------------------------------------------- */

static bool is_ascii_punct(unsigned char c)
{
    return (c >= '!' && c <= '/') || (c >= ':' && c <= '@') || (c >= '[' && c <= '`') ||
           (c >= '{' && c <= '~');
}

/* The length of the article (a, an, the) at s[at..) when it stands between
 * \b boundaries, else 0. `prev_word`: the character before `at` is \w. */
static size_t article_at(const char *s, size_t n, size_t at, bool prev_word)
{
    if (prev_word || (s[at] != 'a' && s[at] != 't'))
        return 0;
    static const char *const articles[] = {"a", "an", "the"};
    static const size_t lens[] = {1, 2, 3};
    for (int k = 0; k < 3; k++) {
        size_t len = lens[k];
        if (n - at < len || memcmp(s + at, articles[k], len) != 0)
            continue;
        size_t after = at + len;
        if (after == n || !kb_py_isword(kv_utf8_next(s, n, &after)))
            return len;
    }
    return 0;
}

/* normalize_answer(s).split(): lower, drop string.punctuation, replace
 * \b(a|an|the)\b by " ", split on whitespace. Tokens are spans of `out`. */
static int normalize_answer(kb_metrics *m, const char *s, size_t n, kb_text *out, kb_spans *tok)
{
    kb_text *low = &m->t1, *nopunct = &m->t2;
    low->len = nopunct->len = out->len = 0;
    tok->n = 0;
    if (kb_py_lower(s, n, low) < 0 || kb_text_reserve(nopunct, low->len) < 0 ||
        kb_text_reserve(out, low->len) < 0)
        return -1;
    for (size_t i = 0; i < low->len; i++) /* ASCII bytes never occur inside a multibyte char */
        if (!is_ascii_punct((unsigned char)low->data[i]))
            nopunct->data[nopunct->len++] = low->data[i];
    const char *t = nopunct->data;
    size_t len = nopunct->len;
    bool prev_word = false;
    for (size_t i = 0; i < len;) {
        size_t skip = article_at(t, len, i, prev_word);
        if (skip) {
            out->data[out->len++] = ' ';
            i += skip;
            prev_word = true; /* the article's last letter, for the next \b */
            continue;
        }
        if ((unsigned char)t[i] < 0x80) { /* the common case, without decoding */
            prev_word = kb_py_isword((unsigned char)t[i]);
            out->data[out->len++] = t[i++];
            continue;
        }
        size_t at = i;
        prev_word = kb_py_isword(kv_utf8_next(t, len, &i));
        memcpy(out->data + out->len, t + at, i - at);
        out->len += i - at;
    }
    out->data[out->len] = '\0';
    return split_ws(out, tok);
}

static int qa_f1(kb_metrics *m, double *score)
{
    if (normalize_answer(m, m->pred.data, m->pred.len, &m->t3, &m->sp1) < 0 ||
        normalize_answer(m, m->gt.data, m->gt.len, &m->t4, &m->sp2) < 0)
        return -1;
    *score = f1_tokens(m, m->t3.data, &m->sp1, m->t4.data, &m->sp2);
    return 0;
}

/* ---- qa_f1_zh_score -------------------------------------------------------- */

/* metrics.py's cn_punctuation (docs/longbench.md, qa_f1_zh); '.' is in it too. */
static bool is_cn_punct(uint32_t c)
{
    static const uint32_t list[] = {
        0xFF01, 0xFF1F, 0xFF61, 0x3002, 0xFF02, 0xFF03, 0xFF04, 0xFF05, 0xFF06, 0xFF07, 0xFF08,
        0xFF09, 0xFF0A, 0xFF0B, 0xFF0C, 0xFF0D, 0xFF0F, 0xFF1A, 0xFF1B, 0xFF1C, 0xFF1D, 0xFF1E,
        0xFF20, 0xFF3B, 0xFF3C, 0xFF3D, 0xFF3E, 0xFF3F, 0xFF40, 0xFF5B, 0xFF5C, 0xFF5D, 0xFF5E,
        0xFF5F, 0xFF60, 0xFF62, 0xFF63, 0xFF64, 0x3001, 0x3003, 0x300B, 0x300C, 0x300D, 0x300E,
        0x300F, 0x3010, 0x3011, 0x3014, 0x3015, 0x3016, 0x3017, 0x3018, 0x3019, 0x301A, 0x301B,
        0x301C, 0x301D, 0x301E, 0x301F, 0x3030, 0x303E, 0x303F, 0x2013, 0x2014, 0x2018, 0x2019,
        0x201B, 0x201C, 0x201D, 0x201E, 0x201F, 0x2026, 0x2027, 0xFE4F, 0x002E,
    };
    if (c < 0x80)
        return is_ascii_punct((unsigned char)c);
    for (size_t i = 0; i < sizeof list / sizeof list[0]; i++)
        if (list[i] == c)
            return true;
    return false;
}

/* [normalize_zh_answer(t) for t in jieba.cut(s)] without the empty ones:
 * each token lowered, stripped of punctuation and whitespace. */
static int zh_tokens(kb_metrics *m, const kb_text *s, kb_text *out, kb_spans *tok)
{
    kb_spans raw = {0};
    out->len = 0;
    tok->n = 0;
    int rc = kb_jieba_cut(m->jieba, s->data, s->len, &raw);
    for (size_t k = 0; rc == 0 && k < raw.n; k++) {
        m->t1.len = 0;
        if ((rc = kb_py_lower(s->data + raw.v[k].off, raw.v[k].len, &m->t1)) < 0)
            break;
        size_t start = out->len;
        if ((rc = kb_text_reserve(out, m->t1.len)) < 0)
            break;
        for (size_t i = 0; i < m->t1.len;) {
            size_t at = i;
            uint32_t c = kv_utf8_next(m->t1.data, m->t1.len, &i);
            if (is_cn_punct(c) || kv_utf8_py_isspace(c))
                continue;
            memcpy(out->data + out->len, m->t1.data + at, i - at);
            out->len += i - at;
        }
        if (out->len > start)
            rc = kb_spans_push(tok, start, out->len - start);
    }
    kb_spans_free(&raw);
    return rc;
}

static int qa_f1_zh(kb_metrics *m, double *score)
{
    kb_spans p = {0}, g = {0};
    int rc = zh_tokens(m, &m->pred, &m->t3, &p);
    if (rc == 0)
        rc = zh_tokens(m, &m->gt, &m->t4, &g);
    if (rc == 0)
        *score = f1_tokens(m, m->t3.data, &p, m->t4.data, &g);
    kb_spans_free(&p);
    kb_spans_free(&g);
    return rc;
}

/* ---- rouge_score ------------------------------------------------------------ */

/* rouge 1.0.1's preprocessing: sentences = non-empty pieces between ASCII
 * '.', each whitespace-normalised, then split on " ". Appends the word ids of
 * every sentence to `words` and each sentence's end index to `ends`. A
 * whitespace-only piece is one sentence of one empty word. */
static int rouge_sentences(kb_metrics *m, const kb_text *t, u32vec *words, u32vec *ends)
{
    words->n = ends->n = 0;
    for (size_t i = 0; i <= t->len;) {
        const char *dot = memchr(t->data + i, '.', t->len - i);
        size_t end = dot ? (size_t)(dot - t->data) : t->len;
        if (end > i) {
            size_t before = words->n;
            for (size_t k = i; k < end;) {
                size_t at = k;
                if (kv_utf8_py_isspace(kv_utf8_next(t->data, end, &k)))
                    continue;
                size_t w = at;
                while (k < end) {
                    size_t next = k;
                    if (kv_utf8_py_isspace(kv_utf8_next(t->data, end, &next)))
                        break;
                    k = next;
                }
                int added;
                kb_strmap_entry *e =
                    kb_strmap_upsert(&m->map, t->data + w, k - w, (int64_t)m->map.count, &added);
                if (!e || vec_push(words, (uint32_t)e->value) < 0)
                    return -1;
            }
            if (words->n == before) {
                int added;
                kb_strmap_entry *e =
                    kb_strmap_upsert(&m->map, "", 0, (int64_t)m->map.count, &added);
                if (!e || vec_push(words, (uint32_t)e->value) < 0)
                    return -1;
            }
            if (vec_push(ends, (uint32_t)words->n) < 0)
                return -1;
        }
        i = end + 1;
    }
    return 0;
}

static size_t count_unique(const u32vec *words, unsigned char *seen)
{
    size_t n = 0;
    for (size_t i = 0; i < words->n; i++)
        if (!seen[words->v[i]]) {
            seen[words->v[i]] = 1;
            n++;
        }
    for (size_t i = 0; i < words->n; i++)
        seen[words->v[i]] = 0;
    return n;
}

/* _recon_lcs(x, y) for one (reference, hypothesis) sentence pair: marks the
 * backtracked LCS words in `in_union`. Returns 1 when Python would have hit
 * its recursion limit, -1 when out of memory, else 0.
 *
 * The backtrack makes one call per step, so with `budget` steps allowed it
 * only reads the last budget+1 rows and columns of the LCS table: the table
 * is computed row by row and only that corner is kept. */
static int recon_lcs(kb_metrics *m, const uint32_t *x, size_t nx, const uint32_t *y, size_t ny,
                     int frames, unsigned char *in_union)
{
    size_t budget = (size_t)(PY_RECURSION_LIMIT - frames - 1); /* steps allowed */
    if ((nx < ny ? nx : ny) > budget)
        return 1; /* every path to row or column 0 is at least that long */
    size_t r0 = nx > budget ? nx - budget : 0, c0 = ny > budget ? ny - budget : 0;
    size_t w = ny - c0 + 1, h = nx - r0 + 1;
    if (vec_reserve(&m->row1, ny + 1) < 0 || vec_reserve(&m->row2, ny + 1) < 0)
        return -1;
    if (w * h > m->table_cap) {
        uint32_t *t = realloc(m->table, w * h * sizeof *t);
        if (!t)
            return -1;
        m->table = t;
        m->table_cap = w * h;
    }
    uint32_t *prev = m->row1.v, *cur = m->row2.v;
    memset(prev, 0, (ny + 1) * sizeof *prev);
    if (r0 == 0)
        memcpy(m->table, prev + c0, w * sizeof *prev);
    for (size_t i = 1; i <= nx; i++) {
        cur[0] = 0;
        for (size_t j = 1; j <= ny; j++)
            cur[j] = x[i - 1] == y[j - 1]   ? prev[j - 1] + 1
                     : prev[j] > cur[j - 1] ? prev[j]
                                            : cur[j - 1];
        if (i >= r0)
            memcpy(m->table + (i - r0) * w, cur + c0, w * sizeof *cur);
        uint32_t *t = prev;
        prev = cur;
        cur = t;
    }
#define T(i, j) m->table[((i)-r0) * w + ((j)-c0)]
    size_t i = nx, j = ny, calls = 1;
    while (i > 0 && j > 0) {
        if (++calls + (size_t)frames > PY_RECURSION_LIMIT)
            return 1;
        if (x[i - 1] == y[j - 1]) {
            in_union[x[i - 1]] = 1;
            i--, j--;
        } else if (T(i - 1, j) > T(i, j - 1)) {
            i--;
        } else {
            j--;
        }
    }
#undef T
    return 0;
}

/* rouge_score on valid UTF-8; any failure (an exception in Python) is 0. */
static double rouge_l(kb_metrics *m, const kb_text *hyp, const kb_text *ref, int frames)
{
    double f = 0.0;
    unsigned char *seen = NULL;
    kb_strmap_clear(&m->map);
    if (rouge_sentences(m, hyp, &m->words_h, &m->sent_h) < 0 ||
        rouge_sentences(m, ref, &m->words_r, &m->sent_r) < 0)
        goto done;
    if (m->sent_h.n == 0 || m->sent_r.n == 0)
        goto done; /* rouge raises ValueError: "Hypothesis is empty" */
    seen = calloc(m->map.count + 1, 2);
    if (!seen)
        goto done;
    unsigned char *in_union = seen + m->map.count + 1;
    size_t nref = count_unique(&m->words_r, seen), nhyp = count_unique(&m->words_h, seen);
    for (size_t r = 0, rs = 0; r < m->sent_r.n; rs = m->sent_r.v[r++]) {
        for (size_t h = 0, hs = 0; h < m->sent_h.n; hs = m->sent_h.v[h++]) {
            int rc = recon_lcs(m, m->words_r.v + rs, m->sent_r.v[r] - rs, m->words_h.v + hs,
                               m->sent_h.v[h] - hs, frames, in_union);
            if (rc != 0)
                goto done; /* RecursionError (or no memory): 0 */
        }
    }
    size_t llcs = 0;
    for (size_t k = 0; k < m->map.count; k++)
        llcs += in_union[k];
    double r_lcs = (double)llcs / (double)nref, p_lcs = (double)llcs / (double)nhyp;
    f = 2.0 * ((p_lcs * r_lcs) / (p_lcs + r_lcs + 1e-8));
done:
    free(seen);
    return f;
}

double kb_rouge_l(kb_metrics *m, const char *pred, const char *gt, int frames)
{
    kb_text hyp = {0}, ref = {0};
    double f = 0.0;
    if (kb_utf8_sanitize(pred, strlen(pred), &hyp) == 0 &&
        kb_utf8_sanitize(gt, strlen(gt), &ref) == 0)
        f = rouge_l(m, &hyp, &ref, frames);
    kb_text_free(&hyp);
    kb_text_free(&ref);
    return f;
}

/* " ".join(jieba.cut(s)) */
static int jieba_join(kb_metrics *m, const kb_text *s, kb_text *out)
{
    kb_spans sp = {0};
    out->len = 0;
    int rc = kb_jieba_cut(m->jieba, s->data, s->len, &sp);
    for (size_t k = 0; rc == 0 && k < sp.n; k++) {
        if (k)
            rc = kb_text_append(out, " ", 1);
        if (rc == 0)
            rc = kb_text_append(out, s->data + sp.v[k].off, sp.v[k].len);
    }
    if (rc == 0)
        rc = kb_text_reserve(out, 0);
    if (rc == 0)
        out->data[out->len] = '\0';
    kb_spans_free(&sp);
    return rc;
}

static int rouge_zh(kb_metrics *m, double *score)
{
    if (jieba_join(m, &m->pred, &m->t3) < 0 || jieba_join(m, &m->gt, &m->t4) < 0)
        return -1;
    *score = rouge_l(m, &m->t3, &m->t4, ROUGE_ZH_FRAMES);
    return 0;
}

/* ---- classification_score -------------------------------------------------- */

static bool contains(kv_str hay, kv_str needle)
{
    return memmem(hay.p, hay.n, needle.p, needle.n) != NULL;
}

static int classification(const kb_text *pred, kv_str gt, const kb_classes *c, double *score)
{
    kv_str *list = malloc((c->n ? c->n : 1) * sizeof *list);
    if (!list)
        return -1;
    size_t n = 0;
    kv_str p = {pred->data, pred->len};
    for (size_t k = 0; k < c->n; k++)
        if (contains(p, c->names[k]))
            list[n++] = c->names[k];
    /* `for t in L: if ...: L.remove(t)` iterates by index over the live list:
     * removing the first equal element shifts the next one under the cursor,
     * and the cursor still moves on, so that element is never examined. */
    for (size_t i = 0; i < n; i++) {
        kv_str t = list[i];
        if (contains(gt, t) && !kv_str_eq(t, gt)) {
            size_t first = 0;
            while (!kv_str_eq(list[first], t))
                first++;
            memmove(list + first, list + first + 1, (n - first - 1) * sizeof *list);
            n--;
        }
    }
    *score = 0.0;
    for (size_t k = 0; k < n; k++)
        if (kv_str_eq(list[k], gt)) {
            *score = 1.0 / (double)n;
            break;
        }
    free(list);
    return 0;
}

/* ---- retrieval_score, retrieval_zh_score, count_score ------------------------ */

/* (#re.findall(r"\d+", pred) equal to target) / #numbers, 0 without numbers. */
static double digit_share(kb_metrics *m, const kb_text *pred, const char *target, size_t tlen)
{
    size_t numbers = 0, right = 0;
    PCRE2_SIZE at = 0;
    while (at <= pred->len && pcre2_match(m->re_digits, (PCRE2_SPTR)pred->data, pred->len, at,
                                          PCRE2_NO_UTF_CHECK, m->md, NULL) > 0) {
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(m->md);
        numbers++;
        right += ov[1] - ov[0] == tlen && memcmp(pred->data + ov[0], target, tlen) == 0;
        at = ov[1]; /* \d+ never matches empty */
    }
    return numbers == 0 ? 0.0 : (double)right / (double)numbers;
}

static int retrieval(kb_metrics *m, pcre2_code *re, const char *what, double *score, kv_error *err)
{
    if (pcre2_match(re, (PCRE2_SPTR)m->gt.data, m->gt.len, 0, PCRE2_NO_UTF_CHECK, m->md, NULL) < 2)
        return kv_fail(err, "the answer '%.80s' has no '%s' (LongBench's metric raises IndexError)",
                       m->gt.data, what);
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(m->md);
    size_t len = ov[3] - ov[2];
    char *target = malloc(len + 1);
    if (!target)
        return kv_fail(err, "out of memory");
    memcpy(target, m->gt.data + ov[2], len);
    *score = digit_share(m, &m->pred, target, len);
    free(target);
    return 0;
}

/* ---- code_sim_score ------------------------------------------------------------ */

static int decode(const char *s, size_t n, u32vec *out)
{
    out->n = 0;
    if (vec_reserve(out, n + 1) < 0)
        return -1;
    for (size_t i = 0; i < n;)
        out->v[out->n++] = kv_utf8_next(s, n, &i);
    return 0;
}

typedef struct matcher {
    const uint32_t *a, *b;
    size_t la, lb;
    const uint32_t *pos; /* positions j of b sorted by (b[j], j); popular chars removed */
    const uint32_t *run; /* for each i of a: start of a[i]'s positions in pos */
    const uint32_t *run_len;
    uint32_t *len[2];   /* j2len of the previous and current row */
    uint64_t *stamp[2]; /* which row each len[] entry belongs to */
    uint64_t *next_stamp;
} matcher;

static int cmp_pair(const void *x, const void *y)
{
    const uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return a < b ? -1 : a > b;
}

/* find_longest_match(alo, ahi, blo, bhi) of difflib, no junk function. */
static void longest_match(matcher *mt, size_t alo, size_t ahi, size_t blo, size_t bhi, size_t *bi,
                          size_t *bj, size_t *bk)
{
    size_t besti = alo, bestj = blo, bestsize = 0;
    uint64_t prev_row = 0; /* 0: no previous row (an empty j2len) */
    for (size_t i = alo; i < ahi; i++) {
        uint64_t row = ++*mt->next_stamp;
        int cur = (int)(row & 1), old = !cur;
        const uint32_t *p = mt->pos + mt->run[i];
        for (size_t q = 0; q < mt->run_len[i]; q++) {
            size_t j = p[q];
            if (j < blo)
                continue;
            if (j >= bhi)
                break;
            size_t k = 1;
            if (j > 0 && prev_row && mt->stamp[old][j - 1] == prev_row)
                k = mt->len[old][j - 1] + 1;
            mt->len[cur][j] = (uint32_t)k;
            mt->stamp[cur][j] = row;
            if (k > bestsize) {
                besti = i - k + 1;
                bestj = j - k + 1;
                bestsize = k;
            }
        }
        prev_row = row;
    }
    /* Popular characters are not junk: the match grows through them. */
    while (besti > alo && bestj > blo && mt->a[besti - 1] == mt->b[bestj - 1])
        besti--, bestj--, bestsize++;
    while (besti + bestsize < ahi && bestj + bestsize < bhi &&
           mt->a[besti + bestsize] == mt->b[bestj + bestsize])
        bestsize++;
    *bi = besti, *bj = bestj, *bk = bestsize;
}

/* Sum of get_matching_blocks() sizes; -1 when out of memory. */
static long matching_total(matcher *mt)
{
    size_t cap = 0, top = 0;
    size_t(*stack)[4] = NULL;
    if (KV_VEC_RESERVE(stack, cap, 64, 64) < 0)
        return -1;
    stack[top][0] = 0, stack[top][1] = mt->la, stack[top][2] = 0, stack[top][3] = mt->lb;
    top++;
    long total = 0;
    while (top) {
        top--;
        size_t alo = stack[top][0], ahi = stack[top][1], blo = stack[top][2], bhi = stack[top][3];
        size_t i, j, k;
        longest_match(mt, alo, ahi, blo, bhi, &i, &j, &k);
        if (!k)
            continue;
        total += (long)k;
        if (KV_VEC_RESERVE(stack, cap, top + 2, 64) < 0) {
            free(stack);
            return -1;
        }
        if (alo < i && blo < j) {
            stack[top][0] = alo, stack[top][1] = i, stack[top][2] = blo, stack[top][3] = j;
            top++;
        }
        if (i + k < ahi && j + k < bhi) {
            stack[top][0] = i + k, stack[top][1] = ahi, stack[top][2] = j + k, stack[top][3] = bhi;
            top++;
        }
    }
    free(stack);
    return total;
}

/* Matches of difflib.SequenceMatcher(None, a, b); -1 when out of memory. */
static long difflib_matches(kb_metrics *m, const u32vec *a, const u32vec *b)
{
    size_t la = a->n, lb = b->n;
    uint64_t *pairs = malloc((lb ? lb : 1) * sizeof *pairs);
    uint32_t *pos = malloc((lb ? lb : 1) * sizeof *pos);
    uint32_t *run = malloc((la ? la : 1) * 2 * sizeof *run);
    uint32_t *lens = malloc((lb ? lb : 1) * 2 * sizeof *lens);
    uint64_t *stamps = calloc((lb ? lb : 1) * 2, sizeof *stamps);
    long total = -1;
    if (!pairs || !pos || !run || !lens || !stamps)
        goto done;
    for (size_t j = 0; j < lb; j++)
        pairs[j] = (uint64_t)b->v[j] << 32 | j;
    qsort(pairs, lb, sizeof *pairs, cmp_pair);
    /* b2j, with autojunk: when len(b) >= 200, characters occurring more than
     * len(b)//100 + 1 times are dropped from the index. */
    size_t npos = 0;
    for (size_t s = 0; s < lb;) {
        size_t e = s;
        while (e < lb && pairs[e] >> 32 == pairs[s] >> 32)
            e++;
        bool popular = lb >= 200 && e - s > lb / 100 + 1;
        for (size_t q = s; q < e && !popular; q++)
            pos[npos++] = (uint32_t)pairs[q];
        pairs[s] = (pairs[s] & ~0xffffffffull) | (popular ? UINT32_MAX : npos - (e - s));
        for (size_t q = s + 1; q < e; q++)
            pairs[q] = pairs[s];
        s = e;
    }
    /* For each character of a, its run of positions (binary search). */
    uint32_t *run_len = run + la;
    for (size_t i = 0; i < la; i++) {
        size_t lo = 0, hi = lb;
        uint64_t key = (uint64_t)a->v[i] << 32;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if ((pairs[mid] & ~0xffffffffull) < key)
                lo = mid + 1;
            else
                hi = mid;
        }
        run[i] = run_len[i] = 0;
        if (lo < lb && pairs[lo] >> 32 == a->v[i] && (uint32_t)pairs[lo] != UINT32_MAX) {
            size_t e = lo;
            while (e < lb && pairs[e] >> 32 == a->v[i])
                e++;
            run[i] = (uint32_t)pairs[lo];
            run_len[i] = (uint32_t)(e - lo);
        }
    }
    matcher mt = {
        a->v, b->v, la, lb, pos, run, run_len, {lens, lens + lb}, {stamps, stamps + lb}, &m->stamp};
    total = matching_total(&mt);
done:
    free(pairs);
    free(pos);
    free(run);
    free(lens);
    free(stamps);
    return total;
}

double kb_difflib_ratio(kb_metrics *m, const char *a, const char *b)
{
    if (decode(a, strlen(a), &m->a) < 0 || decode(b, strlen(b), &m->b) < 0)
        return 0.0;
    size_t t = m->a.n + m->b.n;
    if (t == 0)
        return 1.0;
    long matches = difflib_matches(m, &m->a, &m->b);
    return matches < 0 ? 0.0 : 2.0 * (double)matches / (double)t;
}

static int fuzz_ratio_decoded(kb_metrics *m)
{
    size_t la = m->a.n, lb = m->b.n;
    if (la == lb && memcmp(m->a.v, m->b.v, la * sizeof *m->a.v) == 0)
        return 100; /* equal strings, even two empty ones */
    if (la == 0 || lb == 0)
        return 0;
    long matches = difflib_matches(m, &m->a, &m->b);
    if (matches < 0)
        return -1;
    double ratio = 2.0 * (double)matches / (double)(la + lb);
    /* int(round(100 * ratio)): Python rounds halves to even, as nearbyint does. */
    return (int)nearbyint(100 * ratio);
}

int kb_fuzz_ratio(kb_metrics *m, const char *a, const char *b)
{
    if (decode(a, strlen(a), &m->a) < 0 || decode(b, strlen(b), &m->b) < 0)
        return -1;
    return fuzz_ratio_decoded(m);
}

/* The first line of pred.lstrip('\n') with no '`', '#' or "//", else "". */
static void code_line(const kb_text *pred, size_t *start, size_t *len)
{
    const char *s = pred->data, *end = s + pred->len;
    while (s < end && *s == '\n')
        s++;
    while (s <= end) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        const char *e = nl ? nl : end;
        bool bad = false;
        for (const char *p = s; p < e && !bad; p++)
            bad = *p == '`' || *p == '#' || (*p == '/' && p + 1 < e && p[1] == '/');
        if (!bad) {
            *start = (size_t)(s - pred->data);
            *len = (size_t)(e - s);
            return;
        }
        if (!nl)
            break;
        s = nl + 1;
    }
    *start = *len = 0;
}

static int code_sim(kb_metrics *m, double *score)
{
    size_t start, len;
    code_line(&m->pred, &start, &len);
    if (decode(m->pred.data + start, len, &m->a) < 0 || decode(m->gt.data, m->gt.len, &m->b) < 0)
        return -1;
    int r = fuzz_ratio_decoded(m);
    if (r < 0)
        return -1;
    *score = (double)r / 100;
    return 0;
}

static char search_letter(const char *pattern, const char *s, size_t n)
{
    int code;
    PCRE2_SIZE at;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, 0, &code, &at, NULL);
    pcre2_match_data *md = re ? pcre2_match_data_create_from_pattern(re, NULL) : NULL;
    char letter = 0;
    if (md && pcre2_match(re, (PCRE2_SPTR)s, n, 0, 0, md, NULL) >= 2)
        letter = s[pcre2_get_ovector_pointer(md)[2]];
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    return letter;
}

char kb_v2_extract_answer(kv_str response)
{
    char *s = malloc(response.n + 1);
    if (!s)
        return 0;
    size_t n = 0;
    for (size_t i = 0; i < response.n; i++) /* response.replace('*', '') */
        if (response.p[i] != '*')
            s[n++] = response.p[i];
    s[n] = '\0';
    char letter = search_letter("The correct answer is \\(([A-D])\\)", s, n);
    if (!letter)
        letter = search_letter("The correct answer is ([A-D])", s, n);
    free(s);
    return letter;
}

char kb_v2_letter(kv_str pred)
{
    if (pred.n == 1 && pred.p[0] >= 'A' && pred.p[0] <= 'D')
        return pred.p[0];
    return kb_v2_extract_answer(pred);
}

/* ---- dispatch --------------------------------------------------------------- */

int kb_metric_score(kb_metrics *m, kb_metric metric, kv_str pred, kv_str gt,
                    const kb_classes *classes, double *score, kv_error *err)
{
    *score = 0.0;
    if ((unsigned)metric >= KB_N_METRICS)
        return kv_fail(err, "unknown metric %d", (int)metric);
    if (kb_metric_needs_jieba(metric) && !m->jieba)
        return kv_fail(err,
                       "%s needs jieba's dictionary, which is not loaded; install it with "
                       "`apt-get install python3-jieba`",
                       kb_metric_name(metric));
    if (metric == KB_CLASSIFICATION && !classes)
        return kv_fail(err, "classification_score needs the task's all_classes list");
    if (metric == KB_ACCURACY) { /* on the raw bytes, as result.py's re.search */
        char letter = kb_v2_letter(pred);
        *score = letter && gt.n == 1 && letter == gt.p[0];
        return 0;
    }
    if (kb_utf8_sanitize(pred.p, pred.n, &m->pred) < 0 || kb_utf8_sanitize(gt.p, gt.n, &m->gt) < 0)
        return kv_fail(err, "out of memory");
    int rc = 0;
    switch (metric) {
    case KB_QA_F1:
        rc = qa_f1(m, score);
        break;
    case KB_QA_F1_ZH:
        rc = qa_f1_zh(m, score);
        break;
    case KB_ROUGE:
        *score = rouge_l(m, &m->pred, &m->gt, ROUGE_FRAMES);
        break;
    case KB_ROUGE_ZH:
        rc = rouge_zh(m, score);
        break;
    case KB_CLASSIFICATION:
        rc = classification(&m->pred, (kv_str){m->gt.data, m->gt.len}, classes, score);
        break;
    case KB_RETRIEVAL:
        return retrieval(m, m->re_paragraph, "Paragraph N", score, err);
    case KB_RETRIEVAL_ZH:
        return retrieval(m, m->re_paragraph_zh,
                         "\xe6\xae\xb5\xe8\x90\xbd"
                         "N",
                         score, err);
    case KB_COUNT:
        *score = digit_share(m, &m->pred, m->gt.data, m->gt.len);
        break;
    case KB_CODE_SIM:
        rc = code_sim(m, score);
        break;
    default:
        break;
    }
    return rc < 0 ? kv_fail(err, "out of memory while scoring") : 0;
}

bool kb_metrics_has_jieba(const kb_metrics *m)
{
    return m->jieba != NULL;
}
