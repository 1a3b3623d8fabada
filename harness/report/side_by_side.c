#include "report/side_by_side.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "report/rows.h"
#include "report/rowstats.h"

/* The names (config or task) of every run's rows, in order of first
 * appearance; tasks then sorted in LongBench's order. */
typedef struct names {
    const char **v;
    size_t n;
} names;

static int add_name(names *s, const char *name)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->v[i], name) == 0)
            return 0;
    const char **grown = realloc(s->v, (s->n + 1) * sizeof *grown);
    if (!grown)
        return -1;
    s->v = grown;
    s->v[s->n++] = name;
    return 0;
}

static int cmp_tasks(const void *a, const void *b)
{
    return kb_task_cmp(*(const char *const *)a, *(const char *const *)b);
}

/* Markdown and HTML from one description: a row is cells between begin and end. */
typedef struct table {
    FILE *f;
    bool html;
} table;

static void row_begin(table *t)
{
    fputs(t->html ? "<tr>" : "|", t->f);
}

static void row_end(table *t)
{
    fputs(t->html ? "</tr>\n" : "\n", t->f);
}

static void cell_text(table *t, const char *s, bool head)
{
    if (!t->html) {
        fprintf(t->f, " %s |", s);
        return;
    }
    fputs(head ? "<th>" : "<td>", t->f);
    for (; *s; s++) /* names: no quotes to escape in element text */
        if (*s == '<')
            fputs("&lt;", t->f);
        else if (*s == '&')
            fputs("&amp;", t->f);
        else
            fputc(*s, t->f);
    fputs(head ? "</th>" : "</td>", t->f);
}

static void cell_num(table *t, double v, const char *fmt)
{
    char buf[64] = "–";
    if (!isnan(v))
        snprintf(buf, sizeof buf, fmt, v);
    if (t->html)
        fprintf(t->f, "<td class='num'>%s</td>", buf);
    else
        fprintf(t->f, " %s |", buf);
}

/* "-3.33 [-6.67, -1.11] ▼": a paired difference, its interval and mark. */
static void cell_delta(table *t, kb_pairing p)
{
    char buf[128] = "–";
    if (!isnan(p.delta)) {
        int k = snprintf(buf, sizeof buf, "%+.2f", p.delta);
        if (!isnan(p.ci.lo))
            k += snprintf(buf + k, sizeof buf - (size_t)k, " [%+.2f, %+.2f]", p.ci.lo, p.ci.hi);
        if (kb_interval_excludes_zero(p.ci))
            snprintf(buf + k, sizeof buf - (size_t)k, " %s", p.ci.hi < 0 ? "▼" : "▲");
    }
    if (t->html)
        fprintf(t->f, "<td class='num%s'>%s</td>",
                isnan(p.delta) ? "" : p.delta < 0 ? " neg" : " pos", buf);
    else
        fprintf(t->f, " %s |", buf);
}

static void header(table *t, const char *first, const char *second, const kb_report_run *runs,
                   size_t n, const char *delta_note)
{
    row_begin(t);
    cell_text(t, first, true);
    cell_text(t, second, true);
    for (size_t k = 0; k < n; k++)
        cell_text(t, runs[k].name, true);
    for (size_t k = 1; k < n; k++) {
        char h[512];
        snprintf(h, sizeof h, "Δ %s − %s%s", runs[k].name, runs[0].name, delta_note);
        cell_text(t, h, true);
    }
    row_end(t);
    if (!t->html) {
        fputs("|---|---|", t->f);
        for (size_t k = 0; k < 2 * n - 1; k++)
            fputs("--:|", t->f);
        fputc('\n', t->f);
    }
}

/* Each run's mean over the tasks that every run scored for this config. */
static void config_means(const kb_report_run *runs, size_t n, const char *config,
                         const names *tasks, double *mean)
{
    size_t used = 0;
    for (size_t k = 0; k < n; k++)
        mean[k] = 0;
    for (size_t t = 0; t < tasks->n; t++) {
        bool everywhere = true;
        for (size_t k = 0; k < n && everywhere; k++)
            everywhere = kb_report_row(&runs[k], config, tasks->v[t]) != NULL;
        if (!everywhere)
            continue;
        for (size_t k = 0; k < n; k++)
            mean[k] += kb_report_row(&runs[k], config, tasks->v[t])->score;
        used++;
    }
    for (size_t k = 0; k < n; k++)
        mean[k] = used ? mean[k] / (double)used : NAN;
}

int kb_report_side_by_side(FILE *f, const kb_report_run *runs, size_t n, bool html)
{
    if (n < 2)
        return 0;
    names configs = {0}, tasks = {0};
    int rc = 0;
    for (size_t k = 0; k < n && rc == 0; k++)
        for (size_t i = 0; i < runs[k].n_rows && rc == 0; i++)
            rc = add_name(&configs, runs[k].rows[i].config) < 0 ||
                         add_name(&tasks, runs[k].rows[i].task) < 0
                     ? -1
                     : 0;
    double *mean = calloc(n, sizeof *mean);
    if (rc < 0 || !mean) {
        free(configs.v);
        free(tasks.v);
        free(mean);
        return -1;
    }
    qsort(tasks.v, tasks.n, sizeof *tasks.v, cmp_tasks);
    table t = {f, html};
    fputs(html ? "<h2>Side by side</h2>\n<p>Each config's mean over the tasks every run scored; "
                 "then each task, with the difference to the first run paired on the samples "
                 "both scored (95 % interval; ▼ / ▲ where it excludes 0).</p>\n<table>"
               : "\n## Side by side\n\nEach config's mean over the tasks every run scored; then "
                 "each task, with the difference to the first run paired on the samples both "
                 "scored (95 % interval; ▼ / ▲ where it excludes 0).\n\n",
          f);
    header(&t, "config", "tasks", runs, n, "");
    for (size_t c = 0; c < configs.n; c++) {
        config_means(runs, n, configs.v[c], &tasks, mean);
        row_begin(&t);
        cell_text(&t, configs.v[c], false);
        cell_text(&t, "mean", false);
        for (size_t k = 0; k < n; k++)
            cell_num(&t, mean[k], "%.2f");
        for (size_t k = 1; k < n; k++)
            cell_num(&t, mean[k] - mean[0], "%+.2f");
        row_end(&t);
    }
    fputs(html ? "</table>\n<table>" : "\n", f);
    header(&t, "task", "config", runs, n, " (paired)");
    for (size_t i = 0; i < tasks.n && rc == 0; i++)
        for (size_t c = 0; c < configs.n && rc == 0; c++) {
            const kb_score_row *base = kb_report_row(&runs[0], configs.v[c], tasks.v[i]);
            bool any = false;
            for (size_t k = 0; k < n; k++)
                any |= kb_report_row(&runs[k], configs.v[c], tasks.v[i]) != NULL;
            if (!any)
                continue;
            row_begin(&t);
            cell_text(&t, tasks.v[i], false);
            cell_text(&t, configs.v[c], false);
            for (size_t k = 0; k < n; k++) {
                const kb_score_row *r = kb_report_row(&runs[k], configs.v[c], tasks.v[i]);
                cell_num(&t, r ? r->score : NAN, "%.2f");
            }
            for (size_t k = 1; k < n && rc == 0; k++) {
                const kb_score_row *r = kb_report_row(&runs[k], configs.v[c], tasks.v[i]);
                kb_pairing p = {NAN, {NAN, NAN}, 0, false};
                if (r && base)
                    rc = kb_rows_pair(r, base, tasks.v[i], NULL, &p);
                cell_delta(&t, p);
            }
            row_end(&t);
        }
    if (html)
        fputs("</table>\n", f);
    free(configs.v);
    free(tasks.v);
    free(mean);
    return rc;
}
