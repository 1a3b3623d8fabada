#include "report/scores_file.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "rundir/predfile.h"
#include "report/json_get.h"
#include "report/rows.h"
#include "util/file.h"
#include "util/jsonstr.h"

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
        (r->n_samples && add_samples(o, r) < 0) ||
        (kb_row_has_buckets(r) && add_buckets(o, r) < 0)) {
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
        double n = kb_json_num(one, "n"), score = kb_json_num(one, "score");
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
    const char *config = kb_json_str(o, "config"), *task = kb_json_str(o, "task"),
               *metric = kb_json_str(o, "metric");
    double score = kb_json_num(o, "score"), n = kb_json_num(o, "n");
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
        kb_score_row_free(r);
        return kv_fail(err, "out of memory");
    }
    r->score = score;
    r->n = (long)n;
    r->prompt_tokens = kb_json_num(o, "mean_prompt_tokens");
    r->kept_tokens = kb_json_num(o, "mean_kept_tokens");
    r->prefill_s = kb_json_num(o, "mean_prefill_s");
    r->decode_s = kb_json_num(o, "mean_decode_s");
    char where[64];
    snprintf(where, sizeof where, "rows[%zu]", i);
    if (samples_from_json(o, r, path, where, err) < 0 ||
        buckets_from_json(o, r, path, i, err) < 0) {
        kb_score_row_free(r);
        return -1;
    }
    return 0;
}

int kb_scores_load(const char *dir, kb_report_run *run, kv_error *err)
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
