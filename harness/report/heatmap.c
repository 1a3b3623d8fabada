#include "report/heatmap.h"

#include <math.h>
#include <string.h>

#include "report/compare.h"
#include "report/html_escape.h"

/* Cell size and the room above the cells for the slanted task names, px. */
static const double CELL_W = 58, CELL_H = 24, TOP = 120;

typedef struct heatmap {
    const kb_pivot *p;
    const kb_change *ch; /* against the baseline */
    size_t n_ch;
    double left;  /* x of the first column: room for the longest config name */
    double range; /* points of difference at which the colours saturate, 5 at least */
    size_t cols;  /* the tasks, then the average */
} heatmap;

static heatmap heatmap_layout(const kb_pivot *p, const kb_change *ch, size_t n_ch)
{
    heatmap h = {.p = p, .ch = ch, .n_ch = n_ch, .range = 5, .cols = p->nt + 1};
    /* room for the longest config name at ~6.5 px per character */
    size_t longest = 8;
    for (size_t c = 0; c < p->nc; c++)
        if (strlen(p->configs[c]) > longest)
            longest = strlen(p->configs[c]);
    h.left = 16 + 6.5 * (double)longest;
    for (size_t c = 0; p->full >= 0 && c < p->nc; c++)
        for (size_t t = 0; t < p->nt; t++) {
            double d = kb_pivot_score(p, c, t) - kb_pivot_score(p, (size_t)p->full, t);
            if (!isnan(d) && fabs(d) > h.range)
                h.range = fabs(d);
        }
    return h;
}

/* Diverging colour for a delta: red below the full cache, blue above. */
static void delta_colour(double d, double range, char out[8])
{
    double t = fmin(1, fabs(d) / range);
    int r, g, b;
    if (d < 0) { /* white -> #d73027 */
        r = (int)lround(255 + t * (215 - 255));
        g = (int)lround(255 + t * (48 - 255));
        b = (int)lround(255 + t * (39 - 255));
    } else { /* white -> #4575b4 */
        r = (int)lround(255 + t * (69 - 255));
        g = (int)lround(255 + t * (117 - 255));
        b = (int)lround(255 + t * (180 - 255));
    }
    snprintf(out, 8, "#%02x%02x%02x", r, g, b);
}

static const char *column_name(const heatmap *h, size_t t)
{
    return t < h->p->nt ? h->p->tasks[t] : kb_pivot_avg_label(h->p);
}

/* The column titles, slanted above the cells. */
static void heatmap_header(FILE *f, const heatmap *h)
{
    for (size_t t = 0; t < h->cols; t++) {
        double x = h->left + CELL_W * ((double)t + 0.5);
        fprintf(f, "<text x='%.1f' y='%.1f' class='tick' transform='rotate(-45 %.1f %.1f)'>", x,
                TOP - 8, x, TOP - 8);
        kb_html_esc(f, column_name(h, t));
        fputs("</text>\n", f);
    }
}

/* A cell's tooltip: the config, the column, the score with its interval
 * and the difference to the full cache with its paired interval. */
static void cell_title(FILE *f, const heatmap *h, size_t c, size_t t, kb_cell_est e)
{
    double s = e.score.value;
    kb_html_esc(f, h->p->configs[c]);
    fputs(" · ", f);
    kb_html_esc(f, column_name(h, t));
    if (isnan(s))
        fputs(": no score", f);
    else
        fprintf(f, ": %.2f", s);
    if (!isnan(e.score.ci.lo))
        fprintf(f, " [%.2f, %.2f]", e.score.ci.lo, e.score.ci.hi);
    if (!isnan(s) && !isnan(e.delta.value) && (int)c != h->p->full) {
        fprintf(f, " (%+.2f vs full", e.delta.value);
        if (!isnan(e.delta.ci.lo))
            fprintf(f, ", paired 95 %% interval [%+.2f, %+.2f]%s", e.delta.ci.lo, e.delta.ci.hi,
                    *kb_sig_mark(e.delta) ? ", excludes 0" : "");
        fputc(')', f);
    }
}

static void heatmap_cell(FILE *f, const heatmap *h, size_t c, size_t t, double y)
{
    const kb_pivot *p = h->p;
    kb_cell_est e =
        t < p->nt ? kb_pivot_task_est(p, c, t) : kb_pivot_avg_est(p, c, kb_pivot_headline_set(p));
    double s = e.score.value;
    double base = p->full < 0 ? NAN
                  : t < p->nt ? kb_pivot_score(p, (size_t)p->full, t)
                              : kb_pivot_headline(p, (size_t)p->full);
    char fill[8] = "#eeeeee";
    if (!isnan(s) && !isnan(base) && (int)c != p->full)
        delta_colour(e.delta.value, h->range, fill);
    else if (!isnan(s))
        snprintf(fill, sizeof fill, "#f7f7f7");
    double x = h->left + CELL_W * (double)t;
    fprintf(f,
            "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='%s' "
            "class='cell'><title>",
            x, y, CELL_W, CELL_H, fill);
    cell_title(f, h, c, t, e);
    fputs("</title></rect>\n", f);
    if (t < p->nt && kb_is_regression(h->ch, h->n_ch, p->configs[c], p->tasks[t]))
        fprintf(f,
                "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' class='regcell'>"
                "<title>regression against the baseline</title></rect>\n",
                x + 1.5, y + 1.5, CELL_W - 3, CELL_H - 3);
    /* a difference to the full cache beyond noise: bold, with its mark */
    const char *mark = kb_sig_mark(e.delta);
    if (!isnan(s))
        fprintf(f, "<text x='%.1f' y='%.1f' class='%s' text-anchor='middle'>%.1f%s</text>\n",
                x + CELL_W / 2, y + CELL_H / 2 + 4, *mark ? "valsig" : "val", s, mark);
}

/* The colour scale's two ends and what bold means, below the cells. */
static void heatmap_legend(FILE *f, const heatmap *h)
{
    char lo[8], hi[8];
    delta_colour(-h->range, h->range, lo);
    delta_colour(h->range, h->range, hi);
    double ly = TOP + CELL_H * (double)h->p->nc + 24;
    fprintf(f,
            "<rect x='%.1f' y='%.1f' width='14' height='14' fill='%s'/><text x='%.1f' y='%.1f' "
            "class='legend'>%.1f points below the full cache</text>\n"
            "<rect x='%.1f' y='%.1f' width='14' height='14' fill='%s'/><text x='%.1f' y='%.1f' "
            "class='legend'>%.1f above</text>\n"
            "<text x='%.1f' y='%.1f' class='legend'>bold ▼ / ▲: paired 95 %% interval of the "
            "difference excludes 0</text>\n",
            h->left, ly - 11, lo, h->left + 20, ly, h->range, h->left + 260, ly - 11, hi,
            h->left + 280, ly, h->range, h->left, ly + 20);
}

void kb_svg_heatmap(FILE *f, const kb_pivot *p, const kb_change *ch, size_t n_ch)
{
    heatmap h = heatmap_layout(p, ch, n_ch);
    double w = fmax(h.left + CELL_W * (double)h.cols + 20, h.left + 420),
           height = TOP + CELL_H * (double)p->nc + 60;
    fprintf(f,
            "<svg xmlns='http://www.w3.org/2000/svg' class='chart' width='%.0f' height='%.0f' "
            "viewBox='0 0 %.0f %.0f' role='img' aria-label='per-task heatmap'>\n",
            w, height, w, height);
    heatmap_header(f, &h);
    for (size_t c = 0; c < p->nc; c++) {
        double y = TOP + CELL_H * (double)c;
        fprintf(f, "<text x='%.1f' y='%.1f' class='tick' text-anchor='end'>", h.left - 8,
                y + CELL_H / 2 + 4);
        kb_html_esc(f, p->configs[c]);
        fputs("</text>\n", f);
        for (size_t t = 0; t < h.cols; t++)
            heatmap_cell(f, &h, c, t, y);
    }
    heatmap_legend(f, &h);
    fputs("</svg>\n", f);
}
