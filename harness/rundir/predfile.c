#include "rundir/predfile.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/file.h"
#include "util/jsonstr.h"
#include "rundir/runjson.h"

/* ---- writing a line ---------------------------------------------------- */

static void add_text(kv_strbuf *b, const char *key, kv_str s)
{
    kv_strbuf_puts(b, key);
    kv_json_quote(b, s.p ? s.p : "", s.n);
}

static void add_name(kv_strbuf *b, const char *key, const char *s)
{
    add_text(b, key, kv_str_c(s));
}

static void add_list(kv_strbuf *b, const char *key, const kv_str *v, size_t n)
{
    kv_strbuf_puts(b, key);
    kv_strbuf_puts(b, "[");
    for (size_t i = 0; i < n; i++) {
        if (i)
            kv_strbuf_puts(b, ",");
        kv_json_quote(b, v[i].p, v[i].n);
    }
    kv_strbuf_puts(b, "]");
}

/* A number as lines have always spelled it (cJSON's way): a whole number
 * plainly, else the shortest of 15 or 17 digits that reads back the same;
 * NaN and infinities, which JSON cannot hold, as null. */
static void add_number(kv_strbuf *b, const char *key, double v)
{
    char num[32];
    if (!isfinite(v))
        snprintf(num, sizeof num, "null");
    else if (v == (double)(long long)v && fabs(v) < 1e15 && !signbit(v)) /* -0 below */
        snprintf(num, sizeof num, "%lld", (long long)v);
    else if (snprintf(num, sizeof num, "%1.15g", v), strtod(num, NULL) != v)
        snprintf(num, sizeof num, "%1.17g", v);
    kv_strbuf_puts(b, key);
    kv_strbuf_puts(b, num);
}

/* "length": LongBench's word count, or v2's class; v2 adds its difficulty
 * and answer letter. */
static void add_length(kv_strbuf *b, const kb_prediction *p)
{
    if (!p->length_class) {
        add_number(b, ",\"length\":", (double)p->length);
        return;
    }
    add_name(b, ",\"length\":", p->length_class);
    if (p->difficulty)
        add_name(b, ",\"difficulty\":", p->difficulty);
    if (p->n_answers)
        add_text(b, ",\"answer\":", p->answers[0]);
}

int kb_prediction_format(const kb_prediction *p, kv_strbuf *b)
{
    add_text(b, "{\"id\":", p->id);
    add_number(b, ",\"index\":", (double)p->index);
    add_name(b, ",\"dataset\":", p->task);
    add_name(b, ",\"config\":", p->config);
    if (p->config_hash)
        add_name(b, ",\"config_hash\":", p->config_hash);
    add_text(b, ",\"pred\":", p->pred);
    add_list(b, ",\"answers\":", p->answers, p->n_answers);
    if (p->all_classes)
        add_list(b, ",\"all_classes\":", p->all_classes, p->n_classes);
    else
        kv_strbuf_puts(b, ",\"all_classes\":null");
    add_length(b, p);
    add_number(b, ",\"prompt_tokens\":", p->prompt_tokens);
    add_number(b, ",\"kept_tokens\":", p->kept_tokens);
    add_number(b, ",\"context_tokens\":", p->context_tokens);
    add_number(b, ",\"kept_context_tokens\":", p->kept_context_tokens);
    add_number(b, ",\"generated_tokens\":", p->generated_tokens);
    add_number(b, ",\"prefill_s\":", p->prefill_s);
    add_number(b, ",\"decode_s\":", p->decode_s);
    return kv_strbuf_puts(b, "}");
}

/* ---- reading a line ---------------------------------------------------- */

/* What a read line's views point into: its parsed document, and its
 * answers and classes as kv_str. */
struct kb_pred_held {
    json_t *doc;
    kv_str *texts;
};

static const char *name_of(const json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key)); /* NULL when not a string */
}

static double number_of(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

static kv_str text_of(const json_t *v)
{
    return (kv_str){json_string_value(v), json_string_length(v)};
}

/* A list of strings into views at *at (advanced); false, with no list,
 * when v is not one. */
static bool texts_of(const json_t *v, kv_str **at, const kv_str **out, size_t *n)
{
    size_t k = json_array_size(v);
    for (size_t i = 0; i < k; i++)
        if (!json_is_string(json_array_get(v, i)))
            return false;
    *out = *at;
    *n = k;
    for (size_t i = 0; i < k; i++)
        *(*at)++ = text_of(json_array_get(v, i));
    return json_is_array(v);
}

/* The fields scoring needs, whose absence only scoring minds: NULL, or
 * what is wrong with the first one that is wrong. */
static const char *scoring_fields(const json_t *o, kb_prediction *p, kv_str *texts)
{
    const json_t *pred = json_object_get(o, "pred");
    if (!pred)
        pred = json_object_get(o, "prediction"); /* eval.py's other spelling */
    const json_t *answers = json_object_get(o, "answers");
    const json_t *classes = json_object_get(o, "all_classes");
    if (!json_is_string(pred))
        return "no \"pred\" (or \"prediction\") string";
    p->pred = text_of(pred);
    if (!answers)
        return "no \"answers\" list";
    if (!texts_of(answers, &texts, &p->answers, &p->n_answers))
        return "\"answers\" must be a list of strings";
    if (classes && !json_is_null(classes) &&
        !texts_of(classes, &texts, &p->all_classes, &p->n_classes))
        return "\"all_classes\" must be a list of strings";
    return NULL;
}

/* One line (no '\n', no NUL byte) into p, whose views point into h. -1
 * when it is not a prediction line, -2 when out of memory. */
static int parse_line(const char *s, size_t n, kb_prediction *p, struct kb_pred_held *h)
{
    kv_error ignored; /* the caller says what a line must be */
    json_t *o = kv_json_load(s, n, &ignored);
    const json_t *id = json_object_get(o, "id"), *index = json_object_get(o, "index");
    double at = json_is_number(index) ? json_number_value(index) : -1;
    if (!json_is_object(o) || !json_is_string(id) || !(at >= 0 && at == floor(at))) {
        json_decref(o);
        return -1;
    }
    size_t texts = json_array_size(json_object_get(o, "answers")) +
                   json_array_size(json_object_get(o, "all_classes"));
    *h = (struct kb_pred_held){o, malloc((texts ? texts : 1) * sizeof *h->texts)};
    if (!h->texts) {
        json_decref(o);
        return -2;
    }
    const json_t *length = json_object_get(o, "length");
    *p = (kb_prediction){.id = text_of(id),
                         .index = (long)at,
                         .task = name_of(o, "dataset"),
                         .config = name_of(o, "config"),
                         .config_hash = name_of(o, "config_hash"),
                         .length = json_is_number(length) ? (long)json_number_value(length) : -1,
                         .difficulty = name_of(o, "difficulty"),
                         .length_class = json_string_value(length),
                         .prompt_tokens = number_of(o, "prompt_tokens"),
                         .kept_tokens = number_of(o, "kept_tokens"),
                         .context_tokens = number_of(o, "context_tokens"),
                         .kept_context_tokens = number_of(o, "kept_context_tokens"),
                         .generated_tokens = number_of(o, "generated_tokens"),
                         .prefill_s = number_of(o, "prefill_s"),
                         .decode_s = number_of(o, "decode_s")};
    p->unscorable = scoring_fields(o, p, h->texts);
    return 0;
}

/* ---- reading prediction files ------------------------------------------ */

void kb_pred_lines_free(kb_pred_lines *l)
{
    for (size_t i = 0; i < l->n; i++) {
        free(l->text[i]);
        json_decref(l->held[i].doc);
        free(l->held[i].texts);
    }
    free(l->text);
    free(l->line);
    free(l->held);
    memset(l, 0, sizeof *l);
}

static bool blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n' && s[i] != '\0')
            return false;
    return true;
}

/* Room for one more line, and its verbatim text. */
static int push_text(kb_pred_lines *l, size_t *cap, const char *s, size_t n)
{
    if (l->n == *cap) {
        size_t c = *cap ? 2 * *cap : 64;
        char **t = realloc(l->text, c * sizeof *t);
        if (t)
            l->text = t;
        kb_prediction *p = t ? realloc(l->line, c * sizeof *p) : NULL;
        if (p)
            l->line = p;
        struct kb_pred_held *h = p ? realloc(l->held, c * sizeof *h) : NULL;
        if (!h)
            return -1;
        l->held = h;
        *cap = c;
    }
    return (l->text[l->n] = strndup(s, n)) ? 0 : -1;
}

/* Splits data into complete, valid lines, each parsed once. A cut-short or
 * unparsable last line is dropped (counted); a bad line before the last is
 * an error. */
static int split_lines(const char *path, const char *data, size_t len, kb_pred_lines *out,
                       kv_error *err)
{
    memset(out, 0, sizeof *out);
    size_t cap = 0, pos = 0;
    long lineno = 0;
    while (pos < len) {
        lineno++;
        const char *s = data + pos;
        const char *nl = memchr(s, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - s) : len - pos;
        size_t next = pos + n + (nl ? 1 : 0);
        bool last = blank(data + next, len - next);
        if (blank(s, n) && !last) {
            kb_pred_lines_free(out);
            return kv_fail(err, "%s:%ld: blank line inside a prediction file", path, lineno);
        }
        /* a NUL byte is never part of JSON text; it is what a crash can leave */
        bool parsable = nl && !blank(s, n) && !memchr(s, '\0', n);
        if (parsable && push_text(out, &cap, s, n) < 0) {
            kb_pred_lines_free(out);
            return kv_fail(err, "out of memory");
        }
        int rc = parsable ? parse_line(s, n, &out->line[out->n], &out->held[out->n]) : -1;
        if (rc == 0) {
            out->n++;
        } else {
            if (parsable)
                free(out->text[out->n]);
            if (rc == -1 && last) { /* what an interruption leaves: redo that sample */
                out->n_dropped += !blank(s, n);
                break;
            }
            kb_pred_lines_free(out);
            if (rc == -2)
                return kv_fail(err, "out of memory");
            return kv_fail(err,
                           "%s:%ld: not a prediction line (JSON object with \"id\" and "
                           "\"index\"); the file is damaged before its last line: fix or delete "
                           "it",
                           path, lineno);
        }
        pos = next;
    }
    return 0;
}

int kb_pred_lines_read(const char *path, kb_pred_lines *out, kv_error *err)
{
    memset(out, 0, sizeof *out);
    char *data = NULL;
    size_t len = 0;
    if (kv_file_read(path, &data, &len, err) < 0)
        return -1;
    int rc = split_lines(path, data, len, out, err);
    free(data);
    return rc;
}

/* The way out offered for a line that does not belong: the file's other
 * lines are fine, so removing the line (the sample is then redone) or the
 * file (the task is redone) is all a rerun needs. */
#define REMOVE_LINE "remove that line (or the file) and run again to redo the sample"

int kb_pred_lines_check(const kb_pred_lines *l, const char *path, const kb_pred_expect *x,
                        kv_error *err)
{
    for (size_t i = 0; i < l->n; i++) {
        const kb_prediction *p = &l->line[i];
        const char *task = p->task, *config = p->config, *hash = p->config_hash;
        char id[160];
        kv_json_quote_to(id, sizeof id, p->id.p, p->id.n);
        if (x->task && (!task || strcmp(task, x->task) != 0))
            return kv_fail(err, "%s:%zu: a line of task \"%s\" in the file of task \"%s\"; %s",
                           path, i + 1, task ? task : "(none)", x->task, REMOVE_LINE);
        if (x->config && (!config || strcmp(config, x->config) != 0))
            return kv_fail(err, "%s:%zu: a line of config \"%s\" in the file of config \"%s\"; %s",
                           path, i + 1, config ? config : "(none)", x->config, REMOVE_LINE);
        if (x->config_hash && !hash)
            return kv_fail(err,
                           "%s:%zu: no config_hash (written by hand or by an older kvbench), so "
                           "nothing shows it was made with config \"%s\" as run.json gives it; %s",
                           path, i + 1, x->config ? x->config : "?", REMOVE_LINE);
        if (x->config_hash && strcmp(hash, x->config_hash) != 0)
            return kv_fail(err,
                           "%s:%zu: config hash %s, but run.json gives config \"%s\" hash %s "
                           "(the line was made with other parameters); %s",
                           path, i + 1, hash, x->config ? x->config : "?", x->config_hash,
                           REMOVE_LINE);
        long pos = x->ids ? kb_idset_pos(x->ids, p->id) : -1;
        if (pos == -2)
            return kv_fail(err, "%s:%zu: sample %s is not in the task's data; %s", path, i + 1, id,
                           REMOVE_LINE);
        /* shards, merges and --limit go by index: it must be the id's place */
        if (pos >= 0 && p->index != pos)
            return kv_fail(err,
                           "%s:%zu: sample %s has index %ld, but it is sample %ld of the "
                           "task's data (the data changed since, or the line comes from other "
                           "data); %s",
                           path, i + 1, id, p->index, pos, REMOVE_LINE);
        /* a shard's folder holds only its own samples, or merge would
         * count a sample twice */
        if (x->shard.count > 1 && !kb_shard_selects(&x->shard, p->index))
            return kv_fail(err,
                           "%s:%zu: sample %s has index %ld, which shard %ld of %ld runs, "
                           "not this folder's shard %ld; %s",
                           path, i + 1, id, p->index, p->index % x->shard.count, x->shard.count,
                           x->shard.index, REMOVE_LINE);
    }
    return 0;
}

/* ---- appending --------------------------------------------------------- */

static char *join_lines(const kb_pred_lines *l, size_t *len)
{
    kv_strbuf b = {0};
    for (size_t i = 0; i < l->n; i++) {
        kv_strbuf_puts(&b, l->text[i]);
        kv_strbuf_puts(&b, "\n");
    }
    if (b.oom || kv_strbuf_add(&b, "", 0) < 0) {
        kv_strbuf_free(&b);
        return NULL;
    }
    *len = b.len;
    return b.s;
}

/* Checks every line against x and puts its id in done: a sample twice in
 * one file is an error too. */
static int check_lines(const kb_pred_lines *l, const char *path, const kb_pred_expect *x,
                       kb_idset *done, kv_error *err)
{
    if (kb_pred_lines_check(l, path, x, err) < 0)
        return -1;
    for (size_t i = 0; i < l->n; i++) {
        int added = kb_idset_add(done, l->line[i].id);
        char id[160];
        if (added < 0)
            return kv_fail(err, "out of memory");
        if (added == 0)
            return kv_fail(err, "%s:%zu: sample %s appears twice", path, i + 1,
                           kv_json_quote_to(id, sizeof id, l->line[i].id.p, l->line[i].id.n));
    }
    return 0;
}

/* Reads what is there, checks every line against x, drops a cut-short tail
 * (atomically) and fills done. */
static int recover(kb_pred_file *pf, const kb_pred_expect *x, kv_error *err)
{
    if (!kv_file_exists(pf->path))
        return 0;
    char *data = NULL;
    size_t len = 0;
    if (kv_file_read(pf->path, &data, &len, err) < 0)
        return -1;
    kb_pred_lines l;
    int rc = split_lines(pf->path, data, len, &l, err);
    if (rc < 0) {
        free(data);
        return -1;
    }
    rc = check_lines(&l, pf->path, x, &pf->done, err);
    pf->n_lines = (long)l.n;
    pf->n_dropped = l.n_dropped;
    /* rewrite only when the bytes on disk are not exactly the valid lines */
    size_t keep_len = 0;
    char *keep = rc == 0 ? join_lines(&l, &keep_len) : NULL;
    if (rc == 0 && !keep)
        rc = kv_fail(err, "out of memory");
    if (rc == 0 && (keep_len != len || memcmp(keep, data, len) != 0))
        rc = kv_write_atomic(pf->path, keep, keep_len, err);
    free(keep);
    free(data);
    kb_pred_lines_free(&l);
    return rc;
}

/* The hash run.json records for a config, NULL when it lists none. */
static const char *run_config_hash(const kb_run *run, const char *config)
{
    return kb_runjson_string(kb_runjson_find(kb_runjson_list(run->json, "configs"), "name", config),
                             "hash");
}

char *kb_pred_dir(const char *run_dir, const char *config)
{
    char *preds = kv_path_join(run_dir, "predictions");
    if (!preds || !config)
        return preds;
    char *dir = kv_path_join(preds, config);
    free(preds);
    return dir;
}

char *kb_pred_path(const char *run_dir, const char *config, const char *task)
{
    char *dir = kb_pred_dir(run_dir, config), *path = NULL;
    if (dir && asprintf(&path, "%s/%s.jsonl", dir, task) < 0)
        path = NULL;
    free(dir);
    return path;
}

/* What every line of a prediction file of the run must say. */
static kb_pred_expect pred_expect(const kb_run *run, const char *config, const char *task,
                                  const kb_idset *ids)
{
    return (kb_pred_expect){.task = task,
                            .config = config,
                            .config_hash = run_config_hash(run, config),
                            .ids = ids,
                            .shard = kb_runjson_shard(run->json)};
}

long kb_pred_file_lines(const kb_run *run, const char *config, const char *task)
{
    char *path = kb_pred_path(run->dir, config, task), *data = NULL;
    size_t len = 0;
    kv_error err;
    long n = 0;
    if (path && kv_file_exists(path) && kv_file_read(path, &data, &len, &err) == 0)
        for (size_t i = 0; i < len; i++)
            n += data[i] == '\n';
    free(data);
    free(path);
    return n;
}

int kb_pred_file_verify(const kb_run *run, const char *config, const char *task,
                        const kb_idset *ids, kv_error *err)
{
    char *path = kb_pred_path(run->dir, config, task);
    if (!path)
        return kv_fail(err, "out of memory");
    kb_pred_lines l;
    int rc = 0;
    if (kv_file_exists(path) && (rc = kb_pred_lines_read(path, &l, err)) == 0) {
        kb_idset seen = {0};
        kb_pred_expect x = pred_expect(run, config, task, ids);
        rc = check_lines(&l, path, &x, &seen, err);
        kb_idset_free(&seen);
        kb_pred_lines_free(&l);
    }
    free(path);
    return rc;
}

int kb_pred_file_open(const kb_run *run, const char *config, const char *task, const kb_idset *ids,
                      kb_pred_file *pf, kv_error *err)
{
    memset(pf, 0, sizeof *pf);
    pf->fd = -1;
    char *dir = kb_pred_dir(run->dir, config);
    if (!dir || !(pf->path = kb_pred_path(run->dir, config, task))) {
        free(dir);
        return kv_fail(err, "out of memory");
    }
    int rc = kv_mkdirs(dir, err);
    free(dir);
    kb_pred_expect x = pred_expect(run, config, task, ids);
    if (rc == 0)
        rc = recover(pf, &x, err);
    if (rc == 0) {
        pf->fd = open(pf->path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0666);
        if (pf->fd < 0)
            rc = kv_fail(err, "%s: cannot open for appending: %s", pf->path, strerror(errno));
    }
    if (rc < 0)
        kb_pred_file_close(pf);
    return rc;
}

bool kb_pred_file_done(const kb_pred_file *pf, kv_str id)
{
    return kb_idset_has(&pf->done, id);
}

int kb_pred_file_append(kb_pred_file *pf, const kb_prediction *p, kv_error *err)
{
    char id[160];
    if (kb_pred_file_done(pf, p->id))
        return kv_fail(err, "%s: sample %s is already there", pf->path,
                       kv_json_quote_to(id, sizeof id, p->id.p, p->id.n));
    kv_strbuf line = {0};
    kb_prediction_format(p, &line);
    if (kv_strbuf_puts(&line, "\n") < 0) {
        kv_strbuf_free(&line);
        return kv_fail(err, "out of memory");
    }
    /* one write: an interruption leaves a prefix of this line, never a mix */
    int rc = 0;
    if (kv_write_all(pf->fd, line.s, line.len) < 0 || fsync(pf->fd) < 0)
        rc = kv_fail(err, "%s: cannot write: %s", pf->path, strerror(errno));
    kv_strbuf_free(&line);
    if (rc == 0) {
        if (kb_idset_add(&pf->done, p->id) < 0)
            return kv_fail(err, "out of memory");
        pf->n_lines++;
    }
    return rc;
}

void kb_pred_file_close(kb_pred_file *pf)
{
    if (pf->fd >= 0)
        close(pf->fd);
    free(pf->path);
    kb_idset_free(&pf->done);
    memset(pf, 0, sizeof *pf);
    pf->fd = -1;
}
