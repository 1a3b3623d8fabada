#include "sample.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "jsonl.h"

void lb_sample_free(lb_sample *s)
{
    if (!s)
        return;
    free(s->id);
    free(s->input);
    free(s->context);
    free(s->dataset);
    free(s->language);
    for (size_t i = 0; i < s->n_answers; i++)
        free(s->answers[i]);
    free(s->answers);
    for (size_t i = 0; i < s->n_classes; i++)
        free(s->all_classes[i]);
    free(s->all_classes);
    memset(s, 0, sizeof *s);
}

/* ---- one record ---------------------------------------------------------- */

static const char *json_type_name(const cJSON *v)
{
    if (cJSON_IsString(v))
        return "a string";
    if (cJSON_IsNumber(v))
        return "a number";
    if (cJSON_IsArray(v))
        return "an array";
    if (cJSON_IsObject(v))
        return "an object";
    if (cJSON_IsBool(v))
        return "a boolean";
    if (cJSON_IsNull(v))
        return "null";
    return "an invalid value";
}

/* Takes the parsed string out of the cJSON tree instead of copying it: a
 * context is megabytes, and copying it again would halve the loading speed.
 * cJSON_Delete skips a NULL valuestring. */
static char *steal_string(cJSON *v)
{
    char *s = v->valuestring;
    v->valuestring = NULL;
    return s;
}

static int take_string(cJSON *obj, const char *key, char **out, kv_error *err)
{
    cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v)
        return kv_fail(err, "missing key \"%s\"", key);
    if (!cJSON_IsString(v))
        return kv_fail(err, "\"%s\" must be a string, found %s", key, json_type_name(v));
    *out = steal_string(v);
    return 0;
}

/* Fills *out and *n with the strings of a JSON array; min is the least number of
 * elements allowed. */
static int take_string_array(cJSON *v, const char *key, size_t min, char ***out, size_t *n,
                             kv_error *err)
{
    if (!cJSON_IsArray(v))
        return kv_fail(err, "\"%s\" must be an array of strings, found %s", key, json_type_name(v));
    size_t count = (size_t)cJSON_GetArraySize(v);
    if (count < min)
        return kv_fail(err, "\"%s\" is empty: a sample needs at least one answer", key);
    char **arr = calloc(count ? count : 1, sizeof *arr);
    if (!arr)
        return kv_fail(err, "out of memory reading \"%s\"", key);
    size_t i = 0;
    for (cJSON *e = v->child; e; e = e->next, i++) {
        if (!cJSON_IsString(e)) {
            for (size_t j = 0; j < i; j++)
                free(arr[j]);
            free(arr);
            return kv_fail(err, "\"%s\"[%zu] must be a string, found %s", key, i,
                           json_type_name(e));
        }
        arr[i] = steal_string(e);
    }
    *out = arr;
    *n = count;
    return 0;
}

static int take_length(cJSON *obj, long *out, kv_error *err)
{
    cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, "length");
    if (!v)
        return kv_fail(err, "missing key \"length\"");
    if (!cJSON_IsNumber(v))
        return kv_fail(err, "\"length\" must be a number, found %s", json_type_name(v));
    double d = v->valuedouble;
    if (!(d >= 0 && d <= 1e15) || d != floor(d))
        return kv_fail(err, "\"length\" must be a whole number >= 0, found %.17g", d);
    *out = (long)d;
    return 0;
}

static int take_fields(cJSON *obj, lb_sample *s, kv_error *err)
{
    if (take_string(obj, "_id", &s->id, err) < 0 || take_string(obj, "input", &s->input, err) < 0 ||
        take_string(obj, "context", &s->context, err) < 0 ||
        take_string(obj, "dataset", &s->dataset, err) < 0 ||
        take_string(obj, "language", &s->language, err) < 0 ||
        take_length(obj, &s->length, err) < 0)
        return -1;
    cJSON *answers = cJSON_GetObjectItemCaseSensitive(obj, "answers");
    if (!answers)
        return kv_fail(err, "missing key \"answers\"");
    if (take_string_array(answers, "answers", 1, &s->answers, &s->n_answers, err) < 0)
        return -1;
    cJSON *classes = cJSON_GetObjectItemCaseSensitive(obj, "all_classes");
    if (!classes)
        return kv_fail(err, "missing key \"all_classes\"");
    if (cJSON_IsNull(classes))
        return 0;
    return take_string_array(classes, "all_classes", 0, &s->all_classes, &s->n_classes, err);
}

int lb_sample_parse(const char *line, size_t len, lb_sample *s, kv_error *err)
{
    memset(s, 0, sizeof *s);
    const char *end = NULL;
    cJSON *obj = cJSON_ParseWithLengthOpts(line, len, &end, false);
    if (!obj) {
        size_t at = end && end >= line && end <= line + len ? (size_t)(end - line) : 0;
        return kv_fail(err, "not valid JSON (error near byte %zu of %zu)", at + 1, len);
    }
    int rc = 0;
    /* Anything but blanks after the object means two records on one line or garbage. */
    for (const char *p = end; p < line + len && rc == 0; p++)
        if (*p != ' ' && *p != '\t' && *p != '\r')
            rc = kv_fail(err, "unexpected text after the JSON object at byte %zu",
                         (size_t)(p - line) + 1);
    if (rc == 0 && !cJSON_IsObject(obj))
        rc = kv_fail(err, "a record must be a JSON object, found %s", json_type_name(obj));
    if (rc == 0)
        rc = take_fields(obj, s, err);
    cJSON_Delete(obj);
    if (rc < 0)
        lb_sample_free(s);
    return rc;
}

/* ---- the loader ------------------------------------------------------------ */

struct lb_loader {
    lb_jsonl *lines;
    lb_loader_options opts;
    bool *id_seen; /* per requested id */
    long returned;
    long records;
    long skipped;
    kv_error last_skip;
};

lb_loader *lb_loader_open(const char *path, const lb_loader_options *opts, kv_error *err)
{
    lb_loader *l = calloc(1, sizeof *l);
    if (!l) {
        kv_fail(err, "out of memory");
        return NULL;
    }
    if (opts)
        l->opts = *opts;
    if (l->opts.ids && l->opts.n_ids) {
        l->id_seen = calloc(l->opts.n_ids, sizeof *l->id_seen);
        if (!l->id_seen) {
            free(l);
            kv_fail(err, "out of memory");
            return NULL;
        }
    }
    l->lines = lb_jsonl_open(path);
    if (!l->lines) {
        kv_fail(err, "%s: cannot open: %s", path, strerror(errno));
        free(l->id_seen);
        free(l);
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
            return kv_fail(err, "%s: no sample has _id \"%s\"", l->lines->path, l->opts.ids[i]);
    return 0;
}

/* Parses the current line; on failure err holds "file:line: what". */
static int parse_current(lb_loader *l, lb_sample *s, kv_error *err)
{
    lb_jsonl *r = l->lines;
    if (lb_sample_parse(r->line, r->len, s, err) == 0) {
        s->lineno = r->lineno;
        return 0;
    }
    char where[512];
    snprintf(where, sizeof where, "%s:%ld", r->path, r->lineno);
    if (!r->complete && err) { /* the usual cause of a bad last line: a download cut short */
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
    for (;;) {
        int rc = lb_jsonl_next(l->lines);
        if (rc < 0)
            return kv_fail(err, "%s: read error: %s", l->lines->path, strerror(errno));
        if (rc == 0)
            return check_ids_found(l, err);
        l->records++;
        kv_error perr = {{0}};
        if (parse_current(l, s, &perr) < 0) {
            if (l->opts.on_error == LB_ON_ERROR_STOP) {
                if (err)
                    *err = perr;
                return -1;
            }
            l->skipped++;
            l->last_skip = perr;
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
    free(l->id_seen);
    free(l);
}
