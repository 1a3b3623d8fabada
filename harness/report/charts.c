#include "report/charts.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "report/html_escape.h"
#include "report/report_run.h"
#include "report/series.h"

/* ---- the frame: axes, lines, legend ------------------------------------ */

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

/* A style attribute for a dashed series: " stroke-dasharray='8 4'". */
static void dash_attr(FILE *f, const char *dash)
{
    if (*dash)
        fprintf(f, " stroke-dasharray='%s'", dash);
}

/* Opens a series' line; the caller writes its points "x,y " and closes it
 * with "'/>". */
static void polyline_open(FILE *f, kb_series_style style)
{
    fprintf(f, "<polyline fill='none' stroke='%s' stroke-width='2'", style.colour);
    dash_attr(f, style.dash);
    fputs(" points='", f);
}

/* A legend entry at height y, right of the plot; returns the next one's y. */
static double legend_entry(FILE *f, double y, kb_series_style style, const char *name)
{
    fprintf(f, "<line x1='640' x2='664' y1='%.1f' y2='%.1f' stroke='%s' stroke-width='3'", y, y,
            style.colour);
    dash_attr(f, style.dash);
    fprintf(f, "/><text x='670' y='%.1f' class='legend'>", y + 4);
    kb_html_esc(f, name);
    fputs("</text>\n", f);
    return y + 20;
}

/* ---- score vs cache budget --------------------------------------------- */

typedef struct chart_point {
    long budget;
    double score;
    kb_interval ci; /* the whisker; NaN: none */
    const char *config;
} chart_point;

/* The configs with a budget and a headline score (the full cache aside),
 * the series of each, the budgets they span, and the top of the y axis. */
typedef struct budget_points {
    chart_point *pts;
    cJSON **series; /* [i]: the series of pts[i] (report/series.h) */
    size_t np;
    long *budgets; /* distinct, ascending */
    size_t nb;
    double ymax; /* the highest score or interval bound of any config */
} budget_points;

static int cmp_long(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

static void budget_points_free(budget_points *bp)
{
    for (size_t i = 0; bp->series && i < bp->np; i++)
        cJSON_Delete(bp->series[i]);
    free(bp->series);
    free(bp->pts);
    free(bp->budgets);
}

/* -1 on OOM (bp then holds what it had, for budget_points_free). */
static int budget_points_collect(const kb_pivot *p, budget_points *bp)
{
    memset(bp, 0, sizeof *bp);
    bp->pts = calloc(p->nc + 1, sizeof *bp->pts);
    bp->series = calloc(p->nc + 1, sizeof *bp->series);
    bp->budgets = calloc(p->nc + 1, sizeof *bp->budgets);
    if (!bp->pts || !bp->series || !bp->budgets)
        return -1;
    for (size_t c = 0; c < p->nc; c++) {
        long b = kb_report_budget(p->run, p->configs[c]);
        kb_estimate est = kb_pivot_mean(p, c, kb_pivot_headline_set(p), false, true);
        if (!isnan(est.value) && est.value > bp->ymax)
            bp->ymax = est.value;
        if (!isnan(est.ci.hi) && est.ci.hi > bp->ymax)
            bp->ymax = est.ci.hi;
        if (b <= 0 || isnan(est.value) || (int)c == p->full)
            continue;
        const cJSON *params =
            cJSON_GetObjectItemCaseSensitive(kb_report_config(p->run, p->configs[c]), "params");
        bp->series[bp->np] = kb_series_params(params);
        bp->pts[bp->np++] = (chart_point){b, est.value, est.ci, p->configs[c]};
        bool seen = false;
        for (size_t i = 0; i < bp->nb; i++)
            seen |= bp->budgets[i] == b;
        if (!seen)
            bp->budgets[bp->nb++] = b;
    }
    qsort(bp->budgets, bp->nb, sizeof *bp->budgets, cmp_long);
    return 0;
}

/* The plot area: x the budgets on a log scale, y zoomed on the data (the
 * differences between methods are a few points), full cache included. */
static chart budget_frame(const budget_points *bp, kb_estimate full)
{
    double ymin = bp->ymax;
    for (size_t i = 0; i < bp->np; i++)
        ymin = fmin(ymin, isnan(bp->pts[i].ci.lo) ? bp->pts[i].score : bp->pts[i].ci.lo);
    if (!isnan(full.value))
        ymin = fmin(ymin, isnan(full.ci.lo) ? full.value : full.ci.lo);
    double lo = fmax(0, floor((ymin - 2) / 5) * 5), hi = ceil((bp->ymax + 1) / 5) * 5;
    chart c = {.x0 = log2((double)bp->budgets[0]),
               .x1 = log2((double)bp->budgets[bp->nb - 1]),
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
    return c;
}

/* The axes with a tick at every budget of the chart. */
static void budget_axes(FILE *f, const chart *c, const budget_points *bp, const char *ylabel)
{
    double xs[64];
    char labels[64][24];
    size_t nx = bp->nb < 64 ? bp->nb : 64;
    for (size_t i = 0; i < nx; i++) {
        xs[i] = cx(c, bp->budgets[i]);
        snprintf(labels[i], sizeof labels[i], "%ld", bp->budgets[i]);
    }
    chart_axes(f, c, xs, (const char(*)[24])labels, nx,
               "KV cache budget (entries per layer, log scale)", ylabel);
}

/* The full cache: its interval as a band behind the lines, its score as a
 * dashed line across the plot, with a legend entry at legend_y. Returns the
 * next legend entry's y. */
static double budget_full(FILE *f, const chart *c, const kb_pivot *p, kb_estimate full,
                          double legend_y)
{
    if (!isnan(full.ci.lo))
        fprintf(f,
                "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' class='band'><title>full "
                "cache 95 %% interval: %.2f to %.2f</title></rect>\n",
                c->left, cy(c, full.ci.hi), c->width, cy(c, full.ci.lo) - cy(c, full.ci.hi),
                full.ci.lo, full.ci.hi);
    if (p->full < 0)
        return legend_y;
    double score = kb_pivot_headline(p, (size_t)p->full), y = cy(c, score);
    fprintf(f,
            "<line x1='%.1f' x2='%.1f' y1='%.1f' y2='%.1f' class='full'><title>full cache: "
            "%.2f</title></line>\n"
            "<line x1='640' x2='664' y1='%.1f' y2='%.1f' class='full'/><text x='670' "
            "y='%.1f' class='legend'>full cache (%.2f)</text>\n",
            c->left, c->left + c->width, y, y, score, legend_y, legend_y, legend_y + 4, score);
    return legend_y + 20;
}

/* The distinct series of the points, in order of first appearance, and the
 * legend labels that name what tells each from the others. */
typedef struct series_groups {
    size_t *first; /* [s]: the first point of series s */
    size_t *of;    /* [i]: the series of point i */
    char **names;  /* [s]: its label; NULL entries (OOM) read "?" */
    size_t n;
} series_groups;

static void series_groups_free(series_groups *g)
{
    for (size_t s = 0; g->names && s < g->n; s++)
        free(g->names[s]);
    free(g->names);
    free(g->first);
    free(g->of);
}

static int series_group(const budget_points *bp, series_groups *g)
{
    memset(g, 0, sizeof *g);
    g->first = calloc(bp->np, sizeof *g->first);
    g->of = calloc(bp->np, sizeof *g->of);
    g->names = calloc(bp->np, sizeof *g->names);
    cJSON **distinct = calloc(bp->np, sizeof *distinct);
    if (!g->first || !g->of || !g->names || !distinct) {
        free(distinct);
        return -1;
    }
    cJSON *const *series = bp->series;
    for (size_t i = 0; i < bp->np; i++) {
        size_t s = 0;
        while (s < g->n && !cJSON_Compare(series[g->first[s]], series[i], true) &&
               (series[g->first[s]] || series[i]))
            s++;
        if (s == g->n) {
            g->first[g->n] = i;
            distinct[g->n++] = series[i];
        }
        g->of[i] = s;
    }
    kb_series_labels(distinct, g->n, g->names);
    free(distinct);
    return 0;
}

/* A point with its whisker and, as tooltip, the config and its numbers. */
static void budget_point(FILE *f, const chart *c, const chart_point *pt, const char *col)
{
    double x = cx(c, pt->budget);
    if (!isnan(pt->ci.lo))
        fprintf(f,
                "<path d='M%.1f,%.1fV%.1fM%.1f,%.1fh8M%.1f,%.1fh8' stroke='%s' "
                "class='whisker'/>\n",
                x, cy(c, pt->ci.lo), cy(c, pt->ci.hi), x - 4, cy(c, pt->ci.lo), x - 4,
                cy(c, pt->ci.hi), col);
    fprintf(f, "<circle cx='%.1f' cy='%.1f' r='4' fill='%s'><title>", x, cy(c, pt->score), col);
    kb_html_esc(f, pt->config);
    fprintf(f, ": %.2f", pt->score);
    if (!isnan(pt->ci.lo))
        fprintf(f, " (95 %% interval %.2f to %.2f)", pt->ci.lo, pt->ci.hi);
    fputs("</title></circle>\n", f);
}

static int cmp_points(const void *a, const void *b)
{
    const chart_point *x = a, *y = b;
    return (x->budget > y->budget) - (x->budget < y->budget);
}

/* Series s: its line through its points in budget order, then the points. */
static int budget_series(FILE *f, const chart *c, const budget_points *bp, const series_groups *g,
                         size_t s, kb_series_style style)
{
    chart_point *line = calloc(bp->np, sizeof *line);
    if (!line)
        return -1;
    size_t nl = 0;
    for (size_t j = g->first[s]; j < bp->np; j++)
        if (g->of[j] == s)
            line[nl++] = bp->pts[j];
    qsort(line, nl, sizeof *line, cmp_points);
    polyline_open(f, style);
    for (size_t j = 0; j < nl; j++)
        fprintf(f, "%.1f,%.1f ", cx(c, line[j].budget), cy(c, line[j].score));
    fputs("'/>\n", f);
    for (size_t j = 0; j < nl; j++)
        budget_point(f, c, &line[j], style.colour);
    free(line);
    return 0;
}

/* Score (row mean) against budget, one line per series, the full cache dashed. */
int kb_svg_budget_chart(FILE *f, const kb_pivot *p)
{
    budget_points bp;
    if (budget_points_collect(p, &bp) < 0) {
        budget_points_free(&bp);
        return -1;
    }
    if (bp.np == 0) {
        fputs("<p class='note'>No configs with a cache budget to plot.</p>\n", f);
        budget_points_free(&bp);
        return 0;
    }
    kb_estimate full =
        p->full >= 0 ? kb_pivot_mean(p, (size_t)p->full, kb_pivot_headline_set(p), false, true)
                     : (kb_estimate){NAN, {NAN, NAN}};
    chart c = budget_frame(&bp, full);
    fprintf(f, "<svg xmlns='http://www.w3.org/2000/svg' class='chart' width='900' height='380' "
               "viewBox='0 0 900 380' role='img' aria-label='score vs cache budget'>\n");
    budget_axes(f, &c, &bp, kb_pivot_avg_label(p));
    double legend_y = budget_full(f, &c, p, full, 30);
    series_groups g;
    int rc = series_group(&bp, &g);
    for (size_t s = 0; rc == 0 && s < g.n; s++) {
        kb_series_style style = kb_series_style_of(s);
        if ((rc = budget_series(f, &c, &bp, &g, s, style)) == 0)
            legend_y = legend_entry(f, legend_y, style, g.names[s] ? g.names[s] : "?");
    }
    fputs("</svg>\n", f);
    series_groups_free(&g);
    budget_points_free(&bp);
    return rc;
}

/* ---- score vs context length ------------------------------------------- */

/* Config ci's line and points; the whiskers of the configs sit side by
 * side around each group's x, so that they do not hide each other. */
static void length_series(FILE *f, const chart *c, const kb_pivot *p, const kb_length_view *v,
                          const double *xs, size_t ci, kb_series_style style)
{
    polyline_open(f, style);
    for (size_t k = 0; k < v->g.n; k++) {
        kb_estimate e = v->est[ci * v->g.n + k];
        if (!isnan(e.value))
            fprintf(f, "%.1f,%.1f ", xs[k], cy(c, e.value));
    }
    fputs("'/>\n", f);
    for (size_t k = 0; k < v->g.n; k++) {
        kb_estimate e = v->est[ci * v->g.n + k];
        if (isnan(e.value))
            continue;
        double x = xs[k] + ((double)ci - (double)(p->nc - 1) / 2) * 3;
        if (!isnan(e.ci.lo))
            fprintf(f,
                    "<line x1='%.1f' x2='%.1f' y1='%.1f' y2='%.1f' stroke='%s' "
                    "class='whisker'/>\n",
                    x, x, cy(c, e.ci.lo), cy(c, e.ci.hi), style.colour);
        fprintf(f, "<circle cx='%.1f' cy='%.1f' r='3.5' fill='%s'><title>", x, cy(c, e.value),
                style.colour);
        kb_html_esc(f, p->configs[ci]);
        fprintf(f, " at %s: %.2f", v->g.names[k], e.value);
        if (!isnan(e.ci.lo))
            fprintf(f, " (95 %% interval %.2f to %.2f)", e.ci.lo, e.ci.hi);
        fprintf(f, ", %zu samples</title></circle>\n", v->n[ci * v->g.n + k]);
    }
}

/* Score against length, one line per config (the full cache dashed), with
 * interval whiskers. */
void kb_svg_length_chart(FILE *f, const kb_pivot *p, const kb_length_view *v)
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
    chart_axes(f, &c, xs, (const char(*)[24])v->g.names, v->g.n, kb_length_axis(v),
               "score (mean of the tasks)");
    double legend_y = 30;
    for (size_t ci = 0; ci < p->nc; ci++) {
        kb_series_style style =
            (int)ci == p->full ? (kb_series_style){"#222", "6 4"} : kb_series_style_of(ci);
        length_series(f, &c, p, v, xs, ci, style);
        legend_y = legend_entry(f, legend_y, style, p->configs[ci]);
    }
    fputs("</svg>\n", f);
}
