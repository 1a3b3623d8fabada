#include "score/score.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "longbench/tasks.h"

#include "util/file.h"
#include "score/jieba.h"
#include "longbench/jsonl.h"
#include "util/jsonstr.h"
#include "util/vec.h"

/* eval.py's dataset2metric and its first-line rule come from the task
 * registry (datasets/longbench/tasks.c), the one table of LongBench's tasks; kvbench's
 * own synthetic tasks name their metric there too. A LongBench-E name
 * ("qasper_e") scores like its base task. */
int kb_task_metric(const char *dataset, kb_metric *metric, bool *first_line)
{
    const lb_task *t = lb_task_find(dataset);
    size_t len = strlen(dataset);
    if (!t && len > 2 && strcmp(dataset + len - 2, "_e") == 0) {
        char base[128];
        if (len - 2 < sizeof base) {
            memcpy(base, dataset, len - 2);
            base[len - 2] = '\0';
            t = lb_task_find(base);
        }
    }
    if (!t || kb_metric_from_name(t->metric, metric) < 0)
        return -1;
    *first_line = t->first_line;
    return 0;
}

int kb_score_prediction(kb_metrics *m, const char *dataset, kv_str pred, const kv_str *answers,
                        size_t n_answers, const kb_classes *classes, double *score, kv_error *err)
{
    kb_metric metric;
    bool first_line;
    *score = 0.0;
    if (kb_task_metric(dataset, &metric, &first_line) < 0)
        return kv_fail(err, "'%s' is not a LongBench task (no metric for it)", dataset);
    if (first_line) {
        /* pred.lstrip('\n').split('\n')[0]: only U+000A; '\r' and spaces stay */
        while (pred.n > 0 && pred.p[0] == '\n')
            pred.p++, pred.n--;
        const char *nl = memchr(pred.p, '\n', pred.n);
        if (nl)
            pred.n = (size_t)(nl - pred.p);
    }
    int rc = 0;
    for (size_t k = 0; k < n_answers && rc == 0; k++) {
        double s;
        rc = kb_metric_score(m, metric, pred, answers[k], classes, &s, err);
        if (rc == 0 && s > *score)
            *score = s;
    }
    return rc;
}

double kb_py_round(double x, int ndigits)
{
    if (!isfinite(x))
        return x;
    /* glibc prints the exact binary value rounded half-to-even, which is what
     * CPython's round() computes with its correctly rounded dtoa. */
    char buf[512];
    snprintf(buf, sizeof buf, "%.*f", ndigits, x);
    return strtod(buf, NULL);
}

/* numpy's pairwise_sum for float64 (8 accumulators, blocks of 128). */
static double pairwise_sum(const double *a, size_t n)
{
    if (n < 8) {
        double res = -0.0;
        for (size_t i = 0; i < n; i++)
            res += a[i];
        return res;
    }
    if (n <= 128) {
        double r[8];
        for (int j = 0; j < 8; j++)
            r[j] = a[j];
        size_t i;
        for (i = 8; i < n - (n % 8); i += 8)
            for (int j = 0; j < 8; j++)
                r[j] += a[i + j];
        double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++)
            res += a[i];
        return res;
    }
    size_t n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise_sum(a, n2) + pairwise_sum(a + n2, n - n2);
}

double kb_np_mean(const double *v, size_t n)
{
    if (n == 0)
        return NAN;
    return (0.0 + pairwise_sum(v, n)) / (double)n;
}

double kb_np_round2(double x)
{
    return rint(x * 100.0) / 100.0;
}

const char *const kb_bucket_names[KB_N_BUCKETS] = {"0-4k", "4-8k", "8k+"};

int kb_bucket_of(long length)
{
    return length < 4000 ? KB_BUCKET_0_4K : length < 8000 ? KB_BUCKET_4_8K : KB_BUCKET_8K_PLUS;
}

/* ---- reading prediction files ------------------------------------------------ */

static void free_texts(kv_str *v, size_t n)
{
    for (size_t k = 0; k < n; k++)
        kv_str_free(&v[k]);
    free(v);
}

void kb_scored_line_free(kb_scored_line *p)
{
    kv_str_free(&p->id);
    free(p->dataset);
    kv_str_free(&p->pred);
    free_texts(p->answers, p->n_answers);
    free_texts(p->classes, p->n_classes);
    free(p->where);
}

void kb_predictions_free(kb_predictions *p)
{
    for (size_t i = 0; i < p->n; i++)
        kb_scored_line_free(&p->v[i]);
    free(p->v);
    *p = (kb_predictions){0};
}

/* A JSON array of strings into a malloc'd kv_str array. */
static int string_list(const json_t *arr, kv_str **out, size_t *n, const char *where,
                       const char *key, kv_error *err)
{
    if (!json_is_array(arr))
        return kv_fail(err, "%s: \"%s\" must be a list of strings", where, key);
    size_t count = json_array_size(arr);
    *out = calloc(count ? count : 1, sizeof **out);
    if (!*out)
        return kv_fail(err, "out of memory");
    *n = 0;
    for (size_t i = 0; i < count; i++) {
        const json_t *it = json_array_get(arr, i);
        if (!json_is_string(it))
            return kv_fail(err, "%s: \"%s\" must be a list of strings", where, key);
        if (kv_json_take(it, &(*out)[i]) < 0)
            return kv_fail(err, "out of memory");
        *n = i + 1;
    }
    return 0;
}

static char *dataset_from_path(const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    return strndup(base, strcspn(base, ".")); /* eval.py: filename.split('.')[0] */
}

static int parse_line(const json_t *o, kb_scored_line *p, const char *path, kv_error *err)
{
    const char *where = p->where;
    if (!json_is_object(o))
        return kv_fail(err, "%s: not a JSON object", where);
    const json_t *pred = json_object_get(o, "pred");
    if (!pred)
        pred = json_object_get(o, "prediction");
    if (!json_is_string(pred))
        return kv_fail(err, "%s: no \"pred\" (or \"prediction\") string", where);
    if (kv_json_take(pred, &p->pred) < 0)
        return kv_fail(err, "out of memory");
    const json_t *answers = json_object_get(o, "answers");
    if (!answers)
        return kv_fail(err, "%s: no \"answers\" list", where);
    if (string_list(answers, &p->answers, &p->n_answers, where, "answers", err) < 0)
        return -1;
    const json_t *classes = json_object_get(o, "all_classes");
    if (classes && !json_is_null(classes) &&
        string_list(classes, &p->classes, &p->n_classes, where, "all_classes", err) < 0)
        return -1;
    const json_t *length = json_object_get(o, "length");
    p->length = json_is_number(length) ? (long)json_number_value(length) : -1;
    const json_t *dataset = json_object_get(o, "dataset");
    p->dataset =
        json_is_string(dataset) ? strdup(json_string_value(dataset)) : dataset_from_path(path);
    const json_t *id = json_object_get(o, "id");
    if (!id)
        id = json_object_get(o, "_id");
    char *num = NULL;
    if (json_is_string(id) && kv_json_take(id, &p->id) < 0)
        return kv_fail(err, "out of memory");
    if (json_is_number(id) && asprintf(&num, "%.17g", json_number_value(id)) >= 0)
        p->id = kv_str_c(num);
    if (!p->dataset)
        return kv_fail(err, "out of memory");
    return 0;
}

int kb_scored_line_parse(const char *text, size_t len, const char *path, kb_scored_line *p,
                         kv_error *err)
{
    json_t *o = kv_json_load(text, len, err);
    if (!o)
        return kv_fail_prefix(err, p->where);
    int rc = parse_line(o, p, path, err);
    json_decref(o);
    return rc;
}

static int push(kb_predictions *p, kb_scored_line **out)
{
    if (KV_VEC_RESERVE(p->v, p->cap, p->n + 1, 256) < 0)
        return -1;
    *out = &p->v[p->n++];
    **out = (kb_scored_line){.length = -1};
    return 0;
}

int kb_predictions_add(kb_predictions *p, const char *text, size_t len, const char *path,
                       long lineno, kv_error *err)
{
    kb_scored_line *pr;
    if (push(p, &pr) < 0)
        return kv_fail(err, "out of memory");
    if (asprintf(&pr->where, "%s:%ld", path, lineno) < 0) {
        pr->where = NULL;
        return kv_fail(err, "out of memory");
    }
    return kb_scored_line_parse(text, len, path, pr, err);
}

int kb_predictions_read(kb_predictions *p, const char *path, kv_error *err)
{
    lb_jsonl *r = lb_jsonl_open(path);
    if (!r)
        return kv_fail(err, "%s: %s", path, strerror(errno));
    int rc = 0, got;
    while (rc == 0 && (got = lb_jsonl_next(r)) == 1)
        rc = kb_predictions_add(p, r->line, r->len, path, r->lineno, err);
    if (rc == 0 && got < 0)
        rc = kv_fail(err, "%s: read error: %s", path, strerror(errno));
    lb_jsonl_close(r);
    return rc;
}

int kb_predictions_read_path(kb_predictions *p, const char *path, kv_error *err)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return kv_fail(err, "%s: %s", path, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return kb_predictions_read(p, path, err);
    char **names;
    size_t n; /* eval.py: filename.endswith("jsonl") */
    if (kv_dir_list(path, "jsonl", &names, &n, err) < 0)
        return -1;
    int rc = 0;
    if (n == 0)
        rc = kv_fail(err, "%s: no *.jsonl prediction files in this folder", path);
    for (size_t i = 0; i < n; i++) {
        char *file = rc == 0 && names[i] ? kv_path_join(path, names[i]) : NULL;
        if (rc == 0)
            rc = file ? kb_predictions_read(p, file, err) : kv_fail(err, "out of memory");
        free(file);
        free(names[i]);
    }
    free(names);
    return rc;
}

/* ---- scoring ------------------------------------------------------------------ */

static int cmp_task(const void *a, const void *b)
{
    return strcmp(((const kb_task_score *)a)->dataset, ((const kb_task_score *)b)->dataset);
}

/* The distinct datasets of p, sorted, with their metric. */
static int collect_tasks(const kb_predictions *p, kb_task_scores *out, kv_error *err)
{
    out->v = NULL;
    out->n = 0;
    for (size_t i = 0; i < p->n; i++) {
        bool seen = false;
        for (size_t t = 0; t < out->n && !seen; t++)
            seen = strcmp(out->v[t].dataset, p->v[i].dataset) == 0;
        if (seen)
            continue;
        kb_metric metric;
        bool first_line;
        if (kb_task_metric(p->v[i].dataset, &metric, &first_line) < 0)
            return kv_fail(err,
                           "%s: '%s' is not a LongBench task; name the file after its task "
                           "(e.g. qasper.jsonl) or give each line a \"dataset\"",
                           p->v[i].where, p->v[i].dataset);
        kb_task_score *v = realloc(out->v, (out->n + 1) * sizeof *v);
        if (!v)
            return kv_fail(err, "out of memory");
        out->v = v;
        out->v[out->n++] = (kb_task_score){.dataset = p->v[i].dataset, .metric = metric};
    }
    if (out->n)
        qsort(out->v, out->n, sizeof *out->v, cmp_task);
    return 0;
}

static int score_task(kb_metrics *m, kb_predictions *p, kb_task_score *t, kv_error *err)
{
    /* eval.py passes the all_classes of the file's last line to every line. */
    kb_classes classes = {NULL, 0}, *cls = NULL;
    for (size_t i = 0; i < p->n; i++)
        if (strcmp(p->v[i].dataset, t->dataset) == 0) {
            classes = (kb_classes){p->v[i].classes, p->v[i].n_classes};
            cls = p->v[i].classes ? &classes : NULL;
        }
    double total = 0.0;
    double *bucket[KB_N_BUCKETS] = {0};
    int rc = 0;
    for (int b = 0; b < KB_N_BUCKETS && rc == 0; b++)
        if (!(bucket[b] = malloc((p->n ? p->n : 1) * sizeof **bucket)))
            rc = kv_fail(err, "out of memory");
    for (size_t i = 0; i < p->n && rc == 0; i++) {
        kb_scored_line *pr = &p->v[i];
        if (strcmp(pr->dataset, t->dataset) != 0)
            continue;
        if (t->refused) {
            pr->score = NAN;
            t->n++;
            continue;
        }
        rc = kb_score_prediction(m, pr->dataset, pr->pred, pr->answers, pr->n_answers, cls,
                                 &pr->score, err);
        if (rc < 0)
            rc = kv_fail_prefix(err, pr->where);
        total += pr->score;
        t->n++;
        int b = kb_bucket_of(pr->length);
        bucket[b][t->bucket_n[b]++] = pr->score;
    }
    if (rc == 0) {
        /* LongBench v2's result.py reports accuracy to 1 decimal, eval.py to 2 */
        int digits = t->metric == KB_ACCURACY ? 1 : 2;
        t->score = t->refused || t->n == 0 ? NAN : kb_py_round(100 * total / (double)t->n, digits);
        for (int b = 0; b < KB_N_BUCKETS; b++)
            t->bucket[b] =
                t->refused ? NAN : kb_np_round2(100 * kb_np_mean(bucket[b], t->bucket_n[b]));
    }
    for (int b = 0; b < KB_N_BUCKETS; b++)
        free(bucket[b]);
    return rc;
}

int kb_score_predictions(kb_metrics *m, kb_predictions *p, kb_task_scores *out, kv_error *err)
{
    if (collect_tasks(p, out, err) < 0) {
        kb_task_scores_free(out);
        return -1;
    }
    for (size_t t = 0; t < out->n; t++) {
        out->v[t].refused = kb_metric_needs_jieba(out->v[t].metric) && !kb_metrics_has_jieba(m);
        if (score_task(m, p, &out->v[t], err) < 0) {
            kb_task_scores_free(out);
            return -1;
        }
    }
    return 0;
}

void kb_task_scores_free(kb_task_scores *t)
{
    free(t->v);
    *t = (kb_task_scores){0};
}

/* ---- the scorer of run folders ------------------------------------------------ */

struct kb_scorer {
    kb_metrics *metrics;
    kb_jieba *jieba; /* NULL until a Chinese task needs it */
};

int kb_scorer_open(kb_scorer **out, kv_error *err)
{
    kb_scorer *s = calloc(1, sizeof *s);
    if (!s)
        return kv_fail(err, "out of memory");
    if (kb_metrics_new(NULL, &s->metrics, err) < 0) {
        free(s);
        return -1;
    }
    *out = s;
    return 0;
}

int kb_scorer_prepare(kb_scorer *s, const char *task, kv_error *err)
{
    kb_metric metric;
    bool first_line;
    if (kb_task_metric(task, &metric, &first_line) < 0)
        return kv_fail(err, "%s: no metric for this task", task);
    if (!kb_metric_needs_jieba(metric) || s->jieba)
        return 0;
    kb_metrics *with = NULL;
    if (kb_jieba_load(NULL, &s->jieba, err) < 0 || kb_metrics_new(s->jieba, &with, err) < 0)
        return kv_fail_prefix(err, task);
    kb_metrics_free(s->metrics);
    s->metrics = with;
    return 0;
}

void kb_scorer_close(kb_scorer *s)
{
    if (!s)
        return;
    kb_metrics_free(s->metrics);
    kb_jieba_free(s->jieba);
    free(s);
}

int kb_scorer_task(const char *task, const kb_scored_line *lines, size_t n, kb_task_result *out,
                   char *msg, size_t msg_n, void *ctx)
{
    kb_scorer *s = ctx;
    /* a copy of the views, which scoring fills in: the texts stay the caller's */
    kb_predictions p = {.v = malloc((n ? n : 1) * sizeof *p.v), .n = n, .cap = n};
    kb_task_scores t = {0};
    kv_error err = {{0}};
    int rc = p.v ? kb_scorer_prepare(s, task, &err) : kv_fail(&err, "out of memory");
    if (rc == 0) {
        memcpy(p.v, lines, n * sizeof *p.v);
        rc = kb_score_predictions(s->metrics, &p, &t, &err);
    }
    if (rc == 0 && (t.n != 1 || strcmp(t.v[0].dataset, task) != 0))
        rc = kv_fail(&err, "the lines are not all of task %s", task);
    if (rc == 0) {
        const lb_task *lt = lb_task_find(task);
        bool by_length = lt && lt->family == LB_FAMILY_E; /* eval.py --e */
        out->score = t.v[0].score;
        out->metric = kb_metric_name(t.v[0].metric);
        for (size_t i = 0; i < n; i++)
            out->sample_scores[i] = p.v[i].score;
        for (int b = 0; b < KB_N_BUCKETS; b++) {
            out->bucket_n[b] = by_length ? t.v[0].bucket_n[b] : 0;
            out->bucket[b] = by_length ? t.v[0].bucket[b] : NAN;
        }
    }
    if (rc < 0)
        snprintf(msg, msg_n, "%s", err.msg);
    kb_task_scores_free(&t);
    free(p.v); /* not kb_predictions_free: the texts are the caller's */
    return rc;
}

/* ---- LongBench v2 ---------------------------------------------------------------- */

static double pct1(int right, int n)
{
    return n ? kb_py_round(100.0 * right / n, 1) : NAN;
}

kb_v2_accuracy kb_v2_score(const kb_v2_item *items, size_t n)
{
    int right[6] = {0}, count[6] = {0}; /* overall, easy, hard, short, medium, long */
    for (size_t i = 0; i < n; i++) {
        int ok = items[i].pred && items[i].pred == items[i].answer;
        int groups[3] = {0, items[i].hard ? 2 : 1, 3 + (items[i].length > 2 ? 2 : items[i].length)};
        for (int g = 0; g < 3; g++) {
            right[groups[g]] += ok;
            count[groups[g]]++;
        }
    }
    return (kb_v2_accuracy){pct1(right[0], count[0]), pct1(right[1], count[1]),
                            pct1(right[2], count[2]), pct1(right[3], count[3]),
                            pct1(right[4], count[4]), pct1(right[5], count[5])};
}

/* One v2 item from its JSON object. */
/* A jansson string as a view (NULs included). */
static kv_str text_of(const json_t *v)
{
    return (kv_str){json_string_value(v), json_string_length(v)};
}

static int v2_item(const json_t *o, kb_v2_item *it, const char *where, kv_error *err)
{
    const json_t *answer = json_object_get(o, "answer");
    const json_t *difficulty = json_object_get(o, "difficulty");
    const json_t *length = json_object_get(o, "length");
    const json_t *response = json_object_get(o, "response");
    const json_t *pred = json_object_get(o, "pred");
    if (!json_is_string(answer) || json_string_length(answer) != 1 || !json_is_string(difficulty) ||
        !json_is_string(length))
        return kv_fail(err,
                       "%s: a LongBench v2 line needs \"answer\" (A-D), \"difficulty\" and "
                       "\"length\"",
                       where);
    it->answer = json_string_value(answer)[0];
    it->hard = !kv_str_eq(text_of(difficulty), kv_str_c("easy"));
    it->length = kv_str_eq(text_of(length), kv_str_c("short"))    ? 0
                 : kv_str_eq(text_of(length), kv_str_c("medium")) ? 1
                                                                  : 2;
    it->pred = 0;
    if (json_is_string(response))
        it->pred = kb_v2_extract_answer(text_of(response));
    else if (json_is_string(pred))
        it->pred = kb_v2_letter(text_of(pred));
    return 0;
}

static int v2_push(kb_v2_item **items, size_t *n, size_t *cap)
{
    return KV_VEC_RESERVE(*items, *cap, *n + 1, 64);
}

int kb_v2_read(const char *path, kb_v2_item **items, size_t *n, kv_error *err)
{
    *items = NULL;
    *n = 0;
    size_t cap = 0, len;
    char *text;
    if (kv_file_read(path, &text, &len, err) < 0)
        return -1;
    int rc = 0;
    char where[4200];
    /* result.py: json.load() the whole file, else one object per line */
    kv_error ignored;
    json_t *all = kv_json_load(text, len, &ignored);
    if (json_is_array(all)) {
        for (size_t k = 0; k < json_array_size(all); k++) {
            const json_t *o = json_array_get(all, k);
            snprintf(where, sizeof where, "%s: item %zu", path, k + 1);
            if ((rc = v2_push(items, n, &cap)) < 0) {
                rc = kv_fail(err, "out of memory");
                break;
            }
            if ((rc = v2_item(o, &(*items)[*n], where, err)) < 0)
                break;
            (*n)++;
        }
    } else {
        long lineno = 0;
        for (char *line = text; rc == 0 && line < text + len;) {
            char *nl = memchr(line, '\n', (size_t)(text + len - line));
            size_t l = nl ? (size_t)(nl - line) : (size_t)(text + len - line);
            lineno++;
            if (l > 0 && strspn(line, " \t\r") < l) {
                snprintf(where, sizeof where, "%s:%ld", path, lineno);
                json_t *o = kv_json_load(line, l, err);
                if (!o)
                    rc = kv_fail_prefix(err, where);
                else if (v2_push(items, n, &cap) < 0)
                    rc = kv_fail(err, "out of memory");
                else if ((rc = v2_item(o, &(*items)[*n], where, err)) == 0)
                    (*n)++;
                json_decref(o);
            }
            line += l + 1;
        }
    }
    json_decref(all);
    free(text);
    if (rc < 0) {
        free(*items);
        *items = NULL;
        *n = 0;
    }
    return rc;
}
