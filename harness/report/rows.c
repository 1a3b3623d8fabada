#include "report/rows.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rundir/predfile.h"
#include "matrix/taskset.h"
#include "report/json_get.h"
#include "util/file.h"
#include "util/vec.h"

void kb_score_row_free(kb_score_row *r)
{
    free(r->config);
    free(r->task);
    free(r->metric);
    for (size_t i = 0; i < r->n_samples; i++)
        kv_str_free(&r->samples[i].id);
    free(r->samples);
    free(r->boot);
    free(r->boot_delta);
}

void kb_score_rows_free(kb_score_row *rows, size_t n)
{
    for (size_t i = 0; i < n; i++)
        kb_score_row_free(&rows[i]);
    free(rows);
}

bool kb_row_has_buckets(const kb_score_row *r)
{
    for (int b = 0; b < KB_N_BUCKETS; b++)
        if (r->bucket_n[b])
            return true;
    return false;
}

const kb_score_row *kb_report_row(const kb_report_run *run, const char *config, const char *task)
{
    for (size_t j = 0; j < run->n_rows; j++)
        if (!strcmp(run->rows[j].config, config) && !strcmp(run->rows[j].task, task))
            return &run->rows[j];
    return NULL;
}

int kb_task_cmp(const char *x, const char *y)
{
    int tx = kb_task_order(x), ty = kb_task_order(y);
    return tx != ty ? (tx < ty ? -1 : 1) : strcmp(x, y);
}

static int config_rank(const cJSON *configs, const char *name)
{
    int i = 0;
    for (const cJSON *c = configs ? configs->child : NULL; c; c = c->next, i++)
        if (kb_json_str(c, "name") && strcmp(kb_json_str(c, "name"), name) == 0)
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
    return kb_task_cmp(x->task, y->task);
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
        if (kb_json_str(c, field) && strcmp(kb_json_str(c, field), name) == 0)
            return true;
    return false;
}

/* The mean of a count or time over the lines that have it. */
static double mean_field(const kb_pred_lines *l, size_t offset)
{
    double sum = 0;
    size_t k = 0;
    for (size_t i = 0; i < l->n; i++) {
        double v = *(const double *)((const char *)&l->line[i] + offset);
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
        const kb_prediction *p = &l->line[i];
        if (!(per[i] >= 0 && per[i] <= 1))
            return kv_fail(err, "%s:%zu: the scorer gave %g, not a score from 0 to 1", path, i + 1,
                           per[i]);
        char *id = malloc(p->id.n + 1);
        if (!id)
            return kv_fail(err, "out of memory");
        memcpy(id, p->id.p, p->id.n);
        id[p->id.n] = '\0';
        r->samples[i].id = (kv_str){id, p->id.n};
        r->samples[i].score = per[i];
        r->samples[i].length = p->length < 0 ? -1 : p->length;
        r->n_samples++;
    }
    return 0;
}

/* The lines as the scorer reads them: views into l. NULL when out of memory
 * or when a line cannot be scored (err says which and why). */
static kb_scored_line *scored_lines(const kb_pred_lines *l, const char *path, const char *task,
                                    kv_error *err)
{
    enum { WHERE = 32 }; /* "line N", what the scorer's messages start with */
    kb_scored_line *v = calloc(l->n + 1, sizeof *v + WHERE);
    if (!v) {
        kv_fail(err, "out of memory");
        return NULL;
    }
    char *where = (char *)(v + l->n + 1);
    for (size_t i = 0; i < l->n; i++) {
        const kb_prediction *p = &l->line[i];
        if (p->unscorable) {
            kv_fail(err, "%s:%zu: %s", path, i + 1, p->unscorable);
            free(v);
            return NULL;
        }
        /* views: the scorer only reads them (a line without "dataset" is the file's task) */
        v[i] = (kb_scored_line){.id = p->id,
                                .dataset = (char *)(p->task ? p->task : task),
                                .pred = p->pred,
                                .answers = (kv_str *)p->answers,
                                .n_answers = p->n_answers,
                                .classes = (kv_str *)p->all_classes,
                                .n_classes = p->n_classes,
                                .length = p->length,
                                .where = where + i * WHERE};
        snprintf(v[i].where, WHERE, "line %zu", i + 1);
    }
    return v;
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
    kb_scored_line *lines = scored_lines(&l, path, task, err);
    kb_task_result res = {.metric = "?", .sample_scores = per};
    int rc = !lines ? -1
             : per  ? scorer(task, lines, l.n, &res, msg, sizeof msg, ctx)
                    : kv_fail(err, "out of memory");
    if (lines && per && rc < 0)
        kv_fail(err, "%s: %s", path, msg[0] ? msg : "the scorer failed");
    if (rc == 0) {
        r->config = strdup(config);
        r->task = strdup(task);
        r->metric = strdup(res.metric);
        if (!r->config || !r->task || !r->metric) {
            kb_score_row_free(r);
            rc = kv_fail(err, "out of memory");
        }
        r->score = res.score;
        r->n = (long)l.n;
        memcpy(r->bucket_n, res.bucket_n, sizeof r->bucket_n);
        memcpy(r->bucket, res.bucket, sizeof r->bucket);
        r->prompt_tokens = mean_field(&l, offsetof(kb_prediction, prompt_tokens));
        r->kept_tokens = mean_field(&l, offsetof(kb_prediction, kept_tokens));
        r->prefill_s = mean_field(&l, offsetof(kb_prediction, prefill_s));
        r->decode_s = mean_field(&l, offsetof(kb_prediction, decode_s));
        if (rc == 0 && (rc = keep_samples(&l, per, r, path, err)) < 0)
            kb_score_row_free(r);
    }
    free(lines);
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
    int rc =
        preds ? kv_dir_list(preds, NULL, &folders, &n_folders, err) : kv_fail(err, "out of memory");
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
