/* Eviction end to end on the tiny Qwen3 model: `kvbench generate
 * --eviction-config ... --trace` against the reference fixtures, the
 * no-eviction invariant, and prefill-once-fork-many against fresh runs. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "evict/evict.h"
#include "model/generate.h"
#include "model/model.h"
#include "util/npy.h"
#include "support/testutil.h"

#define MODEL "tests/data/models/qwen3-bf16"
#define DATA  "tests/data/eviction/"

static char *data(const char *name, const char *ext)
{
    char rel[256];
    snprintf(rel, sizeof rel, DATA "%s%s", name, ext);
    return tu_source(rel);
}

static cJSON *json_file(const char *path)
{
    char *s = tu_slurp(path, NULL);
    cJSON *j = cJSON_Parse(s);
    cr_assert_not_null(j, "%s is not JSON", path);
    free(s);
    return j;
}

/* Trace files as lists of lines, compared line by line as JSON. */
static void assert_same_trace(const char *got_path, const char *want_path)
{
    char *got = tu_slurp(got_path, NULL), *want = tu_slurp(want_path, NULL);
    char *gs, *ws;
    char *g = strtok_r(got, "\n", &gs), *w = strtok_r(want, "\n", &ws);
    int line = 1;
    for (; g && w; line++, g = strtok_r(NULL, "\n", &gs), w = strtok_r(NULL, "\n", &ws)) {
        cJSON *a = cJSON_Parse(g), *b = cJSON_Parse(w);
        cr_assert(a && b && cJSON_Compare(a, b, true), "trace line %d:\n got  %.200s\n want %.200s",
                  line, g, w);
        cJSON_Delete(a);
        cJSON_Delete(b);
    }
    cr_assert(!g && !w, "trace lengths differ at line %d", line);
    free(got);
    free(want);
}

/* kvbench generate on the fixture prompt, 32 tokens, logits to tmp/logits.npy,
 * plus the extra arguments (NULL-terminated). */
static tu_result generate(const char *tmp, const char *const *extra)
{
    char *model = tu_source(MODEL), *prompt = data("prompt", ".txt");
    char npy[512];
    snprintf(npy, sizeof npy, "%s/logits.npy", tmp);
    const char *bin = getenv("KVBENCH");
    const char *argv[48] = {bin ? bin : "./kvbench", "generate", "--model",          model,
                            "--prompt-file",         prompt,     "--max-new-tokens", "32",
                            "--ignore-eos",          "--json",   "--threads",        "2",
                            "--dump-logits",         npy};
    int n = 14;
    for (; *extra && n < 47; extra++)
        argv[n++] = *extra;
    argv[n] = NULL;
    tu_result r = tu_run_argv((char *const *)argv);
    free(model);
    free(prompt);
    return r;
}

/* The generated ids of a --json output. */
static int generated(const tu_result *r, int *ids, int max)
{
    cJSON *j = cJSON_Parse(r->out);
    cr_assert_not_null(j, "not JSON: %s", r->out);
    cJSON *arr = cJSON_GetObjectItem(j, "generated_ids");
    int n = 0;
    cJSON *it;
    cJSON_ArrayForEach(it, arr) if (n < max) ids[n++] = it->valueint;
    cJSON_Delete(j);
    return n;
}

static float *read_npy(const char *path, size_t *rows, size_t *cols)
{
    float *x;
    kv_error err;
    cr_assert_eq(kv_npy_read(path, &x, rows, cols, &err), 0, "%s", err.msg);
    return x;
}

/* The fixture's config, with up to two flags (NULL-terminated) on top. */
static void check_fixture_with(const char *name, const char *const *flags)
{
    char *tmp = tu_mkdtemp(), trace[512], npy[512];
    snprintf(trace, sizeof trace, "%s/trace.jsonl", tmp);
    snprintf(npy, sizeof npy, "%s/logits.npy", tmp);
    char *config = data(name, ".config.json");
    const char *extra[9] = {"--eviction-config", config, "--trace", trace};
    for (int i = 0; flags && flags[i] && i < 4; i++)
        extra[4 + i] = flags[i];
    tu_result r = generate(tmp, extra);
    cr_assert_eq(r.status, 0, "%s: %s", name, r.err);

    char *want_trace = data(name, ".trace.jsonl");
    assert_same_trace(trace, want_trace);

    char *tokens_path = data(name, ".tokens.json");
    cJSON *want = json_file(tokens_path);
    int ids[64], n = generated(&r, ids, 64), i = 0;
    cJSON *it;
    cr_assert_eq(n, cJSON_GetArraySize(cJSON_GetObjectItem(want, "tokens")));
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(want, "tokens"))
    {
        cr_assert_eq(ids[i], it->valueint, "%s: token %d is %d, want %d", name, i, ids[i],
                     it->valueint);
        i++;
    }

    /* the logits that chose each token: rows P-1 .. P+30 of the dump */
    size_t rows, cols, rrows, rcols;
    float *got = read_npy(npy, &rows, &cols);
    char *ref_path = data(name, ".logits.npy");
    float *ref = read_npy(ref_path, &rrows, &rcols);
    cr_assert_eq(cols, rcols);
    cr_assert_eq(rrows, 32);
    size_t first = rows - 31 - 1; /* P + 31 rows in all; P - 1 chose token 1 */
    double worst = 0;
    for (size_t k = 0; k < rrows * cols; k++)
        worst = fmax(worst, fabs((double)got[first * cols + k] - ref[k]));
    cr_assert_lt(worst, 1e-4, "%s: logits differ by %g", name, worst);
    free(got);
    free(ref);
    free(ref_path);
    cJSON_Delete(want);
    free(tokens_path);
    free(want_trace);
    free(config);
    tu_result_free(&r);
    tu_rmtree(tmp);
    free(tmp);
}

static void check_fixture(const char *name)
{
    check_fixture_with(name, NULL);
}

TestSuite(evict_e2e, .init = tu_dir_make, .fini = tu_dir_remove);

Test(evict_e2e, h2o_sum_per_token)
{
    check_fixture("ex1_h2o_sum_token");
}

Test(evict_e2e, snapkv_sum_per_token)
{
    check_fixture("ex3_snapkv_sum_token");
}

Test(evict_e2e, h2o_sum_per_group)
{
    check_fixture("ex4_h2o_sum_group4");
}

/* per_head against tools/ref_per_head.py (float64, written from the spec):
 * each KV head's kept tokens, the tokens and the logits. */
Test(evict_e2e, h2o_sum_per_head)
{
    check_fixture("ph1_h2o_sum_head");
}

Test(evict_e2e, snapkv_sum_per_head)
{
    check_fixture("ph2_snapkv_sum_head");
}

/* tova, keydiff and expected_attention against tools/ref_policies.py
 * (float64 numpy, written from the policies' semantics). */
Test(evict_e2e, tova_per_token)
{
    check_fixture("tv1_tova_token");
}

Test(evict_e2e, tova_per_group)
{
    check_fixture("tv2_tova_group4");
}

Test(evict_e2e, tova_per_head)
{
    check_fixture("tv3_tova_head");
}

Test(evict_e2e, keydiff_per_token)
{
    check_fixture("kd1_keydiff_token");
}

Test(evict_e2e, keydiff_per_group)
{
    check_fixture("kd2_keydiff_group4");
}

Test(evict_e2e, keydiff_per_head)
{
    check_fixture("kd3_keydiff_head");
}

Test(evict_e2e, expected_attention_per_token)
{
    check_fixture("ea1_expected_attention_token");
}

Test(evict_e2e, expected_attention_per_head_no_vnorm_short_future)
{
    check_fixture("ea2_expected_attention_head_novnorm");
}

Test(evict_e2e, expected_attention_per_group_no_covariance_epsilon)
{
    check_fixture("ea3_expected_attention_group4_nocov");
}

/* The budget schedules against tools/ref_budgets.py (float64 numpy, written
 * from the spec): layer_budget pyramid per_token and per_head, head_budget
 * adaptive (AdaKV: the heads of a layer keep different numbers of tokens,
 * attention skips each head's gap), and both together. */
Test(evict_e2e, snapkv_pyramid_per_token)
{
    check_fixture("pk1_snapkv_pyramid_token");
}

Test(evict_e2e, h2o_pyramid_per_head)
{
    check_fixture("pk2_h2o_pyramid_head");
}

Test(evict_e2e, h2o_adaptive_heads)
{
    check_fixture("ad1_h2o_adaptive");
}

Test(evict_e2e, snapkv_adaptive_heads_pyramid_layers)
{
    check_fixture("ad2_snapkv_adaptive_pyramid");
}

/* alpha 1: every head keeps its own best I first, which is all of the
 * budget: plain per_head, the very same trace, tokens and logits. */
Test(evict_e2e, adaptive_alpha_1_is_per_head)
{
    static const char *const flags[] = {"--head-budget", "adaptive", "--alpha-safeguard", "1",
                                        NULL};
    check_fixture_with("ph1_h2o_sum_head", flags);
    check_fixture_with("ph2_snapkv_sum_head", flags);
}

/* The flags of the seed example's shape give what the config file gives. */
Test(evict_e2e, cli_flags_equal_config_file)
{
    char trace[512];
    snprintf(trace, sizeof trace, "%s/trace.jsonl", tu_dir);
    const char *extra[] = {"--eviction",
                           "snapkv",
                           "--start-size",
                           "4",
                           "--recent-size",
                           "16",
                           "--intermediate-size",
                           "44",
                           "--window-size",
                           "8",
                           "--strategy",
                           "per_token",
                           "--score-aggregation",
                           "sum",
                           "--apply-rerotation",
                           "true",
                           "--trace",
                           trace,
                           NULL};
    tu_result r = generate(tu_dir, extra);
    cr_assert_eq(r.status, 0, "%s", r.err);
    char *want = data("ex3_snapkv_sum_token", ".trace.jsonl");
    assert_same_trace(trace, want);
    free(want);
    tu_result_free(&r);
}

/* M >= prompt + generated: the very same tokens as no eviction, the same
 * logits, and nothing in the trace. (Logits to 1e-5, not bit for bit: a
 * prefill that collects attention statistics normalises every row's
 * probabilities in full, the one without runs the blocked online softmax,
 * and the two round differently in the last bits.) */
Test(evict_e2e, budget_above_length_changes_nothing)
{
    char trace[512], npy[512], full_npy[512];
    snprintf(trace, sizeof trace, "%s/trace.jsonl", tu_dir);
    snprintf(npy, sizeof npy, "%s/logits.npy", tu_dir);
    snprintf(full_npy, sizeof full_npy, "%s/full.npy", tu_dir);
    const char *none[] = {NULL};
    tu_result full = generate(tu_dir, none);
    cr_assert_eq(full.status, 0, "%s", full.err);
    cr_assert_eq(rename(npy, full_npy), 0);
    /* pyramid with beta 1 gives every layer intermediate_size; adaptive
     * heads within Hkv * I candidates keep them all */
    static const char *const algos[] = {"snapkv", "h2o",     "knorm",
                                        "snapkv", "tova",    "keydiff",
                                        "expected_attention", "snapkv", "h2o"};
    static const char *const strategies[] = {"per_token", "per_token", "per_token",
                                             "per_head",  "per_token", "per_head",
                                             "per_token", "per_token", "per_head"};
    static const char *const budgets[][2] = {
        {"--layer-budget", "uniform"}, {"--layer-budget", "uniform"},
        {"--layer-budget", "uniform"}, {"--layer-budget", "uniform"},
        {"--layer-budget", "uniform"}, {"--layer-budget", "uniform"},
        {"--layer-budget", "uniform"}, {"--pyramid-beta", "1"},
        {"--head-budget", "adaptive"}};
    for (int a = 0; a < 9; a++) {
        const char *extra[] = {"--eviction",
                               algos[a],
                               "--strategy",
                               strategies[a],
                               "--start-size",
                               "4",
                               "--recent-size",
                               "16",
                               "--intermediate-size",
                               "220",
                               "--trace",
                               trace,
                               budgets[a][0],
                               budgets[a][1],
                               a == 7 ? "--layer-budget" : NULL,
                               "pyramid",
                               NULL};
        tu_result r = generate(tu_dir, extra);
        cr_assert_eq(r.status, 0, "%s", r.err);
        int a_ids[64], b_ids[64];
        int na = generated(&full, a_ids, 64), nb = generated(&r, b_ids, 64);
        cr_assert_eq(na, 32);
        cr_assert_eq(nb, 32);
        cr_assert_eq(memcmp(a_ids, b_ids, sizeof(int) * 32), 0, "%s: tokens differ", algos[a]);
        size_t rows, cols, rows2, cols2;
        float *x = read_npy(full_npy, &rows, &cols), *y = read_npy(npy, &rows2, &cols2);
        cr_assert_eq(rows, rows2);
        double d = 0;
        for (size_t i = 0; i < rows * cols; i++)
            d = fmax(d, fabs((double)x[i] - y[i]));
        cr_assert_leq(d, 1e-5, "%s: logits differ by up to %g", algos[a], d);
        size_t len;
        char *t = tu_slurp(trace, &len);
        cr_assert_eq(len, 0, "%s: evicted: %s", algos[a], t);
        free(t);
        free(x);
        free(y);
        tu_result_free(&r);
    }
    tu_result_free(&full);
}

/* --strategy per_head: one trace line per (step, layer) whose
 * kept_positions holds a list per KV head (the tiny model has 2): each of M
 * ascending positions, the start and the newest tokens in every head, the
 * intermediate ones each head's own. */
Test(evict_e2e, per_head_trace)
{
    char trace[512];
    snprintf(trace, sizeof trace, "%s/trace.jsonl", tu_dir);
    const char *extra[] = {"--eviction",
                           "snapkv",
                           "--strategy",
                           "per_head",
                           "--start-size",
                           "4",
                           "--intermediate-size",
                           "44",
                           "--recent-size",
                           "16",
                           "--trace",
                           trace,
                           NULL};
    tu_result r = generate(tu_dir, extra);
    cr_assert_eq(r.status, 0, "%s", r.err);
    int ids[64];
    cr_assert_eq(generated(&r, ids, 64), 32);
    char *text = tu_slurp(trace, NULL), *save;
    int lines = 0, differing = 0;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        cJSON *j = cJSON_Parse(line);
        cr_assert_not_null(j, "line %d: %s", lines + 1, line);
        int step = cJSON_GetObjectItem(j, "step")->valueint;
        cr_assert_eq(step, lines / 2);
        cr_assert_eq(cJSON_GetObjectItem(j, "layer")->valueint, lines % 2);
        const cJSON *heads = cJSON_GetObjectItem(j, "kept_positions");
        cr_assert_eq(cJSON_GetArraySize(heads), 2, "one list per KV head: %.120s", line);
        int kept[2][64];
        for (int h = 0; h < 2; h++) {
            const cJSON *list = cJSON_GetArrayItem(heads, h);
            cr_assert_eq(cJSON_GetArraySize(list), 64);
            for (int i = 0; i < 64; i++) {
                kept[h][i] = cJSON_GetArrayItem(list, i)->valueint;
                cr_assert(i == 0 || kept[h][i] > kept[h][i - 1], "ascending: %.120s", line);
            }
            for (int i = 0; i < 4; i++)
                cr_assert_eq(kept[h][i], i, "start tokens");
            for (int i = 0; i < 16; i++) /* newest: position 205 + step */
                cr_assert_eq(kept[h][48 + i], 205 + step - 15 + i, "recent tokens");
        }
        differing += memcmp(kept[0], kept[1], sizeof kept[0]) != 0;
        cJSON_Delete(j);
        lines++;
    }
    cr_assert_eq(lines, 64, "steps 0..31 x 2 layers");
    cr_assert_gt(differing, 0, "the KV heads never kept different tokens");
    free(text);
    tu_result_free(&r);
}

/* kvbench generate with args fails as a usage error whose message holds want. */
static void expect_usage_error(const char *tmp, const char *const *args, const char *want)
{
    tu_result r = generate(tmp, args);
    cr_assert_eq(r.status, 2, "%s", r.err);
    cr_assert(strstr(r.err, want), "want '%s' in: %s", want, r.err);
    tu_result_free(&r);
}

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

Test(evict_e2e, cli_errors)
{
    expect_usage_error(tu_dir, ARGS("--eviction", "h2o", "--window-size", "8"),
                       "--window-size: only supported for the snapkv algorithm");
    /* ranges come from the parameter table (kvcore/evict/evict_table.h), as in a config file */
    expect_usage_error(tu_dir, ARGS("--eviction", "h2o", "--start-size", "-4"),
                       "kvbench: --start-size: must be >= 0\n");
    expect_usage_error(tu_dir,
                       ARGS("--eviction", "h2o", "--strategy", "per_group", "--group-size", "0"),
                       "kvbench: --group-size: must be > 0\n");
    expect_usage_error(tu_dir, ARGS("--eviction", "random", "--eviction-seed", "4294967296"),
                       "kvbench: --eviction-seed: must be <= 4294967295\n");
    /* another algorithm's key is refused when given, not when left at its default */
    expect_usage_error(tu_dir, ARGS("--eviction", "h2o", "--ea-n-future-positions", "512"),
                       "--ea-n-future-positions: only supported for the expected_attention");
    expect_usage_error(tu_dir, ARGS("--trace", "x.jsonl"), "--trace needs eviction");
    expect_usage_error(tu_dir, ARGS("--eviction", "snapkv", "--start-size", "lots"),
                       "kvbench: --start-size: expected an integer, got 'lots'\n");
    /* an --eviction-config file's key is named under the file; a flag overrides the file */
    char config[600], want[700];
    snprintf(config, sizeof config, "%s/ea.json", tu_dir);
    FILE *f = fopen(config, "w");
    cr_assert_not_null(f);
    fputs("{\"algorithm\": \"h2o\", \"ea_epsilon\": 0.5}", f);
    cr_assert_eq(fclose(f), 0);
    snprintf(want, sizeof want,
             "kvbench: %s: ea_epsilon: only supported for the expected_attention algorithm\n", config);
    expect_usage_error(tu_dir, ARGS("--eviction-config", config), want);
    expect_usage_error(tu_dir, ARGS("--eviction-config", config, "--ea-epsilon", "1"),
                       "kvbench: --ea-epsilon: only supported for the expected_attention");
    f = fopen(config, "w");
    cr_assert_not_null(f);
    fputs("{\"algorithm\": \"h2o\", \"start_size\": -1}", f);
    cr_assert_eq(fclose(f), 0);
    snprintf(want, sizeof want, "kvbench: %s: start_size: must be >= 0\n", config);
    expect_usage_error(tu_dir, ARGS("--eviction-config", config), want);
}

/* ---- prefill once, fork many (kvcore API) ---- */

typedef struct run {
    kv_evictor *ev;
    kv_attn_stats_request req;
    char trace[64 * 1024];
    size_t len;
} run;

static void trace_to_text(void *ctx, int step, int layer, const int32_t *pos, int n, int sets)
{
    run *r = ctx;
    r->len += (size_t)snprintf(r->trace + r->len, sizeof r->trace - r->len, "%d %d:", step, layer);
    for (int i = 0; i < n * sets && r->len < sizeof r->trace; i++)
        r->len += (size_t)snprintf(r->trace + r->len, sizeof r->trace - r->len,
                                   i > 0 && i % n == 0 ? " | %d" : " %d", pos[i]);
    if (r->len < sizeof r->trace - 1)
        r->trace[r->len++] = '\n';
}

static int step_hook(void *user, kv_cache *c, const kv_attn_stats *stats, int step, kv_error *err)
{
    run *r = user;
    return kv_evictor_step(r->ev, c, &r->req, stats, step, trace_to_text, r, err);
}

static int32_t *prompt_ids(int *n)
{
    char *path = data("prompt", ".txt");
    char *s = tu_slurp(path, NULL);
    free(path);
    /* the tiny model's tokenizer comes with the engine; ids via the CLI */
    char *model = tu_source(MODEL);
    tu_result r = tu_kvbench("generate", "--model", model, "--prompt", s, "--max-new-tokens", "0",
                             "--json", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cJSON *j = cJSON_Parse(r.out);
    cJSON *arr = cJSON_GetObjectItem(j, "prompt_ids");
    *n = cJSON_GetArraySize(arr);
    int32_t *ids = malloc((size_t)*n * sizeof *ids);
    for (int i = 0; i < *n; i++)
        ids[i] = cJSON_GetArrayItem(arr, i)->valueint;
    cJSON_Delete(j);
    tu_result_free(&r);
    free(s);
    free(model);
    return ids;
}

static const char *const sweep_json[] = {
    "{\"algorithm\": \"h2o\", \"start_size\": 4, \"recent_size\": 16, \"intermediate_size\": 44}",
    "{\"algorithm\": \"snapkv\", \"start_size\": 4, \"recent_size\": 16, \"intermediate_size\": "
    "44, \"score_aggregation\": \"norm_sum\"}",
    "{\"algorithm\": \"snapkv\", \"start_size\": 4, \"recent_size\": 16, \"intermediate_size\": "
    "44, \"window_size\": 16, \"strategy\": \"per_group\", \"group_size\": 4}",
    "{\"algorithm\": \"snapkv\", \"start_size\": 4, \"recent_size\": 16, \"intermediate_size\": "
    "44, \"refined_size\": 12}",
    "{\"algorithm\": \"h2o\", \"start_size\": 4, \"recent_size\": 16, \"intermediate_size\": "
    "44, \"refined_size\": 12, \"refined_algorithm\": \"criticalkv\"}",
    "{\"algorithm\": \"knorm\", \"start_size\": 4, \"recent_size\": 16, \"intermediate_size\": "
    "44, \"positions\": \"compact\"}",
    "{\"algorithm\": \"random\", \"start_size\": 4, \"recent_size\": 16, \"intermediate_size\": "
    "44, \"seed\": 3}",
    "{\"algorithm\": \"snapkv\", \"strategy\": \"per_head\", \"start_size\": 4, \"recent_size\": "
    "16, \"intermediate_size\": 44, \"refined_size\": 12, \"kvcrush_anchor\": \"random\"}",
    "{\"algorithm\": \"h2o\", \"strategy\": \"per_head\", \"start_size\": 4, \"recent_size\": "
    "16, \"intermediate_size\": 44, \"refined_size\": 12, \"refined_algorithm\": "
    "\"criticalkv\", \"score_aggregation\": \"norm_sum\"}",
    "{\"algorithm\": \"knorm\", \"strategy\": \"per_head\", \"start_size\": 4, \"recent_size\": "
    "16, \"intermediate_size\": 44}",
    "{\"algorithm\": \"tova\", \"start_size\": 4, \"recent_size\": 16, \"intermediate_size\": 44}",
    "{\"algorithm\": \"keydiff\", \"strategy\": \"per_group\", \"group_size\": 4, \"start_size\": "
    "4, \"recent_size\": 16, \"intermediate_size\": 44}",
    /* two start areas: the shared prefill's query moments start at the
     * lower one, and the other config subtracts its extra rows */
    "{\"algorithm\": \"expected_attention\", \"start_size\": 4, \"recent_size\": 16, "
    "\"intermediate_size\": 44}",
    "{\"algorithm\": \"expected_attention\", \"strategy\": \"per_head\", \"start_size\": 12, "
    "\"recent_size\": 16, \"intermediate_size\": 40, \"ea_n_future_positions\": 32}",
};
#define N_SWEEP (int)(sizeof sweep_json / sizeof sweep_json[0])

/* The sweep's shared prefill: the model on `threads` threads, every
 * config's parameters, and the prompt's cache and statistics (full
 * attention, the union of the configs' requests). */
typedef struct shared_prefill {
    kv_model *m;
    kv_evict_model em;
    kv_evict_params ps[N_SWEEP];
    kv_attn_stats_request req;
    int32_t *prompt;
    int n_prompt;
    kv_cache *base;
    kv_attn_stats *stats;
    float *last; /* [vocab] logits of the prompt's last position */
} shared_prefill;

static void shared_prefill_run(shared_prefill *s, int threads)
{
    char *dir = tu_source(MODEL);
    kv_error err;
    cr_assert_eq(kv_model_load(dir, &s->m, &err), 0, "%s", err.msg);
    free(dir);
    cr_assert_eq(kv_model_set_threads(s->m, threads, &err), 0, "%s", err.msg);
    s->prompt = prompt_ids(&s->n_prompt);
    cr_assert_eq(s->n_prompt, 206);
    cr_assert_eq(kv_evict_model_load(&s->em, s->m, true, &err), 0, "%s", err.msg);
    for (int i = 0; i < N_SWEEP; i++) {
        cJSON *j = cJSON_Parse(sweep_json[i]);
        kv_evict_params_default(&s->ps[i]);
        cr_assert_eq(kv_evict_params_from_json(&s->ps[i], j, &err), 0, "%s", err.msg);
        cJSON_Delete(j);
    }
    cr_assert_eq(kv_evict_stats_request(s->ps, N_SWEEP, true, &s->req, &err), 0, "%s", err.msg);
    s->base = kv_model_cache_new(s->m, s->n_prompt, &err);
    s->stats = kv_model_stats_new(s->m, s->base, s->n_prompt, &s->req, &err);
    s->last = malloc((size_t)kv_model_get_config(s->m)->vocab * sizeof *s->last);
    cr_assert_eq(kv_model_forward(s->m, s->base, s->prompt, s->n_prompt, &s->req, s->stats, s->last,
                                  false, &err),
                 0, "%s", err.msg);
}

static void shared_prefill_free(shared_prefill *s)
{
    kv_model_stats_free(s->stats, kv_model_get_config(s->m)->n_layers);
    kv_cache_free(s->base);
    free(s->last);
    free(s->prompt);
    kv_evict_model_release(&s->em);
    kv_model_free(s->m);
}

Test(evict_e2e, forked_prefill_equals_fresh_runs, .timeout = 120)
{
    static shared_prefill sp;
    shared_prefill_run(&sp, kv_get_threads()); /* the default */
    kv_error err;
    static run fresh, forked;
    for (int i = 0; i < N_SWEEP; i++) {
        kv_generate_opts o = {.max_new_tokens = 24, .ignore_eos = true, .on_step = step_hook};
        /* fresh: its own prefill with its own statistics */
        memset(&fresh, 0, sizeof fresh);
        fresh.ev = kv_evictor_new(&sp.ps[i], &sp.em, &err);
        cr_assert_not_null(fresh.ev, "%s", err.msg);
        kv_evictor_generation_request(fresh.ev, &fresh.req);
        o.stats_req = fresh.req;
        o.user = &fresh;
        kv_cache *c = kv_model_cache_new(sp.m, sp.n_prompt + 24, &err);
        kv_generation a;
        cr_assert_eq(kv_generate(sp.m, c, sp.prompt, sp.n_prompt, &o, &a, &err), 0, "%s", err.msg);
        kv_cache_free(c);
        /* forked: the shared prefill's cache and statistics */
        memset(&forked, 0, sizeof forked);
        forked.ev = kv_evictor_new(&sp.ps[i], &sp.em, &err);
        kv_evictor_generation_request(forked.ev, &forked.req);
        if (i % 2 == 0) { /* a full copy, compressed in place */
            c = kv_cache_fork(sp.base, 0, &err);
            cr_assert_eq(
                kv_evictor_step(forked.ev, c, &sp.req, sp.stats, 0, trace_to_text, &forked, &err),
                0, "%s", err.msg);
        } else { /* only the kept rows copied out of the shared cache */
            cr_assert_eq(kv_evictor_fork(forked.ev, sp.base, &sp.req, sp.stats, &c, trace_to_text,
                                         &forked, &err),
                         0, "%s", err.msg);
            cr_assert_eq(sp.base->layers[0].len, sp.n_prompt, "the shared cache is untouched");
        }
        o.stats_req = forked.req;
        o.user = &forked;
        kv_generation b;
        cr_assert_eq(kv_generate_from(sp.m, c, sp.last, &o, &b, &err), 0, "%s", err.msg);
        cr_assert_eq(a.n, b.n);
        cr_assert_eq(memcmp(a.ids, b.ids, (size_t)a.n * sizeof *a.ids), 0,
                     "config %d: tokens differ", i);
        cr_assert_gt(fresh.len, 0, "config %d evicted", i);
        cr_assert_eq(fresh.len, forked.len, "config %d: traces differ", i);
        cr_assert_eq(memcmp(fresh.trace, forked.trace, fresh.len), 0, "config %d: traces differ",
                     i);
        kv_cache_free(c);
        kv_generation_free(&a);
        kv_generation_free(&b);
        kv_evictor_free(fresh.ev);
        kv_evictor_free(forked.ev);
    }
    shared_prefill_free(&sp);
}

/* Every sweep config forked on the model's two threads (kv_evictor_forks)
 * and decoding in one batch, each row's eviction hook run beside the
 * others' (on_step_concurrent; the CriticalKV and ExpectedAttention configs
 * start jobs of their own inside the hook), gives each row the tokens and
 * eviction trace it has forked and decoded alone. */
Test(evict_e2e, concurrent_hooks_equal_rows_alone, .timeout = 120)
{
    static shared_prefill sp;
    shared_prefill_run(&sp, 2);
    kv_error err;
    run *alone = calloc(N_SWEEP, sizeof *alone), *together = calloc(N_SWEEP, sizeof *together);
    kv_cache *caches[N_SWEEP];
    static kv_fork forks[N_SWEEP];
    kv_generate_opts opts[N_SWEEP];
    const kv_generate_opts *op[N_SWEEP];
    const float *lasts[N_SWEEP];
    kv_generation a[N_SWEEP], b[N_SWEEP];
    for (int pass = 0; pass < 2; pass++) {
        run *r = pass == 0 ? alone : together;
        for (int i = 0; i < N_SWEEP; i++) {
            r[i].ev = kv_evictor_new(&sp.ps[i], &sp.em, &err);
            cr_assert_not_null(r[i].ev, "%s", err.msg);
            kv_evictor_generation_request(r[i].ev, &r[i].req);
            forks[i] = (kv_fork){.ev = r[i].ev, .base = sp.base};
            if (pass == 0) /* one at a time; together: kv_evictor_forks below */
                cr_assert_eq(kv_evictor_fork(r[i].ev, sp.base, &sp.req, sp.stats, &caches[i],
                                             NULL, NULL, &err),
                             0, "%s", err.msg);
            opts[i] = (kv_generate_opts){.max_new_tokens = 16, .ignore_eos = true,
                                         .on_step = step_hook, .on_step_concurrent = pass == 1,
                                         .stats_req = r[i].req, .user = &r[i]};
            op[i] = &opts[i];
            lasts[i] = sp.last;
            if (pass == 0)
                cr_assert_eq(kv_generate_from(sp.m, caches[i], sp.last, &opts[i], &a[i], &err), 0,
                             "%s", err.msg);
        }
        if (pass == 1) {
            int bad = kv_evictor_forks(kv_model_pool(sp.m), forks, N_SWEEP, &sp.req, sp.stats);
            cr_assert_eq(bad, -1, "%s", bad >= 0 ? forks[bad].err.msg : "");
            for (int i = 0; i < N_SWEEP; i++)
                caches[i] = forks[i].out;
            cr_assert_eq(kv_generate_batch(sp.m, N_SWEEP, caches, lasts, op, b, NULL, &err), 0,
                         "%s", err.msg);
        }
        for (int i = 0; i < N_SWEEP; i++)
            kv_cache_free(caches[i]);
    }
    for (int i = 0; i < N_SWEEP; i++) {
        cr_assert_eq(a[i].n, b[i].n);
        cr_assert_eq(memcmp(a[i].ids, b[i].ids, (size_t)a[i].n * sizeof *a[i].ids), 0,
                     "config %d: tokens differ", i);
        cr_assert_gt(alone[i].len, 0, "config %d evicted", i);
        cr_assert_eq(alone[i].len, together[i].len, "config %d: traces differ", i);
        cr_assert_eq(memcmp(alone[i].trace, together[i].trace, alone[i].len), 0,
                     "config %d: traces differ", i);
        kv_generation_free(&a[i]);
        kv_generation_free(&b[i]);
        kv_evictor_free(alone[i].ev);
        kv_evictor_free(together[i].ev);
    }
    free(alone);
    free(together);
    shared_prefill_free(&sp);
}

/* --trace shows the refiner's picks: each line carries "refined_positions",
 * refined_size of the kept positions, none in the start or recent areas;
 * without a refiner the key is absent. */
static void check_refined_trace(const char *algorithm, int refined)
{
    char *tmp = tu_mkdtemp(), trace[512], rs[16];
    snprintf(trace, sizeof trace, "%s/trace.jsonl", tmp);
    snprintf(rs, sizeof rs, "%d", refined);
    const char *extra[] = {"--eviction", "snapkv", "--start-size", "4", "--intermediate-size",
                           "44", "--recent-size", "16", "--refined-size", rs,
                           "--refined-algorithm", algorithm, "--trace", trace, NULL};
    tu_result r = generate(tmp, extra);
    cr_assert_eq(r.status, 0, "%s", r.err);
    char *text = tu_slurp(trace, NULL), *save;
    int lines = 0;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        cJSON *j = cJSON_Parse(line);
        cr_assert_not_null(j, "%s", line);
        const cJSON *kept = cJSON_GetObjectItem(j, "kept_positions");
        const cJSON *picks = cJSON_GetObjectItem(j, "refined_positions");
        if (refined == 0) {
            cr_assert_null(picks, "no refiner, no refined_positions: %.120s", line);
        } else {
            cr_assert_eq(cJSON_GetArraySize(picks), refined, "%.160s", line);
            int n_kept = cJSON_GetArraySize(kept), prev = -1;
            for (int i = 0; i < refined; i++) {
                int p = cJSON_GetArrayItem(picks, i)->valueint, found = -1;
                cr_assert_gt(p, prev, "ascending: %.160s", line);
                prev = p;
                for (int k = 0; k < n_kept; k++)
                    if (cJSON_GetArrayItem(kept, k)->valueint == p)
                        found = k;
                cr_assert(found >= 4 && found < n_kept - 16,
                          "refined pick %d is an intermediate kept token: %.160s", p, line);
            }
        }
        cJSON_Delete(j);
        lines++;
    }
    cr_assert_eq(lines, 64);
    free(text);
    tu_result_free(&r);
    tu_rmtree(tmp);
    free(tmp);
}

Test(evict_e2e, trace_shows_kvcrush_picks)
{
    check_refined_trace("kvcrush", 8);
}

Test(evict_e2e, trace_shows_criticalkv_picks)
{
    check_refined_trace("criticalkv", 12);
}

Test(evict_e2e, trace_without_refiner_has_no_picks)
{
    check_refined_trace("kvcrush", 0);
}
