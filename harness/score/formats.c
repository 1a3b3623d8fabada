#include "score/formats.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/file.h"
#include "util/jsonstr.h"
#include "util/utf8.h"
#include "util/vec.h"

int kb_pred_format_parse(const char *name, kb_pred_format *out)
{
    static const char *const names[] = {"longbench", "kvpress", "lm-eval"};
    for (int i = 0; i < 3; i++)
        if (strcmp(name, names[i]) == 0) {
            *out = (kb_pred_format)i;
            return 0;
        }
    return -1;
}

/* ---- which files -------------------------------------------------------- */

/* Whether a file name is one of the format's prediction files. */
static bool is_pred_file(const char *name, kb_pred_format f)
{
    switch (f) {
    case KB_FORMAT_LONGBENCH:
        return kv_ends_with(name, "jsonl"); /* eval.py: filename.endswith("jsonl") */
    case KB_FORMAT_KVPRESS:
        return strcmp(name, "predictions.csv") == 0;
    case KB_FORMAT_LM_EVAL:
        return strncmp(name, "samples_", 8) == 0 && kv_ends_with(name, ".jsonl");
    }
    return false;
}

static const char *files_of(kb_pred_format f)
{
    return f == KB_FORMAT_KVPRESS   ? "predictions.csv"
           : f == KB_FORMAT_LM_EVAL ? "samples_*.jsonl"
                                    : "*.jsonl";
}

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The format's files in folder dir (paths, name order); 0 of them is no error. */
static int pred_files(const char *dir, kb_pred_format f, char ***out, size_t *n, kv_error *err)
{
    char **names;
    size_t count;
    *out = NULL;
    *n = 0;
    if (kv_dir_list(dir, NULL, &names, &count, err) < 0)
        return -1;
    int rc = (*out = calloc(count + 1, sizeof **out)) ? 0 : kv_fail(err, "out of memory");
    for (size_t i = 0; i < count; i++) {
        char *path = rc == 0 && is_pred_file(names[i], f) ? kv_path_join(dir, names[i]) : NULL;
        if (path && !is_dir(path))
            (*out)[(*n)++] = path;
        else
            free(path);
    }
    kv_names_free(names, count);
    return rc;
}

static int add_group(kb_pred_group **g, size_t *n, size_t *cap, const char *name, char **files,
                     size_t n_files, kv_error *err)
{
    if (KV_VEC_RESERVE(*g, *cap, *n + 1, 8) < 0 || !((*g)[*n].name = strdup(name))) {
        kv_names_free(files, n_files);
        return kv_fail(err, "out of memory");
    }
    (*g)[*n].files = files;
    (*g)[(*n)++].n_files = n_files;
    return 0;
}

int kb_pred_groups(const char *path, kb_pred_format f, kb_pred_group **out, size_t *n,
                   kv_error *err)
{
    *out = NULL;
    *n = 0;
    size_t cap = 0;
    struct stat st;
    if (stat(path, &st) != 0)
        return kv_fail(err, "%s: %s", path, strerror(errno));
    if (!S_ISDIR(st.st_mode)) {
        char **one = calloc(2, sizeof *one);
        if (!one || !(one[0] = strdup(path))) {
            free(one);
            return kv_fail(err, "out of memory");
        }
        return add_group(out, n, &cap, "", one, 1, err);
    }
    char **files;
    size_t n_files;
    if (pred_files(path, f, &files, &n_files, err) < 0)
        return -1;
    if (n_files) /* one model's folder */
        return add_group(out, n, &cap, "", files, n_files, err);
    kv_names_free(files, 0);
    /* a parent: one folder per model (pred/<model>/, an output folder) */
    char **names;
    size_t count;
    if (kv_dir_list(path, NULL, &names, &count, err) < 0)
        return -1;
    int rc = 0;
    for (size_t i = 0; i < count && rc == 0; i++) {
        char *sub = kv_path_join(path, names[i]);
        if (!sub)
            rc = kv_fail(err, "out of memory");
        else if (is_dir(sub) && (rc = pred_files(sub, f, &files, &n_files, err)) == 0)
            rc = n_files ? add_group(out, n, &cap, names[i], files, n_files, err)
                         : (kv_names_free(files, 0), 0);
        free(sub);
    }
    kv_names_free(names, count);
    if (rc == 0 && *n == 0)
        rc = kv_fail(err, "%s: no %s prediction files here nor in its sub-folders (one per model)",
                     path, files_of(f));
    if (rc < 0) {
        kb_pred_groups_free(*out, *n);
        *out = NULL;
        *n = 0;
    }
    return rc;
}

void kb_pred_groups_free(kb_pred_group *g, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(g[i].name);
        kv_names_free(g[i].files, g[i].n_files);
    }
    free(g);
}

/* ---- records as LongBench lines ---------------------------------------- */

/* Adds the LongBench line o (pred, answers, all_classes, length, dataset,
 * _id) to p; o is released. */
static int add_line(kb_predictions *p, json_t *o, const char *path, long lineno, kv_error *err)
{
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL; /* NULs as \u0000 */
    json_decref(o);
    if (!text)
        return kv_fail(err, "out of memory");
    int rc = kb_predictions_add(p, text, strlen(text), path, lineno, err);
    free(text);
    return rc;
}

/* "qasper-e" (kvpress) and "longbench_qasper_e" (lm-eval) are LongBench's "qasper_e". */
static char *task_name(const char *s, size_t n)
{
    if (n > 10 && strncmp(s, "longbench_", 10) == 0)
        s += 10, n -= 10;
    char *t = strndup(s, n);
    if (t && n > 2 && strcmp(t + n - 2, "-e") == 0)
        t[n - 2] = '_';
    return t;
}

/* ---- Python's repr of a list of strings ---------------------------------- */

/* One Python string literal at s[*i] ('...' or "..."), decoded into b. */
static int py_string(const char *s, size_t n, size_t *i, kv_strbuf *b, kv_error *err)
{
    char q = s[(*i)++];
    static const char simple_in[] = "\\'\"nrtabfv0", simple_out[] = "\\'\"\n\r\t\a\b\f\v";
    while (*i < n && s[*i] != q) {
        if (s[*i] != '\\') {
            if (kv_strbuf_add(b, &s[(*i)++], 1) < 0)
                return kv_fail(err, "out of memory");
            continue;
        }
        char e = *i + 1 < n ? s[*i + 1] : 0;
        const char *at = e ? strchr(simple_in, e) : NULL;
        size_t digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
        char out[4];
        size_t len = 1;
        uint32_t cp;
        if (at) {
            out[0] = at[0] == '0' ? '\0' : simple_out[at - simple_in];
        } else if (digits && *i + 2 + digits <= n && kv_hex_value(s + *i + 2, digits, &cp) == 0 &&
                   cp <= 0x10FFFF) {
            len = kv_utf8_encode(cp, out);
        } else {
            return kv_fail(err, "byte %zu: an escape Python's repr does not write", *i + 1);
        }
        if (kv_strbuf_add(b, out, len) < 0)
            return kv_fail(err, "out of memory");
        *i += 2 + digits;
    }
    if (*i >= n)
        return kv_fail(err, "a string that does not end");
    (*i)++;
    return 0;
}

int kb_py_list_to_json(const char *s, size_t n, kv_strbuf *out, kv_error *err)
{
    size_t i = 0;
    while (i < n && strchr(" \t\r\n", s[i]))
        i++;
    if (i == n || (n - i == 4 && memcmp(s + i, "None", 4) == 0)) /* pandas writes None as "" */
        return kv_strbuf_puts(out, "null") < 0 ? kv_fail(err, "out of memory") : 0;
    if (s[i] != '[')
        return kv_fail(err, "not a list (expected ['...', ...])");
    i++;
    if (kv_strbuf_puts(out, "[") < 0)
        return kv_fail(err, "out of memory");
    bool first = true;
    kv_strbuf item = {0};
    int rc = 0;
    for (;;) {
        while (i < n && strchr(" \t\r\n,", s[i])) /* list: ", "; numpy: spaces, newlines */
            i++;
        if (i < n && s[i] == ']')
            break;
        if (i >= n || (s[i] != '\'' && s[i] != '"')) {
            rc = kv_fail(err, "byte %zu: expected a quoted string or ']'", i + 1);
            break;
        }
        item.len = 0;
        if ((rc = kv_strbuf_add(&item, "", 0)) < 0 || (rc = py_string(s, n, &i, &item, err)) < 0)
            break;
        if ((!first && kv_strbuf_puts(out, ",") < 0) || kv_json_quote(out, item.s, item.len) < 0) {
            rc = kv_fail(err, "out of memory");
            break;
        }
        first = false;
    }
    kv_strbuf_free(&item);
    if (rc == 0 && kv_strbuf_puts(out, "]") < 0)
        rc = kv_fail(err, "out of memory");
    return rc < 0 ? -1 : 0;
}

/* ---- kvpress: predictions.csv ------------------------------------------- */

/* One CSV record (RFC 4180, as pandas writes it: quoted fields may hold
 * commas, doubled quotes and newlines) from s[*pos]; 0 at the end. */
static int csv_record(const char *s, size_t n, size_t *pos, kv_strbuf **fields, size_t *n_fields,
                      size_t *cap, long *line, kv_error *err)
{
    size_t i = *pos;
    *n_fields = 0;
    if (i >= n)
        return 0;
    for (;;) {
        if (KV_VEC_RESERVE(*fields, *cap, *n_fields + 1, 16) < 0)
            return kv_fail(err, "out of memory");
        kv_strbuf *f = &(*fields)[(*n_fields)++];
        *f = (kv_strbuf){0};
        if (kv_strbuf_add(f, "", 0) < 0)
            return kv_fail(err, "out of memory");
        if (i < n && s[i] == '"') {
            for (i++;; i++) {
                if (i >= n)
                    return kv_fail(err, "line %ld: a quoted field that does not end", *line);
                if (s[i] == '"' && i + 1 < n && s[i + 1] == '"')
                    i++;
                else if (s[i] == '"')
                    break;
                *line += s[i] == '\n';
                if (kv_strbuf_add(f, &s[i], 1) < 0)
                    return kv_fail(err, "out of memory");
            }
            i++;
        } else {
            size_t len = strcspn(s + i, ",\r\n");
            if (kv_strbuf_add(f, s + i, len) < 0)
                return kv_fail(err, "out of memory");
            i += len;
        }
        if (i < n && s[i] == ',') {
            i++;
            continue;
        }
        if (i < n && s[i] == '\r')
            i++;
        if (i < n && s[i] != '\n')
            return kv_fail(err, "line %ld: a quoted field followed by more text", *line);
        *pos = i + 1;
        (*line)++;
        return 1;
    }
}

static void fields_free(kv_strbuf *f, size_t n)
{
    for (size_t i = 0; i < n; i++)
        kv_strbuf_free(&f[i]);
}

static int column(kv_strbuf *header, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(header[i].s, name) == 0)
            return (int)i;
    return -1;
}

/* A list cell (Python's repr) as JSON: an array, or null for an empty cell. */
static json_t *list_cell(const kv_strbuf *cell, const char *column, const char *where,
                         kv_strbuf *scratch, kv_error *err)
{
    scratch->len = 0;
    json_t *v = kb_py_list_to_json(cell->s, cell->len, scratch, err) == 0
                    ? kv_json_load(scratch->s, scratch->len, err)
                    : NULL;
    if (!v) {
        kv_fail_prefix(err, column);
        kv_fail_prefix(err, where);
    }
    return v;
}

enum { COL_PRED, COL_ANSWERS, COL_TASK, COL_CLASSES, COL_LENGTH, COL_ID, N_COLS };
static const char *const kvpress_columns[N_COLS] = {"predicted_answer", "answers", "task",
                                                    "all_classes",      "length",  "_id"};

/* One kvpress row (its cells by column) as a LongBench line. */
static json_t *kvpress_line(const kv_strbuf *const cell[N_COLS], const char *where,
                            kv_strbuf *scratch, kv_error *err)
{
    json_t *answers = list_cell(cell[COL_ANSWERS], "answers", where, scratch, err);
    json_t *classes = answers && cell[COL_CLASSES]
                          ? list_cell(cell[COL_CLASSES], "all_classes", where, scratch, err)
                          : json_null();
    if (!answers || !classes) {
        json_decref(answers);
        return NULL;
    }
    char *task = task_name(cell[COL_TASK]->s, cell[COL_TASK]->len);
    json_t *o = json_object();
    bool ok = task && o &&
              json_object_set_new(o, "pred", json_stringn(cell[COL_PRED]->s, cell[COL_PRED]->len)) ==
                  0 &&
              json_object_set_new(o, "dataset", json_string(task)) == 0;
    ok = json_object_set_new(o, "answers", answers) == 0 && ok;
    ok = json_object_set_new(o, "all_classes", classes) == 0 && ok;
    char *end = NULL;
    double length = cell[COL_LENGTH] ? strtod(cell[COL_LENGTH]->s, &end) : 0;
    if (ok && end && end != cell[COL_LENGTH]->s && !*end)
        ok = json_object_set_new(o, "length", json_real(length)) == 0;
    if (ok && cell[COL_ID] && cell[COL_ID]->len)
        ok = json_object_set_new(o, "_id", json_stringn(cell[COL_ID]->s, cell[COL_ID]->len)) == 0;
    free(task);
    if (!ok) {
        json_decref(o);
        kv_fail(err, "out of memory");
        return NULL;
    }
    return o;
}

static int read_kvpress(kb_predictions *p, const char *path, kv_error *err)
{
    char *text = NULL;
    size_t len, pos = 0, n = 0, cap = 0, cap_row = 0, n_header = 0;
    kv_strbuf *row = NULL, *header = NULL, scratch = {0};
    long line = 1;
    if (kv_file_read(path, &text, &len, err) < 0)
        return -1;
    int rc = csv_record(text, len, &pos, &header, &n_header, &cap, &line, err);
    if (rc == 0)
        rc = kv_fail(err, "empty file");
    int col[N_COLS];
    for (int c = 0; rc > 0 && c < N_COLS; c++)
        if ((col[c] = column(header, n_header, kvpress_columns[c])) < 0 && c <= COL_TASK)
            rc = kv_fail(err,
                         "no column \"%s\" (kvpress's predictions.csv has predicted_answer, "
                         "answers, task)",
                         kvpress_columns[c]);
    while (rc > 0) {
        long at = line;
        if ((rc = csv_record(text, len, &pos, &row, &n, &cap_row, &line, err)) <= 0)
            break;
        if (n == 1 && row[0].len == 0) /* a blank line */
            continue;
        char where[4200];
        snprintf(where, sizeof where, "%s:%ld", path, at);
        json_t *o = NULL;
        if (n != n_header) {
            rc = kv_fail(err, "%s: %zu fields, the header has %zu", where, n, n_header);
        } else {
            const kv_strbuf *cell[N_COLS];
            for (int c = 0; c < N_COLS; c++)
                cell[c] = col[c] >= 0 ? &row[col[c]] : NULL;
            o = kvpress_line(cell, where, &scratch, err);
            rc = o && add_line(p, o, path, at, err) == 0 ? 1 : -1;
        }
        fields_free(row, n);
        n = 0;
    }
    if (rc < 0 && strncmp(err->msg, path, strlen(path)) != 0)
        kv_fail_prefix(err, path);
    fields_free(row, n);
    fields_free(header, n_header);
    free(row);
    free(header);
    kv_strbuf_free(&scratch);
    free(text);
    return rc < 0 ? -1 : 0;
}

/* ---- lm-eval: samples_<task>_<date>.jsonl ------------------------------- */

/* "samples_longbench_qasper_2024-06-01T12-00-00.123.jsonl" -> "qasper". */
static char *task_from_file(const char *path)
{
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    base += 8; /* "samples_" */
    const char *end = strrchr(base, '_');
    return task_name(base, end && end > base ? (size_t)(end - base) : strcspn(base, "."));
}

/* The model's text: filtered_resps[0] (or its first element when lm-eval
 * kept a list per request), else resps[0][0]. */
static json_t *lm_eval_pred(const json_t *o)
{
    const json_t *r = json_array_get(json_object_get(o, "filtered_resps"), 0);
    if (json_is_array(r))
        r = json_array_get(r, 0);
    if (!json_is_string(r))
        r = json_array_get(json_array_get(json_object_get(o, "resps"), 0), 0);
    return json_is_string(r) ? json_incref((json_t *)r) : NULL;
}

static json_t *lm_eval_line(const json_t *o, const char *file_task, const char *where,
                            kv_error *err)
{
    const json_t *doc = json_object_get(o, "doc");
    json_t *pred = lm_eval_pred(o);
    const json_t *answers = json_object_get(doc, "answers");
    if (!answers)
        answers = json_object_get(o, "target");
    json_t *list = json_is_string(answers) ? json_pack("[O]", answers) : json_incref((json_t *)answers);
    const json_t *dataset = json_object_get(doc, "dataset");
    json_t *line = json_object();
    const char *const copied[] = {"all_classes", "length", "_id"};
    if (!pred || !list) {
        kv_fail(err, "%s: %s", where,
                !pred ? "no \"filtered_resps\" (or \"resps\") text"
                      : "no \"doc\".\"answers\" (or \"target\")");
        json_decref(pred);
        json_decref(list);
        json_decref(line);
        return NULL;
    }
    bool ok = line && json_object_set_new(line, "pred", pred) == 0 &&
              json_object_set_new(line, "answers", list) == 0 &&
              json_object_set_new(line, "dataset", json_is_string(dataset)
                                                       ? json_incref((json_t *)dataset)
                                                       : json_string(file_task)) == 0;
    for (int k = 0; ok && k < 3; k++) {
        json_t *v = json_object_get(doc, copied[k]);
        if (v)
            ok = json_object_set(line, copied[k], v) == 0;
    }
    if (!ok) {
        json_decref(line);
        kv_fail(err, "out of memory");
        return NULL;
    }
    return line;
}

static int read_lm_eval(kb_predictions *p, const char *path, kv_error *err)
{
    char *text = NULL, *task = task_from_file(path);
    size_t len;
    int rc = task ? kv_file_read(path, &text, &len, err) : kv_fail(err, "out of memory");
    long lineno = 0;
    for (size_t at = 0; rc == 0 && text && at < len;) {
        size_t end = at;
        while (end < len && text[end] != '\n')
            end++;
        lineno++;
        size_t n = end - at;
        const char *s = text + at;
        at = end + 1;
        if (strspn(s, " \t\r") >= n) /* a blank line */
            continue;
        char where[4200];
        snprintf(where, sizeof where, "%s:%ld", path, lineno);
        json_t *o = kv_json_load(s, n, err);
        json_t *line = o ? lm_eval_line(o, task, where, err) : NULL;
        json_decref(o);
        rc = line ? add_line(p, line, path, lineno, err) : -1;
        if (rc < 0 && !o)
            kv_fail_prefix(err, where);
    }
    free(task);
    free(text);
    return rc;
}

int kb_predictions_read_format(kb_predictions *p, const char *file, kb_pred_format f,
                               kv_error *err)
{
    switch (f) {
    case KB_FORMAT_KVPRESS:
        return read_kvpress(p, file, err);
    case KB_FORMAT_LM_EVAL:
        return read_lm_eval(p, file, err);
    case KB_FORMAT_LONGBENCH:
        break;
    }
    return kb_predictions_read(p, file, err);
}
