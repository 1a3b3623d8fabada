/* report.html: one self-contained page. Everything is inline (CSS, SVG, no
 * scripts, no fonts, no links out), so the file opens the same from a mail
 * attachment or an air-gapped machine; the only links are to the pages of
 * wrong answers written beside it (report/wrong.h). The charts are
 * report/charts.h and report/heatmap.h.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "matrix/matrix.h"
#include "matrix/taskset.h"
#include "report/charts.h"
#include "report/compare.h"
#include "report/heatmap.h"
#include "report/html_escape.h"
#include "report/incomplete.h"
#include "report/json_get.h"
#include "report/length_view.h"
#include "report/pivot.h"
#include "report/report.h"
#include "report/report_run.h"
#include "report/side_by_side.h"
#include "report/wrong.h"

/* A link to a page beside report.html: every byte but ASCII letters,
 * digits and "-._~/" percent-encoded, so that a run folder named "it's #2"
 * neither ends the attribute nor starts a fragment. */
static void url_path(FILE *f, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
            strchr("-._~/", *p))
            fputc(*p, f);
        else
            fprintf(f, "%%%02X", *p);
}

/* Links to the per-task pages of samples wrong against the full cache (report/wrong.h). */
static void html_wrong_links(FILE *f, const kb_report_run *run, const kb_pivot *p, bool several)
{
    bool any = false;
    for (size_t t = 0; t < p->nt; t++) {
        char *page =
            kb_wrong_has_page(run, p->tasks[t]) ? kb_wrong_page(run, p->tasks[t], several) : NULL;
        if (!page)
            continue;
        fputs(any ? " · " : "<p>Samples each config got wrong against the full cache: ", f);
        fputs("<a href='", f);
        url_path(f, page);
        fputs("'>", f);
        kb_html_esc(f, p->tasks[t]);
        fputs("</a>", f);
        any = true;
        free(page);
    }
    if (any)
        fputs("</p>\n", f);
}

static void html_num(FILE *f, double v, bool bad)
{
    if (isnan(v))
        fprintf(f, "<td class='num'>–</td>");
    else
        fprintf(f, "<td class='num%s'>%.2f</td>", bad ? " reg" : "", v);
}

/* A score cell: the score, "±half-width" small beneath, the significance
 * mark, and the exact interval in the tooltip. */
static void html_cell(FILE *f, kb_cell_est e, const char *cls, bool bad, const kb_score_row *r)
{
    if (isnan(e.score.value)) {
        fputs("<td class='num'>–</td>", f);
        return;
    }
    fprintf(f, "<td class='num%s%s%s'", *cls ? " " : "", cls, bad ? " reg" : "");
    if (!isnan(e.score.ci.lo))
        fprintf(f, " title='95 %% interval %.2f to %.2f'", e.score.ci.lo, e.score.ci.hi);
    fprintf(f, ">%.2f", e.score.value);
    if (!isnan(e.score.ci.lo))
        fprintf(f, "<span class='pm'>±%.1f</span>", kb_half_width(e.score.ci));
    const char *mark = kb_sig_mark(e.delta);
    if (*mark)
        fprintf(f, "<span class='sig'>%s</span>", mark);
    if (kb_row_incomplete(r))
        fprintf(f,
                "<span class='inc' title='the run stopped before this cell was done: %ld of "
                "its %ld samples'>%ld/%ld done</span>",
                r->n, r->n_expected, r->n, r->n_expected);
    fputs("</td>", f);
}

static void html_table(FILE *f, const kb_pivot *p, const kb_change *ch, size_t n_ch)
{
    fputs("<table><tr><th>config</th><th>budget</th>", f);
    for (size_t t = 0; t < p->nt; t++) {
        fputs("<th>", f);
        kb_html_esc(f, p->tasks[t]);
        fputs("</th>", f);
    }
    for (int k = 0; kb_task_categories[k]; k++)
        if (kb_pivot_has_category(p, kb_task_categories[k]))
            fprintf(f, "<th class='cat'>%s</th>", kb_task_categories[k]);
    if (kb_pivot_extra_avg(p))
        fprintf(f, "<th>Avg (%zu)</th>", p->n_scored);
    fprintf(f, "<th>%s</th><th>Δ full (95 %% interval)</th></tr>\n", kb_pivot_avg_label(p));
    for (size_t c = 0; c < p->nc; c++) {
        long b = kb_report_budget(p->run, p->configs[c]);
        fputs("<tr><td>", f);
        kb_html_esc(f, p->configs[c]);
        if (b >= 0)
            fprintf(f, "</td><td class='num'>%ld</td>", b);
        else
            fputs("</td><td class='num'>full</td>", f);
        for (size_t t = 0; t < p->nt; t++)
            html_cell(f, kb_pivot_task_est(p, c, t), "",
                      kb_is_regression(ch, n_ch, p->configs[c], p->tasks[t]),
                      p->cell[c * p->nt + t]);
        for (int k = 0; kb_task_categories[k]; k++)
            if (kb_pivot_has_category(p, kb_task_categories[k]))
                html_cell(f, kb_pivot_avg_est(p, c, (kb_task_set){kb_task_categories[k], false}),
                          "", false, NULL);
        if (kb_pivot_extra_avg(p))
            html_cell(f, kb_pivot_avg_est(p, c, (kb_task_set){NULL, false}), "", false, NULL);
        kb_cell_est avg = kb_pivot_avg_est(p, c, kb_pivot_headline_set(p));
        html_cell(f, avg, "avg", false, NULL);
        kb_estimate d = avg.delta;
        if ((int)c == p->full || isnan(d.value))
            fputs("<td class='num'>–</td>", f);
        else {
            fprintf(f, "<td class='num %s'>%+.2f", d.value < 0 ? "neg" : "pos", d.value);
            if (!isnan(d.ci.lo))
                fprintf(f, " <span class='pm'>[%+.2f, %+.2f]</span>", d.ci.lo, d.ci.hi);
            if (*kb_sig_mark(d))
                fprintf(f, "<span class='sig'>%s</span>", kb_sig_mark(d));
            fputs("</td>", f);
        }
        fputs("</tr>\n", f);
    }
    fputs("</table>\n<p class='note'>± is half the width of the 95 % bootstrap interval "
          "(2,000 resamples of each task's samples; averages resample within each task and "
          "weigh tasks equally, as LongBench does); ▼ / ▲: below / above the full cache with a "
          "paired 95 % interval of the difference that excludes 0. Exact bounds are in "
          "scores.csv.</p>\n",
          f);
}

static void html_compare(FILE *f, const kb_report_run *run, const kb_report_options *opt,
                         const kb_change *ch, size_t n, size_t n_partial)
{
    size_t reg = kb_count_verdict(ch, n, -1);
    fputs("<h3>Compared with ", f);
    kb_html_esc(f, opt->baseline->name);
    fprintf(f, "</h3>\n<p class='%s'>", reg ? "alarm" : "ok");
    kb_compare_notes(f, ch, n, n_partial, opt->threshold);
    fputs("</p>\n", f);
    if (strcmp(opt->baseline->model_hash, run->model_hash) != 0) {
        fputs("<p class='alarm'>The baseline used a different model (hash ", f);
        kb_html_esc(f, opt->baseline->model_hash);
        fputs(").</p>\n", f);
    }
    if (!n)
        return;
    fputs("<table><tr><th></th><th>config</th><th>task</th><th>baseline</th><th>now</th>"
          "<th>Δ</th><th>95 % interval</th><th>samples</th></tr>\n",
          f);
    for (size_t i = 0; i < n; i++) {
        static const char *const cls[] = {"reg", "noise", "gain"};
        fprintf(f, "<tr class='%s'><td>%s</td><td>", cls[ch[i].verdict + 1],
                kb_verdict_name(ch[i].verdict));
        kb_html_esc(f, ch[i].config);
        fputs("</td><td>", f);
        kb_html_esc(f, ch[i].task);
        fprintf(f,
                "</td><td class='num'>%.2f</td><td class='num'>%.2f</td><td class='num'>%+.2f"
                "</td>",
                ch[i].before, ch[i].after, ch[i].delta);
        if (ch[i].paired)
            fprintf(f, "<td class='num'>[%+.2f, %+.2f]</td><td class='num'>%zu</td></tr>\n",
                    ch[i].ci.lo, ch[i].ci.hi, ch[i].n_shared);
        else
            fputs("<td class='num'>–</td><td class='num'>–</td></tr>\n", f);
    }
    fputs("</table>\n", f);
}

static void html_params(FILE *f, const kb_report_run *run)
{
    fputs("<table><tr><th>config</th><th>hash</th><th>budget</th><th>query_aware</th>"
          "<th>parameters</th></tr>\n",
          f);
    for (const cJSON *c = run->configs->child; c; c = c->next) {
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(c, "params");
        char *canon = params && !cJSON_IsNull(params) ? kb_json_canonical(params) : NULL;
        fputs("<tr><td>", f);
        kb_html_esc(f, kb_json_str(c, "name") ? kb_json_str(c, "name") : "?");
        fputs("</td><td><code>", f);
        kb_html_esc(f, kb_json_str(c, "hash") ? kb_json_str(c, "hash") : "?");
        long b = (long)kb_json_num(c, "budget");
        if (b >= 0)
            fprintf(f, "</code></td><td class='num'>%ld</td>", b);
        else
            fputs("</code></td><td class='num'>full</td>", f);
        fprintf(f, "<td>%s</td><td><code>", kb_report_query_aware(params));
        kb_html_esc(f, canon ? canon : "full cache");
        fputs("</code></td></tr>\n", f);
        free(canon);
    }
    fputs("</table>\n", f);
}

static void html_timing(FILE *f, const kb_report_run *run)
{
    fputs("<table><tr><th>config</th><th>task</th><th>metric</th><th>n</th><th>prompt tokens"
          "</th><th>kept tokens</th><th>prefill s</th><th>decode s</th></tr>\n",
          f);
    for (size_t i = 0; i < run->n_rows; i++) {
        const kb_score_row *r = &run->rows[i];
        fputs("<tr><td>", f);
        kb_html_esc(f, r->config);
        fputs("</td><td>", f);
        kb_html_esc(f, r->task);
        fputs("</td><td>", f);
        kb_html_esc(f, r->metric);
        fprintf(f, "</td><td class='num'>%ld</td>", r->n);
        html_num(f, r->prompt_tokens, false);
        html_num(f, r->kept_tokens, false);
        html_num(f, r->prefill_s, false);
        html_num(f, r->decode_s, false);
        fputs("</tr>\n", f);
    }
    fputs("</table>\n", f);
}

static const char css[] =
    "body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:24px;"
    "color:#222;max-width:1400px}h1{margin-top:0}h2{border-bottom:2px solid #ddd;"
    "padding-bottom:4px;margin-top:36px}table{border-collapse:collapse;margin:8px 0 16px;"
    "font-size:13px}th,td{border:1px solid #ddd;padding:3px 7px}th{background:#f3f3f3}"
    "td.num{text-align:right;font-variant-numeric:tabular-nums}td.avg{font-weight:bold}"
    "td.neg{color:#b2182b}td.pos{color:#2166ac}td.reg,tr.reg td{background:#fbd3d0}"
    "tr.gain td{background:#d6e8f7}th.cat{background:#e8eef7}code{font-size:12px}"
    ".alarm{color:#b2182b;font-weight:bold}.ok{color:#1a7f37}.note{color:#666}"
    "svg.chart{display:block;margin:8px 0 20px}svg .grid{stroke:#e5e5e5}"
    "svg .frame{fill:none;stroke:#999}svg .tick{font-size:11px;fill:#444}"
    "svg .axis{font-size:12px;fill:#222}svg .legend{font-size:12px;fill:#222}"
    "svg .full{stroke:#222;stroke-width:2;stroke-dasharray:6 4}svg .cell{stroke:#fff}"
    "svg .val{font-size:11px;fill:#111}svg .regcell{fill:none;stroke:#67001f;stroke-width:3}"
    "span.pm{color:#777;font-size:11px;margin-left:3px}span.sig{margin-left:2px;font-size:10px}"
    "tr.noise td{color:#666}svg .whisker{stroke-width:1.5}svg .band{fill:#222;opacity:.08}"
    "svg .valsig{font-size:11px;fill:#111;font-weight:bold}"
    "span.inc{color:#a50026;font-size:11px;margin-left:3px}";

/* The page's head and the table of the runs (and the baseline). */
static void html_head(FILE *f, const kb_report_run *runs, size_t n, const kb_report_options *opt)
{
    fprintf(f,
            "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            "<title>kvbench report%s</title><style>%s</style></head><body>\n"
            "<h1>kvbench report%s</h1>\n<table><tr><th>run</th><th>model</th><th>model hash"
            "</th><th>protocol</th><th>compute</th><th>kvbench</th></tr>\n",
            kb_reports_unfinished(runs, n) ? " (unfinished run)" : "", css,
            kb_reports_unfinished(runs, n) ? " (unfinished run)" : "");
    for (size_t k = 0; k <= n; k++) {
        const kb_report_run *r = k < n ? &runs[k] : opt ? opt->baseline : NULL;
        if (!r)
            break;
        const char *cells[] = {r->name,     r->model,   r->model_hash,
                               r->protocol, r->compute, r->kvbench_version};
        fputs("<tr>", f);
        for (size_t i = 0; i < sizeof cells / sizeof cells[0]; i++) {
            fputs("<td>", f);
            kb_html_esc(f, cells[i]);
            if (i == 0 && k == n)
                fputs(" (baseline)", f);
            fputs("</td>", f);
        }
        fputs("</tr>\n", f);
    }
    fputs("</table>\n", f);
}

/* One run's section: charts, heatmap, links to the wrong answers, the
 * score table, the comparison with the baseline, configs, tokens and time. */
static int html_run(FILE *f, const kb_report_run *run, const kb_report_options *opt,
                    bool several_runs)
{
    kb_pivot p;
    if (kb_pivot_build(&p, run) < 0)
        return -1;
    kb_change *ch = NULL;
    size_t n_ch = 0, n_partial = 0;
    if (opt && opt->baseline &&
        kb_report_compare(run, opt->baseline, opt->threshold, &ch, &n_ch, &n_partial) < 0) {
        kb_pivot_free(&p);
        return -1;
    }
    fputs("<h2>", f);
    kb_html_esc(f, run->name);
    fputs(" — ", f);
    kb_html_esc(f, run->model);
    kb_report_unfinished_note(f, run);
    fprintf(f, "</h2>\n<h3>%s score vs KV cache budget</h3>\n", kb_pivot_avg_label(&p));
    int rc = kb_svg_budget_chart(f, &p);
    if (run->lengths) {
        fprintf(f, "<h3>Score vs %s</h3>\n", kb_length_axis(run->lengths));
        kb_svg_length_chart(f, &p, run->lengths);
    }
    fputs("<h3>Per-task scores (colour: difference to the full cache)</h3>\n", f);
    kb_svg_heatmap(f, &p, ch, n_ch);
    html_wrong_links(f, run, &p, several_runs);
    fputs("<h3>Scores (LongBench %)</h3>\n", f);
    html_table(f, &p, ch, n_ch);
    if (opt && opt->baseline)
        html_compare(f, run, opt, ch, n_ch, n_partial);
    fputs("<h3>Configs</h3>\n", f);
    html_params(f, run);
    fputs("<h3>Tokens and time (means per sample)</h3>\n", f);
    html_timing(f, run);
    free(ch);
    kb_pivot_free(&p);
    return rc;
}

int kb_report_write_html(FILE *f, const kb_report_run *runs, size_t n, const kb_report_options *opt)
{
    html_head(f, runs, n, opt);
    if (kb_report_side_by_side(f, runs, n, true) < 0)
        return -1;
    for (size_t k = 0; k < n; k++)
        if (html_run(f, &runs[k], opt, n > 1) < 0)
            return -1;
    fputs("</body></html>\n", f);
    return ferror(f) ? -1 : 0;
}
