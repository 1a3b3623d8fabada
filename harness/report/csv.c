/* scores.csv (one line per run x config x task, every field a script
 * needs to trace a number) and averages.csv (the average columns of
 * summary.md with their intervals). The column order is part of the
 * output: scripts read these files by position as well as by name.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "matrix/matrix.h"
#include "matrix/taskset.h"
#include "report/json_get.h"
#include "report/pivot.h"
#include "report/report.h"
#include "report/report_run.h"
#include "report/rows.h"

static void csv_field(FILE *f, const char *s)
{
    if (!strpbrk(s, ",\"\n\r")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void csv_num(FILE *f, double v, const char *fmt)
{
    if (!isnan(v))
        fprintf(f, fmt, v);
}

int kb_report_write_csv(FILE *f, const kb_report_run *runs, size_t n)
{
    fputs("run,kvbench_version,model,model_hash,protocol,compute,config,config_hash,budget,params,"
          "task,"
          "category,metric,score,n,mean_prompt_tokens,mean_kept_tokens,mean_prefill_s,"
          "mean_decode_s,ci_low,ci_high,delta_full,delta_ci_low,delta_ci_high,n_0-4k,score_0-4k,"
          "n_4-8k,score_4-8k,n_8k+,score_8k+\n",
          f);
    for (size_t k = 0; k < n; k++) {
        const kb_report_run *run = &runs[k];
        for (size_t i = 0; i < run->n_rows; i++) {
            const kb_score_row *r = &run->rows[i];
            const cJSON *c = kb_report_config(run, r->config);
            const cJSON *params = cJSON_GetObjectItemCaseSensitive(c, "params");
            char *canon = params ? kb_json_canonical(params) : NULL;
            const char *fields[] = {
                run->name,     run->kvbench_version,
                run->model,    run->model_hash,
                run->protocol, run->compute,
                r->config,     kb_json_str(c, "hash") ? kb_json_str(c, "hash") : ""};
            for (size_t j = 0; j < sizeof fields / sizeof *fields; j++) {
                csv_field(f, fields[j]);
                fputc(',', f);
            }
            long budget = kb_report_budget(run, r->config);
            if (budget >= 0)
                fprintf(f, "%ld", budget);
            fputc(',', f);
            csv_field(f, canon ? canon : "");
            free(canon);
            fputc(',', f);
            csv_field(f, r->task);
            fputc(',', f);
            csv_field(f, kb_task_category(r->task));
            fputc(',', f);
            csv_field(f, r->metric);
            fprintf(f, ",%.2f,%ld,", r->score, r->n);
            csv_num(f, r->prompt_tokens, "%.1f");
            fputc(',', f);
            csv_num(f, r->kept_tokens, "%.1f");
            fputc(',', f);
            csv_num(f, r->prefill_s, "%.4f");
            fputc(',', f);
            csv_num(f, r->decode_s, "%.4f");
            /* 95 % bootstrap bounds and the paired difference to the full
             * cache (harness/report/rowstats.h); empty when not available */
            const double stats[] = {r->ci.lo, r->ci.hi, r->delta_full, r->delta_ci.lo,
                                    r->delta_ci.hi};
            for (size_t j = 0; j < sizeof stats / sizeof *stats; j++) {
                fputc(',', f);
                csv_num(f, stats[j], "%.2f");
            }
            /* LongBench-E's length buckets, as eval.py --e; empty for other tasks */
            for (int b = 0; b < KB_N_BUCKETS; b++) {
                if (!kb_row_has_buckets(r)) {
                    fputs(",,", f);
                    continue;
                }
                fprintf(f, ",%zu,", r->bucket_n[b]);
                csv_num(f, r->bucket[b], "%.2f");
            }
            fputc('\n', f);
        }
    }
    return ferror(f) ? -1 : 0;
}

/* averages.csv: the rows of summary.md's average columns, with intervals:
 * one line per run x config x average (each category, the headline, and
 * "Avg" over all tasks when that is not the headline). */
static void csv_average(FILE *f, const kb_pivot *p, size_t c, const char *name, kb_task_set set,
                        size_t n_tasks)
{
    kb_cell_est e = kb_pivot_avg_est(p, c, set);
    const kb_report_run *run = p->run;
    const char *fields[] = {run->name, run->model, run->model_hash, p->configs[c], name};
    for (size_t j = 0; j < sizeof fields / sizeof *fields; j++) {
        csv_field(f, fields[j]);
        fputc(',', f);
    }
    long budget = kb_report_budget(run, p->configs[c]);
    if (budget >= 0)
        fprintf(f, "%ld", budget);
    fprintf(f, ",%zu", n_tasks);
    const double v[] = {e.score.value, e.score.ci.lo, e.score.ci.hi,
                        e.delta.value, e.delta.ci.lo, e.delta.ci.hi};
    for (size_t j = 0; j < sizeof v / sizeof *v; j++) {
        fputc(',', f);
        csv_num(f, (int)c == p->full && j >= 3 ? NAN : v[j], "%.2f");
    }
    fputc('\n', f);
}

int kb_report_write_averages_csv(FILE *f, const kb_report_run *runs, size_t n)
{
    fputs("run,model,model_hash,config,average,budget,tasks,score,ci_low,ci_high,delta_full,"
          "delta_ci_low,delta_ci_high\n",
          f);
    for (size_t k = 0; k < n; k++) {
        kb_pivot p;
        if (kb_pivot_build(&p, &runs[k]) < 0)
            return -1;
        for (size_t c = 0; c < p.nc; c++) {
            for (int i = 0; kb_task_categories[i]; i++) {
                kb_task_set set = {kb_task_categories[i], false};
                if (kb_pivot_has_category(&p, kb_task_categories[i]))
                    csv_average(f, &p, c, kb_task_categories[i], set, kb_pivot_tasks_in(&p, set));
            }
            if (kb_pivot_has_en16(&p))
                csv_average(f, &p, c, "EN16", kb_pivot_headline_set(&p), 16);
            if (!kb_pivot_has_en16(&p) || kb_pivot_extra_avg(&p))
                csv_average(f, &p, c, "Avg", (kb_task_set){NULL, false}, p.n_scored);
        }
        kb_pivot_free(&p);
    }
    return ferror(f) ? -1 : 0;
}
