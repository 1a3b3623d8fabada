#include "report/incomplete.h"

#include <string.h>

/* The most samples any config of the run has for task. */
static long most_done(const kb_report_run *run, const char *task)
{
    long most = 0;
    for (size_t i = 0; i < run->n_rows; i++)
        if (strcmp(run->rows[i].task, task) == 0 && run->rows[i].n > most)
            most = run->rows[i].n;
    return most;
}

/* The samples a run asks of a task: its first `limit` (all when 0), of the
 * data's count when that is known here. */
static long expected(const kb_report_run *run, const cJSON *task, const kb_task_sizes *sizes)
{
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(task, "task"));
    const cJSON *limit = cJSON_GetObjectItemCaseSensitive(task, "limit");
    long lim = cJSON_IsNumber(limit) ? (long)limit->valuedouble : 0;
    kv_error ignored; /* the data not here (or unreadable): the configs' most stands in */
    long have = sizes && sizes->count && run->data
                    ? sizes->count(sizes->ctx, run->data, name, &ignored)
                    : -1;
    if (have < 0)
        return most_done(run, name);
    return lim > 0 && lim < have ? lim : have;
}

size_t kb_report_expect(kb_report_run *run, const kb_task_sizes *sizes)
{
    if (!run->unfinished)
        return 0;
    for (const cJSON *t = run->tasks ? run->tasks->child : NULL; t; t = t->next) {
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(t, "task"));
        if (!name)
            continue;
        long n = expected(run, t, sizes);
        for (size_t i = 0; i < run->n_rows; i++)
            if (strcmp(run->rows[i].task, name) == 0)
                run->rows[i].n_expected = n;
    }
    return kb_report_n_incomplete(run);
}

bool kb_row_incomplete(const kb_score_row *r)
{
    return r && r->n_expected > r->n;
}

size_t kb_report_n_incomplete(const kb_report_run *run)
{
    size_t n = 0;
    for (size_t i = 0; i < run->n_rows; i++)
        n += kb_row_incomplete(&run->rows[i]);
    return n;
}

bool kb_reports_unfinished(const kb_report_run *runs, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (runs[k].unfinished)
            return true;
    return false;
}

void kb_report_unfinished_note(FILE *f, const kb_report_run *run)
{
    if (!run->unfinished)
        return;
    size_t n = kb_report_n_incomplete(run);
    fprintf(f, " — unfinished: the run stopped before its end");
    if (n)
        fprintf(f, "; %zu cell%s marked \"done/all\" hold only the samples done", n,
                n == 1 ? "" : "s");
}
