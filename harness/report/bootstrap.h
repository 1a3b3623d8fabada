/* Percentile bootstrap intervals for LongBench scores.
 *
 * A task's score is the mean of its per-sample scores, so its sampling noise
 * is estimated by resampling the samples with replacement: KB_BOOT_RESAMPLES
 * resampled means, and the 2.5th and 97.5th percentiles of them (numpy's
 * default "linear" percentile) bound the 95 % interval. A paired difference
 * (config - full cache, new run - old run) resamples sample indices and
 * recomputes the mean difference on the same samples.
 *
 * Reproducibility: the random numbers come from SplitMix64 (Steele, Lea and
 * Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014; the
 * generator below is its whole definition), seeded from KB_BOOT_SEED and the
 * task's name only. So the same data give the same interval on every machine
 * and in every report, whatever else the report holds, and every config of a
 * task is resampled with the same indices: when two rows cover the same
 * samples in the same order, the resampled means of their difference are the
 * differences of their resampled means, which is how reports get paired
 * intervals for free.
 */
#ifndef KB_BOOTSTRAP_H
#define KB_BOOTSTRAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { KB_BOOT_RESAMPLES = 2000 };
#define KB_BOOT_SEED UINT64_C(0x6b7662656e636821) /* "kvbench!" */
#define KB_BOOT_TAIL 2.5                          /* percent cut from each end: a 95 % interval */

/* SplitMix64: state += golden gamma, then a 64-bit finaliser. */
typedef struct kb_rng {
    uint64_t state;
} kb_rng;

uint64_t kb_rng_next(kb_rng *r);
/* Uniform in [0, n) by Lemire's multiply-shift (bias below n / 2^64). */
uint32_t kb_rng_below(kb_rng *r, uint32_t n);

/* The seed of a task's resampling stream: KB_BOOT_SEED mixed with the name. */
uint64_t kb_boot_seed(const char *name);

/* The resample indices of a stream for n samples: B rows of n indices, drawn
 * once per (task, n) and shared by every row of that task. */
typedef struct kb_boot_plan {
    uint64_t seed;
    uint32_t n;
    uint32_t *idx; /* [KB_BOOT_RESAMPLES * n] */
} kb_boot_plan;

/* 0, or -1 on OOM (or n == 0 / n >= 2^32). */
int kb_boot_plan_init(kb_boot_plan *p, uint64_t seed, size_t n);
void kb_boot_plan_free(kb_boot_plan *p);

/* Plans by (seed, n), drawn once and reused: every row of a task, every
 * length group of a task. */
typedef struct kb_boot_plans {
    kb_boot_plan *v;
    size_t n, cap;
} kb_boot_plans;

/* The plan for (seed, n), drawn on first use; NULL on OOM. Valid until the
 * next call. */
const kb_boot_plan *kb_boot_plans_get(kb_boot_plans *ps, uint64_t seed, size_t n);
void kb_boot_plans_free(kb_boot_plans *ps);

/* out[b] = 100 * mean of x over resample b (x in 0..1, out in percent). */
void kb_boot_means(const kb_boot_plan *p, const double *x, double *out);

/* The same without a plan, for one-off resampling (a pairing on the samples
 * two runs share): draws the indices from `seed` as the plan would. */
int kb_boot_means_once(uint64_t seed, const double *x, size_t n, double *out);

typedef struct kb_interval {
    double lo, hi; /* percent; NaN when there is nothing to resample */
} kb_interval;

/* numpy.percentile(v, q) with linear interpolation, v sorted ascending. */
double kb_percentile_sorted(const double *v, size_t n, double q);

/* The central 95 % interval (KB_BOOT_TAIL off each end) of n resampled values (reordered in
 * place: only the four order statistics needed are selected). */
kb_interval kb_boot_interval(double *v, size_t n);

/* The interval lies wholly above or below 0 (a difference "significant at
 * the 5 % level"). False for NaN bounds. */
bool kb_interval_excludes_zero(kb_interval iv);

#endif
