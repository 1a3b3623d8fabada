#include "report/report_run.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "rundir/predfile.h"
#include "report/json_get.h"
#include "report/length_view.h"
#include "report/rows.h"
#include "report/rowstats.h"
#include "report/scores_file.h"

static char *dup_or(const char *s, const char *dflt)
{
    return strdup(s ? s : dflt);
}

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
    if (kb_scores_load(dir, out, err) < 0 || kb_rows_resample(out->rows, out->n_rows, err) < 0) {
        kb_report_run_free(out);
        return -1;
    }
    if (kb_length_view_attach(out) < 0) {
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
            kb_score_row_free(&run->rows[i]);
    }
    run->n_rows = kept;
    /* and the configs table: only the configs with rows left */
    for (cJSON *c = run->configs->child, *next; c; c = next) {
        next = c->next;
        bool has_rows = false;
        for (size_t i = 0; i < run->n_rows && !has_rows; i++)
            has_rows =
                kb_json_str(c, "name") && strcmp(run->rows[i].config, kb_json_str(c, "name")) == 0;
        if (!has_rows)
            cJSON_Delete(cJSON_DetachItemViaPointer(run->configs, c));
    }
    kb_length_view_detach(run); /* the view was of the rows loaded */
    return kb_length_view_attach(run);
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
    kb_length_view_detach(run);
    memset(run, 0, sizeof *run);
}

const cJSON *kb_report_config(const kb_report_run *run, const char *name)
{
    for (const cJSON *c = run->configs->child; c; c = c->next)
        if (kb_json_str(c, "name") && strcmp(kb_json_str(c, "name"), name) == 0)
            return c;
    return NULL;
}

long kb_report_budget(const kb_report_run *run, const char *name)
{
    double b = kb_json_num(kb_report_config(run, name), "budget");
    return isnan(b) ? -1 : (long)b;
}

const char *kb_report_query_aware(const cJSON *params)
{
    if (!params || cJSON_IsNull(params))
        return "-";
    return cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(params, "query_aware")) ? "false"
                                                                                  : "true";
}
