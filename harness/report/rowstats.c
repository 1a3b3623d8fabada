#include "report/rowstats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { B = KB_BOOT_RESAMPLES };

static kb_interval interval_of(const double *boot)
{
    double *tmp = boot ? malloc(B * sizeof *tmp) : NULL;
    if (!tmp)
        return (kb_interval){NAN, NAN};
    memcpy(tmp, boot, B * sizeof *tmp);
    kb_interval iv = kb_boot_interval(tmp, B);
    free(tmp);
    return iv;
}

static bool same_order(const kb_score_row *a, const kb_score_row *b)
{
    if (a->n_samples != b->n_samples)
        return false;
    for (size_t i = 0; i < a->n_samples; i++)
        if (!kv_str_eq(a->samples[i].id, b->samples[i].id))
            return false;
    return true;
}

static int cmp_sample_id(const void *x, const void *y)
{
    return kv_str_cmp((*(const kb_sample_score *const *)x)->id,
                      (*(const kb_sample_score *const *)y)->id);
}

static void fill_nan(double *v)
{
    for (size_t i = 0; v && i < B; i++)
        v[i] = NAN;
}

/* The shared samples in a's order, as differences a - b (0..1 scale). */
static int shared_diffs(const kb_score_row *a, const kb_score_row *b, double **diffs, size_t *n)
{
    *diffs = NULL;
    *n = 0;
    const kb_sample_score **byid = malloc((b->n_samples + 1) * sizeof *byid);
    double *d = malloc((a->n_samples + 1) * sizeof *d);
    if (!byid || !d) {
        free(byid);
        free(d);
        return -1;
    }
    for (size_t i = 0; i < b->n_samples; i++)
        byid[i] = &b->samples[i];
    qsort(byid, b->n_samples, sizeof *byid, cmp_sample_id);
    for (size_t i = 0; i < a->n_samples; i++) {
        const kb_sample_score *key = &a->samples[i];
        const kb_sample_score **hit =
            bsearch(&key, byid, b->n_samples, sizeof *byid, cmp_sample_id);
        if (hit)
            d[(*n)++] = a->samples[i].score - (*hit)->score;
    }
    free(byid);
    *diffs = d;
    return 0;
}

int kb_rows_pair(const kb_score_row *a, const kb_score_row *b, const char *task, double *boot,
                 kb_pairing *out)
{
    *out = (kb_pairing){NAN, {NAN, NAN}, 0, false};
    fill_nan(boot);
    if (!a->n_samples || !b->n_samples) {
        /* rows from before per-sample scores: the scores, unpaired */
        out->delta = a->score - b->score;
        return 0;
    }
    if (same_order(a, b)) {
        /* same indices drawn for both (one stream per task): difference the
         * resampled scores, no second resampling needed */
        out->delta = a->score - b->score;
        out->n_shared = a->n_samples;
        out->same_samples = true;
        if (a->boot && b->boot) {
            double *v = boot ? boot : malloc(B * sizeof *v);
            if (!v)
                return -1;
            for (size_t i = 0; i < B; i++)
                v[i] = a->boot[i] - b->boot[i];
            out->ci = interval_of(v);
            if (!boot)
                free(v);
        }
        return 0;
    }
    double *d;
    size_t n;
    if (shared_diffs(a, b, &d, &n) < 0)
        return -1;
    out->n_shared = n;
    out->same_samples = n == a->n_samples && n == b->n_samples;
    if (n) {
        double sum = 0;
        for (size_t i = 0; i < n; i++)
            sum += d[i];
        out->delta = 100.0 * sum / (double)n;
        double *v = boot ? boot : malloc(B * sizeof *v);
        if (!v || kb_boot_means_once(kb_boot_seed(task), d, n, v) < 0) {
            if (!boot)
                free(v);
            free(d);
            return -1;
        }
        out->ci = interval_of(v);
        if (!boot)
            free(v);
    }
    free(d);
    return 0;
}

static const kb_score_row *full_row(const kb_score_row *rows, size_t n, const char *task)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(rows[i].config, "full") == 0 && strcmp(rows[i].task, task) == 0)
            return &rows[i];
    return NULL;
}

int kb_rows_resample(kb_score_row *rows, size_t n, kv_error *err)
{
    kb_boot_plans ps = {0};
    double *x = NULL;
    size_t x_cap = 0;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        kb_score_row *r = &rows[i];
        r->ci = r->delta_ci = (kb_interval){NAN, NAN};
        r->delta_full = NAN;
        r->n_paired = 0;
        if (!r->n_samples)
            continue;
        if (r->n_samples > x_cap) {
            free(x);
            x_cap = r->n_samples;
            x = malloc(x_cap * sizeof *x);
        }
        const kb_boot_plan *p =
            x ? kb_boot_plans_get(&ps, kb_boot_seed(r->task), r->n_samples) : NULL;
        r->boot = p ? malloc(B * sizeof *r->boot) : NULL;
        if (!r->boot) {
            rc = kv_fail(err, "out of memory");
            break;
        }
        for (size_t j = 0; j < r->n_samples; j++)
            x[j] = r->samples[j].score;
        kb_boot_means(p, x, r->boot);
        r->ci = interval_of(r->boot);
    }
    for (size_t i = 0; rc == 0 && i < n; i++) {
        kb_score_row *r = &rows[i];
        const kb_score_row *f = full_row(rows, n, r->task);
        if (!f || f == r)
            continue;
        bool resampled = r->boot && f->boot;
        r->boot_delta = resampled ? malloc(B * sizeof *r->boot_delta) : NULL;
        kb_pairing pr;
        if ((resampled && !r->boot_delta) || kb_rows_pair(r, f, r->task, r->boot_delta, &pr) < 0) {
            rc = kv_fail(err, "out of memory");
            break;
        }
        if (isnan(pr.ci.lo)) { /* nothing resampled: no vector for averages either */
            free(r->boot_delta);
            r->boot_delta = NULL;
        }
        r->delta_full = pr.delta;
        r->delta_ci = pr.ci;
        r->n_paired = pr.n_shared;
    }
    free(x);
    kb_boot_plans_free(&ps);
    return rc;
}

kb_estimate kb_rows_mean(const kb_score_row *const *rows, size_t n, bool delta, bool with_ci)
{
    kb_estimate e = {NAN, {NAN, NAN}};
    if (n == 0)
        return e;
    double sum = 0;
    bool resampled = true;
    for (size_t t = 0; t < n; t++) {
        sum += delta ? rows[t]->delta_full : rows[t]->score;
        resampled &= (delta ? rows[t]->boot_delta : rows[t]->boot) != NULL;
    }
    e.value = sum / (double)n;
    double *v = resampled && with_ci ? calloc(B, sizeof *v) : NULL;
    if (!v)
        return e;
    for (size_t t = 0; t < n; t++) {
        const double *bt = delta ? rows[t]->boot_delta : rows[t]->boot;
        for (size_t b = 0; b < B; b++)
            v[b] += bt[b];
    }
    for (size_t b = 0; b < B; b++)
        v[b] /= (double)n;
    e.ci = kb_boot_interval(v, B);
    free(v);
    return e;
}
