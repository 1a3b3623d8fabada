#include "report/report.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "util/file.h"
#include "util/jsonstr.h"
#include "score/lengths.h"
#include "matrix/matrix.h"
#include "matrix/results.h"
#include "report/incomplete.h"
#include "report/rowstats.h"
#include "report/series.h"
#include "report/side_by_side.h"
#include "report/wrong.h"
#include "matrix/taskset.h"
#include "util/vec.h"

/* ---- scores.json ------------------------------------------------------- */

/* Per-sample scores as three parallel lists, "sample_ids", "sample_scores"
 * (0..1) and "sample_lengths" (null when unknown): what `kvbench report`
 * resamples for intervals and pairs across configs and runs. */
static int add_samples(cJSON *o, const kb_score_row *r)
{
    cJSON *ids = cJSON_AddArrayToObject(o, "sample_ids");
    cJSON *scores = cJSON_AddArrayToObject(o, "sample_scores");
    cJSON *lengths = cJSON_AddArrayToObject(o, "sample_lengths");
    for (size_t i = 0; ids && scores && lengths && i < r->n_samples; i++) {
        const kb_sample_score *s = &r->samples[i];
        cJSON *id = cJSON_CreateString(s->id);
        cJSON *sc = cJSON_CreateNumber(s->score);
        cJSON *len = s->length >= 0 ? cJSON_CreateNumber((double)s->length) : cJSON_CreateNull();
        bool ok = id && sc && len;
        ok = ok && cJSON_AddItemToArray(ids, id) && (id = NULL, true);
        ok = ok && cJSON_AddItemToArray(scores, sc) && (sc = NULL, true);
        ok = ok && cJSON_AddItemToArray(lengths, len) && (len = NULL, true);
        if (!ok) {
            cJSON_Delete(id);
            cJSON_Delete(sc);
            cJSON_Delete(len);
            return -1;
        }
    }
    return ids && scores && lengths ? 0 : -1;
}

static bool has_buckets(const kb_score_row *r)
{
    for (int b = 0; b < KB_N_BUCKETS; b++)
        if (r->bucket_n[b])
            return true;
    return false;
}

/* "buckets": {"0-4k": {"n": 3, "score": 41.2}, ...} of a LongBench-E row. */
static int add_buckets(cJSON *o, const kb_score_row *r)
{
    cJSON *all = cJSON_AddObjectToObject(o, "buckets");
    for (int b = 0; all && b < KB_N_BUCKETS; b++) {
        cJSON *one = cJSON_AddObjectToObject(all, kb_bucket_names[b]);
        if (!one || !cJSON_AddNumberToObject(one, "n", (double)r->bucket_n[b]) ||
            !(r->bucket_n[b] ? cJSON_AddNumberToObject(one, "score", r->bucket[b])
                             : cJSON_AddNullToObject(one, "score")))
            return -1;
    }
    return all ? 0 : -1;
}

static cJSON *row_json(const kb_score_row *r)
{
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddStringToObject(o, "config", r->config) ||
        !cJSON_AddStringToObject(o, "task", r->task) ||
        !cJSON_AddStringToObject(o, "metric", r->metric) ||
        !cJSON_AddNumberToObject(o, "score", r->score) ||
        !cJSON_AddNumberToObject(o, "n", (double)r->n) ||
        !cJSON_AddNumberToObject(o, "mean_prompt_tokens", r->prompt_tokens) ||
        !cJSON_AddNumberToObject(o, "mean_kept_tokens", r->kept_tokens) ||
        !cJSON_AddNumberToObject(o, "mean_prefill_s", r->prefill_s) ||
        !cJSON_AddNumberToObject(o, "mean_decode_s", r->decode_s) ||
        (r->n_samples && add_samples(o, r) < 0) || (has_buckets(r) && add_buckets(o, r) < 0)) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

int kb_scores_save(const char *dir, const kb_score_row *rows, size_t n, kv_error *err)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *a = o ? cJSON_AddArrayToObject(o, "rows") : NULL;
    for (size_t i = 0; a && i < n; i++) {
        cJSON *r = row_json(&rows[i]);
        if (!r || !cJSON_AddItemToArray(a, r)) {
            cJSON_Delete(r);
            a = NULL;
        }
    }
    char *text = a ? cJSON_Print(o) : NULL;
    cJSON_Delete(o);
    text = text ? kv_json_ids_out(text) : NULL; /* a NUL in an id is "\u0000" */
    char *path = kv_path_join(dir, "scores.json");
    int rc = text && path ? kv_write_atomic(path, text, strlen(text), err)
                          : kv_fail(err, "out of memory");
    free(text);
    free(path);
    return rc;
}

static void row_free(kb_score_row *r)
{
    free(r->config);
    free(r->task);
    free(r->metric);
    for (size_t i = 0; i < r->n_samples; i++)
        free(r->samples[i].id);
    free(r->samples);
    free(r->boot);
    free(r->boot_delta);
}

void kb_score_rows_free(kb_score_row *rows, size_t n)
{
    for (size_t i = 0; i < n; i++)
        row_free(&rows[i]);
    free(rows);
}

static double num(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static const char *str(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* The per-sample lists of a row (absent in scores.json files written before
 * kvbench kept them: the row then has no intervals). They must agree with the
 * row: one entry per sample, distinct ids, and the score their mean. */
static int samples_from_json(const cJSON *o, kb_score_row *r, const char *path, const char *where,
                             kv_error *err)
{
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(o, "sample_ids");
    const cJSON *scores = cJSON_GetObjectItemCaseSensitive(o, "sample_scores");
    const cJSON *lengths = cJSON_GetObjectItemCaseSensitive(o, "sample_lengths");
    if (!ids && !scores && !lengths)
        return 0;
    if (!cJSON_IsArray(ids) || !cJSON_IsArray(scores) || !cJSON_IsArray(lengths))
        return kv_fail(err,
                       "%s: %s: sample_ids, sample_scores and sample_lengths go together, as lists",
                       path, where);
    size_t n = (size_t)cJSON_GetArraySize(ids);
    if ((size_t)cJSON_GetArraySize(scores) != n || (size_t)cJSON_GetArraySize(lengths) != n ||
        n != (size_t)r->n)
        return kv_fail(err,
                       "%s: %s: needs one sample_ids, sample_scores and sample_lengths entry "
                       "per sample (n = %ld)",
                       path, where, r->n);
    if (n == 0)
        return 0;
    if (!(r->samples = calloc(n, sizeof *r->samples)))
        return kv_fail(err, "out of memory");
    kb_idset seen = {0};
    const cJSON *id = ids->child, *sc = scores->child, *len = lengths->child;
    double sum = 0;
    int rc = 0;
    for (size_t k = 0; k < n && rc == 0; k++, id = id->next, sc = sc->next, len = len->next) {
        if (!cJSON_IsString(id) || !cJSON_IsNumber(sc) ||
            !(sc->valuedouble >= 0 && sc->valuedouble <= 1))
            rc = kv_fail(err, "%s: %s: sample %zu: needs a string id and a score from 0 to 1", path,
                         where, k);
        else if (!cJSON_IsNull(len) &&
                 !(cJSON_IsNumber(len) && len->valuedouble >= 0 && len->valuedouble <= 1e15))
            rc = kv_fail(err, "%s: %s: sample_lengths[%zu]: must be a count or null", path, where,
                         k);
        else if ((rc = kb_idset_add(&seen, id->valuestring)) <= 0)
            rc = rc < 0 ? kv_fail(err, "out of memory")
                        : kv_fail(err, "%s: %s: sample id \"%s\" appears twice", path, where,
                                  id->valuestring);
        else {
            rc = 0;
            kb_sample_score *s = &r->samples[r->n_samples];
            if (!(s->id = strdup(id->valuestring))) {
                rc = kv_fail(err, "out of memory");
                break;
            }
            s->score = sc->valuedouble;
            s->length = cJSON_IsNumber(len) ? (long)len->valuedouble : -1;
            sum += s->score;
            r->n_samples++;
        }
    }
    kb_idset_free(&seen);
    /* LongBench rounds the task score to 2 decimals (v2's accuracy to 1):
     * more than that apart means the lists belong to other predictions */
    double rounding = strcmp(r->metric, "accuracy") == 0 ? 0.05 : 0.01;
    if (rc == 0 && fabs(100.0 * sum / (double)n - r->score) > rounding + 1e-9)
        rc = kv_fail(err, "%s: %s: the sample scores average %.4f, not the row's score %.2f", path,
                     where, 100.0 * sum / (double)n, r->score);
    return rc;
}

/* A LongBench-E row's "buckets" (absent: none). */
static int buckets_from_json(const cJSON *o, kb_score_row *r, const char *path, size_t i,
                             kv_error *err)
{
    for (int b = 0; b < KB_N_BUCKETS; b++)
        r->bucket[b] = NAN;
    const cJSON *all = cJSON_GetObjectItemCaseSensitive(o, "buckets");
    if (!all)
        return 0;
    size_t total = 0;
    for (int b = 0; b < KB_N_BUCKETS; b++) {
        const cJSON *one = cJSON_GetObjectItemCaseSensitive(all, kb_bucket_names[b]);
        double n = num(one, "n"), score = num(one, "score");
        if (!(n >= 0 && n <= 1e15 && n == floor(n)) || (n > 0 && !(score >= 0 && score <= 100)))
            return kv_fail(err,
                           "%s: rows[%zu].buckets.%s: needs a count n and, when n > 0, a "
                           "score from 0 to 100",
                           path, i, kb_bucket_names[b]);
        r->bucket_n[b] = (size_t)n;
        r->bucket[b] = n > 0 ? score : NAN;
        total += r->bucket_n[b];
    }
    if (total != (size_t)r->n)
        return kv_fail(err, "%s: rows[%zu].buckets: hold %zu samples, not n = %ld", path, i, total,
                       r->n);
    return 0;
}

static int row_from_json(const cJSON *o, kb_score_row *r, const char *path, size_t i, kv_error *err)
{
    memset(r, 0, sizeof *r);
    const char *config = str(o, "config"), *task = str(o, "task"), *metric = str(o, "metric");
    double score = num(o, "score"), n = num(o, "n");
    if (!config || !task || !metric || isnan(score) || isnan(n))
        return kv_fail(err, "%s: rows[%zu]: needs config, task, metric, score and n", path, i);
    if (!(score >= 0 && score <= 100))
        return kv_fail(err, "%s: rows[%zu].score: must be a percentage (0 to 100)", path, i);
    if (!(n >= 0 && n <= 1e15) || n != floor(n))
        return kv_fail(err, "%s: rows[%zu].n: must be a count", path, i);
    r->config = strdup(config);
    r->task = strdup(task);
    r->metric = strdup(metric);
    if (!r->config || !r->task || !r->metric) {
        row_free(r);
        return kv_fail(err, "out of memory");
    }
    r->score = score;
    r->n = (long)n;
    r->prompt_tokens = num(o, "mean_prompt_tokens");
    r->kept_tokens = num(o, "mean_kept_tokens");
    r->prefill_s = num(o, "mean_prefill_s");
    r->decode_s = num(o, "mean_decode_s");
    char where[64];
    snprintf(where, sizeof where, "rows[%zu]", i);
    if (samples_from_json(o, r, path, where, err) < 0 ||
        buckets_from_json(o, r, path, i, err) < 0) {
        row_free(r);
        return -1;
    }
    return 0;
}

static int load_scores(const char *dir, kb_report_run *run, kv_error *err)
{
    char *path = kv_path_join(dir, "scores.json");
    char *text = NULL;
    size_t len;
    if (!path)
        return kv_fail(err, "out of memory");
    if (!kv_file_exists(path)) {
        kv_fail(err,
                "%s: missing: the runner writes it after scoring (run `kvbench run` to the end, "
                "or `kvbench report` the run folder, which rebuilds it)",
                path);
        free(path);
        return -1;
    }
    int rc = kv_file_read(path, &text, &len, err);
    /* ids with "\u0000" as KV_ID_NUL, as prediction lines give them */
    cJSON *o = rc == 0 ? cJSON_ParseWithLength(text, kv_json_ids_in(text, len)) : NULL;
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(o, "rows");
    if (rc == 0 && !cJSON_IsArray(rows))
        rc = kv_fail(err, "%s: not a scores file (no \"rows\" list)", path);
    size_t n = rc == 0 ? (size_t)cJSON_GetArraySize(rows) : 0;
    if (rc == 0 && n && !(run->rows = calloc(n, sizeof *run->rows)))
        rc = kv_fail(err, "out of memory");
    size_t i = 0;
    for (const cJSON *r = rows ? rows->child : NULL; r && rc == 0; r = r->next, i++) {
        rc = row_from_json(r, &run->rows[i], path, i, err);
        run->n_rows += rc == 0;
    }
    cJSON_Delete(o);
    free(text);
    free(path);
    return rc;
}

static char *dup_or(const char *s, const char *dflt)
{
    return strdup(s ? s : dflt);
}

static int length_view_attach(kb_report_run *run);
static void length_view_free(struct kb_length_view *v);

int kb_report_run_load(const char *dir, kb_report_run *out, kv_error *err)
{
    memset(out, 0, sizeof *out);
    kb_run run;
    if (kb_run_load(dir, &run, err) < 0)
        return -1;
    const char *slash = strrchr(dir, '/');
    const char *base = slash && slash[1] ? slash + 1 : dir;
    out->dir = strdup(dir);
    out->name = strdup(base);
    if (out->name) {
        size_t l = strlen(out->name);
        while (l > 1 && out->name[l - 1] == '/')
            out->name[--l] = '\0';
    }
    out->kvbench_version = dup_or(kb_run_string(&run, "kvbench_version"), "?");
    out->model = dup_or(kb_run_string(&run, "model"), "?");
    out->model_hash = dup_or(kb_run_string(&run, "model_hash"), "?");
    out->protocol = dup_or(kb_run_string(&run, "protocol"), "?");
    out->compute = dup_or(kb_run_string(&run, "compute"), "f32");
    /* "finished": null while it runs or once stopped; folders from before it count as done */
    const cJSON *finished = cJSON_GetObjectItemCaseSensitive(run.json, "finished");
    out->unfinished = finished && !cJSON_IsString(finished);
    const cJSON *matrix = cJSON_GetObjectItemCaseSensitive(run.json, "matrix");
    const cJSON *configs = cJSON_GetObjectItemCaseSensitive(matrix, "configs");
    const cJSON *tasks = cJSON_GetObjectItemCaseSensitive(matrix, "tasks");
    const char *data = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(matrix, "data"));
    out->data = data ? strdup(data) : NULL;
    out->configs = configs ? cJSON_Duplicate(configs, true) : cJSON_CreateArray();
    out->tasks = tasks ? cJSON_Duplicate(tasks, true) : cJSON_CreateArray();
    kb_run_close(&run);
    if (!out->dir || !out->name || !out->kvbench_version || !out->model || !out->model_hash ||
        !out->protocol || !out->compute || !out->configs || !out->tasks) {
        kb_report_run_free(out);
        return kv_fail(err, "out of memory");
    }
    if (load_scores(dir, out, err) < 0 || kb_rows_resample(out->rows, out->n_rows, err) < 0) {
        kb_report_run_free(out);
        return -1;
    }
    if (length_view_attach(out) < 0) {
        kb_report_run_free(out);
        return kv_fail(err, "out of memory");
    }
    return 0;
}

int kb_report_run_select(kb_report_run *run, bool (*keep)(const kb_score_row *r, const void *ctx),
                         const void *ctx)
{
    size_t kept = 0;
    for (size_t i = 0; i < run->n_rows; i++) {
        if (keep(&run->rows[i], ctx))
            run->rows[kept++] = run->rows[i];
        else
            row_free(&run->rows[i]);
    }
    run->n_rows = kept;
    /* and the configs table: only the configs with rows left */
    for (cJSON *c = run->configs->child, *next; c; c = next) {
        next = c->next;
        bool has_rows = false;
        for (size_t i = 0; i < run->n_rows && !has_rows; i++)
            has_rows = str(c, "name") && strcmp(run->rows[i].config, str(c, "name")) == 0;
        if (!has_rows)
            cJSON_Delete(cJSON_DetachItemViaPointer(run->configs, c));
    }
    if (run->lengths) { /* the view was of the rows loaded */
        length_view_free(run->lengths);
        free(run->lengths);
        run->lengths = NULL;
    }
    return length_view_attach(run);
}

void kb_report_run_free(kb_report_run *run)
{
    free(run->name);
    free(run->dir);
    free(run->kvbench_version);
    free(run->model);
    free(run->model_hash);
    free(run->protocol);
    free(run->compute);
    free(run->data);
    cJSON_Delete(run->configs);
    cJSON_Delete(run->tasks);
    kb_score_rows_free(run->rows, run->n_rows);
    if (run->lengths) {
        length_view_free(run->lengths);
        free(run->lengths);
    }
    memset(run, 0, sizeof *run);
}

/* ---- rows from predictions --------------------------------------------- */

static int config_rank(const cJSON *configs, const char *name)
{
    int i = 0;
    for (const cJSON *c = configs ? configs->child : NULL; c; c = c->next, i++)
        if (str(c, "name") && strcmp(str(c, "name"), name) == 0)
            return i;
    return 1 << 20;
}

static int cmp_rows(const void *a, const void *b, void *configs)
{
    const kb_score_row *x = a, *y = b;
    int cx = config_rank(configs, x->config), cy = config_rank(configs, y->config);
    if (cx != cy)
        return cx < cy ? -1 : 1;
    int c = strcmp(x->config, y->config);
    if (c)
        return c;
    int tx = kb_task_order(x->task), ty = kb_task_order(y->task);
    if (tx != ty)
        return tx < ty ? -1 : 1;
    return strcmp(x->task, y->task);
}

static void sort_rows(kb_score_row *rows, size_t n, const cJSON *configs)
{
    qsort_r(rows, n, sizeof *rows, cmp_rows, (void *)configs);
}

/* Whether a run.json list (matrix.configs or matrix.tasks) has an entry
 * whose `field` is name. */
static bool listed(const cJSON *list, const char *field, const char *name)
{
    for (const cJSON *c = list ? list->child : NULL; c; c = c->next)
        if (str(c, field) && strcmp(str(c, field), name) == 0)
            return true;
    return false;
}

static double mean_field(const kb_pred_lines *l, const char *key)
{
    double sum = 0;
    size_t k = 0;
    for (size_t i = 0; i < l->n; i++) {
        double v = num(l->json[i], key);
        if (!isnan(v)) {
            sum += v;
            k++;
        }
    }
    return k ? sum / (double)k : NAN;
}

/* Each line's id, length and score, for intervals and pairings. */
static int keep_samples(const kb_pred_lines *l, const double *per, kb_score_row *r,
                        const char *path, kv_error *err)
{
    if (l->n && !(r->samples = calloc(l->n, sizeof *r->samples)))
        return kv_fail(err, "out of memory");
    for (size_t i = 0; i < l->n; i++) {
        const char *id = str(l->json[i], "id");
        double len = num(l->json[i], "length");
        if (!id)
            return kv_fail(err, "%s:%zu: id: missing", path, i + 1);
        if (!(per[i] >= 0 && per[i] <= 1))
            return kv_fail(err, "%s:%zu: the scorer gave %g, not a score from 0 to 1", path, i + 1,
                           per[i]);
        if (!(r->samples[i].id = strdup(id)))
            return kv_fail(err, "out of memory");
        r->samples[i].score = per[i];
        r->samples[i].length = isnan(len) || len < 0 ? -1 : (long)len;
        r->n_samples++;
    }
    return 0;
}

/* One row from one prediction file: 0, 1 when the file has no lines (no
 * row), or negative with err set. */
static int score_file(const char *path, const char *config, const char *task, kb_task_scorer scorer,
                      void *ctx, kb_score_row *r, kv_error *err)
{
    memset(r, 0, sizeof *r);
    kb_pred_lines l;
    if (kb_pred_lines_read(path, &l, err) < 0)
        return -1;
    if (kb_pred_lines_check(&l, path, &(kb_pred_expect){.task = task, .config = config}, err) < 0) {
        kb_pred_lines_free(&l);
        return -1;
    }
    if (l.n == 0) { /* nothing to score: a missing cell, not a 0.00 that averages count */
        kb_pred_lines_free(&l);
        return 1;
    }
    char msg[512] = "";
    double *per = calloc(l.n + 1, sizeof *per);
    kb_task_result res = {.metric = "?", .sample_scores = per};
    int rc = per ? scorer(task, (const char *const *)l.text, l.n, &res, msg, sizeof msg, ctx) : -2;
    if (rc == -2)
        kv_fail(err, "out of memory");
    else if (rc < 0)
        kv_fail(err, "%s: %s", path, msg[0] ? msg : "the scorer failed");
    if (rc == 0) {
        r->config = strdup(config);
        r->task = strdup(task);
        r->metric = strdup(res.metric);
        if (!r->config || !r->task || !r->metric) {
            row_free(r);
            rc = kv_fail(err, "out of memory");
        }
        r->score = res.score;
        r->n = (long)l.n;
        memcpy(r->bucket_n, res.bucket_n, sizeof r->bucket_n);
        memcpy(r->bucket, res.bucket, sizeof r->bucket);
        r->prompt_tokens = mean_field(&l, "prompt_tokens");
        r->kept_tokens = mean_field(&l, "kept_tokens");
        r->prefill_s = mean_field(&l, "prefill_s");
        r->decode_s = mean_field(&l, "decode_s");
        if (rc == 0 && (rc = keep_samples(&l, per, r, path, err)) < 0)
            row_free(r);
    }
    free(per);
    kb_pred_lines_free(&l);
    return rc;
}

int kb_scores_from_predictions(const char *dir, kb_task_scorer scorer, void *ctx,
                               kb_score_row **rows, size_t *n, kv_error *err)
{
    *rows = NULL;
    *n = 0;
    kb_run run;
    if (kb_run_load(dir, &run, err) < 0)
        return -1;
    char *preds = kv_path_join(dir, "predictions");
    char **folders = NULL, **files = NULL;
    size_t n_folders = 0, n_files = 0, cap = 0;
    int rc = preds ? kv_dir_list(preds, NULL, &folders, &n_folders, err)
                   : kv_fail(err, "out of memory");
    /* only what run.json says this run made: a folder or file put there
     * by hand (or by another matrix) is no result of this run */
    const cJSON *matrix = cJSON_GetObjectItemCaseSensitive(run.json, "matrix");
    const cJSON *configs = cJSON_GetObjectItemCaseSensitive(matrix, "configs");
    const cJSON *tasks = cJSON_GetObjectItemCaseSensitive(matrix, "tasks");
    for (size_t c = 0; c < n_folders && rc == 0; c++) {
        if (!listed(configs, "name", folders[c]))
            continue;
        char *cdir = kv_path_join(preds, folders[c]);
        kv_error ignored; /* an entry that is not a folder holds no predictions */
        if (!cdir || kv_dir_list(cdir, ".jsonl", &files, &n_files, &ignored) < 0)
            n_files = 0;
        for (size_t k = 0; k < n_files && rc == 0; k++) {
            size_t len = strlen(files[k]);
            if (len <= 6)
                continue;
            char *task = strndup(files[k], len - 6);
            if (task && !listed(tasks, "task", task)) {
                free(task);
                continue;
            }
            if (KV_VEC_RESERVE(*rows, cap, *n + 1, 32) < 0) {
                free(task);
                rc = kv_fail(err, "out of memory");
                break;
            }
            char *path = kv_path_join(cdir, files[k]);
            rc = task && path ? score_file(path, folders[c], task, scorer, ctx, &(*rows)[*n], err)
                              : kv_fail(err, "out of memory");
            *n += rc == 0;
            rc = rc > 0 ? 0 : rc;
            free(task);
            free(path);
        }
        kv_names_free(files, n_files);
        files = NULL;
        n_files = 0;
        free(cdir);
    }
    kv_names_free(folders, n_folders);
    free(preds);
    if (rc == 0)
        sort_rows(*rows, *n, configs);
    kb_run_close(&run);
    if (rc < 0) {
        kb_score_rows_free(*rows, *n);
        *rows = NULL;
        *n = 0;
    }
    return rc;
}

/* ---- the pivot: configs x tasks ---------------------------------------- */

typedef struct pivot {
    const kb_report_run *run;
    const char **configs; /* run.json order; configs with rows only */
    size_t nc;
    const char **tasks; /* LongBench order */
    size_t nt;
    const kb_score_row **cell; /* [c * nt + t], NULL when missing */
    bool *scored;              /* [t]: some config has a score of task t */
    size_t n_scored;
    int full;                  /* row of the full cache, -1 when absent */
} pivot;

static bool in_list(const char **list, size_t n, const char *s)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(list[i], s) == 0)
            return true;
    return false;
}

static size_t index_of(const char **list, size_t n, const char *s)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(list[i], s) == 0)
            return i;
    return n;
}

static int cmp_task_names(const void *a, const void *b)
{
    const char *x = *(const char *const *)a, *y = *(const char *const *)b;
    int tx = kb_task_order(x), ty = kb_task_order(y);
    return tx != ty ? (tx < ty ? -1 : 1) : strcmp(x, y);
}

static void pivot_free(pivot *p)
{
    free(p->configs);
    free(p->tasks);
    free(p->cell);
    free(p->scored);
    memset(p, 0, sizeof *p);
}

static int pivot_build(pivot *p, const kb_report_run *run)
{
    memset(p, 0, sizeof *p);
    p->run = run;
    p->full = -1;
    size_t n = run->n_rows ? run->n_rows : 1;
    p->configs = calloc(n + (size_t)cJSON_GetArraySize(run->configs), sizeof *p->configs);
    p->tasks = calloc(n + (size_t)cJSON_GetArraySize(run->tasks), sizeof *p->tasks);
    if (!p->configs || !p->tasks) {
        pivot_free(p);
        return -1;
    }
    /* configs in run.json order first, then any that only scores.json names */
    for (const cJSON *c = run->configs->child; c; c = c->next) {
        const char *name = str(c, "name");
        for (size_t i = 0; name && i < run->n_rows; i++)
            if (strcmp(run->rows[i].config, name) == 0 && !in_list(p->configs, p->nc, name)) {
                p->configs[p->nc++] = name;
                break;
            }
    }
    for (size_t i = 0; i < run->n_rows; i++) {
        if (!in_list(p->configs, p->nc, run->rows[i].config))
            p->configs[p->nc++] = run->rows[i].config;
        if (!in_list(p->tasks, p->nt, run->rows[i].task))
            p->tasks[p->nt++] = run->rows[i].task;
    }
    /* a task of the matrix without any row is a column of "–": left out,
     * the table would read as if the run had never been asked for it */
    for (const cJSON *t = run->tasks ? run->tasks->child : NULL; t; t = t->next) {
        const char *name = str(t, "task");
        if (name && !in_list(p->tasks, p->nt, name))
            p->tasks[p->nt++] = name;
    }
    qsort(p->tasks, p->nt, sizeof *p->tasks, cmp_task_names);
    p->cell = calloc(p->nc * p->nt + 1, sizeof *p->cell);
    p->scored = calloc(p->nt + 1, sizeof *p->scored);
    if (!p->cell || !p->scored) {
        pivot_free(p);
        return -1;
    }
    for (size_t i = 0; i < run->n_rows; i++) {
        size_t c = index_of(p->configs, p->nc, run->rows[i].config);
        size_t t = index_of(p->tasks, p->nt, run->rows[i].task);
        p->cell[c * p->nt + t] = &run->rows[i];
        p->n_scored += !p->scored[t];
        p->scored[t] = true;
    }
    p->full = (int)index_of(p->configs, p->nc, "full");
    if ((size_t)p->full == p->nc)
        p->full = -1;
    return 0;
}

static double cell_score(const pivot *p, size_t c, size_t t)
{
    const kb_score_row *r = p->cell[c * p->nt + t];
    return r ? r->score : NAN;
}

/* Mean over the tasks of a category (NULL: all tasks); NAN when none. */
/* Which tasks an average covers: a category, the EN16 tasks, or all. */
typedef struct task_set {
    const char *category; /* NULL: any */
    bool en16;
} task_set;

/* A task without any score is in no average: its "–" column says so. */
static bool in_set(const pivot *p, size_t t, task_set set)
{
    return p->scored[t] &&
           (!set.category || strcmp(kb_task_category(p->tasks[t]), set.category) == 0) &&
           (!set.en16 || kb_task_in_en16(p->tasks[t]));
}

/* The average of config c over the tasks of `set` that it has (delta: of its
 * paired differences to the full cache, over the tasks both have), with the
 * interval of rowstats.h. */
static kb_estimate set_mean(const pivot *p, size_t c, task_set set, bool delta, bool with_ci)
{
    const kb_score_row **rows = calloc(p->nt + 1, sizeof *rows);
    kb_estimate e = {NAN, {NAN, NAN}};
    if (!rows)
        return e;
    size_t k = 0;
    for (size_t t = 0; t < p->nt; t++) {
        const kb_score_row *r = p->cell[c * p->nt + t];
        if (r && in_set(p, t, set) && (!delta || !isnan(r->delta_full)))
            rows[k++] = r;
    }
    e = kb_rows_mean(rows, k, delta, with_ci);
    free(rows);
    return e;
}

static bool has_en16(const pivot *p)
{
    size_t en = 0;
    for (size_t t = 0; t < p->nt; t++)
        en += p->scored[t] && kb_task_in_en16(p->tasks[t]);
    return en == 16;
}

/* Runs with all 16 English tasks get more tasks too (e.g. zh): the "Avg"
 * column over everything is then printed beside the EN16 headline. */
static bool extra_avg(const pivot *p)
{
    return has_en16(p) && p->n_scored > 16;
}

/* The tasks of the headline number: the 16 English tasks when the run has
 * them (the number papers print), else all its tasks. */
static task_set headline_set(const pivot *p)
{
    return (task_set){NULL, has_en16(p)};
}

static double headline(const pivot *p, size_t c)
{
    return set_mean(p, c, headline_set(p), false, false).value;
}

/* What a table cell shows: a score with its interval, and its paired
 * difference to the full cache with that interval. */
typedef struct cell_est {
    kb_estimate score, delta;
} cell_est;

static cell_est task_est(const pivot *p, size_t c, size_t t)
{
    const kb_score_row *r = p->cell[c * p->nt + t];
    if (!r)
        return (cell_est){{NAN, {NAN, NAN}}, {NAN, {NAN, NAN}}};
    return (cell_est){{r->score, r->ci}, {r->delta_full, r->delta_ci}};
}

static cell_est avg_est(const pivot *p, size_t c, task_set set)
{
    return (cell_est){set_mean(p, c, set, false, true), set_mean(p, c, set, true, true)};
}

/* "▼" / "▲" when the paired interval of the difference to the full cache
 * lies wholly below / above 0, else "". */
static const char *sig_mark(kb_estimate delta)
{
    if (!kb_interval_excludes_zero(delta.ci))
        return "";
    return delta.ci.hi < 0 ? "▼" : "▲";
}

static double half_width(kb_interval ci)
{
    return (ci.hi - ci.lo) / 2;
}

static const char *avg_label(const pivot *p)
{
    return has_en16(p) ? "EN16" : "Avg";
}

static bool category_present(const pivot *p, const char *cat)
{
    for (size_t t = 0; t < p->nt; t++)
        if (strcmp(kb_task_category(p->tasks[t]), cat) == 0)
            return true;
    return false;
}

static const cJSON *config_entry(const kb_report_run *run, const char *name)
{
    for (const cJSON *c = run->configs->child; c; c = c->next)
        if (str(c, "name") && strcmp(str(c, "name"), name) == 0)
            return c;
    return NULL;
}

static long config_budget(const kb_report_run *run, const char *name)
{
    double b = num(config_entry(run, name), "budget");
    return isnan(b) ? -1 : (long)b;
}

/* ---- comparison -------------------------------------------------------- */

static int cmp_change(const void *a, const void *b)
{
    const kb_change *x = a, *y = b;
    /* regressions first, then improvements, then moves within noise */
    static const int rank[3] = {0, 2, 1}; /* by verdict + 1 */
    if (x->verdict != y->verdict)
        return rank[x->verdict + 1] < rank[y->verdict + 1] ? -1 : 1;
    double kx = fabs(x->delta), ky = fabs(y->delta);
    if (kx != ky)
        return kx > ky ? -1 : 1;
    int c = strcmp(x->config, y->config);
    return c ? c : strcmp(x->task, y->task);
}

static const kb_score_row *find_row(const kb_report_run *run, const char *config, const char *task)
{
    for (size_t j = 0; j < run->n_rows; j++)
        if (!strcmp(run->rows[j].config, config) && !strcmp(run->rows[j].task, task))
            return &run->rows[j];
    return NULL;
}

int kb_report_compare(const kb_report_run *run, const kb_report_run *baseline, double threshold,
                      kb_change **out, size_t *n, size_t *n_partial)
{
    *out = NULL;
    *n = 0;
    size_t partial = 0;
    kb_change *ch = calloc(run->n_rows + 1, sizeof *ch);
    if (!ch)
        return -1;
    for (size_t i = 0; i < run->n_rows; i++) {
        const kb_score_row *r = &run->rows[i];
        const kb_score_row *b = find_row(baseline, r->config, r->task);
        kb_pairing p;
        if (!b)
            continue;
        if (kb_rows_pair(r, b, r->task, NULL, &p) < 0) {
            free(ch);
            return -1;
        }
        bool paired = r->n_samples && b->n_samples;
        partial += paired && !p.same_samples;
        if (isnan(p.delta) || fabs(p.delta) < threshold || p.delta == 0)
            continue;
        int sign = p.delta < 0 ? -1 : 1;
        bool beyond_noise =
            !paired || (kb_interval_excludes_zero(p.ci) && (p.ci.hi < 0) == (sign < 0));
        ch[(*n)++] = (kb_change){.config = r->config,
                                 .task = r->task,
                                 .before = b->score,
                                 .after = r->score,
                                 .delta = p.delta,
                                 .ci = p.ci,
                                 .n_shared = p.n_shared,
                                 .n_before = b->n_samples,
                                 .n_after = r->n_samples,
                                 .paired = paired,
                                 .verdict = beyond_noise ? sign : 0};
    }
    qsort(ch, *n, sizeof *ch, cmp_change);
    *out = ch;
    if (n_partial)
        *n_partial = partial;
    return 0;
}

/* ---- CSV --------------------------------------------------------------- */

static void csv_field(FILE *f, const char *s)
{
    if (!strpbrk(s, ",\"\n\r")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void csv_num(FILE *f, double v, const char *fmt)
{
    if (!isnan(v))
        fprintf(f, fmt, v);
}

int kb_report_write_csv(FILE *f, const kb_report_run *runs, size_t n)
{
    fputs("run,kvbench_version,model,model_hash,protocol,compute,config,config_hash,budget,params,"
          "task,"
          "category,metric,score,n,mean_prompt_tokens,mean_kept_tokens,mean_prefill_s,"
          "mean_decode_s,ci_low,ci_high,delta_full,delta_ci_low,delta_ci_high,n_0-4k,score_0-4k,"
          "n_4-8k,score_4-8k,n_8k+,score_8k+\n",
          f);
    for (size_t k = 0; k < n; k++) {
        const kb_report_run *run = &runs[k];
        for (size_t i = 0; i < run->n_rows; i++) {
            const kb_score_row *r = &run->rows[i];
            const cJSON *c = config_entry(run, r->config);
            const cJSON *params = cJSON_GetObjectItemCaseSensitive(c, "params");
            char *canon = params ? kb_json_canonical(params) : NULL;
            const char *fields[] = {run->name,     run->kvbench_version,
                                    run->model,    run->model_hash,
                                    run->protocol, run->compute,
                                    r->config,     str(c, "hash") ? str(c, "hash") : ""};
            for (size_t j = 0; j < sizeof fields / sizeof *fields; j++) {
                csv_field(f, fields[j]);
                fputc(',', f);
            }
            long budget = config_budget(run, r->config);
            if (budget >= 0)
                fprintf(f, "%ld", budget);
            fputc(',', f);
            csv_field(f, canon ? canon : "");
            free(canon);
            fputc(',', f);
            csv_field(f, r->task);
            fputc(',', f);
            csv_field(f, kb_task_category(r->task));
            fputc(',', f);
            csv_field(f, r->metric);
            fprintf(f, ",%.2f,%ld,", r->score, r->n);
            csv_num(f, r->prompt_tokens, "%.1f");
            fputc(',', f);
            csv_num(f, r->kept_tokens, "%.1f");
            fputc(',', f);
            csv_num(f, r->prefill_s, "%.4f");
            fputc(',', f);
            csv_num(f, r->decode_s, "%.4f");
            /* 95 % bootstrap bounds and the paired difference to the full
             * cache (harness/report/rowstats.h); empty when not available */
            const double stats[] = {r->ci.lo, r->ci.hi, r->delta_full, r->delta_ci.lo,
                                    r->delta_ci.hi};
            for (size_t j = 0; j < sizeof stats / sizeof *stats; j++) {
                fputc(',', f);
                csv_num(f, stats[j], "%.2f");
            }
            /* LongBench-E's length buckets, as eval.py --e; empty for other tasks */
            for (int b = 0; b < KB_N_BUCKETS; b++) {
                if (!has_buckets(r)) {
                    fputs(",,", f);
                    continue;
                }
                fprintf(f, ",%zu,", r->bucket_n[b]);
                csv_num(f, r->bucket[b], "%.2f");
            }
            fputc('\n', f);
        }
    }
    return ferror(f) ? -1 : 0;
}

/* ---- per-length view --------------------------------------------------- */

/* Scores by context length (lengths.h): for config c and group k, the mean
 * over the tasks with samples in k of the task's score on those samples
 * (tasks weigh the same, as in the averages), with its bootstrap interval. */
typedef struct kb_length_view {
    kb_length_groups g;
    kb_estimate *est; /* [c * g.n + k], c in pivot order */
    size_t *n;        /* samples behind est */
} length_view;

static void length_view_free(length_view *v)
{
    free(v->est);
    free(v->n);
    memset(v, 0, sizeof *v);
}

/* One (config, group): resamples each task's samples of the group. */
static int length_cell(const pivot *p, const length_view *v, size_t c, int k, kb_boot_plans *plans,
                       double *x, double *boot, double *sum, kb_estimate *out, size_t *n_out)
{
    size_t n_tasks = 0;
    double total = 0;
    memset(sum, 0, KB_BOOT_RESAMPLES * sizeof *sum);
    *n_out = 0;
    for (size_t t = 0; t < p->nt; t++) {
        const kb_score_row *r = p->cell[c * p->nt + t];
        size_t m = 0;
        for (size_t i = 0; r && i < r->n_samples; i++)
            if (kb_length_group_of(&v->g, r->samples[i].length) == k)
                x[m++] = r->samples[i].score;
        if (!m)
            continue;
        /* a stream per (task, group): the group's samples of every config
         * are resampled alike, as whole rows are */
        uint64_t seed = kb_boot_seed(r->task) ^ (UINT64_C(0x9e3779b97f4a7c15) * (uint64_t)(k + 1));
        const kb_boot_plan *plan = kb_boot_plans_get(plans, seed, m);
        if (!plan)
            return -1;
        kb_boot_means(plan, x, boot);
        double mean = 0;
        for (size_t i = 0; i < m; i++)
            mean += x[i];
        total += 100.0 * mean / (double)m;
        for (size_t b = 0; b < KB_BOOT_RESAMPLES; b++)
            sum[b] += boot[b];
        n_tasks++;
        *n_out += m;
    }
    *out = (kb_estimate){NAN, {NAN, NAN}};
    if (!n_tasks)
        return 0;
    for (size_t b = 0; b < KB_BOOT_RESAMPLES; b++)
        sum[b] /= (double)n_tasks;
    *out = (kb_estimate){total / (double)n_tasks, kb_boot_interval(sum, KB_BOOT_RESAMPLES)};
    return 0;
}

/* 0 with v->g.n == 0 when the run has no per-length view; -1 on OOM. */
static int length_view_build(const pivot *p, length_view *v)
{
    memset(v, 0, sizeof *v);
    size_t n_len = 0, max_n = 0;
    for (size_t i = 0; i < p->run->n_rows; i++) {
        n_len += p->run->rows[i].n_samples;
        if (p->run->rows[i].n_samples > max_n)
            max_n = p->run->rows[i].n_samples;
    }
    long *lengths = malloc((n_len + 1) * sizeof *lengths);
    if (!lengths)
        return -1;
    n_len = 0;
    for (size_t i = 0; i < p->run->n_rows; i++)
        for (size_t j = 0; j < p->run->rows[i].n_samples; j++)
            lengths[n_len++] = p->run->rows[i].samples[j].length;
    kb_length_groups_choose(&v->g, lengths, n_len);
    free(lengths);
    if (v->g.n == 0)
        return 0;
    v->est = calloc(p->nc * v->g.n, sizeof *v->est);
    v->n = calloc(p->nc * v->g.n, sizeof *v->n);
    double *x = malloc((max_n + 1) * sizeof *x);
    double *boot = malloc(KB_BOOT_RESAMPLES * sizeof *boot);
    double *sum = malloc(KB_BOOT_RESAMPLES * sizeof *sum);
    kb_boot_plans plans = {0};
    int rc = v->est && v->n && x && boot && sum ? 0 : -1;
    for (size_t c = 0; rc == 0 && c < p->nc; c++)
        for (size_t k = 0; rc == 0 && k < v->g.n; k++)
            rc = length_cell(p, v, c, (int)k, &plans, x, boot, sum, &v->est[c * v->g.n + k],
                             &v->n[c * v->g.n + k]);
    kb_boot_plans_free(&plans);
    free(x);
    free(boot);
    free(sum);
    if (rc < 0)
        length_view_free(v);
    return rc;
}

/* Builds run->lengths once, for every writer (it resamples as much as the
 * rows do). */
static int length_view_attach(kb_report_run *run)
{
    pivot p;
    length_view *v = calloc(1, sizeof *v);
    if (!v || pivot_build(&p, run) < 0) {
        free(v);
        return -1;
    }
    int rc = length_view_build(&p, v);
    pivot_free(&p);
    if (rc < 0 || v->g.n == 0) {
        free(v);
        return rc;
    }
    run->lengths = v;
    return 0;
}

static const char *length_axis(const length_view *v)
{
    return v->g.buckets ? "context length (LongBench-E buckets, words or characters)"
                        : "context length (nearest multiple of 512)";
}

/* averages.csv: the rows of summary.md's average columns, with intervals:
 * one line per run x config x average (each category, the headline, and
 * "Avg" over all tasks when that is not the headline). */
static void csv_average(FILE *f, const pivot *p, size_t c, const char *name, task_set set,
                        size_t n_tasks)
{
    cell_est e = avg_est(p, c, set);
    const kb_report_run *run = p->run;
    const char *fields[] = {run->name, run->model, run->model_hash, p->configs[c], name};
    for (size_t j = 0; j < sizeof fields / sizeof *fields; j++) {
        csv_field(f, fields[j]);
        fputc(',', f);
    }
    long budget = config_budget(run, p->configs[c]);
    if (budget >= 0)
        fprintf(f, "%ld", budget);
    fprintf(f, ",%zu", n_tasks);
    const double v[] = {e.score.value, e.score.ci.lo, e.score.ci.hi,
                        e.delta.value, e.delta.ci.lo, e.delta.ci.hi};
    for (size_t j = 0; j < sizeof v / sizeof *v; j++) {
        fputc(',', f);
        csv_num(f, (int)c == p->full && j >= 3 ? NAN : v[j], "%.2f");
    }
    fputc('\n', f);
}

static size_t tasks_in(const pivot *p, task_set set)
{
    size_t k = 0;
    for (size_t t = 0; t < p->nt; t++)
        k += in_set(p, t, set);
    return k;
}

int kb_report_write_averages_csv(FILE *f, const kb_report_run *runs, size_t n)
{
    fputs("run,model,model_hash,config,average,budget,tasks,score,ci_low,ci_high,delta_full,"
          "delta_ci_low,delta_ci_high\n",
          f);
    for (size_t k = 0; k < n; k++) {
        pivot p;
        if (pivot_build(&p, &runs[k]) < 0)
            return -1;
        for (size_t c = 0; c < p.nc; c++) {
            for (int i = 0; kb_task_categories[i]; i++) {
                task_set set = {kb_task_categories[i], false};
                if (category_present(&p, kb_task_categories[i]))
                    csv_average(f, &p, c, kb_task_categories[i], set, tasks_in(&p, set));
            }
            if (has_en16(&p))
                csv_average(f, &p, c, "EN16", headline_set(&p), 16);
            if (!has_en16(&p) || extra_avg(&p))
                csv_average(f, &p, c, "Avg", (task_set){NULL, false}, p.n_scored);
        }
        pivot_free(&p);
    }
    return ferror(f) ? -1 : 0;
}

/* ---- Markdown ---------------------------------------------------------- */

/* A table cell's text: '|' would end the cell and a newline the row. */
static void md_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '|')
            fputs("\\|", f);
        else if (*s == '\n' || *s == '\r')
            fputc(' ', f);
        else
            fputc(*s, f);
    }
}

static void md_num(FILE *f, double v)
{
    if (isnan(v))
        fputs(" – |", f);
    else
        fprintf(f, " %.2f |", v);
}

/* " 92.22 ±5.56 ▼ |": the score, half the width of its interval, the mark;
 * a task's cell of an unfinished run also the samples done ("2/5 done"). */
static void md_cell(FILE *f, cell_est e, bool bold, const kb_score_row *r)
{
    if (isnan(e.score.value)) {
        fputs(" – |", f);
        return;
    }
    fprintf(f, bold ? " **%.2f**" : " %.2f", e.score.value);
    if (!isnan(e.score.ci.lo))
        fprintf(f, " ±%.2f", half_width(e.score.ci));
    const char *mark = sig_mark(e.delta);
    fprintf(f, "%s%s", *mark ? " " : "", mark);
    if (kb_row_incomplete(r))
        fprintf(f, " (%ld/%ld done)", r->n, r->n_expected);
    fputs(" |", f);
}

/* " -3.33 [-6.67, -1.11] ▼ |": the paired difference and its interval. */
static void md_delta_cell(FILE *f, kb_estimate d)
{
    if (isnan(d.value)) {
        fputs(" – |", f);
        return;
    }
    fprintf(f, " %+.2f", d.value);
    if (!isnan(d.ci.lo))
        fprintf(f, " [%+.2f, %+.2f]", d.ci.lo, d.ci.hi);
    const char *mark = sig_mark(d);
    fprintf(f, "%s%s |", *mark ? " " : "", mark);
}

/* Names the matrix's tasks that no config has a score of, under the table. */
static void md_unscored_note(FILE *f, const pivot *p)
{
    if (p->n_scored == p->nt)
        return;
    fputs("\n– : no score of", f);
    for (size_t t = 0, k = 0; t < p->nt; t++)
        if (!p->scored[t]) {
            fputs(k++ ? ", " : " ", f);
            md_text(f, p->tasks[t]);
        }
    fputs(" (an empty task file reported as missing, or not run yet); the averages leave "
          "it out.\n",
          f);
}

static void md_table(FILE *f, const pivot *p)
{
    fputs("| config | budget |", f);
    for (size_t t = 0; t < p->nt; t++) {
        fputc(' ', f);
        md_text(f, p->tasks[t]);
        fputs(" |", f);
    }
    for (int c = 0; kb_task_categories[c]; c++)
        if (category_present(p, kb_task_categories[c]))
            fprintf(f, " %s |", kb_task_categories[c]);
    if (extra_avg(p))
        fprintf(f, " Avg (%zu) |", p->n_scored);
    fprintf(f, " **%s** | Δ full |\n|---|--:|", avg_label(p));
    for (size_t t = 0; t < p->nt; t++)
        fputs("--:|", f);
    for (int c = 0; kb_task_categories[c]; c++)
        if (category_present(p, kb_task_categories[c]))
            fputs("--:|", f);
    fputs(extra_avg(p) ? "--:|--:|--:|\n" : "--:|--:|\n", f);
    for (size_t c = 0; c < p->nc; c++) {
        long budget = config_budget(p->run, p->configs[c]);
        fputs("| ", f);
        md_text(f, p->configs[c]);
        fputs(" |", f);
        if (budget >= 0)
            fprintf(f, " %ld |", budget);
        else
            fprintf(f, " %s |", kb_budget_label(budget));
        for (size_t t = 0; t < p->nt; t++)
            md_cell(f, task_est(p, c, t), false, p->cell[c * p->nt + t]);
        for (int k = 0; kb_task_categories[k]; k++)
            if (category_present(p, kb_task_categories[k]))
                md_cell(f, avg_est(p, c, (task_set){kb_task_categories[k], false}), false, NULL);
        if (extra_avg(p))
            md_cell(f, avg_est(p, c, (task_set){NULL, false}), false, NULL);
        cell_est avg = avg_est(p, c, headline_set(p));
        md_cell(f, avg, true, NULL);
        md_delta_cell(f, avg.delta);
        fputc('\n', f);
    }
    md_unscored_note(f, p);
}

/* The configs of the run whose parameters contradict each other, each
 * marked ⚠ with what goes wrong and the fix: their scores may be ruined
 * by the setting, not by eviction. */
static void md_warnings(FILE *f, const kb_report_run *run)
{
    for (const cJSON *c = run->configs->child; c; c = c->next) {
        const char *w = kb_config_warning(cJSON_GetObjectItemCaseSensitive(c, "params"));
        if (w)
            fprintf(f, "\n⚠ %s: %s.\n", str(c, "name") ? str(c, "name") : "?", w);
    }
}

/* The config table's query_aware column: "true" (also when the key is
 * absent: the default), "false", or "-" for the full cache. */
static const char *query_aware_cell(const cJSON *params)
{
    if (!params || cJSON_IsNull(params))
        return "-";
    return cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(params, "query_aware")) ? "false"
                                                                                 : "true";
}

static void md_params(FILE *f, const kb_report_run *run)
{
    fputs("\n| config | hash | budget | query_aware | parameters |\n|---|---|--:|---|---|\n", f);
    for (const cJSON *c = run->configs->child; c; c = c->next) {
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(c, "params");
        char *canon = params && !cJSON_IsNull(params) ? kb_json_canonical(params) : NULL;
        long budget = (long)num(c, "budget");
        fprintf(f, "| %s%s | `%s` | ", str(c, "name") ? str(c, "name") : "?",
                kb_config_warning(params) ? " ⚠" : "", str(c, "hash") ? str(c, "hash") : "?");
        if (budget >= 0)
            fprintf(f, "%ld", budget);
        else
            fputs(kb_budget_label(budget), f);
        fprintf(f, " | %s | `%s` |\n", query_aware_cell(params), canon ? canon : "full cache");
        free(canon);
    }
}

static void md_timing(FILE *f, const kb_report_run *run)
{
    fputs("\n| config | task | n | prompt tokens | kept tokens | prefill s | decode s |\n"
          "|---|---|--:|--:|--:|--:|--:|\n",
          f);
    for (size_t i = 0; i < run->n_rows; i++) {
        const kb_score_row *r = &run->rows[i];
        fputs("| ", f);
        md_text(f, r->config);
        fputs(" | ", f);
        md_text(f, r->task);
        fprintf(f, " | %ld |", r->n);
        md_num(f, r->prompt_tokens);
        md_num(f, r->kept_tokens);
        md_num(f, r->prefill_s);
        md_num(f, r->decode_s);
        fputc('\n', f);
    }
}

static const char *verdict_name(int verdict)
{
    return verdict < 0 ? "regression" : verdict > 0 ? "improvement" : "within noise";
}

static size_t count_verdict(const kb_change *ch, size_t n, int verdict)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += ch[i].verdict == verdict;
    return k;
}

/* The rule, and what the comparison could not pair, in one sentence each. */
static void compare_notes(FILE *f, const kb_change *ch, size_t n, size_t n_partial,
                          const kb_report_options *opt)
{
    size_t reg = count_verdict(ch, n, -1), imp = count_verdict(ch, n, 1);
    fprintf(f,
            "%zu regression%s and %zu improvement%s: a move of at least %.2f points whose "
            "paired 95 %% interval (new - baseline, on the samples both runs scored) excludes 0",
            reg, reg == 1 ? "" : "s", imp, imp == 1 ? "" : "s", opt->threshold);
    size_t noise = n - reg - imp, unpaired = 0;
    for (size_t i = 0; i < n; i++)
        unpaired += !ch[i].paired;
    if (noise)
        fprintf(f, "; %zu move%s of that size within noise", noise, noise == 1 ? "" : "s");
    fputs(".", f);
    if (n_partial)
        fprintf(f,
                " %zu (config, task) pair%s of the two runs cover different samples: each is "
                "compared on the samples both runs share.",
                n_partial, n_partial == 1 ? "" : "s");
    if (unpaired)
        fprintf(f,
                " %zu move%s could not be paired (a scores.json without per-sample scores): "
                "the threshold alone decides those.",
                unpaired, unpaired == 1 ? "" : "s");
}

static void md_compare(FILE *f, const kb_report_run *run, const kb_report_options *opt)
{
    const kb_report_run *b = opt->baseline;
    kb_change *ch = NULL;
    size_t n = 0, n_partial = 0;
    if (kb_report_compare(run, b, opt->threshold, &ch, &n, &n_partial) < 0)
        return;
    fprintf(f, "\n### Compared with %s\n\n", b->name);
    if (strcmp(b->model_hash, run->model_hash) != 0)
        fprintf(f, "Note: the baseline used a different model (hash `%s`).\n\n", b->model_hash);
    compare_notes(f, ch, n, n_partial, opt);
    fputc('\n', f);
    if (n) {
        fputs("\n| | config | task | baseline | now | Δ | 95 % interval | samples |\n"
              "|---|---|---|--:|--:|--:|--:|--:|\n",
              f);
        for (size_t i = 0; i < n; i++) {
            fprintf(f, "| %s%s%s | ", ch[i].verdict < 0 ? "**" : "", verdict_name(ch[i].verdict),
                    ch[i].verdict < 0 ? "**" : "");
            md_text(f, ch[i].config);
            fputs(" | ", f);
            md_text(f, ch[i].task);
            fprintf(f, " | %.2f | %.2f | %+.2f |", ch[i].before, ch[i].after, ch[i].delta);
            if (ch[i].paired)
                fprintf(f, " [%+.2f, %+.2f] | %zu |\n", ch[i].ci.lo, ch[i].ci.hi, ch[i].n_shared);
            else
                fputs(" – | – |\n", f);
        }
    }
    free(ch);
}

static void md_lengths(FILE *f, const pivot *p, const length_view *v)
{
    fprintf(f, "\n### Scores by %s\n\n| config |", length_axis(v));
    for (size_t k = 0; k < v->g.n; k++)
        fprintf(f, " %s |", v->g.names[k]);
    fputs("\n|---|", f);
    for (size_t k = 0; k < v->g.n; k++)
        fputs("--:|", f);
    fputc('\n', f);
    for (size_t c = 0; c < p->nc; c++) {
        fputs("| ", f);
        md_text(f, p->configs[c]);
        fputs(" |", f);
        for (size_t k = 0; k < v->g.n; k++) {
            kb_estimate e = v->est[c * v->g.n + k];
            md_cell(f, (cell_est){e, {NAN, {NAN, NAN}}}, false, NULL);
        }
        fputc('\n', f);
    }
}

int kb_report_write_table(FILE *f, const kb_report_run *run)
{
    pivot p;
    if (pivot_build(&p, run) < 0)
        return -1;
    md_table(f, &p);
    pivot_free(&p);
    return ferror(f) ? -1 : 0;
}

int kb_report_write_markdown(FILE *f, const kb_report_run *runs, size_t n,
                             const kb_report_options *opt)
{
    fprintf(f,
            "# kvbench report%s\n\n| run | model | model hash | protocol | compute | kvbench |\n"
            "|---|---|---|---|---|---|\n",
            kb_reports_unfinished(runs, n) ? " (unfinished run)" : "");
    for (size_t k = 0; k < n; k++)
        fprintf(f, "| %s | %s | `%s` | %s | %s | %s |\n", runs[k].name, runs[k].model,
                runs[k].model_hash, runs[k].protocol, runs[k].compute, runs[k].kvbench_version);
    if (opt && opt->baseline)
        fprintf(f, "| %s (baseline) | %s | `%s` | %s | %s | %s |\n", opt->baseline->name,
                opt->baseline->model, opt->baseline->model_hash, opt->baseline->protocol,
                opt->baseline->compute, opt->baseline->kvbench_version);
    if (kb_report_side_by_side(f, runs, n, false) < 0)
        return -1;
    for (size_t k = 0; k < n; k++) {
        pivot p;
        if (pivot_build(&p, &runs[k]) < 0)
            return -1;
        fprintf(f, "\n## %s — %s", runs[k].name, runs[k].model);
        kb_report_unfinished_note(f, &runs[k]);
        fprintf(f,
                "\n\nScores (LongBench %%); averages are plain means of the task "
                "scores; Δ full is the %s difference to the full-cache row, paired on the "
                "samples both scored. ± is half the width of the 95 %% bootstrap interval "
                "(%d resamples of each task's samples, fixed seed; averages resample within "
                "each task); ▼ / ▲ mark a score below / above the full cache whose paired "
                "95 %% interval of the difference excludes 0. Exact bounds are in "
                "scores.csv.\n\n",
                avg_label(&p), KB_BOOT_RESAMPLES);
        md_table(f, &p);
        md_warnings(f, &runs[k]);
        if (runs[k].lengths)
            md_lengths(f, &p, runs[k].lengths);
        if (opt && opt->baseline)
            md_compare(f, &runs[k], opt);
        fputs("\n### Configs\n", f);
        md_params(f, &runs[k]);
        fputs("\n### Tokens and time (means per sample)\n", f);
        md_timing(f, &runs[k]);
        pivot_free(&p);
    }
    return ferror(f) ? -1 : 0;
}

int kb_report_write(const char *dir, const kb_report_run *runs, size_t n,
                    const kb_report_options *opt, kv_error *err)
{
    static const char *const names[] = {"scores.csv", "averages.csv", "summary.md", "report.html"};
    if (kv_mkdirs(dir, err) < 0)
        return -1;
    for (int i = 0; i < 4; i++) {
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        if (!f)
            return kv_fail(err, "out of memory");
        int rc = i == 0   ? kb_report_write_csv(f, runs, n)
                 : i == 1 ? kb_report_write_averages_csv(f, runs, n)
                 : i == 2 ? kb_report_write_markdown(f, runs, n, opt)
                          : kb_report_write_html(f, runs, n, opt);
        fclose(f);
        char *path = kv_path_join(dir, names[i]);
        if (rc < 0 || !path)
            rc = kv_fail(err, "%s: out of memory while writing", names[i]);
        else
            rc = kv_write_atomic(path, buf, len, err);
        free(path);
        free(buf);
        if (rc < 0)
            return -1;
    }
    for (size_t k = 0; k < n; k++) /* the pages report.html links to */
        if (kb_wrong_write(dir, &runs[k], n > 1, err) < 0)
            return -1;
    return 0;
}

/* ---- HTML with inline SVG ---------------------------------------------- */

/* Everything is inline (CSS, SVG, no scripts, no fonts, no links out), so the
 * file opens the same from a mail attachment or an air-gapped machine. */

static void html_esc(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '&':
            fputs("&amp;", f);
            break;
        case '<':
            fputs("&lt;", f);
            break;
        case '>':
            fputs("&gt;", f);
            break;
        case '"':
            fputs("&quot;", f);
            break;
        default:
            fputc(*s, f);
        }
    }
}

/* The series a config belongs to in the budget chart (report/series.h):
 * its parameters with defaults, without the sizes. Caller frees. */
static cJSON *series_of(const kb_report_run *run, const char *config)
{
    return kb_series_params(
        cJSON_GetObjectItemCaseSensitive(config_entry(run, config), "params"));
}

/* A style attribute for a dashed series: " stroke-dasharray='8 4'". */
static void dash_attr(FILE *f, const char *dash)
{
    if (*dash)
        fprintf(f, " stroke-dasharray='%s'", dash);
}

typedef struct chart_point {
    long budget;
    double score;
    kb_interval ci; /* the whisker; NaN: none */
    const char *config;
} chart_point;

static int cmp_points(const void *a, const void *b)
{
    const chart_point *x = a, *y = b;
    return (x->budget > y->budget) - (x->budget < y->budget);
}

typedef struct chart {
    double x0, x1, y0, y1;           /* data ranges (x in log2 budget) */
    double left, top, width, height; /* plot area in px */
} chart;

static double cx(const chart *c, long budget)
{
    return c->left + (log2((double)budget) - c->x0) / (c->x1 - c->x0) * c->width;
}

static double cy(const chart *c, double score)
{
    return c->top + c->height - (score - c->y0) / (c->y1 - c->y0) * c->height;
}

/* The grid, the frame and the axis titles; x ticks at xs (px) with labels. */
static void chart_axes(FILE *f, const chart *c, const double *xs, const char (*labels)[24],
                       size_t nx, const char *xlabel, const char *ylabel)
{
    double step = c->y1 - c->y0 > 50 ? 10 : c->y1 - c->y0 > 20 ? 5 : 2;
    double first = ceil(c->y0 / step) * step;
    /* scores are percentages, so at most ~50 ticks; counted, never open-ended */
    for (int k = 0; k <= 60 && first + k * step <= c->y1 + 1e-9; k++) {
        double y = first + k * step;
        fprintf(f,
                "<line x1='%.1f' x2='%.1f' y1='%.1f' y2='%.1f' class='grid'/>"
                "<text x='%.1f' y='%.1f' class='tick' text-anchor='end'>%g</text>\n",
                c->left, c->left + c->width, cy(c, y), cy(c, y), c->left - 6, cy(c, y) + 4, y);
    }
    for (size_t i = 0; i < nx; i++)
        fprintf(f,
                "<line x1='%.1f' x2='%.1f' y1='%.1f' y2='%.1f' class='grid'/>"
                "<text x='%.1f' y='%.1f' class='tick' text-anchor='middle'>%s</text>\n",
                xs[i], xs[i], c->top, c->top + c->height, xs[i], c->top + c->height + 16,
                labels[i]);
    fprintf(f,
            "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' class='frame'/>\n"
            "<text x='%.1f' y='%.1f' class='axis' text-anchor='middle'>%s</text>\n"
            "<text x='14' y='%.1f' class='axis' text-anchor='middle' transform='rotate(-90 14 "
            "%.1f)'>%s</text>\n",
            c->left, c->top, c->width, c->height, c->left + c->width / 2, c->top + c->height + 38,
            xlabel, c->top + c->height / 2, c->top + c->height / 2, ylabel);
}

static int cmp_long(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

/* Score (row mean) against budget, one line per series, the full cache dashed. */
static void svg_budget_chart(FILE *f, const pivot *p)
{
    chart_point *pts = calloc(p->nc + 1, sizeof *pts);
    cJSON **series = calloc(p->nc + 1, sizeof *series);
    long *budgets = calloc(p->nc + 1, sizeof *budgets);
    if (!pts || !series || !budgets)
        goto out;
    size_t np = 0, nb = 0;
    double ymax = 0;
    for (size_t c = 0; c < p->nc; c++) {
        long b = config_budget(p->run, p->configs[c]);
        kb_estimate est = set_mean(p, c, headline_set(p), false, true);
        double avg = est.value;
        if (!isnan(avg) && avg > ymax)
            ymax = avg;
        if (!isnan(est.ci.hi) && est.ci.hi > ymax)
            ymax = est.ci.hi;
        if (b <= 0 || isnan(avg) || (int)c == p->full)
            continue;
        series[np] = series_of(p->run, p->configs[c]);
        pts[np++] = (chart_point){b, avg, est.ci, p->configs[c]};
        bool seen = false;
        for (size_t i = 0; i < nb; i++)
            seen |= budgets[i] == b;
        if (!seen)
            budgets[nb++] = b;
    }
    if (np == 0) {
        fputs("<p class='note'>No configs with a cache budget to plot.</p>\n", f);
        goto out;
    }
    qsort(budgets, nb, sizeof *budgets, cmp_long);
    /* zoom on the data: the differences between methods are a few points */
    double ymin = ymax;
    for (size_t i = 0; i < np; i++)
        ymin = fmin(ymin, isnan(pts[i].ci.lo) ? pts[i].score : pts[i].ci.lo);
    kb_estimate full = p->full >= 0 ? set_mean(p, (size_t)p->full, headline_set(p), false, true)
                                    : (kb_estimate){NAN, {NAN, NAN}};
    if (!isnan(full.value))
        ymin = fmin(ymin, isnan(full.ci.lo) ? full.value : full.ci.lo);
    double lo = fmax(0, floor((ymin - 2) / 5) * 5), hi = ceil((ymax + 1) / 5) * 5;
    chart c = {.x0 = log2((double)budgets[0]),
               .x1 = log2((double)budgets[nb - 1]),
               .y0 = lo,
               .y1 = hi > lo ? hi : lo + 5,
               .left = 60,
               .top = 20,
               .width = 560,
               .height = 300};
    if (c.x1 - c.x0 < 1e-9) {
        c.x0 -= 1;
        c.x1 += 1;
    }
    c.x0 -= 0.25;
    c.x1 += 0.25;
    fprintf(f, "<svg xmlns='http://www.w3.org/2000/svg' class='chart' width='900' height='380' "
               "viewBox='0 0 900 380' role='img' aria-label='score vs cache budget'>\n");
    double xs[64];
    char labels[64][24];
    size_t nx = nb < 64 ? nb : 64;
    for (size_t i = 0; i < nx; i++) {
        xs[i] = cx(&c, budgets[i]);
        snprintf(labels[i], sizeof labels[i], "%ld", budgets[i]);
    }
    chart_axes(f, &c, xs, (const char(*)[24])labels, nx,
               "KV cache budget (entries per layer, log scale)", avg_label(p));
    double legend_y = 30;
    if (!isnan(full.ci.lo)) /* the full cache's interval as a band behind the lines */
        fprintf(f,
                "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' class='band'><title>full "
                "cache 95 %% interval: %.2f to %.2f</title></rect>\n",
                c.left, cy(&c, full.ci.hi), c.width, cy(&c, full.ci.lo) - cy(&c, full.ci.hi),
                full.ci.lo, full.ci.hi);
    if (p->full >= 0) {
        double y = cy(&c, headline(p, (size_t)p->full));
        fprintf(f,
                "<line x1='%.1f' x2='%.1f' y1='%.1f' y2='%.1f' class='full'><title>full cache: "
                "%.2f</title></line>\n"
                "<line x1='640' x2='664' y1='%.1f' y2='%.1f' class='full'/><text x='670' "
                "y='%.1f' class='legend'>full cache (%.2f)</text>\n",
                c.left, c.left + c.width, y, y, headline(p, (size_t)p->full), legend_y, legend_y,
                legend_y + 4, headline(p, (size_t)p->full));
        legend_y += 20;
    }
    /* one polyline per distinct series, in order of first appearance; the
     * legend names what tells each from the others */
    size_t *first = calloc(np, sizeof *first), *of = calloc(np, sizeof *of), ns = 0;
    cJSON **distinct = calloc(np, sizeof *distinct);
    char **names = calloc(np, sizeof *names);
    for (size_t i = 0; first && of && distinct && names && i < np; i++) {
        size_t s = 0;
        while (s < ns && !cJSON_Compare(series[first[s]], series[i], true) &&
               (series[first[s]] || series[i]))
            s++;
        if (s == ns) {
            first[ns] = i;
            distinct[ns++] = series[i];
        }
        of[i] = s;
    }
    if (names && distinct)
        kb_series_labels(distinct, ns, names);
    for (size_t s = 0; first && of && distinct && names && s < ns; s++) {
        chart_point *line = calloc(np, sizeof *line);
        if (!line)
            break;
        size_t nl = 0;
        for (size_t j = first[s]; j < np; j++)
            if (of[j] == s)
                line[nl++] = pts[j];
        qsort(line, nl, sizeof *line, cmp_points);
        kb_series_style style = kb_series_style_of(s);
        const char *col = style.colour;
        fprintf(f, "<polyline fill='none' stroke='%s' stroke-width='2'", col);
        dash_attr(f, style.dash);
        fputs(" points='", f);
        for (size_t j = 0; j < nl; j++)
            fprintf(f, "%.1f,%.1f ", cx(&c, line[j].budget), cy(&c, line[j].score));
        fputs("'/>\n", f);
        for (size_t j = 0; j < nl; j++) {
            double x = cx(&c, line[j].budget);
            if (!isnan(line[j].ci.lo))
                fprintf(f,
                        "<path d='M%.1f,%.1fV%.1fM%.1f,%.1fh8M%.1f,%.1fh8' stroke='%s' "
                        "class='whisker'/>\n",
                        x, cy(&c, line[j].ci.lo), cy(&c, line[j].ci.hi), x - 4,
                        cy(&c, line[j].ci.lo), x - 4, cy(&c, line[j].ci.hi), col);
            fprintf(f, "<circle cx='%.1f' cy='%.1f' r='4' fill='%s'><title>", x,
                    cy(&c, line[j].score), col);
            html_esc(f, line[j].config);
            fprintf(f, ": %.2f", line[j].score);
            if (!isnan(line[j].ci.lo))
                fprintf(f, " (95 %% interval %.2f to %.2f)", line[j].ci.lo, line[j].ci.hi);
            fputs("</title></circle>\n", f);
        }
        fprintf(f, "<line x1='640' x2='664' y1='%.1f' y2='%.1f' stroke='%s' stroke-width='3'",
                legend_y, legend_y, col);
        dash_attr(f, style.dash);
        fprintf(f, "/><text x='670' y='%.1f' class='legend'>", legend_y + 4);
        html_esc(f, names[s] ? names[s] : "?");
        fputs("</text>\n", f);
        legend_y += 20;
        free(line);
    }
    for (size_t s = 0; names && s < ns; s++)
        free(names[s]);
    free(names);
    free(distinct);
    free(first);
    free(of);
    fputs("</svg>\n", f);
out:
    for (size_t i = 0; series && i < p->nc; i++)
        cJSON_Delete(series[i]);
    free(series);
    free(pts);
    free(budgets);
}

/* Score against length, one line per config (the full cache dashed), with
 * interval whiskers. */
static void svg_length_chart(FILE *f, const pivot *p, const length_view *v)
{
    double ymin = 100, ymax = 0;
    for (size_t i = 0; i < p->nc * v->g.n; i++) {
        kb_estimate e = v->est[i];
        if (isnan(e.value))
            continue;
        ymin = fmin(ymin, isnan(e.ci.lo) ? e.value : e.ci.lo);
        ymax = fmax(ymax, isnan(e.ci.hi) ? e.value : e.ci.hi);
    }
    if (ymin > ymax) {
        fputs("<p class='note'>No scores by length.</p>\n", f);
        return;
    }
    double lo = fmax(0, floor((ymin - 2) / 5) * 5), hi = fmin(100, ceil((ymax + 1) / 5) * 5);
    double height = fmax(300, 20.0 * (double)p->nc);
    chart c = {.x0 = -0.5,
               .x1 = (double)v->g.n - 0.5,
               .y0 = lo,
               .y1 = hi > lo ? hi : lo + 5,
               .left = 60,
               .top = 20,
               .width = 560,
               .height = height};
    fprintf(f,
            "<svg xmlns='http://www.w3.org/2000/svg' class='chart' width='1000' height='%.0f' "
            "viewBox='0 0 1000 %.0f' role='img' aria-label='score vs context length'>\n",
            height + 80, height + 80);
    double xs[KB_MAX_LENGTH_GROUPS];
    for (size_t k = 0; k < v->g.n; k++)
        xs[k] = c.left + ((double)k + 0.5) / (double)v->g.n * c.width;
    chart_axes(f, &c, xs, (const char(*)[24])v->g.names, v->g.n, length_axis(v),
               "score (mean of the tasks)");
    double legend_y = 30;
    for (size_t ci = 0; ci < p->nc; ci++) {
        bool full = (int)ci == p->full;
        kb_series_style style = full ? (kb_series_style){"#222", "6 4"} : kb_series_style_of(ci);
        const char *col = style.colour;
        fprintf(f, "<polyline fill='none' stroke='%s' stroke-width='2'", col);
        dash_attr(f, style.dash);
        fputs(" points='", f);
        for (size_t k = 0; k < v->g.n; k++) {
            kb_estimate e = v->est[ci * v->g.n + k];
            if (!isnan(e.value))
                fprintf(f, "%.1f,%.1f ", xs[k], cy(&c, e.value));
        }
        fputs("'/>\n", f);
        for (size_t k = 0; k < v->g.n; k++) {
            kb_estimate e = v->est[ci * v->g.n + k];
            if (isnan(e.value))
                continue;
            /* whiskers side by side, so that configs do not hide each other */
            double x = xs[k] + ((double)ci - (double)(p->nc - 1) / 2) * 3;
            if (!isnan(e.ci.lo))
                fprintf(f,
                        "<line x1='%.1f' x2='%.1f' y1='%.1f' y2='%.1f' stroke='%s' "
                        "class='whisker'/>\n",
                        x, x, cy(&c, e.ci.lo), cy(&c, e.ci.hi), col);
            fprintf(f, "<circle cx='%.1f' cy='%.1f' r='3.5' fill='%s'><title>", x, cy(&c, e.value),
                    col);
            html_esc(f, p->configs[ci]);
            fprintf(f, " at %s: %.2f", v->g.names[k], e.value);
            if (!isnan(e.ci.lo))
                fprintf(f, " (95 %% interval %.2f to %.2f)", e.ci.lo, e.ci.hi);
            fprintf(f, ", %zu samples</title></circle>\n", v->n[ci * v->g.n + k]);
        }
        fprintf(f, "<line x1='640' x2='664' y1='%.1f' y2='%.1f' stroke='%s' stroke-width='3'",
                legend_y, legend_y, col);
        dash_attr(f, style.dash);
        fprintf(f, "/><text x='670' y='%.1f' class='legend'>", legend_y + 4);
        html_esc(f, p->configs[ci]);
        fputs("</text>\n", f);
        legend_y += 20;
    }
    fputs("</svg>\n", f);
}

/* Diverging colour for a delta: red below the full cache, blue above. */
static void delta_colour(double d, double range, char out[8])
{
    double t = fmin(1, fabs(d) / range);
    int r, g, b;
    if (d < 0) { /* white -> #d73027 */
        r = (int)lround(255 + t * (215 - 255));
        g = (int)lround(255 + t * (48 - 255));
        b = (int)lround(255 + t * (39 - 255));
    } else { /* white -> #4575b4 */
        r = (int)lround(255 + t * (69 - 255));
        g = (int)lround(255 + t * (117 - 255));
        b = (int)lround(255 + t * (180 - 255));
    }
    snprintf(out, 8, "#%02x%02x%02x", r, g, b);
}

static bool is_regression(const kb_change *ch, size_t n, const char *config, const char *task)
{
    for (size_t i = 0; i < n; i++)
        if (ch[i].verdict < 0 && strcmp(ch[i].config, config) == 0 && strcmp(ch[i].task, task) == 0)
            return true;
    return false;
}

/* Cells that regressed against the baseline get a dark red outline. */
/* Links to the per-task pages of samples wrong against the full cache (report/wrong.h). */
static void html_wrong_links(FILE *f, const kb_report_run *run, const pivot *p, bool several)
{
    bool any = false;
    for (size_t t = 0; t < p->nt; t++) {
        char *page = kb_wrong_has_page(run, p->tasks[t]) ? kb_wrong_page(run, p->tasks[t], several)
                                                         : NULL;
        if (!page)
            continue;
        fputs(any ? " · " : "<p>Samples each config got wrong against the full cache: ", f);
        fputs("<a href='", f);
        html_esc(f, page);
        fputs("'>", f);
        html_esc(f, p->tasks[t]);
        fputs("</a>", f);
        any = true;
        free(page);
    }
    if (any)
        fputs("</p>\n", f);
}

static void svg_heatmap(FILE *f, const pivot *p, const kb_change *ch, size_t n_ch)
{
    const double cell_w = 58, cell_h = 24, top = 120;
    /* room for the longest config name at ~6.5 px per character */
    size_t longest = 8;
    for (size_t c = 0; c < p->nc; c++)
        if (strlen(p->configs[c]) > longest)
            longest = strlen(p->configs[c]);
    const double left = 16 + 6.5 * (double)longest;
    size_t cols = p->nt + 1; /* the tasks, then the average */
    double range = 5;
    for (size_t c = 0; p->full >= 0 && c < p->nc; c++)
        for (size_t t = 0; t < p->nt; t++) {
            double d = cell_score(p, c, t) - cell_score(p, (size_t)p->full, t);
            if (!isnan(d) && fabs(d) > range)
                range = fabs(d);
        }
    double w = fmax(left + cell_w * (double)cols + 20, left + 420),
           h = top + cell_h * (double)p->nc + 60;
    fprintf(f,
            "<svg xmlns='http://www.w3.org/2000/svg' class='chart' width='%.0f' height='%.0f' "
            "viewBox='0 0 %.0f %.0f' role='img' aria-label='per-task heatmap'>\n",
            w, h, w, h);
    for (size_t t = 0; t < cols; t++) {
        double x = left + cell_w * ((double)t + 0.5);
        fprintf(f, "<text x='%.1f' y='%.1f' class='tick' transform='rotate(-45 %.1f %.1f)'>", x,
                top - 8, x, top - 8);
        html_esc(f, t < p->nt ? p->tasks[t] : avg_label(p));
        fputs("</text>\n", f);
    }
    for (size_t c = 0; c < p->nc; c++) {
        double y = top + cell_h * (double)c;
        fprintf(f, "<text x='%.1f' y='%.1f' class='tick' text-anchor='end'>", left - 8,
                y + cell_h / 2 + 4);
        html_esc(f, p->configs[c]);
        fputs("</text>\n", f);
        for (size_t t = 0; t < cols; t++) {
            cell_est e = t < p->nt ? task_est(p, c, t) : avg_est(p, c, headline_set(p));
            double s = e.score.value;
            double base = p->full < 0 ? NAN
                          : t < p->nt ? cell_score(p, (size_t)p->full, t)
                                      : headline(p, (size_t)p->full);
            char fill[8] = "#eeeeee";
            if (!isnan(s) && !isnan(base) && (int)c != p->full)
                delta_colour(e.delta.value, range, fill);
            else if (!isnan(s))
                snprintf(fill, sizeof fill, "#f7f7f7");
            double x = left + cell_w * (double)t;
            fprintf(f,
                    "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='%s' "
                    "class='cell'><title>",
                    x, y, cell_w, cell_h, fill);
            html_esc(f, p->configs[c]);
            fputs(" · ", f);
            html_esc(f, t < p->nt ? p->tasks[t] : avg_label(p));
            if (isnan(s))
                fputs(": no score", f);
            else
                fprintf(f, ": %.2f", s);
            if (!isnan(e.score.ci.lo))
                fprintf(f, " [%.2f, %.2f]", e.score.ci.lo, e.score.ci.hi);
            if (!isnan(s) && !isnan(e.delta.value) && (int)c != p->full) {
                fprintf(f, " (%+.2f vs full", e.delta.value);
                if (!isnan(e.delta.ci.lo))
                    fprintf(f, ", paired 95 %% interval [%+.2f, %+.2f]%s", e.delta.ci.lo,
                            e.delta.ci.hi, *sig_mark(e.delta) ? ", excludes 0" : "");
                fputc(')', f);
            }
            fputs("</title></rect>\n", f);
            if (t < p->nt && is_regression(ch, n_ch, p->configs[c], p->tasks[t]))
                fprintf(f,
                        "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' class='regcell'>"
                        "<title>regression against the baseline</title></rect>\n",
                        x + 1.5, y + 1.5, cell_w - 3, cell_h - 3);
            /* a difference to the full cache beyond noise: bold, with its mark */
            const char *mark = sig_mark(e.delta);
            if (!isnan(s))
                fprintf(f,
                        "<text x='%.1f' y='%.1f' class='%s' text-anchor='middle'>%.1f%s</text>\n",
                        x + cell_w / 2, y + cell_h / 2 + 4, *mark ? "valsig" : "val", s, mark);
        }
    }
    char lo[8], hi[8];
    delta_colour(-range, range, lo);
    delta_colour(range, range, hi);
    double ly = top + cell_h * (double)p->nc + 24;
    fprintf(f,
            "<rect x='%.1f' y='%.1f' width='14' height='14' fill='%s'/><text x='%.1f' y='%.1f' "
            "class='legend'>%.1f points below the full cache</text>\n"
            "<rect x='%.1f' y='%.1f' width='14' height='14' fill='%s'/><text x='%.1f' y='%.1f' "
            "class='legend'>%.1f above</text>\n"
            "<text x='%.1f' y='%.1f' class='legend'>bold ▼ / ▲: paired 95 %% interval of the "
            "difference excludes 0</text>\n</svg>\n",
            left, ly - 11, lo, left + 20, ly, range, left + 260, ly - 11, hi, left + 280, ly, range,
            left, ly + 20);
}

static void html_num(FILE *f, double v, bool bad)
{
    if (isnan(v))
        fprintf(f, "<td class='num'>–</td>");
    else
        fprintf(f, "<td class='num%s'>%.2f</td>", bad ? " reg" : "", v);
}

/* A score cell: the score, "±half-width" small beneath, the significance
 * mark, and the exact interval in the tooltip. */
static void html_cell(FILE *f, cell_est e, const char *cls, bool bad, const kb_score_row *r)
{
    if (isnan(e.score.value)) {
        fputs("<td class='num'>–</td>", f);
        return;
    }
    fprintf(f, "<td class='num%s%s%s'", *cls ? " " : "", cls, bad ? " reg" : "");
    if (!isnan(e.score.ci.lo))
        fprintf(f, " title='95 %% interval %.2f to %.2f'", e.score.ci.lo, e.score.ci.hi);
    fprintf(f, ">%.2f", e.score.value);
    if (!isnan(e.score.ci.lo))
        fprintf(f, "<span class='pm'>±%.1f</span>", half_width(e.score.ci));
    const char *mark = sig_mark(e.delta);
    if (*mark)
        fprintf(f, "<span class='sig'>%s</span>", mark);
    if (kb_row_incomplete(r))
        fprintf(f,
                "<span class='inc' title='the run stopped before this cell was done: %ld of "
                "its %ld samples'>%ld/%ld done</span>",
                r->n, r->n_expected, r->n, r->n_expected);
    fputs("</td>", f);
}

static void html_table(FILE *f, const pivot *p, const kb_change *ch, size_t n_ch)
{
    fputs("<table><tr><th>config</th><th>budget</th>", f);
    for (size_t t = 0; t < p->nt; t++) {
        fputs("<th>", f);
        html_esc(f, p->tasks[t]);
        fputs("</th>", f);
    }
    for (int k = 0; kb_task_categories[k]; k++)
        if (category_present(p, kb_task_categories[k]))
            fprintf(f, "<th class='cat'>%s</th>", kb_task_categories[k]);
    if (extra_avg(p))
        fprintf(f, "<th>Avg (%zu)</th>", p->n_scored);
    fprintf(f, "<th>%s</th><th>Δ full (95 %% interval)</th></tr>\n", avg_label(p));
    for (size_t c = 0; c < p->nc; c++) {
        long b = config_budget(p->run, p->configs[c]);
        fputs("<tr><td>", f);
        html_esc(f, p->configs[c]);
        if (b >= 0)
            fprintf(f, "</td><td class='num'>%ld</td>", b);
        else
            fputs("</td><td class='num'>full</td>", f);
        for (size_t t = 0; t < p->nt; t++)
            html_cell(f, task_est(p, c, t), "", is_regression(ch, n_ch, p->configs[c], p->tasks[t]),
                      p->cell[c * p->nt + t]);
        for (int k = 0; kb_task_categories[k]; k++)
            if (category_present(p, kb_task_categories[k]))
                html_cell(f, avg_est(p, c, (task_set){kb_task_categories[k], false}), "", false,
                          NULL);
        if (extra_avg(p))
            html_cell(f, avg_est(p, c, (task_set){NULL, false}), "", false, NULL);
        cell_est avg = avg_est(p, c, headline_set(p));
        html_cell(f, avg, "avg", false, NULL);
        kb_estimate d = avg.delta;
        if ((int)c == p->full || isnan(d.value))
            fputs("<td class='num'>–</td>", f);
        else {
            fprintf(f, "<td class='num %s'>%+.2f", d.value < 0 ? "neg" : "pos", d.value);
            if (!isnan(d.ci.lo))
                fprintf(f, " <span class='pm'>[%+.2f, %+.2f]</span>", d.ci.lo, d.ci.hi);
            if (*sig_mark(d))
                fprintf(f, "<span class='sig'>%s</span>", sig_mark(d));
            fputs("</td>", f);
        }
        fputs("</tr>\n", f);
    }
    fputs("</table>\n<p class='note'>± is half the width of the 95 % bootstrap interval "
          "(2,000 resamples of each task's samples; averages resample within each task and "
          "weigh tasks equally, as LongBench does); ▼ / ▲: below / above the full cache with a "
          "paired 95 % interval of the difference that excludes 0. Exact bounds are in "
          "scores.csv.</p>\n",
          f);
}

static void html_compare(FILE *f, const kb_report_run *run, const kb_report_options *opt,
                         const kb_change *ch, size_t n, size_t n_partial)
{
    size_t reg = count_verdict(ch, n, -1);
    fputs("<h3>Compared with ", f);
    html_esc(f, opt->baseline->name);
    fprintf(f, "</h3>\n<p class='%s'>", reg ? "alarm" : "ok");
    compare_notes(f, ch, n, n_partial, opt);
    fputs("</p>\n", f);
    if (strcmp(opt->baseline->model_hash, run->model_hash) != 0) {
        fputs("<p class='alarm'>The baseline used a different model (hash ", f);
        html_esc(f, opt->baseline->model_hash);
        fputs(").</p>\n", f);
    }
    if (!n)
        return;
    fputs("<table><tr><th></th><th>config</th><th>task</th><th>baseline</th><th>now</th>"
          "<th>Δ</th><th>95 % interval</th><th>samples</th></tr>\n",
          f);
    for (size_t i = 0; i < n; i++) {
        static const char *const cls[] = {"reg", "noise", "gain"};
        fprintf(f, "<tr class='%s'><td>%s</td><td>", cls[ch[i].verdict + 1],
                verdict_name(ch[i].verdict));
        html_esc(f, ch[i].config);
        fputs("</td><td>", f);
        html_esc(f, ch[i].task);
        fprintf(f,
                "</td><td class='num'>%.2f</td><td class='num'>%.2f</td><td class='num'>%+.2f"
                "</td>",
                ch[i].before, ch[i].after, ch[i].delta);
        if (ch[i].paired)
            fprintf(f, "<td class='num'>[%+.2f, %+.2f]</td><td class='num'>%zu</td></tr>\n",
                    ch[i].ci.lo, ch[i].ci.hi, ch[i].n_shared);
        else
            fputs("<td class='num'>–</td><td class='num'>–</td></tr>\n", f);
    }
    fputs("</table>\n", f);
}

static void html_params(FILE *f, const kb_report_run *run)
{
    fputs("<table><tr><th>config</th><th>hash</th><th>budget</th><th>query_aware</th>"
          "<th>parameters</th></tr>\n",
          f);
    for (const cJSON *c = run->configs->child; c; c = c->next) {
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(c, "params");
        char *canon = params && !cJSON_IsNull(params) ? kb_json_canonical(params) : NULL;
        fputs("<tr><td>", f);
        html_esc(f, str(c, "name") ? str(c, "name") : "?");
        fputs("</td><td><code>", f);
        html_esc(f, str(c, "hash") ? str(c, "hash") : "?");
        long b = (long)num(c, "budget");
        if (b >= 0)
            fprintf(f, "</code></td><td class='num'>%ld</td>", b);
        else
            fputs("</code></td><td class='num'>full</td>", f);
        fprintf(f, "<td>%s</td><td><code>", query_aware_cell(params));
        html_esc(f, canon ? canon : "full cache");
        fputs("</code></td></tr>\n", f);
        free(canon);
    }
    fputs("</table>\n", f);
}

static void html_timing(FILE *f, const kb_report_run *run)
{
    fputs("<table><tr><th>config</th><th>task</th><th>metric</th><th>n</th><th>prompt tokens"
          "</th><th>kept tokens</th><th>prefill s</th><th>decode s</th></tr>\n",
          f);
    for (size_t i = 0; i < run->n_rows; i++) {
        const kb_score_row *r = &run->rows[i];
        fputs("<tr><td>", f);
        html_esc(f, r->config);
        fputs("</td><td>", f);
        html_esc(f, r->task);
        fputs("</td><td>", f);
        html_esc(f, r->metric);
        fprintf(f, "</td><td class='num'>%ld</td>", r->n);
        html_num(f, r->prompt_tokens, false);
        html_num(f, r->kept_tokens, false);
        html_num(f, r->prefill_s, false);
        html_num(f, r->decode_s, false);
        fputs("</tr>\n", f);
    }
    fputs("</table>\n", f);
}

static const char css[] =
    "body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:24px;"
    "color:#222;max-width:1400px}h1{margin-top:0}h2{border-bottom:2px solid #ddd;"
    "padding-bottom:4px;margin-top:36px}table{border-collapse:collapse;margin:8px 0 16px;"
    "font-size:13px}th,td{border:1px solid #ddd;padding:3px 7px}th{background:#f3f3f3}"
    "td.num{text-align:right;font-variant-numeric:tabular-nums}td.avg{font-weight:bold}"
    "td.neg{color:#b2182b}td.pos{color:#2166ac}td.reg,tr.reg td{background:#fbd3d0}"
    "tr.gain td{background:#d6e8f7}th.cat{background:#e8eef7}code{font-size:12px}"
    ".alarm{color:#b2182b;font-weight:bold}.ok{color:#1a7f37}.note{color:#666}"
    "svg.chart{display:block;margin:8px 0 20px}svg .grid{stroke:#e5e5e5}"
    "svg .frame{fill:none;stroke:#999}svg .tick{font-size:11px;fill:#444}"
    "svg .axis{font-size:12px;fill:#222}svg .legend{font-size:12px;fill:#222}"
    "svg .full{stroke:#222;stroke-width:2;stroke-dasharray:6 4}svg .cell{stroke:#fff}"
    "svg .val{font-size:11px;fill:#111}svg .regcell{fill:none;stroke:#67001f;stroke-width:3}"
    "span.pm{color:#777;font-size:11px;margin-left:3px}span.sig{margin-left:2px;font-size:10px}"
    "tr.noise td{color:#666}svg .whisker{stroke-width:1.5}svg .band{fill:#222;opacity:.08}"
    "svg .valsig{font-size:11px;fill:#111;font-weight:bold}"
    "span.inc{color:#a50026;font-size:11px;margin-left:3px}";

int kb_report_write_html(FILE *f, const kb_report_run *runs, size_t n, const kb_report_options *opt)
{
    fprintf(f,
            "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            "<title>kvbench report%s</title><style>%s</style></head><body>\n"
            "<h1>kvbench report%s</h1>\n<table><tr><th>run</th><th>model</th><th>model hash"
            "</th><th>protocol</th><th>compute</th><th>kvbench</th></tr>\n",
            kb_reports_unfinished(runs, n) ? " (unfinished run)" : "", css,
            kb_reports_unfinished(runs, n) ? " (unfinished run)" : "");
    for (size_t k = 0; k <= n; k++) {
        const kb_report_run *r = k < n ? &runs[k] : opt ? opt->baseline : NULL;
        if (!r)
            break;
        const char *cells[] = {r->name,     r->model,   r->model_hash,
                               r->protocol, r->compute, r->kvbench_version};
        fputs("<tr>", f);
        for (size_t i = 0; i < sizeof cells / sizeof cells[0]; i++) {
            fputs("<td>", f);
            html_esc(f, cells[i]);
            if (i == 0 && k == n)
                fputs(" (baseline)", f);
            fputs("</td>", f);
        }
        fputs("</tr>\n", f);
    }
    fputs("</table>\n", f);
    if (kb_report_side_by_side(f, runs, n, true) < 0)
        return -1;
    for (size_t k = 0; k < n; k++) {
        pivot p;
        if (pivot_build(&p, &runs[k]) < 0)
            return -1;
        kb_change *ch = NULL;
        size_t n_ch = 0, n_partial = 0;
        if (opt && opt->baseline &&
            kb_report_compare(&runs[k], opt->baseline, opt->threshold, &ch, &n_ch, &n_partial) <
                0) {
            pivot_free(&p);
            return -1;
        }
        fputs("<h2>", f);
        html_esc(f, runs[k].name);
        fputs(" — ", f);
        html_esc(f, runs[k].model);
        kb_report_unfinished_note(f, &runs[k]);
        fprintf(f, "</h2>\n<h3>%s score vs KV cache budget</h3>\n", avg_label(&p));
        svg_budget_chart(f, &p);
        if (runs[k].lengths) {
            fprintf(f, "<h3>Score vs %s</h3>\n", length_axis(runs[k].lengths));
            svg_length_chart(f, &p, runs[k].lengths);
        }
        fputs("<h3>Per-task scores (colour: difference to the full cache)</h3>\n", f);
        svg_heatmap(f, &p, ch, n_ch);
        html_wrong_links(f, &runs[k], &p, n > 1);
        fputs("<h3>Scores (LongBench %)</h3>\n", f);
        html_table(f, &p, ch, n_ch);
        if (opt && opt->baseline)
            html_compare(f, &runs[k], opt, ch, n_ch, n_partial);
        fputs("<h3>Configs</h3>\n", f);
        html_params(f, &runs[k]);
        fputs("<h3>Tokens and time (means per sample)</h3>\n", f);
        html_timing(f, &runs[k]);
        free(ch);
        pivot_free(&p);
    }
    fputs("</body></html>\n", f);
    return ferror(f) ? -1 : 0;
}
