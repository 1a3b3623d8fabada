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

/* ---- reading prediction files ------------------------------------------ */

void kb_pred_lines_free(kb_pred_lines *l)
{
    for (size_t i = 0; i < l->n; i++) {
        free(l->text[i]);
        cJSON_Delete(l->json[i]);
    }
    free(l->text);
    free(l->json);
    memset(l, 0, sizeof *l);
}

static bool valid_line(const cJSON *j)
{
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(j, "id");
    const cJSON *index = cJSON_GetObjectItemCaseSensitive(j, "index");
    return cJSON_IsObject(j) && cJSON_IsString(id) && cJSON_IsNumber(index) &&
           index->valuedouble >= 0 && index->valuedouble == floor(index->valuedouble);
}

static bool blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n' && s[i] != '\0')
            return false;
    return true;
}

static int push_line(kb_pred_lines *l, size_t *cap, const char *s, size_t n, cJSON *j)
{
    if (l->n == *cap) {
        size_t c = *cap ? 2 * *cap : 64;
        char **t = realloc(l->text, c * sizeof *t);
        if (t)
            l->text = t;
        cJSON **js = t ? realloc(l->json, c * sizeof *js) : NULL;
        if (!js)
            return -1;
        l->json = js;
        *cap = c;
    }
    if (!(l->text[l->n] = strndup(s, n)))
        return -1;
    l->json[l->n++] = j;
    return 0;
}

/* Splits data into complete, valid lines. A cut-short or unparsable last line
 * is dropped (counted); a bad line before the last is an error. */
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
        /* cJSON would cut an id at "\u0000": read it as KV_ID_NUL (jsonstr.h) */
        char *ids = parsable && s && memmem(s, n, "\\u0000", 6) ? strndup(s, n) : NULL;
        const char *js = ids ? ids : s, *end = NULL;
        size_t jn = ids ? kv_json_ids_in(ids, n) : n;
        cJSON *j = parsable ? cJSON_ParseWithLengthOpts(js, jn, &end, false) : NULL;
        if (j && !blank(end, jn - (size_t)(end - js))) { /* "{...} junk" is not a line */
            cJSON_Delete(j);
            j = NULL;
        }
        free(ids);
        if (!j || !valid_line(j)) {
            cJSON_Delete(j);
            if (last) { /* what an interruption leaves: redo that sample */
                out->n_dropped += !blank(s, n);
                break;
            }
            kb_pred_lines_free(out);
            return kv_fail(err,
                           "%s:%ld: not a prediction line (JSON object with \"id\" and "
                           "\"index\"); the file is damaged before its last line: fix or delete "
                           "it",
                           path, lineno);
        }
        if (push_line(out, &cap, s, n, j) < 0) {
            cJSON_Delete(j);
            kb_pred_lines_free(out);
            return kv_fail(err, "out of memory");
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
        const cJSON *j = l->json[i];
        const char *id = kb_runjson_string(j, "id");
        const char *task = kb_runjson_string(j, "dataset"),
                   *config = kb_runjson_string(j, "config");
        const char *hash = kb_runjson_string(j, "config_hash");
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
        long pos = x->ids ? kb_idset_pos(x->ids, id) : -1;
        if (pos == -2)
            return kv_fail(err, "%s:%zu: sample \"%s\" is not in the task's data; %s", path, i + 1,
                           id, REMOVE_LINE);
        /* shards, merges and --limit go by index: it must be the id's place */
        long index = (long)cJSON_GetObjectItemCaseSensitive(j, "index")->valuedouble;
        if (pos >= 0 && index != pos)
            return kv_fail(err,
                           "%s:%zu: sample \"%s\" has index %ld, but it is sample %ld of the "
                           "task's data (the data changed since, or the line comes from other "
                           "data); %s",
                           path, i + 1, id, index, pos, REMOVE_LINE);
        /* a shard's folder holds only its own samples, or merge would
         * count a sample twice */
        if (x->shard.count > 1 && !kb_shard_selects(&x->shard, index))
            return kv_fail(err,
                           "%s:%zu: sample \"%s\" has index %ld, which shard %ld of %ld runs, "
                           "not this folder's shard %ld; %s",
                           path, i + 1, id, index, index % x->shard.count, x->shard.count,
                           x->shard.index, REMOVE_LINE);
    }
    return 0;
}

/* ---- appending --------------------------------------------------------- */

static char *join_lines(const kb_pred_lines *l, size_t *len)
{
    size_t n = 0;
    for (size_t i = 0; i < l->n; i++)
        n += strlen(l->text[i]) + 1;
    char *s = malloc(n + 1);
    if (!s)
        return NULL;
    size_t at = 0;
    for (size_t i = 0; i < l->n; i++) {
        size_t k = strlen(l->text[i]);
        memcpy(s + at, l->text[i], k);
        s[at + k] = '\n';
        at += k + 1;
    }
    s[at] = '\0';
    *len = at;
    return s;
}

/* Checks every line against x and puts its id in done: a sample twice in
 * one file is an error too. */
static int check_lines(const kb_pred_lines *l, const char *path, const kb_pred_expect *x,
                       kb_idset *done, kv_error *err)
{
    if (kb_pred_lines_check(l, path, x, err) < 0)
        return -1;
    for (size_t i = 0; i < l->n; i++) {
        const char *id = cJSON_GetObjectItemCaseSensitive(l->json[i], "id")->valuestring;
        int added = kb_idset_add(done, id);
        if (added < 0)
            return kv_fail(err, "out of memory");
        if (added == 0)
            return kv_fail(err, "%s:%zu: sample \"%s\" appears twice", path, i + 1, id);
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

bool kb_pred_file_done(const kb_pred_file *pf, const char *id)
{
    return kb_idset_has(&pf->done, id);
}

int kb_pred_file_append(kb_pred_file *pf, const cJSON *line, kv_error *err)
{
    if (!valid_line(line))
        return kv_fail(err, "%s: a prediction needs \"id\" and \"index\"", pf->path);
    const char *id = cJSON_GetObjectItemCaseSensitive(line, "id")->valuestring;
    if (kb_pred_file_done(pf, id))
        return kv_fail(err, "%s: sample \"%s\" is already there", pf->path, id);
    char *text = cJSON_PrintUnformatted(line);
    if (!text || !(text = kv_json_ids_out(text)))
        return kv_fail(err, "out of memory");
    size_t n = strlen(text);
    char *withnl = realloc(text, n + 2);
    if (!withnl) {
        free(text);
        return kv_fail(err, "out of memory");
    }
    withnl[n] = '\n';
    /* one write: an interruption leaves a prefix of this line, never a mix */
    int rc = 0;
    if (kv_write_all(pf->fd, withnl, n + 1) < 0 || fsync(pf->fd) < 0)
        rc = kv_fail(err, "%s: cannot write: %s", pf->path, strerror(errno));
    free(withnl);
    if (rc == 0) {
        if (kb_idset_add(&pf->done, id) < 0)
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

/* A JSON array of the texts (NULs kept), or NULL on OOM. */
static cJSON *text_array(const kv_str *v, size_t n)
{
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; a && i < n; i++) {
        cJSON *e = kv_json_text(v[i].p, v[i].n);
        if (!e || !cJSON_AddItemToArray(a, e)) {
            cJSON_Delete(e);
            cJSON_Delete(a);
            return NULL;
        }
    }
    return a;
}

/* "length": LongBench's word count, or v2's class; v2 adds its answer
 * letter and difficulty. */
static bool add_length(cJSON *o, const kb_prediction *p)
{
    if (!p->length_class)
        return cJSON_AddNumberToObject(o, "length", (double)p->length);
    return cJSON_AddStringToObject(o, "length", p->length_class) &&
           (!p->difficulty || cJSON_AddStringToObject(o, "difficulty", p->difficulty)) &&
           (p->n_answers == 0 ||
            cJSON_AddItemToObject(o, "answer", kv_json_text(p->answers[0].p, p->answers[0].n)));
}

cJSON *kb_prediction_json(const kb_prediction *p)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *answers = text_array(p->answers, p->n_answers);
    cJSON *classes = p->all_classes ? text_array(p->all_classes, p->n_classes) : cJSON_CreateNull();
    bool ok = o && answers && classes && cJSON_AddStringToObject(o, "id", p->id) &&
              cJSON_AddNumberToObject(o, "index", (double)p->index) &&
              cJSON_AddStringToObject(o, "dataset", p->task) &&
              cJSON_AddStringToObject(o, "config", p->config) &&
              (!p->config_hash || cJSON_AddStringToObject(o, "config_hash", p->config_hash)) &&
              cJSON_AddItemToObject(
                  o, "pred", kv_json_text(p->pred, p->pred_len ? p->pred_len : strlen(p->pred)));
    if (ok) {
        cJSON_AddItemToObject(o, "answers", answers);
        cJSON_AddItemToObject(o, "all_classes", classes);
        answers = classes = NULL;
        ok = add_length(o, p) &&
             cJSON_AddNumberToObject(o, "prompt_tokens", (double)p->prompt_tokens) &&
             cJSON_AddNumberToObject(o, "kept_tokens", (double)p->kept_tokens) &&
             cJSON_AddNumberToObject(o, "context_tokens", (double)p->context_tokens) &&
             cJSON_AddNumberToObject(o, "kept_context_tokens", (double)p->kept_context_tokens) &&
             cJSON_AddNumberToObject(o, "generated_tokens", (double)p->generated_tokens) &&
             cJSON_AddNumberToObject(o, "prefill_s", p->prefill_s) &&
             cJSON_AddNumberToObject(o, "decode_s", p->decode_s);
    }
    cJSON_Delete(answers);
    cJSON_Delete(classes);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}
