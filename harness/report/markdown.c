/* summary.md: per run, the score table (configs x tasks with intervals,
 * averages and the difference to the full cache), the configs' warnings,
 * scores by context length, the comparison with a baseline, the configs'
 * parameters and the tokens and times; before them, several runs side by
 * side (report/side_by_side.h).
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "matrix/matrix.h"
#include "matrix/taskset.h"
#include "report/compare.h"
#include "report/incomplete.h"
#include "report/json_get.h"
#include "report/length_view.h"
#include "report/pivot.h"
#include "report/report.h"
#include "report/report_run.h"
#include "report/side_by_side.h"

/* A table cell's text: '|' would end the cell and a newline the row. */
static void md_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '|')
            fputs("\\|", f);
        else if (*s == '\n' || *s == '\r')
            fputc(' ', f);
        else
            fputc(*s, f);
    }
}

static void md_num(FILE *f, double v)
{
    if (isnan(v))
        fputs(" – |", f);
    else
        fprintf(f, " %.2f |", v);
}

/* " 92.22 ±5.56 ▼ |": the score, half the width of its interval, the mark;
 * a task's cell of an unfinished run also the samples done ("2/5 done"). */
static void md_cell(FILE *f, kb_cell_est e, bool bold, const kb_score_row *r)
{
    if (isnan(e.score.value)) {
        fputs(" – |", f);
        return;
    }
    fprintf(f, bold ? " **%.2f**" : " %.2f", e.score.value);
    if (!isnan(e.score.ci.lo))
        fprintf(f, " ±%.2f", kb_half_width(e.score.ci));
    const char *mark = kb_sig_mark(e.delta);
    fprintf(f, "%s%s", *mark ? " " : "", mark);
    if (kb_row_incomplete(r))
        fprintf(f, " (%ld/%ld done)", r->n, r->n_expected);
    fputs(" |", f);
}

/* " -3.33 [-6.67, -1.11] ▼ |": the paired difference and its interval. */
static void md_delta_cell(FILE *f, kb_estimate d)
{
    if (isnan(d.value)) {
        fputs(" – |", f);
        return;
    }
    fprintf(f, " %+.2f", d.value);
    if (!isnan(d.ci.lo))
        fprintf(f, " [%+.2f, %+.2f]", d.ci.lo, d.ci.hi);
    const char *mark = kb_sig_mark(d);
    fprintf(f, "%s%s |", *mark ? " " : "", mark);
}

/* Names the matrix's tasks that no config has a score of, under the table. */
static void md_unscored_note(FILE *f, const kb_pivot *p)
{
    if (p->n_scored == p->nt)
        return;
    fputs("\n– : no score of", f);
    for (size_t t = 0, k = 0; t < p->nt; t++)
        if (!p->scored[t]) {
            fputs(k++ ? ", " : " ", f);
            md_text(f, p->tasks[t]);
        }
    fputs(" (an empty task file reported as missing, or not run yet); the averages leave "
          "it out.\n",
          f);
}

static void md_table(FILE *f, const kb_pivot *p)
{
    fputs("| config | budget |", f);
    for (size_t t = 0; t < p->nt; t++) {
        fputc(' ', f);
        md_text(f, p->tasks[t]);
        fputs(" |", f);
    }
    for (int c = 0; kb_task_categories[c]; c++)
        if (kb_pivot_has_category(p, kb_task_categories[c]))
            fprintf(f, " %s |", kb_task_categories[c]);
    if (kb_pivot_extra_avg(p))
        fprintf(f, " Avg (%zu) |", p->n_scored);
    fprintf(f, " **%s** | Δ full |\n|---|--:|", kb_pivot_avg_label(p));
    for (size_t t = 0; t < p->nt; t++)
        fputs("--:|", f);
    for (int c = 0; kb_task_categories[c]; c++)
        if (kb_pivot_has_category(p, kb_task_categories[c]))
            fputs("--:|", f);
    fputs(kb_pivot_extra_avg(p) ? "--:|--:|--:|\n" : "--:|--:|\n", f);
    for (size_t c = 0; c < p->nc; c++) {
        long budget = kb_report_budget(p->run, p->configs[c]);
        fputs("| ", f);
        md_text(f, p->configs[c]);
        fputs(" |", f);
        if (budget >= 0)
            fprintf(f, " %ld |", budget);
        else
            fprintf(f, " %s |", kb_budget_label(budget));
        for (size_t t = 0; t < p->nt; t++)
            md_cell(f, kb_pivot_task_est(p, c, t), false, p->cell[c * p->nt + t]);
        for (int k = 0; kb_task_categories[k]; k++)
            if (kb_pivot_has_category(p, kb_task_categories[k]))
                md_cell(f, kb_pivot_avg_est(p, c, (kb_task_set){kb_task_categories[k], false}),
                        false, NULL);
        if (kb_pivot_extra_avg(p))
            md_cell(f, kb_pivot_avg_est(p, c, (kb_task_set){NULL, false}), false, NULL);
        kb_cell_est avg = kb_pivot_avg_est(p, c, kb_pivot_headline_set(p));
        md_cell(f, avg, true, NULL);
        md_delta_cell(f, avg.delta);
        fputc('\n', f);
    }
    md_unscored_note(f, p);
}

/* The configs of the run whose parameters contradict each other, each
 * marked ⚠ with what goes wrong and the fix: their scores may be ruined
 * by the setting, not by eviction. */
static void md_warnings(FILE *f, const kb_report_run *run)
{
    for (const cJSON *c = run->configs->child; c; c = c->next) {
        const char *w = kb_config_warning(cJSON_GetObjectItemCaseSensitive(c, "params"));
        if (w)
            fprintf(f, "\n⚠ %s: %s.\n", kb_json_str(c, "name") ? kb_json_str(c, "name") : "?", w);
    }
}

static void md_params(FILE *f, const kb_report_run *run)
{
    fputs("\n| config | hash | budget | query_aware | parameters |\n|---|---|--:|---|---|\n", f);
    for (const cJSON *c = run->configs->child; c; c = c->next) {
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(c, "params");
        char *canon = params && !cJSON_IsNull(params) ? kb_json_canonical(params) : NULL;
        long budget = (long)kb_json_num(c, "budget");
        fprintf(f, "| %s%s | `%s` | ", kb_json_str(c, "name") ? kb_json_str(c, "name") : "?",
                kb_config_warning(params) ? " ⚠" : "",
                kb_json_str(c, "hash") ? kb_json_str(c, "hash") : "?");
        if (budget >= 0)
            fprintf(f, "%ld", budget);
        else
            fputs(kb_budget_label(budget), f);
        fprintf(f, " | %s | `%s` |\n", kb_report_query_aware(params), canon ? canon : "full cache");
        free(canon);
    }
}

static void md_timing(FILE *f, const kb_report_run *run)
{
    fputs("\n| config | task | n | prompt tokens | kept tokens | prefill s | decode s |\n"
          "|---|---|--:|--:|--:|--:|--:|\n",
          f);
    for (size_t i = 0; i < run->n_rows; i++) {
        const kb_score_row *r = &run->rows[i];
        fputs("| ", f);
        md_text(f, r->config);
        fputs(" | ", f);
        md_text(f, r->task);
        fprintf(f, " | %ld |", r->n);
        md_num(f, r->prompt_tokens);
        md_num(f, r->kept_tokens);
        md_num(f, r->prefill_s);
        md_num(f, r->decode_s);
        fputc('\n', f);
    }
}

static void md_compare(FILE *f, const kb_report_run *run, const kb_report_options *opt)
{
    const kb_report_run *b = opt->baseline;
    kb_change *ch = NULL;
    size_t n = 0, n_partial = 0;
    if (kb_report_compare(run, b, opt->threshold, &ch, &n, &n_partial) < 0)
        return;
    fprintf(f, "\n### Compared with %s\n\n", b->name);
    if (strcmp(b->model_hash, run->model_hash) != 0)
        fprintf(f, "Note: the baseline used a different model (hash `%s`).\n\n", b->model_hash);
    kb_compare_notes(f, ch, n, n_partial, opt->threshold);
    fputc('\n', f);
    if (n) {
        fputs("\n| | config | task | baseline | now | Δ | 95 % interval | samples |\n"
              "|---|---|---|--:|--:|--:|--:|--:|\n",
              f);
        for (size_t i = 0; i < n; i++) {
            fprintf(f, "| %s%s%s | ", ch[i].verdict < 0 ? "**" : "", kb_verdict_name(ch[i].verdict),
                    ch[i].verdict < 0 ? "**" : "");
            md_text(f, ch[i].config);
            fputs(" | ", f);
            md_text(f, ch[i].task);
            fprintf(f, " | %.2f | %.2f | %+.2f |", ch[i].before, ch[i].after, ch[i].delta);
            if (ch[i].paired)
                fprintf(f, " [%+.2f, %+.2f] | %zu |\n", ch[i].ci.lo, ch[i].ci.hi, ch[i].n_shared);
            else
                fputs(" – | – |\n", f);
        }
    }
    free(ch);
}

static void md_lengths(FILE *f, const kb_pivot *p, const kb_length_view *v)
{
    fprintf(f, "\n### Scores by %s\n\n| config |", kb_length_axis(v));
    for (size_t k = 0; k < v->g.n; k++)
        fprintf(f, " %s |", v->g.names[k]);
    fputs("\n|---|", f);
    for (size_t k = 0; k < v->g.n; k++)
        fputs("--:|", f);
    fputc('\n', f);
    for (size_t c = 0; c < p->nc; c++) {
        fputs("| ", f);
        md_text(f, p->configs[c]);
        fputs(" |", f);
        for (size_t k = 0; k < v->g.n; k++) {
            kb_estimate e = v->est[c * v->g.n + k];
            md_cell(f, (kb_cell_est){e, {NAN, {NAN, NAN}}}, false, NULL);
        }
        fputc('\n', f);
    }
}

int kb_report_write_table(FILE *f, const kb_report_run *run)
{
    kb_pivot p;
    if (kb_pivot_build(&p, run) < 0)
        return -1;
    md_table(f, &p);
    kb_pivot_free(&p);
    return ferror(f) ? -1 : 0;
}

int kb_report_write_markdown(FILE *f, const kb_report_run *runs, size_t n,
                             const kb_report_options *opt)
{
    fprintf(f,
            "# kvbench report%s\n\n| run | model | model hash | protocol | compute | kvbench |\n"
            "|---|---|---|---|---|---|\n",
            kb_reports_unfinished(runs, n) ? " (unfinished run)" : "");
    for (size_t k = 0; k < n; k++)
        fprintf(f, "| %s | %s | `%s` | %s | %s | %s |\n", runs[k].name, runs[k].model,
                runs[k].model_hash, runs[k].protocol, runs[k].compute, runs[k].kvbench_version);
    if (opt && opt->baseline)
        fprintf(f, "| %s (baseline) | %s | `%s` | %s | %s | %s |\n", opt->baseline->name,
                opt->baseline->model, opt->baseline->model_hash, opt->baseline->protocol,
                opt->baseline->compute, opt->baseline->kvbench_version);
    if (kb_report_side_by_side(f, runs, n, false) < 0)
        return -1;
    for (size_t k = 0; k < n; k++) {
        kb_pivot p;
        if (kb_pivot_build(&p, &runs[k]) < 0)
            return -1;
        fprintf(f, "\n## %s — %s", runs[k].name, runs[k].model);
        kb_report_unfinished_note(f, &runs[k]);
        fprintf(f,
                "\n\nScores (LongBench %%); averages are plain means of the task "
                "scores; Δ full is the %s difference to the full-cache row, paired on the "
                "samples both scored. ± is half the width of the 95 %% bootstrap interval "
                "(%d resamples of each task's samples, fixed seed; averages resample within "
                "each task); ▼ / ▲ mark a score below / above the full cache whose paired "
                "95 %% interval of the difference excludes 0. Exact bounds are in "
                "scores.csv.\n\n",
                kb_pivot_avg_label(&p), KB_BOOT_RESAMPLES);
        md_table(f, &p);
        md_warnings(f, &runs[k]);
        if (runs[k].lengths)
            md_lengths(f, &p, runs[k].lengths);
        if (opt && opt->baseline)
            md_compare(f, &runs[k], opt);
        fputs("\n### Configs\n", f);
        md_params(f, &runs[k]);
        fputs("\n### Tokens and time (means per sample)\n", f);
        md_timing(f, &runs[k]);
        kb_pivot_free(&p);
    }
    return ferror(f) ? -1 : 0;
}
