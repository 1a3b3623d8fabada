#include "sample.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "file.h"
#include "jscan.h"
#include "jsonl.h"
#include "jsonstr.h"

void lb_sample_free(lb_sample *s)
{
    if (!s)
        return;
    free(s->id);
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

static const char *json_type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
    case JSON_REAL:
        return "a number";
    case JSON_ARRAY:
        return "an array";
    case JSON_OBJECT:
        return "an object";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    default:
        return "null";
    }
}

static const json_t *string_member(const json_t *obj, const char *key, kv_error *err)
{
    const json_t *v = json_object_get(obj, key);
    if (!v)
        kv_fail(err, "missing key \"%s\"", key);
    else if (!json_is_string(v))
        kv_fail(err, "\"%s\" must be a string, found %s", key, json_type_name(v));
    return json_is_string(v) ? v : NULL;
}

/* A text field: every byte kept, NULs included. */
static int take_text(const json_t *obj, const char *key, kv_str *out, kv_error *err)
{
    const json_t *v = string_member(obj, key, err);
    if (!v)
        return -1;
    return kv_json_take(v, out) < 0 ? kv_fail(err, "out of memory reading \"%s\"", key) : 0;
}

/* A key or metadata field: a C string, so a NUL inside is refused rather than cut. */
static int take_name(const json_t *obj, const char *key, char **out, kv_error *err)
{
    const json_t *v = string_member(obj, key, err);
    if (!v)
        return -1;
    if (memchr(json_string_value(v), '\0', json_string_length(v)))
        return kv_fail(err,
                       "\"%s\" holds a NUL character (\\u0000), which kvbench refuses in ids "
                       "and names",
                       key);
    if (!(*out = strdup(json_string_value(v))))
        return kv_fail(err, "out of memory reading \"%s\"", key);
    return 0;
}

/* Fills *out and *n with the strings of a JSON array; min is the least number of
 * elements allowed. */
static int take_text_array(const json_t *v, const char *key, size_t min, kv_str **out, size_t *n,
                           kv_error *err)
{
    if (!json_is_array(v))
        return kv_fail(err, "\"%s\" must be an array of strings, found %s", key, json_type_name(v));
    size_t count = json_array_size(v);
    if (count < min)
        return kv_fail(err, "\"%s\" is empty: a sample needs at least one answer", key);
    kv_str *arr = calloc(count ? count : 1, sizeof *arr);
    if (!arr)
        return kv_fail(err, "out of memory reading \"%s\"", key);
    *out = arr; /* owned by the sample from here: lb_sample_free frees what was taken */
    for (size_t i = 0; i < count; i++) {
        const json_t *e = json_array_get(v, i);
        if (!json_is_string(e))
            return kv_fail(err, "\"%s\"[%zu] must be a string, found %s", key, i,
                           json_type_name(e));
        if (kv_json_take(e, &arr[i]) < 0)
            return kv_fail(err, "out of memory reading \"%s\"", key);
        *n = i + 1;
    }
    return 0;
}

static int take_length(const json_t *obj, long *out, kv_error *err)
{
    const json_t *v = json_object_get(obj, "length");
    if (!v)
        return kv_fail(err, "missing key \"length\"");
    if (!json_is_number(v))
        return kv_fail(err, "\"length\" must be a number, found %s", json_type_name(v));
    double d = json_number_value(v);
    if (!(d >= 0 && d <= 1e15) || d != floor(d))
        return kv_fail(err, "\"length\" must be a whole number >= 0, found %.17g", d);
    *out = (long)d;
    return 0;
}

static int take_fields(const json_t *obj, lb_sample *s, kv_error *err)
{
    if (take_name(obj, "_id", &s->id, err) < 0 || take_text(obj, "input", &s->input, err) < 0 ||
        take_text(obj, "context", &s->context, err) < 0 ||
        take_name(obj, "dataset", &s->dataset, err) < 0 ||
        take_name(obj, "language", &s->language, err) < 0 || take_length(obj, &s->length, err) < 0)
        return -1;
    const json_t *answers = json_object_get(obj, "answers");
    if (!answers)
        return kv_fail(err, "missing key \"answers\"");
    if (take_text_array(answers, "answers", 1, &s->answers, &s->n_answers, err) < 0)
        return -1;
    const json_t *classes = json_object_get(obj, "all_classes");
    if (!classes)
        return kv_fail(err, "missing key \"all_classes\"");
    if (json_is_null(classes))
        return 0;
    return take_text_array(classes, "all_classes", 0, &s->all_classes, &s->n_classes, err);
}

/* An optional name field: absent or null leaves *out NULL. */
static int take_optional_name(const json_t *obj, const char *key, char **out, kv_error *err)
{
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return 0;
    return take_name(obj, key, out, err);
}

static char *dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

/* LongBench v2 (data.json): question, choice_A..D, answer "A".."D", context. */
static int take_fields_v2(const json_t *obj, lb_sample *s, kv_error *err)
{
    static const char *const choice_keys[4] = {"choice_A", "choice_B", "choice_C", "choice_D"};
    if (take_name(obj, "_id", &s->id, err) < 0 || take_text(obj, "question", &s->input, err) < 0 ||
        take_text(obj, "context", &s->context, err) < 0)
        return -1;
    for (int i = 0; i < 4; i++)
        if (take_text(obj, choice_keys[i], &s->choices[i], err) < 0)
            return -1;
    s->answers = calloc(1, sizeof *s->answers);
    if (!s->answers)
        return kv_fail(err, "out of memory");
    if (take_text(obj, "answer", &s->answers[0], err) < 0)
        return -1;
    s->n_answers = 1;
    kv_str a = s->answers[0];
    if (a.n != 1 || a.p[0] < 'A' || a.p[0] > 'D')
        return kv_fail(err, "\"answer\" must be one of A, B, C, D, found \"%.20s\"", a.p);
    if (take_optional_name(obj, "domain", &s->domain, err) < 0 ||
        take_optional_name(obj, "difficulty", &s->difficulty, err) < 0 ||
        take_optional_name(obj, "length", &s->length_class, err) < 0)
        return -1;
    s->dataset = dup_or_null("v2");
    s->language = dup_or_null("en");
    if (!s->dataset || !s->language)
        return kv_fail(err, "out of memory");
    return 0;
}

typedef int (*take_fn)(const json_t *obj, lb_sample *s, kv_error *err);

static int parse_with(take_fn take, const char *line, size_t len, lb_sample *s, kv_error *err)
{
    memset(s, 0, sizeof *s);
    json_t *obj = kv_json_load(line, len, err);
    if (!obj)
        return -1;
    int rc = json_is_object(obj)
                 ? take(obj, s, err)
                 : kv_fail(err, "a record must be a JSON object, found %s", json_type_name(obj));
    json_decref(obj);
    if (rc < 0)
        lb_sample_free(s);
    return rc;
}

int lb_sample_parse(const char *line, size_t len, lb_sample *s, kv_error *err)
{
    return parse_with(take_fields, line, len, s, err);
}

int lb_sample_parse_v2(const char *text, size_t len, lb_sample *s, kv_error *err)
{
    return parse_with(take_fields_v2, text, len, s, err);
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
    if (a->len + 2 > a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 1 << 16;
        char *p = realloc(a->buf, cap);
        if (!p)
            return -1;
        a->buf = p;
        a->cap = cap;
    }
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
        if (strcmp(l->opts.ids[i], s->id) == 0) {
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
        if (!l->id_seen[i])
            return kv_fail(err, "%s: no sample has _id \"%s\"", l->path, l->opts.ids[i]);
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
