#include "bootstrap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"

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

void kb_boot_means(const kb_boot_plan *p, const double *x, double *out)
{
    const uint32_t *idx = p->idx;
    for (size_t b = 0; b < KB_BOOT_RESAMPLES; b++, idx += p->n) {
        double sum = 0;
        for (uint32_t j = 0; j < p->n; j++)
            sum += x[idx[j]];
        out[b] = 100.0 * sum / p->n;
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

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

kb_interval kb_boot_interval(double *v, size_t n)
{
    if (n == 0)
        return (kb_interval){NAN, NAN};
    qsort(v, n, sizeof *v, cmp_double);
    double tail = 50.0 * (1.0 - KB_BOOT_LEVEL);
    return (kb_interval){kb_percentile_sorted(v, n, tail), kb_percentile_sorted(v, n, 100 - tail)};
}

bool kb_interval_excludes_zero(kb_interval iv)
{
    return iv.lo > 0 || iv.hi < 0;
}
