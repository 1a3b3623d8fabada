/* The bootstrap: the generator against its reference outputs, numpy's
 * percentile rule, the coverage of the intervals on data with a known mean,
 * and paired intervals: the shortcut for rows over the same samples agrees
 * with resampling the differences, and a partial pairing uses only the shared
 * samples. Intervals against an independent resampler: test_intervals.c. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report/bootstrap.h"
#include "report/rowstats.h"

Test(bootstrap, splitmix64_gives_the_reference_outputs)
{
    /* Vigna's splitmix64.c with x = 0 */
    kb_rng r = {0};
    cr_assert_eq(kb_rng_next(&r), UINT64_C(0xe220a8397b1dcdaf));
    cr_assert_eq(kb_rng_next(&r), UINT64_C(0x6e789e6aa1b965f4));
    cr_assert_eq(kb_rng_next(&r), UINT64_C(0x06c45d188009454f));
}

Test(bootstrap, indices_are_uniform_and_in_range)
{
    kb_rng r = {42};
    long hits[7] = {0};
    for (int i = 0; i < 70000; i++) {
        uint32_t k = kb_rng_below(&r, 7);
        cr_assert_lt(k, 7);
        hits[k]++;
    }
    for (int k = 0; k < 7; k++) /* 10,000 expected, sd 93 */
        cr_assert(labs(hits[k] - 10000) < 500, "%d: %ld", k, hits[k]);
}

Test(bootstrap, percentiles_interpolate_like_numpy)
{
    const double v[] = {1, 2, 3, 4, 5};
    /* numpy.percentile([1, 2, 3, 4, 5], q): position q/100 * (n - 1) */
    cr_assert_float_eq(kb_percentile_sorted(v, 5, 2.5), 1.1, 1e-12);
    cr_assert_float_eq(kb_percentile_sorted(v, 5, 97.5), 4.9, 1e-12);
    cr_assert_float_eq(kb_percentile_sorted(v, 5, 50), 3, 1e-12);
    cr_assert_float_eq(kb_percentile_sorted(v, 5, 100), 5, 1e-12);
    cr_assert_float_eq(kb_percentile_sorted(v, 5, 0), 1, 1e-12);
    cr_assert(isnan(kb_percentile_sorted(v, 0, 50)));
}

Test(bootstrap, a_constant_has_no_spread)
{
    double x[50];
    for (int i = 0; i < 50; i++)
        x[i] = 0.25;
    double boot[KB_BOOT_RESAMPLES];
    cr_assert_eq(kb_boot_means_once(kb_boot_seed("t"), x, 50, boot), 0);
    kb_interval iv = kb_boot_interval(boot, KB_BOOT_RESAMPLES);
    cr_assert_float_eq(iv.lo, 25, 1e-9);
    cr_assert_float_eq(iv.hi, 25, 1e-9);
    cr_assert(kb_interval_excludes_zero(iv));
    cr_assert(!kb_interval_excludes_zero((kb_interval){-1, 1}));
    cr_assert(!kb_interval_excludes_zero((kb_interval){NAN, NAN}));
}

Test(bootstrap, same_data_same_interval)
{
    double x[40], a[KB_BOOT_RESAMPLES], b[KB_BOOT_RESAMPLES];
    for (int i = 0; i < 40; i++)
        x[i] = (i * 7 % 5) / 4.0;
    cr_assert_eq(kb_boot_means_once(kb_boot_seed("qasper"), x, 40, a), 0);
    cr_assert_eq(kb_boot_means_once(kb_boot_seed("qasper"), x, 40, b), 0);
    cr_assert_eq(memcmp(a, b, sizeof a), 0, "a fixed seed: reports are reproducible");
    cr_assert_eq(kb_boot_means_once(kb_boot_seed("trec"), x, 40, b), 0);
    cr_assert_neq(memcmp(a, b, sizeof a), 0, "each task its own stream");
}

/* 95 % intervals of the mean of Bernoulli(0.3) samples hold 30 about 95 % of
 * the time (the percentile bootstrap runs a little narrow at small n). */
Test(bootstrap, intervals_cover_the_true_mean)
{
    kb_rng r = {7};
    double x[200], boot[KB_BOOT_RESAMPLES];
    int trials = 300, covered = 0;
    for (int k = 0; k < trials; k++) {
        for (int i = 0; i < 200; i++)
            x[i] = (double)(kb_rng_next(&r) >> 11) * 0x1.0p-53 < 0.3;
        cr_assert_eq(kb_boot_means_once(kb_rng_next(&r), x, 200, boot), 0);
        kb_interval iv = kb_boot_interval(boot, KB_BOOT_RESAMPLES);
        covered += iv.lo <= 30 && 30 <= iv.hi;
    }
    cr_assert(covered >= 0.90 * trials && covered <= 0.985 * trials, "%d of %d", covered, trials);
}

/* A row of n samples "s0".."s{n-1}" (in order, or reversed) scoring x. */
static kb_score_row make_row(const char *config, const double *x, size_t n, bool reversed)
{
    kb_score_row r = {.config = (char *)config, .task = "qasper", .n = (long)n};
    r.samples = calloc(n, sizeof *r.samples);
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
        size_t j = reversed ? n - 1 - i : i;
        char id[32];
        snprintf(id, sizeof id, "s%zu", j);
        r.samples[i] = (kb_sample_score){{strdup(id), strlen(id)}, x[j], -1};
        sum += x[j];
    }
    r.n_samples = n;
    r.score = 100 * sum / (double)n;
    return r;
}

static void free_row(kb_score_row *r)
{
    for (size_t i = 0; i < r->n_samples; i++)
        kv_str_free(&r->samples[i].id);
    free(r->samples);
    free(r->boot);
    free(r->boot_delta);
}

Test(bootstrap, paired_shortcut_agrees_with_resampling_the_differences)
{
    enum { N = 150 };
    double full[N], evict[N];
    kb_rng r = {99};
    for (int i = 0; i < N; i++) {
        full[i] = kb_rng_below(&r, 10) < 8;                     /* 80 % right */
        evict[i] = full[i] && kb_rng_below(&r, 10) < 9 ? 1 : 0; /* loses ~8 points */
    }
    kb_score_row rows[3] = {make_row("full", full, N, false), make_row("a", evict, N, false),
                            make_row("b", evict, N, true)};
    kv_error err = {{0}};
    cr_assert_eq(kb_rows_resample(rows, 3, &err), 0, "%s", err.msg);
    /* "a" has full's order (difference of resampled scores), "b" the reverse
     * (resamples the paired differences): other draws, the same interval
     * within resampling noise, and the same difference */
    cr_assert_eq(rows[1].n_paired, N);
    cr_assert_eq(rows[2].n_paired, N);
    cr_assert_float_eq(rows[1].delta_full, rows[2].delta_full, 1e-9);
    cr_assert_lt(rows[1].delta_full, 0);
    cr_assert(fabs(rows[1].delta_ci.lo - rows[2].delta_ci.lo) < 1.5, "%f %f", rows[1].delta_ci.lo,
              rows[2].delta_ci.lo);
    cr_assert(fabs(rows[1].delta_ci.hi - rows[2].delta_ci.hi) < 1.5, "%f %f", rows[1].delta_ci.hi,
              rows[2].delta_ci.hi);
    /* paired: narrower than even one score's own interval (unpaired, the
     * difference of two such scores would be ~1.4 times wider) */
    cr_assert_lt(rows[1].delta_ci.hi - rows[1].delta_ci.lo, rows[1].ci.hi - rows[1].ci.lo);
    cr_assert(kb_interval_excludes_zero(rows[1].delta_ci));
    for (int i = 0; i < 3; i++)
        free_row(&rows[i]);
}

Test(bootstrap, pairs_only_the_shared_samples)
{
    double a[10] = {1, 1, 1, 1, 1, 0, 0, 0, 0, 0}, b[10] = {0, 0, 0, 0, 0, 1, 1, 1, 1, 1};
    kb_score_row ra = make_row("x", a, 10, false), rb = make_row("x", b, 6, false);
    kv_error err = {{0}};
    cr_assert_eq(kb_rows_resample(&ra, 1, &err), 0);
    cr_assert_eq(kb_rows_resample(&rb, 1, &err), 0);
    kb_pairing p;
    cr_assert_eq(kb_rows_pair(&ra, &rb, "qasper", NULL, &p), 0);
    /* shared: s0..s5; a - b = +1 on s0..s4, -1 on s5 */
    cr_assert_eq(p.n_shared, 6);
    cr_assert(!p.same_samples);
    cr_assert_float_eq(p.delta, 100.0 * 4 / 6, 1e-9);
    cr_assert(p.ci.lo <= p.delta && p.delta <= p.ci.hi);
    free_row(&ra);
    free_row(&rb);
}

Test(bootstrap, averages_resample_within_each_task)
{
    /* two tasks, one always right, one right half the time: the average's
     * spread comes from the second task alone, halved by the averaging */
    double ones[100], half[100];
    for (int i = 0; i < 100; i++) {
        ones[i] = 1;
        half[i] = i % 2;
    }
    kb_score_row rows[2] = {make_row("c", ones, 100, false), make_row("c", half, 100, false)};
    rows[1].task = "trec";
    kv_error err = {{0}};
    cr_assert_eq(kb_rows_resample(rows, 2, &err), 0);
    const kb_score_row *ptr[2] = {&rows[0], &rows[1]};
    kb_estimate e = kb_rows_mean(ptr, 2, false, true);
    cr_assert_float_eq(e.value, 75, 1e-9);
    double task_width = rows[1].ci.hi - rows[1].ci.lo;
    cr_assert_float_eq(e.ci.hi - e.ci.lo, task_width / 2, 1e-9);
    cr_assert(isnan(kb_rows_mean(ptr, 2, false, false).ci.lo), "no interval asked for");
    for (int i = 0; i < 2; i++)
        free_row(&rows[i]);
}

Test(bootstrap, selected_percentiles_equal_sorted_ones)
{
    /* kb_boot_interval selects order statistics instead of sorting: on data
     * with many ties (scores are steps of 1/n), the same numbers */
    kb_rng r = {5};
    double v[KB_BOOT_RESAMPLES], s[KB_BOOT_RESAMPLES];
    for (int trial = 0; trial < 20; trial++) {
        size_t n = trial < 10 ? KB_BOOT_RESAMPLES : 1 + kb_rng_below(&r, 50);
        for (size_t i = 0; i < n; i++)
            v[i] = s[i] = kb_rng_below(&r, trial % 2 ? 7 : 1000) / 3.0;
        for (size_t i = 1; i < n; i++) /* insertion sort: the obvious reference */
            for (size_t j = i; j > 0 && s[j - 1] > s[j]; j--) {
                double t = s[j];
                s[j] = s[j - 1];
                s[j - 1] = t;
            }
        kb_interval iv = kb_boot_interval(v, n);
        cr_assert_eq(iv.lo, kb_percentile_sorted(s, n, 2.5), "trial %d", trial);
        cr_assert_eq(iv.hi, kb_percentile_sorted(s, n, 97.5), "trial %d", trial);
    }
}
