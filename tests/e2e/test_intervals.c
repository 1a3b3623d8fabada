/* kvbench's intervals against an independent bootstrap.
 *
 * tests/data/bootstrap/demo is the run folder (run.json, scores.json with
 * per-sample scores) of `kvbench run configs/demo.json`;
 * tests/data/bootstrap/demo_reference.json holds intervals that
 * tests/tools/bootstrap_reference.py computed from it with another generator
 * (numpy's PCG64), another resampling scheme (multinomial weights) and 10,000
 * resamples. Both estimate the same percentile interval, so they agree up to
 * resampling noise: within 2.5 points, as the issue asks (the data are
 * steps of 1/90 = 1.1 points). */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report/report.h"
#include "report/rowstats.h"
#include "support/testutil.h"

#define TOLERANCE 2.5

static cJSON *reference(void)
{
    char *path = tu_source("tests/data/bootstrap/demo_reference.json");
    char *text = tu_slurp(path, NULL);
    cJSON *ref = cJSON_Parse(text);
    cr_assert_not_null(ref, "%s", path);
    free(text);
    free(path);
    return ref;
}

/* The fields of one CSV line (RFC 4180 quoting), in place. */
static size_t csv_split(char *line, char **fields, size_t max)
{
    size_t n = 0;
    char *w = line;
    for (char *r = line; n < max;) {
        fields[n++] = w;
        bool quoted = *r == '"';
        r += quoted;
        for (; *r; r++) {
            if (quoted && r[0] == '"' && r[1] == '"')
                *w++ = *r++;
            else if (quoted && *r == '"')
                quoted = false;
            else if (!quoted && *r == ',')
                break;
            else
                *w++ = *r;
        }
        bool more = *r == ',';
        *w++ = '\0';
        if (!more)
            break;
        r++;
    }
    return n;
}

static size_t column(char **header, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(header[i], name) == 0)
            return i;
    cr_assert_fail("scores.csv has no column %s", name);
    return 0;
}

static const cJSON *ref_row(const cJSON *ref, const char *config, const char *task)
{
    const cJSON *r;
    cJSON_ArrayForEach(r, cJSON_GetObjectItem(ref, "rows"))
    {
        if (!strcmp(cJSON_GetObjectItem(r, "config")->valuestring, config) &&
            !strcmp(cJSON_GetObjectItem(r, "task")->valuestring, task))
            return r;
    }
    return NULL;
}

/* `kvbench report` of the demo run into a new folder (caller removes and frees). */
static char *demo_report(void)
{
    char *run = tu_source("tests/data/bootstrap/demo");
    char *out = tu_mkdtemp();
    tu_result res = tu_kvbench("report", run, "--output", out, NULL);
    cr_assert_eq(res.status, 0, "%s", res.err);
    tu_result_free(&res);
    free(run);
    return out;
}

Test(intervals, demo_scores_csv_bounds_agree_with_an_independent_bootstrap)
{
    char *out = demo_report();
    char *csv = tu_slurp_in(out, "scores.csv");
    cJSON *ref = reference();

    char *save, *line = strtok_r(csv, "\n", &save);
    char *header[32];
    size_t nh = csv_split(line, header, 32);
    static const char *const names[] = {"ci_low", "ci_high", "delta_full", "delta_ci_low",
                                        "delta_ci_high"};
    size_t col[5];
    for (int k = 0; k < 5; k++)
        col[k] = column(header, nh, names[k]);
    size_t c_config = column(header, nh, "config"), c_task = column(header, nh, "task");
    int rows = 0, compared = 0;
    double worst = 0;
    while ((line = strtok_r(NULL, "\n", &save)) != NULL) {
        char *f[32];
        cr_assert_eq(csv_split(line, f, 32), nh);
        const cJSON *r = ref_row(ref, f[c_config], f[c_task]);
        cr_assert_not_null(r, "%s %s", f[c_config], f[c_task]);
        bool full = strcmp(f[c_config], "full") == 0;
        for (int k = 0; k < 5; k++) {
            const cJSON *want = cJSON_GetObjectItem(r, names[k]);
            if (full && k >= 2) { /* the full cache has no difference to itself */
                cr_assert_str_empty(f[col[k]], "%s %s", f[c_task], names[k]);
                continue;
            }
            cr_assert(*f[col[k]], "%s %s: %s is empty", f[c_config], f[c_task], names[k]);
            double got = strtod(f[col[k]], NULL);
            double tol = k == 2 ? 0.01 : TOLERANCE; /* delta_full is a plain mean */
            double d = fabs(got - want->valuedouble);
            cr_assert(d <= tol, "%s %s %s: kvbench %.2f, reference %.2f", f[c_config], f[c_task],
                      names[k], got, want->valuedouble);
            worst = k == 2 ? worst : fmax(worst, d);
            compared++;
        }
        rows++;
    }
    cr_assert_eq(rows, 10 * 3, "10 configs x 3 tasks");
    cr_assert_eq(compared, 3 * 2 + 27 * 5);
    cr_log_info("largest difference to the reference: %.2f points", worst);
    cJSON_Delete(ref);
    free(csv);
    tu_rmtree(out);
    free(out);
}

Test(intervals, demo_averages_agree_with_an_independent_bootstrap)
{
    char *dir = tu_source("tests/data/bootstrap/demo");
    kb_report_run run;
    kv_error err = {{0}};
    cr_assert_eq(kb_report_run_load(dir, &run, &err), 0, "%s", err.msg);
    cJSON *ref = reference();
    const cJSON *a;
    int n = 0;
    cJSON_ArrayForEach(a, cJSON_GetObjectItem(ref, "averages"))
    {
        const char *config = cJSON_GetObjectItem(a, "config")->valuestring;
        const kb_score_row *rows[8];
        size_t k = 0;
        for (size_t i = 0; i < run.n_rows && k < 8; i++)
            if (!strcmp(run.rows[i].config, config))
                rows[k++] = &run.rows[i];
        cr_assert_eq(k, (size_t)cJSON_GetArraySize(cJSON_GetObjectItem(a, "tasks")));
        kb_estimate e = kb_rows_mean(rows, k, false, true);
        cr_assert(fabs(e.ci.lo - cJSON_GetObjectItem(a, "ci_low")->valuedouble) <= TOLERANCE &&
                      fabs(e.ci.hi - cJSON_GetObjectItem(a, "ci_high")->valuedouble) <= TOLERANCE,
                  "%s: [%.2f, %.2f]", config, e.ci.lo, e.ci.hi);
        if (strcmp(config, "full") != 0) {
            kb_estimate d = kb_rows_mean(rows, k, true, true);
            cr_assert(fabs(d.ci.lo - cJSON_GetObjectItem(a, "delta_ci_low")->valuedouble) <=
                              TOLERANCE &&
                          fabs(d.ci.hi - cJSON_GetObjectItem(a, "delta_ci_high")->valuedouble) <=
                              TOLERANCE,
                      "%s: delta [%.2f, %.2f]", config, d.ci.lo, d.ci.hi);
        }
        n++;
    }
    cr_assert_eq(n, 10);
    cJSON_Delete(ref);
    kb_report_run_free(&run);
    free(dir);
}

/* The demo's report through the command line: "Avg" lines of averages.csv
 * against the reference, and summary.md's marks following the intervals. */
Test(intervals, demo_averages_csv_and_summary_marks)
{
    char *out = demo_report();
    char *csv = tu_slurp_in(out, "averages.csv");
    cJSON *ref = reference();
    char *save, *line = strtok_r(csv, "\n", &save);
    char *header[16];
    size_t nh = csv_split(line, header, 16);
    size_t c_config = column(header, nh, "config"), c_avg = column(header, nh, "average");
    size_t c_lo = column(header, nh, "ci_low"), c_hi = column(header, nh, "ci_high");
    size_t c_dlo = column(header, nh, "delta_ci_low"), c_dhi = column(header, nh, "delta_ci_high");
    int n = 0;
    while ((line = strtok_r(NULL, "\n", &save)) != NULL) {
        char *f[16];
        cr_assert_eq(csv_split(line, f, 16), nh);
        if (strcmp(f[c_avg], "Avg") != 0)
            continue;
        const cJSON *a;
        cJSON_ArrayForEach(a, cJSON_GetObjectItem(ref, "averages"))
        {
            if (strcmp(cJSON_GetObjectItem(a, "config")->valuestring, f[c_config]) != 0)
                continue;
            cr_assert(fabs(strtod(f[c_lo], NULL) - cJSON_GetObjectItem(a, "ci_low")->valuedouble) <=
                      TOLERANCE);
            cr_assert(fabs(strtod(f[c_hi], NULL) -
                           cJSON_GetObjectItem(a, "ci_high")->valuedouble) <= TOLERANCE);
            if (strcmp(f[c_config], "full") != 0) {
                cr_assert(fabs(strtod(f[c_dlo], NULL) -
                               cJSON_GetObjectItem(a, "delta_ci_low")->valuedouble) <= TOLERANCE);
                cr_assert(fabs(strtod(f[c_dhi], NULL) -
                               cJSON_GetObjectItem(a, "delta_ci_high")->valuedouble) <= TOLERANCE);
            }
            n++;
        }
    }
    cr_assert_eq(n, 10);
    cJSON_Delete(ref);
    free(csv);

    char *md = tu_slurp_in(out, "summary.md");
    /* StreamingLLM at 128 is far below the full cache: marked; SnapKV W=32 at 128 is
     * +0.74 with an interval around 0: not marked */
    char *row = strstr(md, "| streaming_128 | 128 |");
    cr_assert_not_null(row);
    cr_assert(strstr(row, "] ▼ |") && strstr(row, "] ▼ |") < strchr(row, '\n'), "%.200s", row);
    row = strstr(md, "| snapkv_s4_r32_i92_w32_norot | 128 |");
    cr_assert_not_null(row);
    *strchr(row, '\n') = '\0';
    cr_assert(strstr(row, "| +0.74 [-"), "%s", row);
    cr_assert_null(strstr(row, "▼"), "%s", row);
    cr_assert_null(strstr(row, "▲"), "%s", row);
    free(md);
    tu_rmtree(out);
    free(out);
}
