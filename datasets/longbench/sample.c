#include "longbench/sample.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/file.h"
#include "util/jscan.h"
#include "util/jsonstr.h"
#include "longbench/jsonl.h"
#include "longbench/usertask.h"
#include "util/utf8.h"
#include "util/vec.h"

void lb_sample_free(lb_sample *s)
{
    if (!s)
        return;
    kv_str_free(&s->id);
    kv_str_free(&s->input);
    kv_str_free(&s->context);
    free(s->dataset);
    free(s->language);
    for (size_t i = 0; i < s->n_answers; i++)
        kv_str_free(&s->answers[i]);
    free(s->answers);
    for (size_t i = 0; i < s->n_classes; i++)
        kv_str_free(&s->all_classes[i]);
    free(s->all_classes);
    for (int i = 0; i < 4; i++)
        kv_str_free(&s->choices[i]);
    free(s->domain);
    free(s->difficulty);
    free(s->length_class);
    kv_str_free(&s->cot);
    memset(s, 0, sizeof *s);
}

char *lb_sample_path(const char *dir, const lb_task *task)
{
    if (task->family == LB_FAMILY_V2)
        return kv_path_join(dir, "data.json");
    if (task->family == LB_FAMILY_USER) /* its own file, wherever it is */
        return strdup(lb_user_task_file(task));
    char name[128];
    snprintf(name, sizeof name, "%s.jsonl", task->name);
    char *p = kv_path_join(dir, name);
    if (!p || kv_file_exists(p))
        return p;
    char *data = kv_path_join(dir, "data");
    char *q = data ? kv_path_join(data, name) : NULL;
    free(data);
    if (q && kv_file_exists(q)) {
        free(p);
        return q;
    }
    free(q);
    return p;
}

/* ---- one record ---------------------------------------------------------- */

/* A record is read straight off its text with kv_jscan: each member's value
 * is decoded into its field (strings with their NULs), unknown members are
 * checked and skipped. No DOM is built: a context is megabytes, and a DOM
 * library with length-carrying strings (jansson) loads ten times slower. A
 * repeated key keeps its last value, as Python's json does. */

typedef struct reader {
    kv_jscan j;
    const char *key; /* the member being read, for messages */
    kv_error *err;
} reader;

static int syntax(reader *r)
{
    if (r->j.pos >= r->j.n)
        return kv_fail(r->err, "not valid JSON: the text ends early (%s)", r->j.err);
    return kv_fail(r->err, "not valid JSON at byte %zu: %s", r->j.pos + 1, r->j.err);
}

static int trailing(reader *r)
{
    return kv_fail(r->err, "not valid JSON at byte %zu: text after the record", r->j.pos + 1);
}

static int expect_kind(reader *r, char c, const char *what)
{
    if (kv_jscan_peek(&r->j) == c)
        return 0;
    return kv_fail(r->err, "\"%s\" must be %s, found %s", r->key, what, kv_jscan_kind(&r->j));
}

/* A string value into *out (replacing a repeated key's value). */
static int read_string(reader *r, kv_str *out)
{
    char *buf = NULL;
    size_t cap = 0, len;
    if (kv_jscan_string(&r->j, &buf, &cap, &len) != 0) {
        free(buf);
        return syntax(r);
    }
    kv_str_free(out);
    *out = (kv_str){buf ? buf : strdup(""), len};
    return out->p ? 0 : kv_fail(r->err, "out of memory reading \"%s\"", r->key);
}

/* A text field: every byte kept, NULs included. */
static int read_text(reader *r, kv_str *out)
{
    return expect_kind(r, '"', "a string") < 0 ? -1 : read_string(r, out);
}

/* A metadata field: a C string, so a NUL inside is refused rather than cut. */
static int read_name(reader *r, char **out)
{
    kv_str v = {0};
    if (read_text(r, &v) < 0)
        return -1;
    if (memchr(v.p, '\0', v.n)) {
        kv_str_free(&v);
        return kv_fail(r->err,
                       "\"%s\" holds a NUL character (\\u0000), which kvbench refuses in "
                       "names",
                       r->key);
    }
    free(*out);
    *out = (char *)v.p;
    return 0;
}

/* An array of strings into *out, *n. */
static int read_texts(reader *r, kv_str **out, size_t *n)
{
    if (expect_kind(r, '[', "an array of strings") < 0)
        return -1;
    for (size_t i = 0; i < *n; i++) /* a repeated key */
        kv_str_free(&(*out)[i]);
    *n = 0;
    size_t cap = 0;
    if (KV_VEC_RESERVE(*out, cap, 4, 4) < 0)
        return kv_fail(r->err, "out of memory reading \"%s\"", r->key);
    kv_jscan_eat(&r->j, '[');
    bool more = kv_jscan_peek(&r->j) != ']';
    if (!more)
        r->j.pos++;
    while (more) {
        if (kv_jscan_peek(&r->j) != '"')
            return kv_fail(r->err, "\"%s\"[%zu] must be a string, found %s", r->key, *n,
                           kv_jscan_kind(&r->j));
        if (KV_VEC_RESERVE(*out, cap, *n + 1, 4) < 0)
            return kv_fail(r->err, "out of memory reading \"%s\"", r->key);
        (*out)[*n] = (kv_str){0};
        if (read_string(r, &(*out)[*n]) < 0)
            return -1;
        ++*n;
        if (kv_jscan_next(&r->j, ']', &more) != 0)
            return syntax(r);
    }
    return 0;
}

static int read_length(reader *r, long *out)
{
    double d;
    const char *kind = kv_jscan_kind(&r->j);
    if (strcmp(kind, "a number") != 0)
        return kv_fail(r->err, "\"length\" must be a number, found %s", kind);
    if (kv_jscan_number(&r->j, &d) != 0)
        return syntax(r);
    if (!(d >= 0 && d <= 1e15) || d != floor(d))
        return kv_fail(r->err, "\"length\" must be a whole number >= 0, found %.17g", d);
    *out = (long)d;
    return 0;
}

/* null (the field stays as it is) or what `read` reads. */
static bool take_null(reader *r)
{
    if (kv_jscan_peek(&r->j) != 'n')
        return false;
    return kv_jscan_value(&r->j) == 0;
}

/* Which members a schema reads; the reader of the member named r->key. */
static const char *const choice_keys[4] = {"choice_A", "choice_B", "choice_C", "choice_D"};

typedef struct seen {
    bool length, classes;
} seen;

static int member_v1(reader *r, lb_sample *s, seen *got)
{
    const char *k = r->key;
    if (strcmp(k, "_id") == 0)
        return read_text(r, &s->id);
    if (strcmp(k, "input") == 0)
        return read_text(r, &s->input);
    if (strcmp(k, "context") == 0)
        return read_text(r, &s->context);
    if (strcmp(k, "dataset") == 0)
        return read_name(r, &s->dataset);
    if (strcmp(k, "language") == 0)
        return read_name(r, &s->language);
    if (strcmp(k, "length") == 0)
        return got->length = true, read_length(r, &s->length);
    if (strcmp(k, "answers") == 0)
        return read_texts(r, &s->answers, &s->n_answers);
    if (strcmp(k, "all_classes") == 0) {
        got->classes = true;
        if (take_null(r)) {
            for (size_t i = 0; i < s->n_classes; i++)
                kv_str_free(&s->all_classes[i]);
            free(s->all_classes);
            s->all_classes = NULL;
            s->n_classes = 0;
            return 0;
        }
        return read_texts(r, &s->all_classes, &s->n_classes);
    }
    return kv_jscan_value(&r->j) == 0 ? 0 : syntax(r);
}

static int member_v2(reader *r, lb_sample *s, seen *got)
{
    (void)got;
    const char *k = r->key;
    for (int i = 0; i < 4; i++)
        if (strcmp(k, choice_keys[i]) == 0)
            return read_text(r, &s->choices[i]);
    if (strcmp(k, "_id") == 0)
        return read_text(r, &s->id);
    if (strcmp(k, "question") == 0)
        return read_text(r, &s->input);
    if (strcmp(k, "context") == 0)
        return read_text(r, &s->context);
    if (strcmp(k, "answer") == 0) {
        if (!s->answers && !(s->answers = calloc(1, sizeof *s->answers)))
            return kv_fail(r->err, "out of memory");
        s->n_answers = 1;
        return read_text(r, &s->answers[0]);
    }
    char **optional = strcmp(k, "domain") == 0       ? &s->domain
                      : strcmp(k, "difficulty") == 0 ? &s->difficulty
                      : strcmp(k, "length") == 0     ? &s->length_class
                                                     : NULL;
    if (optional && !take_null(r))
        return read_name(r, optional);
    return optional ? 0 : kv_jscan_value(&r->j) == 0 ? 0 : syntax(r);
}

/* The first required key that the record lacks, or NULL. */
static const char *missing_v1(const lb_sample *s, const seen *got)
{
    return !s->id.p        ? "_id"
           : !s->input.p   ? "input"
           : !s->context.p ? "context"
           : !s->dataset   ? "dataset"
           : !s->language  ? "language"
           : !got->length  ? "length"
           : !s->answers   ? "answers"
           : !got->classes ? "all_classes"
                           : NULL;
}

static const char *missing_v2(const lb_sample *s, const seen *got)
{
    (void)got;
    if (!s->id.p || !s->input.p || !s->context.p)
        return !s->id.p ? "_id" : !s->input.p ? "question" : "context";
    for (int i = 0; i < 4; i++)
        if (!s->choices[i].p)
            return choice_keys[i];
    return !s->answers ? "answer" : NULL;
}

/* v2 records: the answer is a letter; dataset and language are implied. */
static int finish_v2(lb_sample *s, kv_error *err)
{
    kv_str a = s->answers[0];
    if (a.n != 1 || a.p[0] < 'A' || a.p[0] > 'D')
        return kv_fail(err, "\"answer\" must be one of A, B, C, D, found \"%.20s\"", a.p);
    s->dataset = strdup("v2");
    s->language = strdup("en");
    return s->dataset && s->language ? 0 : kv_fail(err, "out of memory");
}

typedef int (*member_fn)(reader *r, lb_sample *s, seen *got);
typedef const char *(*missing_fn)(const lb_sample *s, const seen *got);

static int read_record(reader *r, member_fn member, lb_sample *s, seen *got)
{
    if (kv_jscan_peek(&r->j) != '{') {
        const char *kind = kv_jscan_kind(&r->j);
        if (kv_jscan_value(&r->j) != 0)
            return syntax(r);
        return kv_jscan_peek(&r->j) != 0
                   ? trailing(r)
                   : kv_fail(r->err, "a record must be a JSON object, found %s", kind);
    }
    r->j.pos++;
    bool more = kv_jscan_peek(&r->j) != '}';
    if (!more)
        r->j.pos++;
    char *key = NULL;
    size_t cap = 0, len;
    int rc = 0;
    while (rc == 0 && more) {
        if (kv_jscan_string(&r->j, &key, &cap, &len) != 0 || kv_jscan_eat(&r->j, ':') != 0) {
            rc = syntax(r);
            break;
        }
        r->key = key;
        rc = member(r, s, got);
        if (rc == 0 && kv_jscan_next(&r->j, '}', &more) != 0)
            rc = syntax(r);
    }
    free(key);
    return rc == 0 && kv_jscan_peek(&r->j) != 0 ? trailing(r) : rc;
}

static int parse_with(member_fn member, missing_fn missing, const char *line, size_t len,
                      lb_sample *s, kv_error *err)
{
    memset(s, 0, sizeof *s);
    if (kv_utf8_has_bom(line, len))
        return kv_fail(err, "the line " KV_UTF8_BOM_ERROR);
    size_t ok = kv_utf8_valid_prefix(line, len);
    if (ok < len)
        return kv_fail(err, "invalid UTF-8 at byte %zu (0x%02X)", ok + 1, (unsigned char)line[ok]);
    reader r = {.err = err};
    kv_jscan_init(&r.j, line, len);
    seen got = {0};
    int rc = read_record(&r, member, s, &got);
    const char *lacks = rc == 0 ? missing(s, &got) : NULL;
    if (lacks)
        rc = kv_fail(err, "missing key \"%s\"", lacks);
    if (rc == 0 && s->n_answers == 0 && member == member_v1)
        rc = kv_fail(err, "\"answers\" is empty: a sample needs at least one answer");
    if (rc == 0 && member == member_v2)
        rc = finish_v2(s, err);
    if (rc < 0)
        lb_sample_free(s);
    return rc;
}

int lb_sample_parse(const char *line, size_t len, lb_sample *s, kv_error *err)
{
    return parse_with(member_v1, missing_v1, line, len, s, err);
}

int lb_sample_parse_v2(const char *text, size_t len, lb_sample *s, kv_error *err)
{
    return parse_with(member_v2, missing_v2, text, len, s, err);
}

/* ---- JSON arrays, one element at a time ----------------------------------------- */

/* LongBench v2 ships data.json: one array of large objects. Elements are cut
 * out by a byte scanner that tracks strings and nesting, so that only one
 * element is in memory at a time, as with JSONL. */
typedef struct array_reader {
    FILE *fp;
    char *buf;
    size_t len, cap;
    long line;  /* 1-based line of the current read position */
    long start; /* line where the current element starts */
    long index; /* elements read */
    bool done;
} array_reader;

static int buf_push(array_reader *a, char c)
{
    if (KV_VEC_RESERVE(a->buf, a->cap, a->len + 2, 1 << 16) < 0)
        return -1;
    a->buf[a->len++] = c;
    return 0;
}

static int next_byte(array_reader *a)
{
    int c = getc_unlocked(a->fp);
    a->line += c == '\n';
    return c;
}

static int skip_blanks(array_reader *a)
{
    int c;
    do
        c = next_byte(a);
    while (c == ' ' || c == '\t' || c == '\r' || c == '\n');
    return c;
}

/* 1: an element is in a->buf; 0: the array ended; -1: err says why. */
static int array_next(array_reader *a, kv_error *err)
{
    if (a->done)
        return 0;
    int c = skip_blanks(a);
    if (a->index > 0 && c == ',')
        c = skip_blanks(a);
    else if (a->index > 0 && c != ']' && c != EOF)
        return kv_fail(err, "expected ',' or ']' after element %ld", a->index);
    if (c == ']') {
        a->done = true;
        return 0;
    }
    if (c == EOF)
        return kv_fail(err, "the array is cut short (no closing ']')");
    a->start = a->line;
    a->index++;
    if (c != '{')
        return kv_fail(err, "element %ld is not a JSON object", a->index);
    a->len = 0;
    int depth = 0;
    kv_jbytes st = {0};
    for (; c != EOF; c = next_byte(a)) {
        if (buf_push(a, (char)c) < 0)
            return kv_fail(err, "out of memory reading element %ld", a->index);
        if (!kv_jbytes_outside(&st, c))
            continue;
        if (c == '{' || c == '[') {
            depth++;
        } else if ((c == '}' || c == ']') && --depth == 0) {
            a->buf[a->len] = '\0';
            return 1;
        }
    }
    return kv_fail(err, "the array is cut short inside element %ld", a->index);
}

/* ---- the loader ------------------------------------------------------------ */

struct lb_loader {
    char *path;
    lb_jsonl *lines;    /* JSONL files */
    array_reader array; /* JSON arrays (array.fp != NULL) */
    lb_loader_options opts;
    bool *id_seen; /* per requested id */
    long returned;
    long records;
    long skipped;
    kv_error last_skip;
};

/* Opens path as a JSON array when its first non-blank byte is '['; the
 * array reader then stands after it. */
static bool open_array(lb_loader *l)
{
    if (strcmp(l->path, "-") == 0)
        return false;
    l->array.fp = fopen(l->path, "rb");
    l->array.line = 1;
    if (l->array.fp && skip_blanks(&l->array) == '[')
        return true;
    if (l->array.fp)
        fclose(l->array.fp);
    memset(&l->array, 0, sizeof l->array);
    return false;
}

lb_loader *lb_loader_open(const char *path, const lb_loader_options *opts, kv_error *err)
{
    lb_loader *l = calloc(1, sizeof *l);
    if (!l || !(l->path = strdup(path))) {
        free(l);
        kv_fail(err, "out of memory");
        return NULL;
    }
    if (opts)
        l->opts = *opts;
    if (l->opts.ids && l->opts.n_ids) {
        l->id_seen = calloc(l->opts.n_ids, sizeof *l->id_seen);
        if (!l->id_seen) {
            lb_loader_close(l);
            kv_fail(err, "out of memory");
            return NULL;
        }
    }
    if (!open_array(l) && !(l->lines = lb_jsonl_open(path))) {
        kv_fail(err, "%s: cannot open: %s", path, strerror(errno));
        lb_loader_close(l);
        return NULL;
    }
    return l;
}

/* Is s selected by the ids option? Marks the id as seen. A linear scan: id
 * lists are typed by hand and short. */
static bool selected(lb_loader *l, const lb_sample *s)
{
    if (!l->id_seen)
        return true;
    for (size_t i = 0; i < l->opts.n_ids; i++)
        if (kv_str_eq(l->opts.ids[i], s->id)) {
            l->id_seen[i] = true;
            return true;
        }
    return false;
}

static int check_ids_found(const lb_loader *l, kv_error *err)
{
    if (!l->id_seen)
        return 0;
    for (size_t i = 0; i < l->opts.n_ids; i++)
        if (!l->id_seen[i]) {
            char id[160];
            return kv_fail(err, "%s: no sample has _id %s", l->path,
                           kv_json_quote_to(id, sizeof id, l->opts.ids[i].p, l->opts.ids[i].n));
        }
    return 0;
}

/* The next record's text: 1, 0 at the end, -1 for an error that ends the
 * file (err has "file:line: what"). */
static int next_record(lb_loader *l, const char **text, size_t *len, long *lineno, bool *complete,
                       kv_error *err)
{
    if (l->array.fp) {
        int rc = array_next(&l->array, err);
        if (rc < 0) {
            char where[512];
            snprintf(where, sizeof where, "%s:%ld", l->path, l->array.line);
            return kv_fail_prefix(err, where);
        }
        *text = l->array.buf;
        *len = l->array.len;
        *lineno = l->array.start;
        *complete = true;
        return rc;
    }
    int rc = lb_jsonl_next(l->lines);
    if (rc < 0)
        return kv_fail(err, "%s: read error: %s", l->path, strerror(errno));
    *text = l->lines->line;
    *len = l->lines->len;
    *lineno = l->lines->lineno;
    *complete = l->lines->complete;
    return rc;
}

/* Parses one record; on failure err holds "file:line: what". */
static int parse_record(lb_loader *l, const char *text, size_t len, long lineno, bool complete,
                        lb_sample *s, kv_error *err)
{
    int rc = l->opts.schema == LB_SCHEMA_V2 ? lb_sample_parse_v2(text, len, s, err)
                                            : lb_sample_parse(text, len, s, err);
    if (rc == 0) {
        s->lineno = lineno;
        return 0;
    }
    char where[512];
    snprintf(where, sizeof where, "%s:%ld", l->path, lineno);
    if (!complete) { /* the usual cause of a bad last line: a download cut short */
        kv_error what = *err;
        kv_fail(err, "the last line is cut short (no newline at the end of the file): %s",
                what.msg);
    }
    return kv_fail_prefix(err, where);
}

int lb_loader_next(lb_loader *l, lb_sample *s, kv_error *err)
{
    memset(s, 0, sizeof *s);
    if (l->opts.limit > 0 && l->returned >= l->opts.limit)
        return 0;
    kv_error local;
    if (!err)
        err = &local;
    for (;;) {
        const char *text = NULL;
        size_t len = 0;
        long lineno = 0;
        bool complete = true;
        int rc = next_record(l, &text, &len, &lineno, &complete, err);
        if (rc < 0)
            return -1;
        if (rc == 0)
            return check_ids_found(l, err);
        l->records++;
        if (parse_record(l, text, len, lineno, complete, s, err) < 0) {
            if (l->opts.on_error == LB_ON_ERROR_STOP)
                return -1;
            l->skipped++;
            l->last_skip = *err;
            continue;
        }
        if (!selected(l, s)) {
            lb_sample_free(s);
            continue;
        }
        l->returned++;
        return 1;
    }
}

long lb_loader_skipped(const lb_loader *l)
{
    return l->skipped;
}

const char *lb_loader_last_skip(const lb_loader *l)
{
    return l->last_skip.msg;
}

long lb_loader_records(const lb_loader *l)
{
    return l->records;
}

void lb_loader_close(lb_loader *l)
{
    if (!l)
        return;
    lb_jsonl_close(l->lines);
    if (l->array.fp)
        fclose(l->array.fp);
    free(l->array.buf);
    free(l->id_seen);
    free(l->path);
    free(l);
}
