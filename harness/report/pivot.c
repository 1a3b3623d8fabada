#include "report/pivot.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "matrix/taskset.h"
#include "report/json_get.h"
#include "report/rows.h"

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
    return kb_task_cmp(*(const char *const *)a, *(const char *const *)b);
}

void kb_pivot_free(kb_pivot *p)
{
    free(p->configs);
    free(p->tasks);
    free(p->cell);
    free(p->scored);
    memset(p, 0, sizeof *p);
}

int kb_pivot_build(kb_pivot *p, const kb_report_run *run)
{
    memset(p, 0, sizeof *p);
    p->run = run;
    p->full = -1;
    size_t n = run->n_rows ? run->n_rows : 1;
    p->configs = calloc(n + (size_t)cJSON_GetArraySize(run->configs), sizeof *p->configs);
    p->tasks = calloc(n + (size_t)cJSON_GetArraySize(run->tasks), sizeof *p->tasks);
    if (!p->configs || !p->tasks) {
        kb_pivot_free(p);
        return -1;
    }
    /* configs in run.json order first, then any that only scores.json names */
    for (const cJSON *c = run->configs->child; c; c = c->next) {
        const char *name = kb_json_str(c, "name");
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
        const char *name = kb_json_str(t, "task");
        if (name && !in_list(p->tasks, p->nt, name))
            p->tasks[p->nt++] = name;
    }
    qsort(p->tasks, p->nt, sizeof *p->tasks, cmp_task_names);
    p->cell = calloc(p->nc * p->nt + 1, sizeof *p->cell);
    p->scored = calloc(p->nt + 1, sizeof *p->scored);
    if (!p->cell || !p->scored) {
        kb_pivot_free(p);
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

double kb_pivot_score(const kb_pivot *p, size_t c, size_t t)
{
    const kb_score_row *r = p->cell[c * p->nt + t];
    return r ? r->score : NAN;
}

/* A task without any score is in no average: its "–" column says so. */
static bool in_set(const kb_pivot *p, size_t t, kb_task_set set)
{
    return p->scored[t] &&
           (!set.category || strcmp(kb_task_category(p->tasks[t]), set.category) == 0) &&
           (!set.en16 || kb_task_in_en16(p->tasks[t]));
}

kb_estimate kb_pivot_mean(const kb_pivot *p, size_t c, kb_task_set set, bool delta, bool with_ci)
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

bool kb_pivot_has_en16(const kb_pivot *p)
{
    size_t en = 0;
    for (size_t t = 0; t < p->nt; t++)
        en += p->scored[t] && kb_task_in_en16(p->tasks[t]);
    return en == 16;
}

bool kb_pivot_extra_avg(const kb_pivot *p)
{
    return kb_pivot_has_en16(p) && p->n_scored > 16;
}

kb_task_set kb_pivot_headline_set(const kb_pivot *p)
{
    return (kb_task_set){NULL, kb_pivot_has_en16(p)};
}

double kb_pivot_headline(const kb_pivot *p, size_t c)
{
    return kb_pivot_mean(p, c, kb_pivot_headline_set(p), false, false).value;
}

kb_cell_est kb_pivot_task_est(const kb_pivot *p, size_t c, size_t t)
{
    const kb_score_row *r = p->cell[c * p->nt + t];
    if (!r)
        return (kb_cell_est){{NAN, {NAN, NAN}}, {NAN, {NAN, NAN}}};
    return (kb_cell_est){{r->score, r->ci}, {r->delta_full, r->delta_ci}};
}

kb_cell_est kb_pivot_avg_est(const kb_pivot *p, size_t c, kb_task_set set)
{
    return (kb_cell_est){kb_pivot_mean(p, c, set, false, true),
                         kb_pivot_mean(p, c, set, true, true)};
}

const char *kb_sig_mark(kb_estimate delta)
{
    if (!kb_interval_excludes_zero(delta.ci))
        return "";
    return delta.ci.hi < 0 ? "▼" : "▲";
}

double kb_half_width(kb_interval ci)
{
    return (ci.hi - ci.lo) / 2;
}

const char *kb_pivot_avg_label(const kb_pivot *p)
{
    return kb_pivot_has_en16(p) ? "EN16" : "Avg";
}

bool kb_pivot_has_category(const kb_pivot *p, const char *cat)
{
    for (size_t t = 0; t < p->nt; t++)
        if (strcmp(kb_task_category(p->tasks[t]), cat) == 0)
            return true;
    return false;
}

size_t kb_pivot_tasks_in(const kb_pivot *p, kb_task_set set)
{
    size_t k = 0;
    for (size_t t = 0; t < p->nt; t++)
        k += in_set(p, t, set);
    return k;
}
