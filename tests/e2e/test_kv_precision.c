/* KV-cache precision end to end (`kvbench generate --kv-cache-precision`) on
 * the trained demo model: every policy runs at every precision; a budget
 * above the prompt gives the tokens of the full cache at the same
 * precision; the prompt's own forward is untouched by the precision (its
 * tokens attend each other unrounded, however the prompt is sliced). */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/npy.h"
#include "support/testutil.h"

#define MODEL "models/kvbench-retrieval"

/* A passkey prompt of the shipped synthetic task (about 1,000 tokens). */
static char *prompt_file(const char *tmp)
{
    char *src = tu_source("datasets/synthetic/synth_passkey.jsonl");
    char *text = tu_slurp(src, NULL);
    *strchr(text, '\n') = '\0';
    cJSON *j = cJSON_Parse(text);
    cr_assert_not_null(j);
    char *path = malloc(strlen(tmp) + 16);
    sprintf(path, "%s/prompt.txt", tmp);
    FILE *f = fopen(path, "w");
    fputs(cJSON_GetObjectItem(j, "context")->valuestring, f);
    fputs(cJSON_GetObjectItem(j, "input")->valuestring, f);
    fclose(f);
    cJSON_Delete(j);
    free(text);
    free(src);
    return path;
}

/* generate with the given flags (NULL-terminated); the generated ids as a
 * string, "" on failure (the error in *status). */
static char *run(const char *tmp, const char *npy, const char *const *flags, int *status)
{
    char *model = tu_source(MODEL), *prompt = prompt_file(tmp);
    const char *bin = getenv("KVBENCH");
    const char *argv[40] = {bin ? bin : "./kvbench", "generate", "--model", model, "--prompt-file",
                            prompt, "--max-new-tokens", "6", "--ignore-eos", "--json",
                            "--threads", "2"};
    int n = 12;
    if (npy) {
        argv[n++] = "--dump-logits";
        argv[n++] = npy;
    }
    for (; *flags && n < 39; flags++)
        argv[n++] = *flags;
    argv[n] = NULL;
    tu_result r = tu_run_argv((char *const *)argv);
    *status = r.status;
    const char *ids = strstr(r.out, "\"generated_ids\"");
    char *out = strdup(r.status == 0 && ids ? ids : r.err);
    out[strcspn(out, "]") + (out[strcspn(out, "]")] ? 1 : 0)] = '\0';
    tu_result_free(&r);
    free(model);
    free(prompt);
    return out;
}

static const char *const precisions[][4] = {
    {"bf16", "by_token"}, {"f16", "by_token"}, {"u8", "by_token"}, {"u4", "by_token"},
    {"u8", "by_channel"}, {"u4", "by_channel"},
};

TestSuite(kv_precision, .init = tu_dir_make, .fini = tu_dir_remove);

Test(kv_precision, every_policy_runs_at_every_precision)
{
    static const char *const policies[][8] = {
        {"snapkv", "--window-size", "32"}, {"h2o"}, {"streaming"}, {"random"}, {"knorm"},
        {"tova"}, {"keydiff"}, {"expected_attention"},
        {"snapkv", "--refined-algorithm", "kvcrush", "--refined-size", "16"},
        {"snapkv", "--refined-algorithm", "criticalkv", "--refined-size", "16"},
        {"h2o", "--strategy", "per_head", "--head-budget", "adaptive"},
        {"snapkv", "--layer-budget", "pyramid", "--apply-rerotation", "false"},
    };
    for (size_t p = 0; p < sizeof precisions / sizeof *precisions; p++)
        for (size_t a = 0; a < sizeof policies / sizeof *policies; a++) {
            const char *flags[24] = {"--kv-cache-precision", precisions[p][0], "--key-quant",
                                     precisions[p][1], "--eviction", policies[a][0],
                                     "--start-size", "4", "--intermediate-size", "64",
                                     "--recent-size", "32"};
            int n = 12;
            for (int i = 1; policies[a][i]; i++)
                flags[n++] = policies[a][i];
            int status;
            char *ids = run(tu_dir, NULL, flags, &status);
            cr_expect_eq(status, 0, "%s at %s %s: %s", policies[a][0], precisions[p][0],
                         precisions[p][1], ids);
            free(ids);
        }
}

Test(kv_precision, a_budget_above_the_prompt_equals_the_full_cache_at_its_precision)
{
    for (size_t p = 0; p < sizeof precisions / sizeof *precisions; p++) {
        const char *full[] = {"--kv-cache-precision", precisions[p][0], "--key-quant",
                              precisions[p][1], NULL};
        const char *evict[] = {"--kv-cache-precision", precisions[p][0], "--key-quant",
                               precisions[p][1], "--eviction", "snapkv", "--intermediate-size",
                               "100000", NULL};
        int s1, s2;
        char *a = run(tu_dir, NULL, full, &s1), *b = run(tu_dir, NULL, evict, &s2);
        cr_assert(s1 == 0 && s2 == 0, "%s / %s", a, b);
        cr_expect_str_eq(a, b, "%s %s: full cache and a budget above the prompt differ",
                         precisions[p][0], precisions[p][1]);
        free(a);
        free(b);
    }
}

Test(kv_precision, the_prompts_own_forward_reads_no_rounded_key)
{
    char f32[512], u4[512];
    snprintf(f32, sizeof f32, "%s/f32.npy", tu_dir);
    snprintf(u4, sizeof u4, "%s/u4.npy", tu_dir);
    const char *none[] = {NULL}, *quant[] = {"--kv-cache-precision", "u4", NULL};
    int s1, s2;
    free(run(tu_dir, f32, none, &s1));
    free(run(tu_dir, u4, quant, &s2));
    cr_assert(s1 == 0 && s2 == 0);
    float *a, *b;
    size_t ra, ca, rb, cb;
    kv_error err;
    cr_assert_eq(kv_npy_read(f32, &a, &ra, &ca, &err), 0, "%s", err.msg);
    cr_assert_eq(kv_npy_read(u4, &b, &rb, &cb, &err), 0, "%s", err.msg);
    cr_assert(ra == rb && ca == cb && ra > 600, "%zu rows", ra);
    size_t prompt_rows = ra - 5; /* P + N - 1 rows, N = 6 */
    cr_expect_eq(memcmp(a, b, prompt_rows * ca * sizeof *a), 0,
                 "the prompt's logits (fed in slices of 256) changed with the cache precision");
    double d = 0;
    for (size_t i = prompt_rows * ca; i < ra * ca; i++)
        d = fmax(d, fabs((double)a[i] - b[i]));
    cr_expect_gt(d, 0.0, "decode steps read the u4 cache");
    free(a);
    free(b);
}

/* The preds of one config's prediction file, one per line, as one string. */
static char *preds(const char *dir, const char *run, const char *config)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/runs/%s/predictions/%s/synth_passkey.jsonl", dir, run, config);
    char *text = tu_slurp(path, NULL), *out = calloc(1, strlen(text) + 1);
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        cr_assert_not_null(j, "%s: %s", path, line);
        strcat(out, cJSON_GetObjectItem(j, "pred")->valuestring);
        strcat(out, "\n");
        cJSON_Delete(j);
    }
    free(text);
    return out;
}

/* A number of a JSON object, which must be there. */
static double number(const cJSON *o, const char *key)
{
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(o, key);
    cr_assert(cJSON_IsNumber(n), "no number \"%s\"", key);
    return n->valuedouble;
}

/* run.json's kv_bytes_per_token of each config against the sizes the
 * precision defines, in the demo model's shapes (config.json): F32 keys and
 * values; u8 and u4 codes of 8 and 4 bits plus an F32 scale and min per
 * group, by token a group per head's channels, keys by channel a group per
 * channel and block of 32 tokens. */
static void check_bytes_per_token(const char *dir, const char *run)
{
    char path[1024], *model = tu_source(MODEL);
    snprintf(path, sizeof path, "%s/config.json", model);
    char *text = tu_slurp(path, NULL);
    cJSON *cfg = cJSON_Parse(text);
    cr_assert_not_null(cfg);
    double layers = number(cfg, "num_hidden_layers"), dim = number(cfg, "head_dim");
    double row = number(cfg, "num_key_value_heads") * dim, group = 2 * sizeof(float);
    enum { NONE, BY_TOKEN, BY_CHANNEL };
    static const struct {
        const char *config;
        double bits;
        int keys; /* how keys are grouped (values: by token when quantised) */
    } want[] = {{"full", 32, NONE},
                {"full_u8", 8, BY_TOKEN},
                {"big_u8", 8, BY_TOKEN},
                {"full_u4_kch", 4, BY_CHANNEL},
                {"big_u4_kch", 4, BY_CHANNEL}};
    snprintf(path, sizeof path, "%s/runs/%s/run.json", dir, run);
    char *doc = tu_slurp(path, NULL);
    cJSON *j = cJSON_Parse(doc);
    cr_assert_not_null(j, "%s", path);
    const cJSON *recorded = cJSON_GetObjectItem(j, "kv_bytes_per_token");
    cr_assert_not_null(recorded, "%s: no kv_bytes_per_token", path);
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        double bytes = 2 * row * want[i].bits / 8;
        if (want[i].keys != NONE)
            bytes += (row / dim + (want[i].keys == BY_TOKEN ? row / dim : row / 32)) * group;
        cr_expect_eq(number(recorded, want[i].config), layers * bytes, "%s: %s", path,
                     want[i].config);
    }
    cJSON_Delete(j);
    cJSON_Delete(cfg);
    free(doc);
    free(text);
    free(model);
}

/* In a run, {"algorithm": "full", "kv_cache_precision": ...} keeps every
 * token at that precision beside the F32 baseline, from the one prefill:
 * it answers as an eviction config of that precision whose budget is above
 * the prompt, and the baseline answers as in a run without it; run.json
 * records the bytes a cached token takes in each config. */
Test(kv_precision, a_run_holds_full_caches_at_their_precision_beside_the_f32_baseline,
     .timeout = 300)
{
    static const char *const matrices[2] = {
        "[{\"name\": \"full_u8\", \"algorithm\": \"full\", \"kv_cache_precision\": \"u8\"},\n"
        " {\"name\": \"full_u4_kch\", \"algorithm\": \"full\", \"kv_cache_precision\": \"u4\",\n"
        "  \"key_quant\": \"by_channel\"},\n"
        " {\"name\": \"big_u8\", \"algorithm\": \"snapkv\", \"intermediate_size\": 100000,\n"
        "  \"kv_cache_precision\": \"u8\"},\n"
        " {\"name\": \"big_u4_kch\", \"algorithm\": \"snapkv\", \"intermediate_size\": 100000,\n"
        "  \"kv_cache_precision\": \"u4\", \"key_quant\": \"by_channel\"}]",
        "[]"};
    for (int i = 0; i < 2; i++) {
        char *path = tu_write_demo_matrix(
            i ? "alone" : "prec", NULL,
            "\"limit\": 3,\n \"threads\": 1, \"tasks\": [\"synth_passkey\"], \"configs\": %s",
            matrices[i]);
        tu_kvbench_ok("run", path, NULL);
        free(path);
    }
    char *full = preds(tu_dir, "prec", "full"), *alone = preds(tu_dir, "alone", "full");
    char *u8 = preds(tu_dir, "prec", "full_u8"), *big8 = preds(tu_dir, "prec", "big_u8");
    char *u4 = preds(tu_dir, "prec", "full_u4_kch"), *big4 = preds(tu_dir, "prec", "big_u4_kch");
    cr_expect_str_eq(u8, big8, "u8: the full cache and a budget above the prompt differ");
    cr_expect_str_eq(u4, big4, "u4 by channel: the full cache and a budget above the prompt differ");
    /* the baseline stays F32: as in a run of the baseline alone */
    cr_assert(strlen(alone) > 3, "%s", alone);
    cr_expect_str_eq(full, alone, "the F32 baseline changed beside full caches at u8/u4");
    check_bytes_per_token(tu_dir, "prec");
    free(full);
    free(alone);
    free(u8);
    free(big8);
    free(u4);
    free(big4);
}
