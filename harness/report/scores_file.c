#include "report/scores_file.h"

#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rundir/predfile.h"
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
        cJSON *id = kv_json_text(s->id.p, s->id.n);
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
    char *path = kv_path_join(dir, "scores.json");
    int rc = text && path ? kv_write_atomic(path, text, strlen(text), err)
                          : kv_fail(err, "out of memory");
    free(text);
    free(path);
    return rc;
}

/* scores.json is a data document (sample ids may hold a NUL), so it is read
 * with jansson (docs/ARCHITECTURE.md, "JSON"): a number (NaN when absent or not a number)
 * and a string (NULL when absent or not a string) of a row. */
static double jnum(const json_t *o, const char *k)
{
    const json_t *v = json_object_get(o, k);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

static const char *jstr(const json_t *o, const char *k)
{
    return json_string_value(json_object_get(o, k));
}

/* One sample of a row's lists into s (its id copied). */
static int sample_from_json(const json_t *id, const json_t *sc, const json_t *len,
                            kb_sample_score *s, const char *path, const char *where, size_t k,
                            kv_error *err)
{
    double score = json_is_number(sc) ? json_number_value(sc) : NAN;
    double length = json_is_number(len) ? json_number_value(len) : NAN;
    if (!json_is_string(id) || !(score >= 0 && score <= 1))
        return kv_fail(err, "%s: %s: sample %zu: needs a string id and a score from 0 to 1", path,
                       where, k);
    if (!json_is_null(len) && !(length >= 0 && length <= 1e15))
        return kv_fail(err, "%s: %s: sample_lengths[%zu]: must be a count or null", path, where, k);
    if (kv_json_take(id, &s->id) < 0)
        return kv_fail(err, "out of memory");
    s->score = score;
    s->length = json_is_number(len) ? (long)length : -1;
    return 0;
}

/* The per-sample lists of a row (absent in scores.json files written before
 * kvbench kept them: the row then has no intervals). They must agree with the
 * row: one entry per sample, distinct ids, and the score their mean. */
static int samples_from_json(const json_t *o, kb_score_row *r, const char *path, const char *where,
                             kv_error *err)
{
    const json_t *ids = json_object_get(o, "sample_ids");
    const json_t *scores = json_object_get(o, "sample_scores");
    const json_t *lengths = json_object_get(o, "sample_lengths");
    if (!ids && !scores && !lengths)
        return 0;
    if (!json_is_array(ids) || !json_is_array(scores) || !json_is_array(lengths))
        return kv_fail(err,
                       "%s: %s: sample_ids, sample_scores and sample_lengths go together, as lists",
                       path, where);
    size_t n = json_array_size(ids);
    if (json_array_size(scores) != n || json_array_size(lengths) != n || n != (size_t)r->n)
        return kv_fail(err,
                       "%s: %s: needs one sample_ids, sample_scores and sample_lengths entry "
                       "per sample (n = %ld)",
                       path, where, r->n);
    if (n == 0)
        return 0;
    if (!(r->samples = calloc(n, sizeof *r->samples)))
        return kv_fail(err, "out of memory");
    kb_idset seen = {0};
    double sum = 0;
    int rc = 0;
    for (size_t k = 0; k < n && rc == 0; k++) {
        kb_sample_score *s = &r->samples[r->n_samples];
        rc = sample_from_json(json_array_get(ids, k), json_array_get(scores, k),
                              json_array_get(lengths, k), s, path, where, k, err);
        if (rc < 0)
            break;
        r->n_samples++;
        sum += s->score;
        int added = kb_idset_add(&seen, s->id);
        char id[160];
        if (added <= 0)
            rc = added < 0 ? kv_fail(err, "out of memory")
                           : kv_fail(err, "%s: %s: sample id %s appears twice", path, where,
                                     kv_json_quote_to(id, sizeof id, s->id.p, s->id.n));
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
static int buckets_from_json(const json_t *o, kb_score_row *r, const char *path, size_t i,
                             kv_error *err)
{
    for (int b = 0; b < KB_N_BUCKETS; b++)
        r->bucket[b] = NAN;
    const json_t *all = json_object_get(o, "buckets");
    if (!all)
        return 0;
    size_t total = 0;
    for (int b = 0; b < KB_N_BUCKETS; b++) {
        const json_t *one = json_object_get(all, kb_bucket_names[b]);
        double n = jnum(one, "n"), score = jnum(one, "score");
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

static int row_from_json(const json_t *o, kb_score_row *r, const char *path, size_t i,
                         kv_error *err)
{
    memset(r, 0, sizeof *r);
    const char *config = jstr(o, "config"), *task = jstr(o, "task"), *metric = jstr(o, "metric");
    double score = jnum(o, "score"), n = jnum(o, "n");
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
    r->prompt_tokens = jnum(o, "mean_prompt_tokens");
    r->kept_tokens = jnum(o, "mean_kept_tokens");
    r->prefill_s = jnum(o, "mean_prefill_s");
    r->decode_s = jnum(o, "mean_decode_s");
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
    json_t *o = rc == 0 ? kv_json_load(text, len, err) : NULL;
    if (rc == 0 && !o)
        rc = kv_fail_prefix(err, path);
    const json_t *rows = json_object_get(o, "rows");
    if (rc == 0 && !json_is_array(rows))
        rc = kv_fail(err, "%s: not a scores file (no \"rows\" list)", path);
    size_t n = rc == 0 ? json_array_size(rows) : 0;
    if (rc == 0 && n && !(run->rows = calloc(n, sizeof *run->rows)))
        rc = kv_fail(err, "out of memory");
    for (size_t i = 0; i < n && rc == 0; i++) {
        rc = row_from_json(json_array_get(rows, i), &run->rows[i], path, i, err);
        run->n_rows += rc == 0;
    }
    json_decref(o);
    free(text);
    free(path);
    return rc;
}
