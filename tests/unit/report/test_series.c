/* Chart series: styles stay distinct past ten series (colours, then dash
 * patterns), and legends name the parameters that tell series apart. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report/report.h"
#include "report/series.h"
#include "support/testutil.h"

Test(series, forty_series_have_forty_styles_and_ten_colours)
{
    for (size_t i = 0; i < KB_SERIES_STYLES; i++)
        for (size_t j = 0; j < i; j++) {
            kb_series_style a = kb_series_style_of(i), b = kb_series_style_of(j);
            cr_assert(strcmp(a.colour, b.colour) != 0 || strcmp(a.dash, b.dash) != 0,
                      "series %zu and %zu look alike", i, j);
            if (i < KB_SERIES_COLOURS)
                cr_assert(strcmp(a.colour, b.colour) != 0 && !*a.dash,
                          "the first ten are ten solid colours");
        }
}

static char *label_of(const char *const *configs, size_t n, size_t which)
{
    cJSON *params[8];
    char *labels[8];
    cr_assert_leq(n, 8);
    for (size_t i = 0; i < n; i++) {
        cJSON *c = configs[i] ? cJSON_Parse(configs[i]) : NULL;
        params[i] = kb_series_params(c);
        cr_assert(!configs[i] || params[i], "%s", configs[i]);
        cJSON_Delete(c);
    }
    kb_series_labels(params, n, labels);
    char *want = strdup(labels[which]);
    for (size_t i = 0; i < n; i++) {
        free(labels[i]);
        cJSON_Delete(params[i]);
    }
    return want;
}

static void expect_labels(const char *const *configs, size_t n, const char *const *want)
{
    for (size_t i = 0; i < n; i++) {
        char *got = label_of(configs, n, i);
        cr_assert_str_eq(got, want[i]);
        free(got);
    }
}

Test(series, legends_name_what_differs_sizes_excluded)
{
    const char *const windows[] = {
        "{\"algorithm\": \"snapkv\", \"window_size\": 8, \"intermediate_size\": 92}",
        "{\"algorithm\": \"snapkv\", \"window_size\": 32, \"intermediate_size\": 220}",
        "{\"algorithm\": \"h2o\", \"intermediate_size\": 92}", NULL};
    expect_labels(windows, 4,
                  (const char *const[]){"snapkv window_size=8", "snapkv window_size=32", "h2o",
                                        "full cache"});
    const char *const refiners[] = {
        "{\"algorithm\": \"snapkv\"}",
        "{\"algorithm\": \"snapkv\", \"refined_algorithm\": \"kvcrush\", \"refined_size\": 64}",
        "{\"algorithm\": \"snapkv\", \"strategy\": \"per_head\"}"};
    expect_labels(refiners, 3,
                  (const char *const[]){"snapkv strategy=per_token",
                                        "snapkv strategy=per_token refined_algorithm=kvcrush "
                                        "kvcrush_anchor=alternate",
                                        "snapkv strategy=per_head"});
}

/* A run of configs (name, params) with one qasper score each, in memory. */
static void add_config(kb_report_run *run, const char *name, const char *params, long budget,
                       double score)
{
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "name", name);
    cJSON_AddStringToObject(c, "hash", "0123456789abcdef");
    cJSON_AddNumberToObject(c, "budget", (double)budget);
    cJSON_AddItemToObject(c, "params", params ? cJSON_Parse(params) : cJSON_CreateNull());
    cJSON_AddItemToArray(run->configs, c);
    run->rows = realloc(run->rows, (run->n_rows + 1) * sizeof *run->rows);
    kb_score_row *r = &run->rows[run->n_rows++];
    *r = (kb_score_row){.config = strdup(name), .task = strdup("qasper"),
                        .metric = strdup("qa_f1_score"), .score = score, .n = 10,
                        .prompt_tokens = NAN, .kept_tokens = NAN, .prefill_s = NAN,
                        .decode_s = NAN, .ci = {NAN, NAN}, .delta_full = NAN,
                        .delta_ci = {NAN, NAN}};
}

Test(series, the_budget_chart_of_fifteen_series_draws_fifteen_styles)
{
    kb_report_run run = {.name = strdup("r"), .dir = strdup("r"), .kvbench_version = strdup("t"),
                         .model = strdup("m"), .model_hash = strdup("h"),
                         .protocol = strdup("longbench"), .compute = strdup("f32"),
                         .configs = cJSON_CreateArray(), .tasks = cJSON_Parse("[{\"task\": \"qasper\"}]")};
    add_config(&run, "full", NULL, -1, 50);
    for (int w = 1; w <= 15; w++)
        for (int b = 0; b < 2; b++) {
            char name[64], params[256];
            snprintf(name, sizeof name, "snapkv_w%d_i%d", w, 64 << b);
            snprintf(params, sizeof params,
                     "{\"algorithm\": \"snapkv\", \"window_size\": %d, \"intermediate_size\": %d}",
                     w, 64 << b);
            add_config(&run, name, params, 32 + 128 + (64 << b), 20 + w + b);
        }
    char *html = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&html, &len);
    cr_assert_eq(kb_report_write_html(f, &run, 1, NULL), 0);
    fclose(f);
    /* the budget chart: its legend, one entry per series */
    char *chart = strstr(html, "score vs cache budget'"), *end = chart ? strstr(chart, "</svg>") : NULL;
    cr_assert(chart && end);
    *end = '\0';
    char styles[16][64];
    size_t n = 0;
    for (char *at = chart; (at = strstr(at, "<line x1='640' x2='664'")); at++) {
        char *stroke = strstr(at, "stroke='"), *close = strstr(at, "/>");
        if (!stroke || stroke > close) /* the full cache's line has a class */
            continue;
        cr_assert_lt(n, 16);
        snprintf(styles[n], sizeof styles[n], "%.*s", (int)(close - stroke), stroke);
        for (size_t k = 0; k < n; k++)
            cr_assert_str_neq(styles[k], styles[n], "two series drawn alike");
        n++;
    }
    cr_assert_eq(n, 15, "15 series in the legend");
    for (int w = 1; w <= 15; w++) {
        char label[64];
        snprintf(label, sizeof label, ">snapkv window_size=%d</text>", w);
        cr_assert(strstr(chart, label), "the legend names the window: %s", label);
    }
    free(html);
    kb_report_run_free(&run);
}
