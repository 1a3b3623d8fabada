#include "report/bootstrap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "matrix/hash.h"
#include "util/vec.h"

uint64_t kb_rng_next(kb_rng *r)
{
    uint64_t z = (r->state += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

uint32_t kb_rng_below(kb_rng *r, uint32_t n)
{
    return (uint32_t)(((kb_rng_next(r) >> 32) * (uint64_t)n) >> 32);
}

uint64_t kb_boot_seed(const char *name)
{
    return KB_BOOT_SEED ^ kb_hash_bytes(name, strlen(name));
}

static void draw(uint64_t seed, uint32_t n, uint32_t *idx)
{
    kb_rng r = {seed};
    for (size_t i = 0; i < (size_t)KB_BOOT_RESAMPLES * n; i++)
        idx[i] = kb_rng_below(&r, n);
}

int kb_boot_plan_init(kb_boot_plan *p, uint64_t seed, size_t n)
{
    memset(p, 0, sizeof *p);
    if (n == 0 || n >= UINT32_MAX)
        return -1;
    p->idx = malloc((size_t)KB_BOOT_RESAMPLES * n * sizeof *p->idx);
    if (!p->idx)
        return -1;
    p->seed = seed;
    p->n = (uint32_t)n;
    draw(seed, p->n, p->idx);
    return 0;
}

void kb_boot_plan_free(kb_boot_plan *p)
{
    free(p->idx);
    memset(p, 0, sizeof *p);
}

const kb_boot_plan *kb_boot_plans_get(kb_boot_plans *ps, uint64_t seed, size_t n)
{
    for (size_t i = 0; i < ps->n; i++)
        if (ps->v[i].seed == seed && ps->v[i].n == n)
            return &ps->v[i];
    if (KV_VEC_RESERVE(ps->v, ps->cap, ps->n + 1, 16) < 0)
        return NULL;
    if (kb_boot_plan_init(&ps->v[ps->n], seed, n) < 0)
        return NULL;
    return &ps->v[ps->n++];
}

void kb_boot_plans_free(kb_boot_plans *ps)
{
    for (size_t i = 0; i < ps->n; i++)
        kb_boot_plan_free(&ps->v[i]);
    free(ps->v);
    memset(ps, 0, sizeof *ps);
}

void kb_boot_means(const kb_boot_plan *p, const double *x, double *out)
{
    const uint32_t *idx = p->idx;
    for (size_t b = 0; b < KB_BOOT_RESAMPLES; b++, idx += p->n) {
        /* four running sums: one would wait on the adder at every sample */
        double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        uint32_t j = 0;
        for (; j + 4 <= p->n; j += 4) {
            s0 += x[idx[j]];
            s1 += x[idx[j + 1]];
            s2 += x[idx[j + 2]];
            s3 += x[idx[j + 3]];
        }
        for (; j < p->n; j++)
            s0 += x[idx[j]];
        out[b] = 100.0 * ((s0 + s1) + (s2 + s3)) / p->n;
    }
}

int kb_boot_means_once(uint64_t seed, const double *x, size_t n, double *out)
{
    kb_boot_plan p;
    if (kb_boot_plan_init(&p, seed, n) < 0)
        return -1;
    kb_boot_means(&p, x, out);
    kb_boot_plan_free(&p);
    return 0;
}

double kb_percentile_sorted(const double *v, size_t n, double q)
{
    if (n == 0)
        return NAN;
    double pos = q / 100.0 * (double)(n - 1);
    size_t i = (size_t)floor(pos);
    if (i + 1 >= n)
        return v[n - 1];
    double frac = pos - (double)i;
    return v[i] + (v[i + 1] - v[i]) * frac;
}

/* Moves the k-th smallest of v[0..n) to v[k], smaller ones before it and
 * larger ones after (Hoare's selection; median-of-three pivots). */
static void select_kth(double *v, size_t n, size_t k)
{
    size_t lo = 0, hi = n - 1;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        double a = v[lo], b = v[mid], c = v[hi];
        double pivot = a < b ? (b < c ? b : a < c ? c : a) : (a < c ? a : b < c ? c : b);
        size_t i = lo, j = hi;
        while (i <= j) {
            while (v[i] < pivot)
                i++;
            while (v[j] > pivot)
                j--;
            if (i <= j) {
                double t = v[i];
                v[i] = v[j];
                v[j] = t;
                i++;
                if (j == 0)
                    break;
                j--;
            }
        }
        if (k <= j)
            hi = j;
        else if (k >= i)
            lo = i;
        else
            return;
    }
}

/* numpy.percentile(v, q), linear, selecting instead of sorting. */
static double percentile_select(double *v, size_t n, double q)
{
    double pos = q / 100.0 * (double)(n - 1);
    size_t i = (size_t)floor(pos);
    select_kth(v, n, i);
    if (i + 1 >= n)
        return v[i];
    /* the next order statistic is the smallest of what lies above v[i] */
    double next = v[i + 1];
    for (size_t j = i + 2; j < n; j++)
        if (v[j] < next)
            next = v[j];
    return v[i] + (next - v[i]) * (pos - (double)i);
}

kb_interval kb_boot_interval(double *v, size_t n)
{
    if (n == 0)
        return (kb_interval){NAN, NAN};
    double lo = percentile_select(v, n, KB_BOOT_TAIL);
    double hi = percentile_select(v, n, 100 - KB_BOOT_TAIL);
    return (kb_interval){lo, hi};
}

bool kb_interval_excludes_zero(kb_interval iv)
{
    return iv.lo > 0 || iv.hi < 0;
}
