/* kvbench score: LongBench's eval.py over prediction files, with its exact
 * numbers (docs/longbench.md). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "util/file.h"
#include "score/formats.h"
#include "score/jieba.h"
#include "util/jsonstr.h"
#include "score/metrics.h"
#include "score/score.h"

static const kb_option options[] = {
    {"e", NULL, "LongBench-E: also score by length bucket (0-4k, 4-8k, 8k+), as eval.py --e"},
    {"per-line", NULL, "print {\"id\", \"dataset\", \"score\"} per prediction (JSON Lines)"},
    {"v2", NULL,
     "LongBench v2 results (response/pred, answer, difficulty, length): accuracy as result.py"},
    {"format", "F",
     "longbench (pred.py's *.jsonl, default), kvpress (predictions.csv) or lm-eval "
     "(samples_*.jsonl)"},
    {"csv", "PATH", "also write the per-task table as CSV to PATH"},
    {"output", "PATH",
     "also write eval.py's result.json to PATH ({task: score}; with --e, buckets)"},
    {"jieba", "DIR",
     "jieba's data folder for the Chinese tasks (default: $KVBENCH_JIEBA_DIR "
     "or " KB_JIEBA_DEBIAN_DIR ")"},
    {NULL, NULL, NULL},
};

/* --out was score's spelling before every command wrote --output */
static const kb_alias aliases[] = {{"out", "output"}, {NULL, NULL}};

static bool needs_jieba(const kb_predictions *p)
{
    for (size_t i = 0; i < p->n; i++) {
        kb_metric m;
        bool first;
        if (kb_task_metric(p->v[i].dataset, &m, &first) == 0 && kb_metric_needs_jieba(m))
            return true;
    }
    return false;
}

static void print_per_line(const kb_predictions *p)
{
    for (size_t i = 0; i < p->n; i++) {
        const kb_scored_line *pr = &p->v[i];
        cJSON *id = pr->id.p ? kv_json_text(pr->id.p, pr->id.n) : cJSON_CreateNull();
        cJSON *ds = kv_json_text(pr->dataset, strlen(pr->dataset));
        char *ids = id ? cJSON_PrintUnformatted(id) : NULL;
        char *dss = ds ? cJSON_PrintUnformatted(ds) : NULL;
        if (isnan(pr->score))
            printf("{\"id\": %s, \"dataset\": %s, \"score\": null}\n", ids ? ids : "null",
                   dss ? dss : "null");
        else
            printf("{\"id\": %s, \"dataset\": %s, \"score\": %.17g}\n", ids ? ids : "null",
                   dss ? dss : "null", pr->score);
        free(ids);
        free(dss);
        cJSON_Delete(id);
        cJSON_Delete(ds);
    }
}

static void fmt_score(char *buf, size_t n, double x)
{
    if (isnan(x))
        snprintf(buf, n, "NaN");
    else
        snprintf(buf, n, "%.2f", x);
}

static void print_table(FILE *f, const kb_task_scores *t, bool e)
{
    if (e)
        fprintf(f, "%-22s %-20s %5s %8s %8s %8s\n", "task", "metric", "n", "0-4k", "4-8k", "8k+");
    else
        fprintf(f, "%-22s %-20s %5s %8s\n", "task", "metric", "n", "score");
    for (size_t i = 0; i < t->n; i++) {
        const kb_task_score *s = &t->v[i];
        char a[32], b[32], c[32];
        if (s->refused) {
            fprintf(f, "%-22s %-20s %5zu  refused: needs jieba's data\n", s->dataset,
                    kb_metric_name(s->metric), s->n);
            continue;
        }
        if (e) {
            fmt_score(a, sizeof a, s->bucket[0]);
            fmt_score(b, sizeof b, s->bucket[1]);
            fmt_score(c, sizeof c, s->bucket[2]);
            fprintf(f, "%-22s %-20s %5zu %8s %8s %8s\n", s->dataset, kb_metric_name(s->metric),
                    s->n, a, b, c);
        } else {
            fmt_score(a, sizeof a, s->score);
            fprintf(f, "%-22s %-20s %5zu %8s\n", s->dataset, kb_metric_name(s->metric), s->n, a);
        }
    }
}

static void csv_rows(FILE *f, const char *model, const kb_task_scores *t)
{
    for (size_t i = 0; i < t->n; i++) {
        const kb_task_score *s = &t->v[i];
        if (s->refused)
            continue;
        char sc[32];
        fmt_score(sc, sizeof sc, s->score);
        if (model)
            fprintf(f, "%s,", model);
        fprintf(f, "%s,%s,%zu,%s", s->dataset, kb_metric_name(s->metric), s->n, sc);
        for (int b = 0; b < KB_N_BUCKETS; b++) {
            fmt_score(sc, sizeof sc, s->bucket[b]);
            fprintf(f, ",%zu,%s", s->bucket_n[b], sc);
        }
        fputc('\n', f);
    }
}

/* The table as CSV; a parent folder's models each get their rows, named in
 * a first column. */
static int write_csv(const char *path, const kb_pred_group *g, const kb_task_scores *t, size_t n)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    bool models = n > 1 || g[0].name[0];
    fprintf(f, "%stask,metric,n,score,n_0-4k,score_0-4k,n_4-8k,score_4-8k,n_8k+,score_8k+\n",
            models ? "model," : "");
    for (size_t k = 0; k < n; k++)
        csv_rows(f, models ? g[k].name : NULL, &t[k]);
    return fclose(f) == 0 ? 0 : -1;
}

/* eval.py's result.json of one model: {task: score}, or with --e {task:
 * {"0-4k": x, "4-8k": y, "8k+": z}}; a refused task is left out (its error
 * is printed). */
static cJSON *result_json(const kb_task_scores *t, bool e)
{
    cJSON *o = cJSON_CreateObject();
    for (size_t i = 0; o && i < t->n; i++) {
        const kb_task_score *s = &t->v[i];
        if (s->refused)
            continue;
        cJSON *v = e ? cJSON_CreateObject() : cJSON_CreateNumber(s->score);
        for (int b = 0; e && v && b < KB_N_BUCKETS; b++)
            if (!cJSON_AddNumberToObject(v, kb_bucket_names[b], s->bucket[b]))
                break;
        if (!v || !cJSON_AddItemToObject(o, s->dataset, v)) {
            cJSON_Delete(v);
            cJSON_Delete(o);
            return NULL;
        }
    }
    return o;
}

/* result.json; a parent folder's models as {model: {task: score}}. */
static int write_result_json(const char *path, const kb_pred_group *g, const kb_task_scores *t,
                             size_t n, bool e)
{
    bool models = n > 1 || g[0].name[0];
    cJSON *o = models ? cJSON_CreateObject() : result_json(&t[0], e);
    for (size_t k = 0; models && o && k < n; k++) {
        cJSON *one = result_json(&t[k], e);
        if (!one || !cJSON_AddItemToObject(o, g[k].name, one)) {
            cJSON_Delete(one);
            cJSON_Delete(o);
            o = NULL;
        }
    }
    char *text = o ? cJSON_Print(o) : NULL;
    cJSON_Delete(o);
    FILE *f = text ? fopen(path, "w") : NULL;
    int rc = f && fprintf(f, "%s\n", text) >= 0 ? 0 : -1;
    if (f && fclose(f) != 0)
        rc = -1;
    free(text);
    return rc;
}

/* The v2 result files of path: itself, or its *.jsonl / *.json files in name order. */
static int v2_files(const char *path, char ***files, size_t *n)
{
    struct stat st;
    *files = NULL;
    *n = 0;
    if (stat(path, &st) != 0)
        return -1;
    if (!S_ISDIR(st.st_mode)) {
        *files = malloc(sizeof **files);
        if (!*files || !((*files)[0] = strdup(path)))
            return -1;
        *n = 1;
        return 0;
    }
    char **names;
    size_t count;
    kv_error err;
    if (kv_dir_list(path, NULL, &names, &count, &err) < 0)
        return -1;
    *files = calloc(count + 1, sizeof **files);
    for (size_t i = 0; i < count; i++)
        if (*files && (kv_ends_with(names[i], ".json") || kv_ends_with(names[i], ".jsonl")))
            (*files)[(*n)++] = kv_path_join(path, names[i]);
    kv_names_free(names, count);
    return *files ? 0 : -1;
}

static void v2_cell(FILE *f, double x, const char *sep)
{
    if (isnan(x))
        fprintf(f, "%sNaN", sep);
    else
        fprintf(f, "%s%.1f", sep, x);
}

/* result.py's table: one row per results file. */
static int run_v2(const kb_args *a)
{
    const char *path = a->positional[0];
    char **files;
    size_t n;
    if (v2_files(path, &files, &n) < 0) {
        kb_error("%s: cannot list the LongBench v2 result files", path);
        return KB_EXIT_FAIL;
    }
    const char *csv_path = kb_arg(a, "csv");
    FILE *csv = csv_path ? fopen(csv_path, "w") : fopen("/dev/null", "w");
    int status = csv ? KB_EXIT_OK : KB_EXIT_FAIL;
    if (!csv)
        kb_error("cannot write %s: %s", csv_path ? csv_path : "/dev/null", strerror(errno));
    else
        fprintf(csv, "file,n,overall,easy,hard,short,medium,long\n");
    printf("%-30s %5s %8s %8s %8s %8s %8s %8s\n", "file", "n", "overall", "easy", "hard", "short",
           "medium", "long");
    for (size_t i = 0; i < n && status == KB_EXIT_OK; i++) {
        kb_v2_item *items;
        size_t count;
        kv_error err;
        if (kb_v2_read(files[i], &items, &count, &err) < 0) {
            kb_error("%s", err.msg);
            status = KB_EXIT_FAIL;
            break;
        }
        kb_v2_accuracy acc = kb_v2_score(items, count);
        double cells[] = {acc.overall, acc.easy, acc.hard, acc.short_, acc.medium, acc.long_};
        const char *base = strrchr(files[i], '/') ? strrchr(files[i], '/') + 1 : files[i];
        printf("%-30s %5zu", base, count);
        fprintf(csv, "%s,%zu", base, count);
        for (int c = 0; c < 6; c++) {
            if (isnan(cells[c]))
                printf(" %8s", "NaN");
            else
                printf(" %8.1f", cells[c]);
            v2_cell(csv, cells[c], ",");
        }
        printf("\n");
        fprintf(csv, "\n");
        free(items);
    }
    if (csv && fclose(csv) != 0 && status == KB_EXIT_OK) {
        kb_error("cannot write %s", csv_path);
        status = KB_EXIT_FAIL;
    }
    for (size_t i = 0; i < n; i++)
        free(files[i]);
    free(files);
    return status;
}

/* Scores one group of files (one model) into *tasks (whose task names
 * point into *preds), printing its table (under a heading when the path held
 * several models). 0, 1 when a task was refused (no jieba data), -1 on an
 * error (printed). */
static int score_group(const kb_args *a, const kb_pred_group *g, kb_pred_format format,
                       bool heading, kb_predictions *preds, kb_task_scores *tasks)
{
    kv_error err;
    kb_jieba *jieba = NULL;
    kb_metrics *metrics = NULL;
    int rc = -1;
    for (size_t i = 0; i < g->n_files; i++)
        if (kb_predictions_read_format(preds, g->files[i], format, &err) < 0) {
            kb_error("%s", err.msg);
            goto done;
        }
    if (needs_jieba(preds) && kb_jieba_load(kb_arg(a, "jieba"), &jieba, &err) < 0)
        kb_error("%s", err.msg); /* the Chinese tasks are refused below, the rest scored */
    if (kb_metrics_new(jieba, &metrics, &err) < 0 ||
        kb_score_predictions(metrics, preds, tasks, &err) < 0) {
        kb_error("%s", err.msg);
        goto done;
    }
    bool per_line = kb_flag(a, "per-line");
    if (per_line)
        print_per_line(preds);
    FILE *table = per_line ? stderr : stdout;
    if (heading) /* a parent folder: one table per model */
        fprintf(table, "== %s ==\n", g->name);
    print_table(table, tasks, kb_flag(a, "e"));
    rc = 0;
    for (size_t i = 0; i < tasks->n; i++)
        if (tasks->v[i].refused)
            rc = 1;
done:
    kb_metrics_free(metrics);
    kb_jieba_free(jieba);
    return rc;
}

static int run(const kb_args *a)
{
    if (kb_flag(a, "v2"))
        return run_v2(a);
    kb_pred_format format = KB_FORMAT_LONGBENCH;
    if (kb_arg(a, "format") && kb_pred_format_parse(kb_arg(a, "format"), &format) < 0) {
        kb_error("score: --format: \"%s\" is none of longbench, kvpress, lm-eval",
                 kb_arg(a, "format"));
        return KB_EXIT_USAGE;
    }
    kv_error err;
    kb_pred_group *groups = NULL;
    size_t n = 0;
    if (kb_pred_groups(a->positional[0], format, &groups, &n, &err) < 0) {
        kb_error("%s", err.msg);
        return KB_EXIT_FAIL;
    }
    kb_task_scores *tasks = calloc(n, sizeof *tasks);
    kb_predictions *preds = calloc(n, sizeof *preds);
    const char *csv = kb_arg(a, "csv"), *out = kb_arg(a, "output");
    int status = tasks && preds ? KB_EXIT_OK : KB_EXIT_FAIL;
    bool refused = false; /* a Chinese task without jieba: the rest is still written */
    for (size_t k = 0; k < n && status == KB_EXIT_OK; k++) {
        int rc = score_group(a, &groups[k], format, groups[k].name[0] != '\0', &preds[k],
                             &tasks[k]);
        status = rc < 0 ? KB_EXIT_FAIL : status;
        refused |= rc > 0;
    }
    /* files only where asked: the folder read may be read-only (LongBench's pred/) */
    if (status == KB_EXIT_OK && csv && write_csv(csv, groups, tasks, n) < 0) {
        kb_error("cannot write %s: %s", csv, strerror(errno));
        status = KB_EXIT_FAIL;
    }
    if (status == KB_EXIT_OK && out && write_result_json(out, groups, tasks, n, kb_flag(a, "e")) < 0) {
        kb_error("cannot write %s: %s", out, strerror(errno));
        status = KB_EXIT_FAIL;
    }
    for (size_t k = 0; tasks && preds && k < n; k++) {
        kb_task_scores_free(&tasks[k]);
        kb_predictions_free(&preds[k]);
    }
    free(tasks);
    free(preds);
    kb_pred_groups_free(groups, n);
    return refused ? KB_EXIT_FAIL : status;
}

const kb_command kb_cmd_score = {
    .name = "score",
    .summary = "score prediction files with LongBench's metrics",
    .usage = "kvbench score FILE.jsonl|DIR [--e] [--per-line] [--v2] [--csv PATH] [--output PATH] "
             "[--jieba DIR]",
    .description =
        "Scores LongBench prediction files exactly as LongBench's eval.py does. A line holds\n"
        "\"pred\" (or \"prediction\"), \"answers\", \"all_classes\" and, for --e, \"length\"; the "
        "task\n"
        "is the file name up to its first '.' (qasper.jsonl), or a line's \"dataset\". A folder\n"
        "scores every *.jsonl in it, so LongBench's pred/<model>/ gives result.json's numbers.\n"
        "Chinese tasks need jieba's data (apt-get install python3-jieba). With --v2, the files\n"
        "are LongBench v2 results and the accuracies are result.py's. The table goes to\n"
        "stdout; files are written only where --csv and --output say, never beside the input.",
    .options = options,
    .aliases = aliases,
    .min_positional = 1,
    .max_positional = 1,
    .run = run,
};
