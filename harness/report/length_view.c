#include "report/length_view.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "report/bootstrap.h"
#include "report/pivot.h"

static void length_view_free(kb_length_view *v)
{
    free(v->est);
    free(v->n);
    memset(v, 0, sizeof *v);
}

/* One (config, group): resamples each task's samples of the group. */
static int length_cell(const kb_pivot *p, const kb_length_view *v, size_t c, int k,
                       kb_boot_plans *plans, double *x, double *boot, double *sum, kb_estimate *out,
                       size_t *n_out)
{
    size_t n_tasks = 0;
    double total = 0;
    memset(sum, 0, KB_BOOT_RESAMPLES * sizeof *sum);
    *n_out = 0;
    for (size_t t = 0; t < p->nt; t++) {
        const kb_score_row *r = p->cell[c * p->nt + t];
        size_t m = 0;
        for (size_t i = 0; r && i < r->n_samples; i++)
            if (kb_length_group_of(&v->g, r->samples[i].length) == k)
                x[m++] = r->samples[i].score;
        if (!m)
            continue;
        /* a stream per (task, group): the group's samples of every config
         * are resampled alike, as whole rows are */
        uint64_t seed = kb_boot_seed(r->task) ^ (UINT64_C(0x9e3779b97f4a7c15) * (uint64_t)(k + 1));
        const kb_boot_plan *plan = kb_boot_plans_get(plans, seed, m);
        if (!plan)
            return -1;
        kb_boot_means(plan, x, boot);
        double mean = 0;
        for (size_t i = 0; i < m; i++)
            mean += x[i];
        total += 100.0 * mean / (double)m;
        for (size_t b = 0; b < KB_BOOT_RESAMPLES; b++)
            sum[b] += boot[b];
        n_tasks++;
        *n_out += m;
    }
    *out = (kb_estimate){NAN, {NAN, NAN}};
    if (!n_tasks)
        return 0;
    for (size_t b = 0; b < KB_BOOT_RESAMPLES; b++)
        sum[b] /= (double)n_tasks;
    *out = (kb_estimate){total / (double)n_tasks, kb_boot_interval(sum, KB_BOOT_RESAMPLES)};
    return 0;
}

/* 0 with v->g.n == 0 when the run has no per-length view; -1 on OOM. */
static int length_view_build(const kb_pivot *p, kb_length_view *v)
{
    memset(v, 0, sizeof *v);
    size_t n_len = 0, max_n = 0;
    for (size_t i = 0; i < p->run->n_rows; i++) {
        n_len += p->run->rows[i].n_samples;
        if (p->run->rows[i].n_samples > max_n)
            max_n = p->run->rows[i].n_samples;
    }
    long *lengths = malloc((n_len + 1) * sizeof *lengths);
    if (!lengths)
        return -1;
    n_len = 0;
    for (size_t i = 0; i < p->run->n_rows; i++)
        for (size_t j = 0; j < p->run->rows[i].n_samples; j++)
            lengths[n_len++] = p->run->rows[i].samples[j].length;
    kb_length_groups_choose(&v->g, lengths, n_len);
    free(lengths);
    if (v->g.n == 0)
        return 0;
    v->est = calloc(p->nc * v->g.n, sizeof *v->est);
    v->n = calloc(p->nc * v->g.n, sizeof *v->n);
    double *x = malloc((max_n + 1) * sizeof *x);
    double *boot = malloc(KB_BOOT_RESAMPLES * sizeof *boot);
    double *sum = malloc(KB_BOOT_RESAMPLES * sizeof *sum);
    kb_boot_plans plans = {0};
    int rc = v->est && v->n && x && boot && sum ? 0 : -1;
    for (size_t c = 0; rc == 0 && c < p->nc; c++)
        for (size_t k = 0; rc == 0 && k < v->g.n; k++)
            rc = length_cell(p, v, c, (int)k, &plans, x, boot, sum, &v->est[c * v->g.n + k],
                             &v->n[c * v->g.n + k]);
    kb_boot_plans_free(&plans);
    free(x);
    free(boot);
    free(sum);
    if (rc < 0)
        length_view_free(v);
    return rc;
}

/* Built once, for every writer: it resamples as much as the rows do. */
int kb_length_view_attach(kb_report_run *run)
{
    kb_pivot p;
    kb_length_view *v = calloc(1, sizeof *v);
    if (!v || kb_pivot_build(&p, run) < 0) {
        free(v);
        return -1;
    }
    int rc = length_view_build(&p, v);
    kb_pivot_free(&p);
    if (rc < 0 || v->g.n == 0) {
        free(v);
        return rc;
    }
    run->lengths = v;
    return 0;
}

const char *kb_length_axis(const kb_length_view *v)
{
    return v->g.buckets ? "context length (LongBench-E buckets, words or characters)"
                        : "context length (nearest multiple of 512)";
}

void kb_length_view_detach(kb_report_run *run)
{
    if (run->lengths) {
        length_view_free(run->lengths);
        free(run->lengths);
        run->lengths = NULL;
    }
}
