/* The config matrix: structure errors name their key path, sweeps expand to
 * the cartesian product, the baseline is always there, names and hashes are
 * deterministic (configs equal once defaults apply are one), the parameter
 * table drives validation, --help and the schema, the reported budget is
 * what the engine keeps, and the shipped configs parse. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "evict/evict.h"
#include "cli/eviction.h"
#include "model/generate.h"
#include "matrix/matrix.h"
#include "model/model.h"
#include "score/score.h"
#include "longbench/tasks.h"
#include "support/testutil.h"

static kb_matrix m;
static kv_error err;

static int parse(const char *text)
{
    memset(&err, 0, sizeof err);
    return kb_matrix_parse(text, "t", &m, &err);
}

/* The text must fail with exactly this message. */
static void expect_error(const char *text, const char *msg)
{
    cr_assert_lt(parse(text), 0, "accepted: %s", text);
    cr_assert_str_eq(err.msg, msg);
}

#define BASE "\"model\": \"m\", \"tasks\": [\"trec\"]"

TestSuite(matrix, .init = tu_dir_make, .fini = tu_dir_remove);

Test(matrix, minimal_file_has_baseline_and_defaults)
{
    cr_assert_eq(parse("{" BASE "}"), 0, "%s", err.msg);
    cr_assert_str_eq(m.run_name, "t");
    cr_assert_str_eq(m.protocol, "longbench");
    cr_assert_str_eq(m.compute, "f32");
    cr_assert_str_eq(m.output, "results");
    cr_assert_eq(m.n_tasks, 1);
    cr_assert_eq(m.n_configs, 1);
    cr_assert_str_eq(m.configs[0].name, "full");
    cr_assert_null(m.configs[0].params);
    cr_assert_eq(m.configs[0].budget, -1);
    kb_matrix_free(&m);
}

Test(matrix, errors_name_the_key_path)
{
    expect_error(
        "{" BASE
        ", \"configs\": [{}, {\"start_size\": 1}, {\"start_size\": 2}, {\"algorithm\": \"snapkv\", "
        "\"window_size\": 0}]}",
        "configs[3].window_size: must be > 0");
    expect_error("{" BASE ", \"thread\": 4}",
                 "thread: unknown key (did you mean \"threads\"?) (known: name, description, "
                 "model, model_revision, "
                 "protocol, compute, threads, output, data, limit, max_length, max_new_tokens, "
                 "tasks, configs, sweep, baseline)");
    expect_error("{" BASE ", \"threads\": -1}", "threads: must be >= 0");
    expect_error("{" BASE ", \"compute\": \"fp16\"}", "compute: must be \"f32\" or \"bf16\"");
    expect_error("{" BASE ", \"compute\": 16}", "compute: must be a non-empty string");
    expect_error("{" BASE ", \"threads\": 1.5}", "threads: must be an integer");
    expect_error("{" BASE ", \"protocol\": \"hf\"}", "protocol: must be \"longbench\" or \"nncf\"");
    expect_error("{\"model\": \"m\", \"tasks\": [\"trec\", {\"task\": \"qasper\", \"limit\": 0}]}",
                 "tasks[1].limit: must be > 0");
    expect_error("{\"model\": \"m\", \"tasks\": [\"trec\", {\"task\": \"qasper\", \"lmit\": 3}]}",
                 "tasks[1].lmit: unknown key (a task entry has task, limit, max_length, "
                 "max_new_tokens; a user task also file, template, metric, language, chat, "
                 "first_line)");
    expect_error("{\"model\": \"m\", \"tasks\": [\"trek\"]}",
                 "tasks[0]: unknown task or group \"trek\" (groups: en16, zh, longbench, "
                 "longbench_e)");
    expect_error("{\"model\": \"m\", \"tasks\": [\"en16\", \"trec\"]}",
                 "tasks[1]: task \"trec\" is listed twice");
    expect_error("{\"tasks\": [\"trec\"]}",
                 "model: required: a model folder or a hub name (ORG/NAME)");
    expect_error("{" BASE ", \"configs\": [{\"algorithm\": \"snapkv\", \"windw_size\": 8}]}",
                 "configs[0].windw_size: unknown eviction parameter (did you mean "
                 "\"window_size\"?)");
    expect_error("{" BASE ", \"configs\": [{\"name\": \"a/b\", \"algorithm\": \"h2o\"}]}",
                 "configs[0].name: must be a non-empty string of letters, digits, '.', '_', '-'");
    expect_error("{" BASE ", \"sweep\": {\"algorithm\": []}}",
                 "sweep.algorithm: an empty list gives no configs");
    expect_error("{" BASE ", \"sweep\": [{\"algorithm\": [\"h2o\"]}, {\"algorithm\": [[1]]}]}",
                 "sweep[1].algorithm: [0]: must be a number, string or boolean");
    expect_error("{" BASE ", \"threads\": 2, \"threads\": 3}", "(top level): key \"threads\" "
                                                               "appears twice");
    expect_error("{" BASE
                 ", \"configs\": [\"full\", {\"algorithm\": \"full\", \"start_size\": 1}]}",
                 "configs[1].start_size: the full cache takes no eviction parameters, only the "
                 "cache's precision (kv_cache_precision, key_quant, value_quant, key_group_size, "
                 "value_group_size)");
}

/* Issue 30: a full cache at another precision is a config of its own (every
 * token kept, stored at that precision); at F32 it is the baseline. */
Test(matrix, a_full_cache_at_another_precision_is_its_own_config)
{
    cr_assert_eq(parse("{" BASE ", \"configs\": [{\"algorithm\": \"full\", \"kv_cache_precision\": "
                       "\"u8\"}, {\"name\": \"full_u4_kch\", \"algorithm\": \"FULL\", "
                       "\"key_quant\": \"by_channel\", \"kv_cache_precision\": \"u4\"}]}"),
                 0, "%s", err.msg);
    cr_assert_eq(m.n_configs, 3);
    cr_assert_null(m.configs[0].params);
    cr_assert_str_eq(m.configs[1].name, "full_kvu8");
    cr_assert_eq(m.configs[1].budget, -1);
    cr_assert(kb_config_is_full(m.configs[1].params));
    kv_cache_quant q = kv_evict_params_cache_quant(&m.configs[2].evict);
    cr_assert(q.precision == KV_PREC_U4 && q.key_by_channel);
    cr_assert_str_neq(m.configs[1].hash, m.configs[0].hash);
    char hash[17];
    /* the hash is the precision's: defaults spelled out or key order change nothing */
    cJSON *same = cJSON_Parse("{\"value_quant\": \"by_token\", \"kv_cache_precision\": \"u8\", "
                              "\"algorithm\": \"full\", \"key_quant\": \"by_token\"}");
    cr_assert_eq(kb_config_hash_json(same, hash), 0);
    cr_assert_str_eq(hash, m.configs[1].hash);
    cJSON_Delete(same);
    kb_matrix_free(&m);
    /* at F32 it is the baseline itself */
    expect_error("{" BASE ", \"configs\": [\"full\", {\"algorithm\": \"full\", "
                 "\"kv_cache_precision\": \"f32\"}]}",
                 "configs[1] (\"full\") is the same config as configs[0] (\"full\"); remove one");
    expect_error("{" BASE ", \"configs\": [{\"algorithm\": \"full\", \"kv_cache_precision\": "
                 "\"u7\"}]}",
                 "configs[0].kv_cache_precision: must be one of f32, bf16, f16, u8, u4");
}

Test(matrix, sweep_error_names_the_combination)
{
    expect_error("{" BASE ", \"sweep\": {\"algorithm\": [\"snapkv\", \"h2o\"], "
                 "\"window_size\": [8]}}",
                 "sweep{algorithm=h2o,window_size=8}.window_size: only supported for the snapkv "
                 "algorithm");
}

Test(matrix, invalid_json_gives_line_and_column)
{
    cr_assert_lt(parse("{\n  \"model\": \"m\",\n  \"tasks\": [\"trec\",]\n}"), 0);
    cr_assert(strstr(err.msg, "line 3") && strstr(err.msg, "invalid JSON"), "%s", err.msg);
}

Test(matrix, sweep_is_the_cartesian_product_in_file_order)
{
    cr_assert_eq(parse("{" BASE ", \"sweep\": {\"algorithm\": [\"h2o\", \"snapkv\"], "
                       "\"start_size\": 32, \"intermediate_size\": [128, 256, 512], "
                       "\"score_aggregation\": [\"sum\", \"norm_sum\"]}}"),
                 0, "%s", err.msg);
    cr_assert_eq(m.n_configs, 1 + 2 * 3 * 2);
    /* the last key varies fastest */
    const char *expect[] = {"full",
                            "h2o_s32_i128_sum",
                            "h2o_s32_i128_normsum",
                            "h2o_s32_i256_sum",
                            "h2o_s32_i256_normsum",
                            "h2o_s32_i512_sum",
                            "h2o_s32_i512_normsum",
                            "snapkv_s32_i128_sum",
                            "snapkv_s32_i128_normsum",
                            "snapkv_s32_i256_sum",
                            "snapkv_s32_i256_normsum",
                            "snapkv_s32_i512_sum",
                            "snapkv_s32_i512_normsum"};
    for (size_t i = 0; i < m.n_configs; i++)
        cr_assert_str_eq(m.configs[i].name, expect[i], "config %zu", i);
    /* every combination is distinct: distinct hashes */
    for (size_t i = 0; i < m.n_configs; i++)
        for (size_t j = i + 1; j < m.n_configs; j++)
            cr_assert_str_neq(m.configs[i].hash, m.configs[j].hash);
    cr_assert_eq(m.configs[3].budget, 32 + 256 + 128); /* recent defaults to 128 */
    cr_assert_str_eq(m.configs[3].origin,
                     "sweep{algorithm=h2o,intermediate_size=256,score_aggregation=sum}");
    kb_matrix_free(&m);
}

Test(matrix, list_of_sweeps_is_their_union_after_named_configs)
{
    cr_assert_eq(
        parse("{" BASE ", \"configs\": [{\"name\": \"mine\", \"algorithm\": \"h2o\"}], "
              "\"sweep\": [{\"algorithm\": [\"h2o\", \"snapkv\"], \"window_size\": 8, "
              "\"start_size\": 4}, {\"algorithm\": \"streaming\", \"recent_size\": [1, 2]}]}"),
        -1);
    /* h2o + window_size is invalid; the error names the first combination */
    cr_assert(strstr(err.msg, "sweep[0]{algorithm=h2o}.window_size:"), "%s", err.msg);
    cr_assert_eq(parse("{" BASE ", \"configs\": [{\"name\": \"mine\", \"algorithm\": \"h2o\"}], "
                       "\"sweep\": [{\"algorithm\": [\"h2o\", \"snapkv\"], \"start_size\": 4}, "
                       "{\"algorithm\": \"streaming\", \"recent_size\": [1, 2]}]}"),
                 0, "%s", err.msg);
    cr_assert_eq(m.n_configs, 1 + 1 + 2 + 2);
    cr_assert_str_eq(m.configs[1].name, "mine");
    cr_assert_str_eq(m.configs[2].name, "h2o_s4");
    cr_assert_str_eq(m.configs[5].name, "streaming_r2");
    /* streaming's intermediate area keeps the newest candidates: the cache
     * holds start + intermediate + recent like every algorithm's */
    cr_assert_eq(m.configs[5].budget, 32 + 512 + 2);
    kb_matrix_free(&m);
}

Test(matrix, duplicate_configs_are_refused)
{
    expect_error("{" BASE ", \"configs\": [{\"algorithm\": \"h2o\", \"start_size\": 4}], "
                 "\"sweep\": {\"start_size\": [4, 8], \"algorithm\": \"h2o\"}}",
                 "sweep{start_size=4} (\"h2o_s4\") is the same config as configs[0] "
                 "(\"h2o_s4\"); remove one");
    expect_error("{" BASE ", \"configs\": [{\"name\": \"x\", \"algorithm\": \"h2o\"}, "
                 "{\"name\": \"x\", \"algorithm\": \"snapkv\"}]}",
                 "configs[1] (\"x\") has the same name as configs[0] (\"x\"); give one of them "
                 "a \"name\"");
    /* the baseline may be listed once, explicitly */
    cr_assert_eq(parse("{" BASE ", \"configs\": [\"full\", {\"algorithm\": \"h2o\"}]}"), 0, "%s",
                 err.msg);
    cr_assert_eq(m.n_configs, 2);
    cr_assert_str_eq(m.configs[0].name, "full");
    kb_matrix_free(&m);
    expect_error("{" BASE ", \"configs\": [\"full\", {\"algorithm\": \"full\"}]}",
                 "configs[1] (\"full\") is the same config as configs[0] (\"full\"); remove one");
}

/* Parameters added to the table after a run was stored leave its config
 * hashes as they were (a run resumes by them): these are the hashes main
 * gave before the ea_* rows existed (main @ 504c209, its run.json); a later
 * key joins the hash only when it leaves its default. */
Test(matrix, stored_hashes_survive_new_parameters)
{
    static const char *const stored[][2] = {
        {"{\"algorithm\": \"h2o\", \"start_size\": 4, \"recent_size\": 32, "
         "\"intermediate_size\": 92}",
         "17ee463df1a3db75"},
        {"{\"algorithm\": \"snapkv\", \"strategy\": \"per_group\", \"group_size\": 4, "
         "\"start_size\": 4, \"recent_size\": 32, \"intermediate_size\": 92, "
         "\"score_aggregation\": \"norm_sum\"}",
         "cc5b463c5ee7dcd4"},
    };
    for (size_t i = 0; i < sizeof stored / sizeof stored[0]; i++) {
        cJSON *p = cJSON_Parse(stored[i][0]);
        char h[17];
        cr_assert_eq(kb_config_hash_json(p, h), 0);
        cr_assert_str_eq(h, stored[i][1], "%s", stored[i][0]);
        cJSON_Delete(p);
    }
    cJSON *a = cJSON_Parse("{\"algorithm\": \"expected_attention\"}");
    cJSON *b = cJSON_Parse("{\"algorithm\": \"expected_attention\", \"ea_epsilon\": 0.0}");
    cJSON *d = cJSON_Parse("{\"algorithm\": \"expected_attention\", \"ea_epsilon\": 1e-3}");
    char ha[17], hb[17], hd[17];
    cr_assert_eq(kb_config_hash_json(a, ha), 0);
    cr_assert_eq(kb_config_hash_json(b, hb), 0);
    cr_assert_eq(kb_config_hash_json(d, hd), 0);
    cr_assert_str_eq(ha, hb);
    cr_assert_str_neq(ha, hd);
    cJSON_Delete(a);
    cJSON_Delete(b);
    cJSON_Delete(d);
}

/* query_aware (issue 29): true is today's behaviour and leaves every hash
 * and name as it was; false is another config, named with "_qa0". */
Test(matrix, query_aware_is_part_of_identity_only_when_false)
{
    cJSON *a = cJSON_Parse("{\"algorithm\": \"h2o\", \"start_size\": 4, \"recent_size\": 32, "
                           "\"intermediate_size\": 92, \"query_aware\": true}");
    cJSON *b = cJSON_Parse("{\"algorithm\": \"h2o\", \"start_size\": 4, \"recent_size\": 32, "
                           "\"intermediate_size\": 92, \"query_aware\": false}");
    char ha[17], hb[17];
    cr_assert_eq(kb_config_hash_json(a, ha), 0);
    cr_assert_eq(kb_config_hash_json(b, hb), 0);
    cr_assert_str_eq(ha, "17ee463df1a3db75", "the stored hash of the same config without the key");
    cr_assert_str_neq(ha, hb);
    char *na = kb_config_name(a), *nb = kb_config_name(b);
    cr_assert_str_eq(na, "h2o_s4_r32_i92");
    cr_assert_str_eq(nb, "h2o_s4_r32_i92_qa0");
    free(na);
    free(nb);
    cJSON_Delete(a);
    cJSON_Delete(b);
}

Test(matrix, hash_ignores_key_order_and_number_spelling)
{
    cJSON *a = cJSON_Parse("{\"algorithm\": \"snapkv\", \"window_size\": 8, \"start_size\": 32}");
    cJSON *b = cJSON_Parse("{\"start_size\": 32.0, \"window_size\": 8, \"algorithm\": \"snapkv\"}");
    cJSON *c = cJSON_Parse("{\"start_size\": 33, \"window_size\": 8, \"algorithm\": \"snapkv\"}");
    char ha[17], hb[17], hc[17], hf[17];
    cr_assert_eq(kb_config_hash_json(a, ha), 0);
    cr_assert_eq(kb_config_hash_json(b, hb), 0);
    cr_assert_eq(kb_config_hash_json(c, hc), 0);
    cr_assert_eq(kb_config_hash_json(NULL, hf), 0);
    cr_assert_str_eq(ha, hb);
    cr_assert_str_neq(ha, hc);
    cr_assert_str_neq(ha, hf);
    char *canon = kb_json_canonical(b);
    cr_assert_str_eq(canon, "{\"algorithm\":\"snapkv\",\"start_size\":32,\"window_size\":8}");
    free(canon);
    cr_assert_eq(strlen(ha), 16); /* frozen values: tests/unit/matrix/test_hash.c */
    char *name = kb_config_name(b);
    cr_assert_str_eq(name, "snapkv_s32_w8");
    free(name);
    cJSON_Delete(a);
    cJSON_Delete(b);
    cJSON_Delete(c);
}

Test(matrix, names_follow_the_documented_scheme)
{
    cJSON *p = cJSON_Parse("{\"score_aggregation\": \"sum\", \"window_size\": 8, "
                           "\"intermediate_size\": 128, \"algorithm\": \"snapkv\"}");
    char *n = kb_config_name(p);
    cr_assert_str_eq(n, "snapkv_i128_w8_sum");
    free(n);
    cJSON_Delete(p);
    p = cJSON_Parse("{\"algorithm\": \"h2o\", \"strategy\": \"per_group\", \"group_size\": 16, "
                    "\"refined_algorithm\": \"kvcrush\", \"refined_size\": 64, \"kvcrush_anchor\": "
                    "\"mean\", \"apply_rerotation\": false, \"positions\": \"compact\", "
                    "\"future_knob\": 0.5}");
    n = kb_config_name(p);
    cr_assert_str_eq(n, "h2o_pg_g16_kvcrush_ref64_anchor-mean_norot_compact_future-knob-0.5");
    free(n);
    cJSON_Delete(p);
}

/* Writes text to path (a config file for kb_matrix_load). */
static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "%s", path);
    fputs(text, f);
    cr_assert_eq(fclose(f), 0, "%s", path);
}

/* The eviction module's problems (kvcore/evict/evict_params.h) land on the
 * key at fault; a rule between keys on the config, or on the sweep's
 * combination. */
Test(matrix, eviction_problems_land_on_their_key)
{
    expect_error("{" BASE ", \"configs\": [{\"algorithm\": \"snapkv\", \"window_size\": 9, "
                 "\"start_size\": -1}]}",
                 "configs[0].start_size: must be >= 0");
    expect_error("{" BASE ", \"configs\": [\"full\", {\"algorithm\": \"h2o\", \"refined_size\": 64, "
                 "\"intermediate_size\": 32}]}",
                 "configs[1]: refined_size cannot be greater than intermediate_size.");
    expect_error("{" BASE ", \"sweep\": {\"algorithm\": [\"snapkv\"], \"kvcrush_anchor\": "
                 "[\"mean\"], \"refined_size\": [32]}}",
                 "sweep{algorithm=snapkv,kvcrush_anchor=mean,refined_size=32}: Mean anchor is not "
                 "supported for KVCrush in per-token mode.");
    /* a budget's error lands on "budget", also when another key is wrong too */
    expect_error("{" BASE ", \"configs\": [{\"budget\": 8, \"start_size\": 4, "
                 "\"recent_size\": 8}]}",
                 "configs[0].budget: 8 is below start_size + recent_size = 12, which every config "
                 "keeps: lower them or raise the budget");
    expect_error("{" BASE ", \"configs\": [{\"budget\": 100, \"start_size\": -1}]}",
                 "configs[0].start_size: must be >= 0");
}

/* A task the run could not score is refused when the file is loaded, with
 * the file and the task named, not after the whole inference: every task
 * of the registry has a metric (LongBench v2's accuracy included), and a
 * task the file defines needs one kvbench has. */
Test(matrix, a_task_without_a_metric_is_refused_at_load)
{
    for (size_t i = 0; i < lb_n_tasks; i++) {
        kb_metric metric;
        bool first_line;
        cr_expect_eq(kb_task_metric(lb_tasks[i].name, &metric, &first_line), 0, "%s",
                     lb_tasks[i].name);
        char text[256];
        snprintf(text, sizeof text, "{\"model\": \"m\", \"tasks\": [\"%s\"]}", lb_tasks[i].name);
        cr_expect_eq(parse(text), 0, "%s", err.msg);
        kb_matrix_free(&m);
    }
    char path[512];
    snprintf(path, sizeof path, "%s/nometric.json", tu_dir);
    write_file(path, "{\"model\": \"m\", \"tasks\": [\"trec\", {\"task\": \"mine\", \"file\": "
                     "\"f\", \"template\": \"{context} Q: {input}\", \"metric\": \"f1\"}]}");
    cr_assert_lt(kb_matrix_load(path, &m, &err), 0);
    char want[600];
    snprintf(want, sizeof want, "%s: tasks[1].metric: unknown metric \"f1\" (LongBench's: ", path);
    cr_assert_eq(strncmp(err.msg, want, strlen(want)), 0, "%s", err.msg);
}

Test(matrix, task_groups_and_per_task_settings)
{
    cr_assert_eq(parse("{\"model\": \"m\", \"limit\": 5, \"max_length\": 4000, \"tasks\": "
                       "[\"en16\", {\"task\": \"lsht\", \"limit\": 2, \"max_new_tokens\": 8}]}"),
                 0, "%s", err.msg);
    cr_assert_eq(m.n_tasks, 17);
    cr_assert_str_eq(m.tasks[0].name, "narrativeqa");
    cr_assert_str_eq(m.tasks[15].name, "repobench-p");
    cr_assert_eq(m.tasks[0].limit, 5);
    cr_assert_eq(m.tasks[0].max_length, 4000);
    cr_assert_eq(m.tasks[0].max_new_tokens, 0);
    cr_assert_str_eq(m.tasks[16].name, "lsht");
    cr_assert_eq(m.tasks[16].limit, 2);
    cr_assert_eq(m.tasks[16].max_length, 4000);
    cr_assert_eq(m.tasks[16].max_new_tokens, 8);
    kb_matrix_free(&m);
    cr_assert_eq(parse("{\"model\": \"m\", \"tasks\": [\"longbench_e\"]}"), 0, "%s", err.msg);
    cr_assert_eq(m.n_tasks, 13);
    cr_assert_str_eq(m.tasks[0].name, "qasper_e");
    kb_matrix_free(&m);
}

Test(matrix, to_json_round_trips_the_expansion)
{
    cr_assert_eq(parse("{" BASE ", \"sweep\": {\"algorithm\": [\"h2o\", \"snapkv\"]}}"), 0);
    cJSON *j = kb_matrix_to_json(&m);
    cr_assert_not_null(j);
    const cJSON *configs = cJSON_GetObjectItem(j, "configs");
    cr_assert_eq(cJSON_GetArraySize(configs), 3);
    const cJSON *c1 = cJSON_GetArrayItem(configs, 1);
    cr_assert_str_eq(cJSON_GetObjectItem(c1, "name")->valuestring, "h2o");
    cr_assert_str_eq(cJSON_GetObjectItem(c1, "hash")->valuestring, m.configs[1].hash);
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetArrayItem(configs, 0), "params")));
    cJSON_Delete(j);
    kb_matrix_free(&m);
}

static void load_shipped(const char *rel, size_t n_tasks, size_t n_configs)
{
    char *path = tu_source(rel);
    cr_assert_eq(kb_matrix_load(path, &m, &err), 0, "%s", err.msg);
    cr_assert_eq(m.n_tasks, n_tasks, "%s: %zu tasks", rel, m.n_tasks);
    cr_assert_eq(m.n_configs, n_configs, "%s: %zu configs", rel, m.n_configs);
    free(path);
}

/* The configs of m whose parameters contradict each other, as "a,b,". */
static void warned_configs(char *out, size_t n)
{
    out[0] = '\0';
    for (size_t i = 0; i < m.n_configs; i++)
        if (kb_config_warning(m.configs[i].params)) {
            strncat(out, m.configs[i].name, n - strlen(out) - 1);
            strncat(out, ",", n - strlen(out) - 1);
        }
}

/* Issue 28: NNCF's defaults (rerotation, absolute positions) stay, so the
 * hashes do, but they contradict each other: a config that keeps them is
 * warned about, and the shipped configs set coherent ones (the demo's one
 * rerotated row is there to show the gap, and says so). */
Test(matrix, shipped_configs_are_coherent_and_defaults_are_warned_about)
{
    char warned[4096];
    cr_assert_eq(parse("{" BASE ", \"configs\": [{\"algorithm\": \"h2o\"}, {\"algorithm\": "
                       "\"h2o\", \"positions\": \"compact\"}, {\"algorithm\": \"snapkv\", "
                       "\"apply_rerotation\": false}]}"),
                 0, "%s", err.msg);
    warned_configs(warned, sizeof warned);
    cr_assert_str_eq(warned, "h2o,");
    cr_assert(strstr(kb_config_warning(m.configs[1].params), "set \"positions\": \"compact\""));
    kb_matrix_free(&m);
    load_shipped("configs/demo.json", 3, 1 + 2 + 1 + 3 + 2 + 4 + 3);
    warned_configs(warned, sizeof warned);
    cr_assert_str_eq(warned, "snapkv_w32_128_rerotated,");
    kb_matrix_free(&m);
    load_shipped("configs/seed-example.json", 16, 2);
    warned_configs(warned, sizeof warned);
    cr_assert_str_eq(warned, "");
    kb_matrix_free(&m);
    load_shipped("configs/nightly.json", 16, 1 + 4 + 20 + 5 + 6 + 2 + 2 + 8);
    warned_configs(warned, sizeof warned);
    cr_assert_str_eq(warned, "");
    kb_matrix_free(&m);
}

Test(matrix, shipped_configs_parse)
{
    /* 3 synthetic tasks; full + 2 streaming + 1 rerotated SnapKV + PyramidKV + per_head +
     * AdaKV + 2 H2O + 4 SnapKV (2 budgets x 2 windows) + TOVA, KeyDiff, ExpectedAttention */
    load_shipped("configs/demo.json", 3, 1 + 2 + 1 + 3 + 2 + 4 + 3);
    for (size_t i = 4; i < 7; i++)
        cr_assert_eq(m.configs[i].budget, 128, "%s", m.configs[i].name);
    for (size_t i = 13; i < 16; i++)
        cr_assert_eq(m.configs[i].budget, 128, "%s", m.configs[i].name);
    cr_assert_str_eq(m.run_name, "demo");
    kb_matrix_free(&m);
    load_shipped("configs/seed-example.json", 16, 2);
    cr_assert_str_eq(m.protocol, "nncf");
    cr_assert_eq(m.configs[1].budget, 224);
    kb_matrix_free(&m);
    /* 16 tasks; full + 4 refined + 2x5x2 (H2O/SnapKV x budgets x sum/norm_sum) + 5 streaming
     * + 3x2 (TOVA/KeyDiff/ExpectedAttention x 512, 1024) + 2 PyramidKV + 2 AdaKV + the 2x2x2
     * query-agnostic twins of H2O/SnapKV at 512, 1024 */
    load_shipped("configs/nightly.json", 16, 1 + 4 + 20 + 5 + 6 + 2 + 2 + 8);
    long budgets[5] = {0};
    for (size_t i = 5; i < 25; i += 2)
        budgets[(i - 5) / 2 % 5] = m.configs[i].budget;
    long want[5] = {128, 256, 512, 1024, 2048};
    for (int i = 0; i < 5; i++)
        cr_assert_eq(budgets[i], want[i]);
    cr_assert_eq(m.configs[29].budget, 2048);
    /* the schedules' budget is their mean: the same 512 and 1024 */
    for (int i = 30; i < 40; i++)
        cr_assert_eq(m.configs[i].budget, i % 2 ? 1024 : 512, "%s", m.configs[i].name);
    for (int i = 40; i < 48; i++) {
        cr_assert_eq(m.configs[i].budget, i % 4 < 2 ? 512 : 1024, "%s", m.configs[i].name);
        cr_assert(strstr(m.configs[i].name, "_qa0"), "%s", m.configs[i].name);
    }
    kb_matrix_free(&m);
    /* the demo's 8 configs at 128 in both settings, and the full cache */
    load_shipped("configs/demo-query-agnostic.json", 3, 1 + 16);
    for (size_t i = 1; i < 17; i++)
        cr_assert_eq(m.configs[i].budget, 128, "%s", m.configs[i].name);
    kb_matrix_free(&m);
    /* the F32 baseline, 4 full caches at u8/u4 (by token, by channel), SnapKV W=32 at
     * 128 and 256 at f32, u8, u4 and u8, u4 by channel */
    load_shipped("configs/demo-kv-precision.json", 3, 1 + 4 + 6 + 4);
    for (size_t i = 1; i < 5; i++)
        cr_assert(kb_config_is_full(m.configs[i].params) && m.configs[i].budget == -1, "%s",
                  m.configs[i].name);
    kb_matrix_free(&m);
}

Test(matrix, load_prefixes_the_file_name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/bad.json", tu_dir);
    write_file(path, "{\"model\": \"m\", \"tasks\": [\"trec\"], \"configs\": [{\"algorithm\": "
                     "\"snapkv\", \"window_size\": -3}]}");
    cr_assert_lt(kb_matrix_load(path, &m, &err), 0);
    char want[600];
    snprintf(want, sizeof want, "%s: configs[0].window_size: must be > 0", path);
    cr_assert_str_eq(err.msg, want);
}

Test(matrix, run_dry_run_shows_the_plan_and_errors_name_the_key)
{
    char *nightly = tu_source("configs/nightly.json");
    tu_result r = tu_kvbench("run", nightly, "--dry-run", "--shard", "1/4", NULL);
    /* the plan, then the data checked: LongBench is not fetched here */
    cr_assert_eq(r.status, 1, "%s", r.err);
    cr_assert(strstr(r.err, "kvbench: run: narrativeqa: datasets/longbench/narrativeqa.jsonl: "
                            "cannot open: No such file or directory"),
              "%s", r.err);
    cr_assert(strstr(r.out, "run nightly -> results/nightly/shards/1-of-4\n"), "%s", r.out);
    cr_assert(strstr(r.out, "16 tasks:"));
    cr_assert(strstr(r.out, "48 configs (one prefill of the context per sample, shared by all; "
                            "then the question on the full cache, and batched on the 8 "
                            "query-agnostic caches):"),
              "%s", r.out);
    cr_assert(strstr(r.out, "  snapkv_s32_r64_i1952_normsum_norot "), "%s", r.out);
    cr_assert(strstr(r.out, "  h2o_s32_r64_i928_normsum_norot_qa0 "), "%s", r.out);
    tu_result_free(&r);
    r = tu_kvbench("run", nightly, "--dry-run", "--shard", "4/4", NULL);
    cr_assert_eq(r.status, 2);
    cr_assert(strstr(r.err, "need 0 <= I < N"), "%s", r.err);
    tu_result_free(&r);
    free(nightly);

    char path[512];
    snprintf(path, sizeof path, "%s/x.json", tu_dir);
    FILE *f = fopen(path, "w");
    fputs("{\"model\": \"m\", \"tasks\": [\"trec\"], \"sweep\": {\"algorithm\": [\"h2o\"], "
          "\"intermediate_size\": [64, -1]}}",
          f);
    fclose(f);
    r = tu_kvbench("run", path, "--dry-run", NULL);
    cr_assert_eq(r.status, 1);
    cr_assert(strstr(r.err, "x.json: sweep{algorithm=h2o,intermediate_size=-1}.intermediate_size: "
                            "must be >= 0"),
              "%s", r.err);
    tu_result_free(&r);
    /* the plan shows the budget the engine keeps (streaming: 32 + 512 + 64) */
    char *model = tu_source("tests/data/models/qwen3-bf16"), *samples = tu_source("datasets/samples");
    f = fopen(path, "w");
    fprintf(f,
            "{\"model\": \"%s\", \"data\": \"%s\", \"tasks\": [\"trec\"], \"configs\": "
            "[{\"algorithm\": \"streaming\", \"recent_size\": 64}]}",
            model, samples);
    fclose(f);
    free(model), free(samples);
    r = tu_kvbench("run", path, "--dry-run", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "budget 608 "), "%s", r.out);
    tu_result_free(&r);
}

/* ---- issue 17: names, paths and limits checked when a file is loaded ---- */

static char *write_in(const char *dir, const char *name, const char *text)
{
    char *path;
    cr_assert_geq(asprintf(&path, "%s/%s", dir, name), 0);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    return path;
}

Test(matrix, run_names_are_one_safe_folder_name)
{
    cr_assert(kb_name_is_safe("nightly-2026.12_01"));
    const char *bad[] = {"", "..", "../x", "a/b", ".hidden", "-x", "my config", NULL};
    for (int i = 0; bad[i]; i++)
        cr_assert_not(kb_name_is_safe(bad[i]), "'%s' accepted", bad[i]);
    char *demo = tu_source("configs/demo.json");
    for (int i = 0; i < 3; i++) {
        tu_result r = tu_kvbench("run", demo, "--dry-run", "--name", bad[i], NULL);
        cr_assert_eq(r.status, 2, "--name '%s': %s", bad[i], r.out);
        cr_assert(strstr(r.err, "a run name is one folder name"), "%s", r.err);
        tu_result_free(&r);
    }
    free(demo);
    /* a file name with a space still names the run */
    char *path =
        write_in(tu_dir, "my config.json", "{\"model\": \"Org/Name\", \"tasks\": [\"trec\"]}");
    cr_assert_eq(kb_matrix_load(path, &m, &err), 0, "%s", err.msg);
    cr_assert_str_eq(m.run_name, "my_config");
    kb_matrix_free(&m);
    free(path);
}

Test(matrix, relative_paths_are_found_beside_the_config)
{
    char *elsewhere = tu_mkdtemp();
    char *demo = tu_source("configs/demo.json"), *model = tu_source("models/kvbench-retrieval");
    char *data = tu_source("datasets/synthetic");
    char here[4096];
    cr_assert(getcwd(here, sizeof here));
    cr_assert_eq(chdir(elsewhere), 0);
    tu_result r = tu_kvbench("run", demo, "--dry-run", NULL);
    cr_assert_eq(chdir(here), 0);
    cr_assert_eq(r.status, 0, "%s", r.err);
    char want[8192];
    snprintf(want, sizeof want, "model %s\n", model);
    cr_assert(strstr(r.out, want), "the shipped demo.json from another folder: %s", r.out);
    snprintf(want, sizeof want, "data %s,", data);
    cr_assert(strstr(r.out, want), "%s", r.out);
    tu_result_free(&r);

    /* an explicit output that exists nowhere goes beside the config */
    char *path = write_in(tu_dir, "c.json",
                          "{\"model\": \"Org/Name\", \"output\": \"out\", "
                          "\"tasks\": [\"trec\"]}");
    cr_assert_eq(kb_matrix_load(path, &m, &err), 0, "%s", err.msg);
    cr_assert_str_eq(m.model, "Org/Name", "ORG/NAME with no folder ORG is a hub name");
    char *out;
    cr_assert_geq(asprintf(&out, "%s/out", tu_dir), 0);
    cr_assert_str_eq(m.output, out);
    kb_matrix_free(&m);
    free(path);
    free(out);

    /* a local path that is missing is an error, not a download */
    char *models;
    cr_assert_geq(asprintf(&models, "%s/models", tu_dir), 0);
    cr_assert_eq(mkdir(models, 0777), 0);
    path = write_in(tu_dir, "d.json", "{\"model\": \"models/missing\", \"tasks\": [\"trec\"]}");
    cr_assert_lt(kb_matrix_load(path, &m, &err), 0);
    cr_assert(strstr(err.msg, "model: 'models/missing' is no folder"), "%s", err.msg);
    free(path);
    path = write_in(tu_dir, "e.json", "{\"model\": \"m\", \"tasks\": [\"trec\"]}");
    cr_assert_lt(kb_matrix_load(path, &m, &err), 0);
    cr_assert(strstr(err.msg, "no hub name ORG/NAME"), "%s", err.msg);
    free(path);
    free(models);
    free(demo), free(model), free(data);
    tu_rmtree(elsewhere);
    free(elsewhere);
}

Test(matrix, sizes_and_budgets_are_checked_before_any_run)
{
    expect_error("{" BASE ", \"max_new_tokens\": 1e9}", "max_new_tokens: must be <= 1048576");
    expect_error("{\"model\": \"m\", \"tasks\": [{\"task\": \"trec\", \"max_length\": 1e12}]}",
                 "tasks[0].max_length: must be <= 2147483647");
    /* dry-run uses the eviction module's own checks, which add in 64 bits */
    char *model = tu_source("models/kvbench-retrieval"), *text;
    cr_assert_geq(asprintf(&text,
                           "{\"model\": \"%s\", \"tasks\": [\"trec\"], \"configs\": "
                           "[{\"algorithm\": \"h2o\", \"start_size\": 2147483647, "
                           "\"recent_size\": 1, \"intermediate_size\": 0}]}",
                           model),
                  0);
    char *path = write_in(tu_dir, "big.json", text);
    tu_result r = tu_kvbench("run", path, "--dry-run", NULL);
    cr_assert_eq(r.status, 1, "%s", r.out);
    cr_assert(strstr(r.err, "start_size + intermediate_size + recent_size = 2147483648: must be "
                            "<= 1073741824"),
              "%s", r.err);
    tu_result_free(&r);
    free(path);
    free(text);
    free(model);
}

/* cJSON would cut a config name at "\u0000" (two configs could then share a
 * folder) or pass ill-formed UTF-8 into run.json: both are refused with the
 * line, and an escaped backslash before "u0000" is no NUL. */
Test(matrix, load_refuses_nul_characters_and_invalid_utf8)
{
    char path[512];
    snprintf(path, sizeof path, "%s/nul.json", tu_dir);
    static const struct {
        const char *text, *what;
    } cases[] = {
        {"{\"model\": \"m\", \"tasks\": [\"trec\"],\n\"configs\": [{\"name\": \"a\\u0000b\"}]}",
         ":2: name: a string holds \\u0000 (NUL), which names and paths cannot hold"},
        {"{\"model\": \"m\", \"tasks\": [\"tr\\u0000ec\"]}",
         ":1: tasks: a string holds \\u0000 (NUL), which names and paths cannot hold"},
        {"{\"model\": \"m\", \"con\\u0000figs\": []}",
         ":1: a key holds \\u0000 (NUL), which keys cannot hold"},
        {"{\"model\": \"m\xc3\"}", ":1: invalid UTF-8 at byte 13 (0xC3)"},
        {"\xEF\xBB\xBF{\"model\": \"m\", \"tasks\": [\"trec\"]}",
         ": the file starts with a UTF-8 byte order mark (BOM, bytes EF BB BF), which JSON does "
         "not allow: save the file as UTF-8 without BOM"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        FILE *f = fopen(path, "w");
        fputs(cases[i].text, f);
        fclose(f);
        cr_assert_lt(kb_matrix_load(path, &m, &err), 0);
        char want[600];
        snprintf(want, sizeof want, "%s%s", path, cases[i].what);
        cr_expect_str_eq(err.msg, want);
    }
    FILE *f = fopen(path, "w");
    fputs("{\"model\": \"m\\\\u0000\", \"tasks\": [\"trec\"], \"configs\": []}", f);
    fclose(f);
    err.msg[0] = '\0'; /* the model folder does not exist; the text itself is fine */
    kb_matrix_load(path, &m, &err);
    cr_expect_null(strstr(err.msg, "NUL"), "%s", err.msg);
    cr_expect_null(strstr(err.msg, "UTF-8"), "%s", err.msg);
    kb_matrix_free(&m);
}

/* Issue 28: a huge integer is refused, not cast past a long; -0 is 0 in the
 * name as it is in the hash. */
Test(matrix, huge_integers_are_refused_and_minus_zero_is_zero)
{
    expect_error("{" BASE ", \"limit\": 9223372036854775807}",
                 "limit: must be <= 9007199254740991");
    expect_error("{\"model\": \"m\", \"tasks\": [{\"task\": \"trec\", \"limit\": 1e300}]}",
                 "tasks[0].limit: must be <= 9007199254740991");
    cr_assert_eq(parse("{" BASE ", \"limit\": 9007199254740991}"), 0, "%s", err.msg);
    kb_matrix_free(&m);

    cr_assert_eq(parse("{" BASE ", \"sweep\": {\"algorithm\": \"h2o\", \"intermediate_size\": [-0]}}"),
                 0, "%s", err.msg);
    cr_assert_str_eq(m.configs[1].name, "h2o_i0");
    char zero[17];
    cJSON *p = cJSON_Parse("{\"algorithm\": \"h2o\", \"intermediate_size\": 0}");
    cr_assert_eq(kb_config_hash_json(p, zero), 0);
    cr_assert_str_eq(m.configs[1].hash, zero);
    cJSON_Delete(p);
    kb_matrix_free(&m);
}

/* The hash of one eviction config given as JSON text. */
static void hash_of(const char *json, char hash[17])
{
    cJSON *p = cJSON_Parse(json);
    cr_assert_eq(kb_config_hash_json(p, hash), 0);
    cJSON_Delete(p);
}

/* Issue 28: "budget" is the tokens kept, whatever the algorithm; the config
 * is the intermediate_size one it gives (same hash), named by the budget. */
Test(matrix, a_budget_sets_intermediate_size_for_every_algorithm)
{
    cr_assert_eq(parse("{" BASE ", \"sweep\": {\"algorithm\": [\"h2o\", \"streaming\"], "
                       "\"recent_size\": 64, \"budget\": [128, 1000]}}"),
                 0, "%s", err.msg);
    cr_assert_eq(m.n_configs, 5);
    static const struct {
        const char *name, *same;
        long budget;
    } want[] = {
        {"h2o_r64_b128", "{\"algorithm\": \"h2o\", \"recent_size\": 64, \"intermediate_size\": 32}", 128},
        {"h2o_r64_b1000", "{\"algorithm\": \"h2o\", \"recent_size\": 64, \"intermediate_size\": 904}", 1000},
        {"streaming_r64_b128", "{\"algorithm\": \"streaming\", \"recent_size\": 64, \"intermediate_size\": 32}", 128},
        {"streaming_r64_b1000", "{\"algorithm\": \"streaming\", \"recent_size\": 64, \"intermediate_size\": 904}", 1000},
    };
    for (size_t i = 0; i < 4; i++) {
        const kb_config *c = &m.configs[i + 1];
        char hash[17];
        hash_of(want[i].same, hash);
        cr_expect_str_eq(c->name, want[i].name);
        cr_expect_str_eq(c->hash, hash, "%s", c->name);
        cr_expect_eq(c->budget, want[i].budget, "%s", c->name);
        cr_expect_eq(c->budget_asked, want[i].budget, "%s", c->name);
        cr_expect_null(cJSON_GetObjectItem(c->params, "budget"));
    }
    kb_matrix_free(&m);
    /* per_group: its sizes divide by the group, so one group fewer at most */
    cr_assert_eq(parse("{" BASE ", \"configs\": [{\"algorithm\": \"h2o\", \"strategy\": "
                       "\"per_group\", \"group_size\": 16, \"budget\": 200}]}"),
                 0, "%s", err.msg);
    cr_expect_eq(m.configs[1].budget, 192);
    cr_expect_eq(cJSON_GetObjectItem(m.configs[1].params, "intermediate_size")->valueint, 32);
    kb_matrix_free(&m);
    expect_error("{" BASE ", \"configs\": [{\"algorithm\": \"h2o\", \"budget\": 100}]}",
                 "configs[0].budget: 100 is below start_size + recent_size = 160, which every "
                 "config keeps: lower them or raise the budget");
    expect_error("{" BASE ", \"configs\": [{\"budget\": 300, \"intermediate_size\": 8}]}",
                 "configs[0].budget: give budget or intermediate_size, not both");
    expect_error("{" BASE ", \"configs\": [{\"budget\": 0.5}]}",
                 "configs[0].budget: must be an integer in 1..1073741824");
}

/* Issue 28: "compression_ratio" is kvpress's: the share of each prompt
 * evicted, so the kept count is int(n * (1 - r)) and the intermediate size
 * what is left of it after start and recent. A ratio of 0 is no ratio
 * (the hashes stored before it stay). */
Test(matrix, a_compression_ratio_is_a_budget_per_prompt)
{
    kv_evict_params p;
    kv_evict_params_default(&p);
    p.start_size = 4, p.recent_size = 32, p.compression_ratio = 0.5;
    kv_evict_params_for_prompt(&p, 1017);
    cr_expect_eq(kv_evict_params_budget(&p), 508);
    p.compression_ratio = 0.9;
    kv_evict_params_for_prompt(&p, 1520); /* int(1520 * (1 - 0.9)) = int(151.99999999999997) */
    cr_expect_eq(kv_evict_params_budget(&p), 151);
    kv_evict_params_for_prompt(&p, 100); /* 10 kept: no room past start and recent */
    cr_expect_eq(p.intermediate_size, 0);
    kv_evict_params_default(&p);
    p.strategy[0] = '\0', strcat(p.strategy, "per_group");
    p.group_size = 16, p.start_size = 16, p.recent_size = 16, p.refined_size = 400;
    p.compression_ratio = 0.75;
    kv_evict_params_for_prompt(&p, 1000); /* 250 kept: 218 rounded down to 208 */
    cr_expect_eq(p.intermediate_size, 208);
    cr_expect_eq(p.refined_size, 208);
    kv_evict_params_default(&p);
    p.compression_ratio = 0;
    kv_evict_params_for_prompt(&p, 1000);
    cr_expect_eq(p.intermediate_size, 512, "no ratio, no change");

    cr_assert_eq(parse("{" BASE ", \"sweep\": {\"algorithm\": \"snapkv\", \"compression_ratio\": "
                       "[0.5, 0]}}"),
                 0, "%s", err.msg);
    cr_expect_str_eq(m.configs[1].name, "snapkv_cr0.5");
    cr_expect_eq(m.configs[1].budget, KB_BUDGET_PER_PROMPT);
    char hash[17];
    hash_of("{\"algorithm\": \"snapkv\"}", hash);
    cr_expect_str_eq(m.configs[2].hash, hash, "a ratio of 0 is none");
    cr_expect_eq(m.configs[2].budget, 672);
    kb_matrix_free(&m);
    expect_error("{" BASE ", \"configs\": [{\"compression_ratio\": 0.5, \"budget\": 300}]}",
                 "configs[0].compression_ratio: sets the budget of each prompt: give it without "
                 "budget");
    expect_error("{" BASE ", \"configs\": [{\"compression_ratio\": 0.5, \"intermediate_size\": 8}]}",
                 "configs[0].compression_ratio: sets the budget of each prompt: give it without "
                 "intermediate_size");
    expect_error("{" BASE ", \"configs\": [{\"compression_ratio\": 1}]}",
                 "configs[0]: compression_ratio must be in [0, 1).");
}

/* Issue 28: "SnapKV" is snapkv in files as on the command line, and a
 * misspelt key (the CLI's "intermediate-size", "budjet") names the key it
 * is nearest to. */
Test(matrix, names_ignore_case_and_unknown_keys_suggest_the_nearest)
{
    cr_assert_eq(parse("{" BASE ", \"configs\": [{\"algorithm\": \"SnapKV\", "
                       "\"intermediate_size\": 64, \"window_size\": 8, \"strategy\": \"Per_Token\"}]}"),
                 0, "%s", err.msg);
    char hash[17];
    hash_of("{\"algorithm\": \"snapkv\", \"intermediate_size\": 64}", hash);
    cr_expect_str_eq(m.configs[1].hash, hash);
    cr_expect_str_eq(m.configs[1].name, "snapkv_i64_w8");
    cr_expect_str_eq(cJSON_GetObjectItem(m.configs[1].params, "algorithm")->valuestring, "snapkv");
    kb_matrix_free(&m);
    cr_assert_eq(parse("{" BASE ", \"configs\": [{\"algorithm\": \"FULL\"}]}"), 0, "%s", err.msg);
    cr_expect_eq(m.n_configs, 1, "the baseline");
    kb_matrix_free(&m);
    expect_error("{" BASE ", \"configs\": [{\"algorithm\": \"h2o\", \"intermediate-size\": 64}]}",
                 "configs[0].intermediate-size: unknown eviction parameter (did you mean "
                 "\"intermediate_size\"?)");
    expect_error("{" BASE ", \"configs\": [{\"budjet\": 64}]}",
                 "configs[0].budjet: unknown eviction parameter (did you mean \"budget\"?)");
    expect_error("{" BASE ", \"configs\": [{\"xyzzy\": 64}]}",
                 "configs[0].xyzzy: unknown eviction parameter");
}

Test(matrix, configs_equal_once_defaults_apply_are_one_config)
{
    cJSON *a = cJSON_Parse("{\"algorithm\": \"h2o\", \"intermediate_size\": 64}");
    cJSON *b =
        cJSON_Parse("{\"algorithm\": \"h2o\", \"intermediate_size\": 64, \"start_size\": 32, "
                    "\"score_aggregation\": \"sum\"}");
    cJSON *c =
        cJSON_Parse("{\"algorithm\": \"h2o\", \"intermediate_size\": 64, \"start_size\": 16}");
    char ha[17], hb[17], hc[17];
    cr_assert_eq(kb_config_hash_json(a, ha), 0);
    cr_assert_eq(kb_config_hash_json(b, hb), 0);
    cr_assert_eq(kb_config_hash_json(c, hc), 0);
    cr_assert_str_eq(ha, hb, "defaults spelt out are the same config");
    cr_assert_str_neq(ha, hc, "a value other than the default is another config");
    cJSON_Delete(a);
    cJSON_Delete(b);
    cJSON_Delete(c);
    /* the matrix runs it once: it refuses the second spelling */
    expect_error("{" BASE ", \"configs\": [{\"algorithm\": \"h2o\", \"intermediate_size\": 64}, "
                 "{\"algorithm\": \"h2o\", \"intermediate_size\": 64, \"start_size\": 32, "
                 "\"score_aggregation\": \"sum\"}]}",
                 "configs[1] (\"h2o_s32_i64_sum\") is the same config as configs[0] "
                 "(\"h2o_i64\"); remove one");
    /* snapkv's window none is its window 8 */
    expect_error("{" BASE ", \"configs\": [{\"algorithm\": \"snapkv\"}, {\"algorithm\": "
                 "\"snapkv\", \"window_size\": 16}, {\"algorithm\": \"snapkv\", "
                 "\"window_size\": 8}]}",
                 "configs[2] (\"snapkv_w8\") is the same config as configs[0] (\"snapkv\"); "
                 "remove one");
    /* so does a sweep that spells out the default */
    expect_error("{" BASE ", \"configs\": [{\"algorithm\": \"snapkv\"}], "
                 "\"sweep\": {\"algorithm\": \"snapkv\", \"recent_size\": [64, 128]}}",
                 "sweep{recent_size=128} (\"snapkv_r128\") is the same config as configs[0] "
                 "(\"snapkv\"); remove one");
}

/* The case: streaming without intermediate_size keeps
 * 32 + 512 + 64 = 608 tokens, and the matrix says so. */
Test(matrix, budget_is_the_engines)
{
    cr_assert_eq(parse("{" BASE ", \"configs\": [{\"algorithm\": \"streaming\", \"recent_size\": "
                       "64}, {\"algorithm\": \"h2o\", \"start_size\": 0, \"recent_size\": 0, "
                       "\"intermediate_size\": 7}]}"),
                 0, "%s", err.msg);
    cr_assert_eq(m.configs[1].budget, 608);
    cr_assert_eq(m.configs[2].budget, 7);
    kb_matrix_free(&m);
}

/* Every parameter comes from the table: each key the table lists is
 * accepted by the matrix with its default, its CLI flag is in --help with
 * that default, and the committed schema holds the generated properties. */
/* Issue 28: `kvbench schema` prints the whole document, a JSON Schema
 * that is the committed one (whose eviction part the test below keeps
 * current), not only its generated fragment. */
Test(matrix, schema_prints_the_whole_document)
{
    tu_result r = tu_kvbench("schema", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    char *path = tu_source("configs/schema.json");
    char *committed = tu_slurp(path, NULL);
    cr_assert_str_eq(r.out, committed);
    cJSON *doc = cJSON_Parse(r.out);
    cr_assert_str_eq(cJSON_GetObjectItem(doc, "$schema")->valuestring,
                     "https://json-schema.org/draft/2020-12/schema");
    cr_assert(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "$defs"), "eviction"),
                                  "properties"));
    cJSON_Delete(doc);
    free(committed), free(path);
    tu_result_free(&r);
}

Test(matrix, parameter_table_drives_validation_cli_and_schema)
{
    tu_result h = tu_kvbench("generate", "--help", NULL);
    cr_assert_eq(h.status, 0, "%s", h.err);
    const kv_evict_param_def *d;
    for (int i = 0; (d = kv_evict_param(i)); i++) {
        char cfg[512], flag[128];
        const char *q = d->type == KV_PARAM_NAME ? "\"" : "";
        const char *v = strcmp(d->dflt, "none") == 0 ? "null" : d->dflt;
        char alg[96] = ""; /* a key of one algorithm comes with it */
        if (d->only_for)
            snprintf(alg, sizeof alg, "\"algorithm\": \"%s\", ", d->only_for);
        snprintf(cfg, sizeof cfg, "{" BASE ", \"configs\": [{%s\"%s\": %s%s%s}]}", alg, d->key, q,
                 v, q);
        cr_assert_eq(parse(cfg), 0, "%s: %s", cfg, err.msg);
        kb_matrix_free(&m);
        snprintf(flag, sizeof flag, "--%s %s", d->flag, d->metavar);
        const char *at = strstr(h.out, flag);
        cr_assert_not_null(at, "--help lacks %s", flag);
        snprintf(flag, sizeof flag, "(default %s)", d->dflt);
        cr_assert(strstr(at, flag) && strstr(at, flag) < strchr(at, '\n'), "%s: %s", d->key, flag);
    }
    /* a key the table does not list, and a range taken from it */
    expect_error("{" BASE ", \"configs\": [{\"start_sise\": 1}]}",
                 "configs[0].start_sise: unknown eviction parameter (did you mean "
                 "\"start_size\"?)");
    expect_error("{" BASE ", \"configs\": [{\"algorithm\": \"snapkv\", \"window_size\": 0}]}",
                 "configs[0].window_size: must be > 0");
    expect_error("{" BASE ", \"configs\": [{\"algorithm\": \"h2o\", \"window_size\": 8}]}",
                 "configs[0].window_size: only supported for the snapkv algorithm");
    expect_error("{" BASE ", \"configs\": [{\"seed\": 4294967296}]}",
                 "configs[0].seed: must be <= 4294967295");
    char *path = tu_source("configs/schema.json");
    char *schema = tu_slurp(path, NULL);
    char *block = kb_eviction_schema_text();
    cr_assert(strstr(schema, block),
              "configs/schema.json is stale: run kvbench schema --write configs/schema.json");
    /* kvbench schema --write puts it back into a stale copy, byte for byte */
    char copy[512];
    snprintf(copy, sizeof copy, "%s/schema.json", tu_dir);
    char *stale = strdup(schema);
    char *at = strstr(stale, "\"start_size\"");
    memcpy(at, "\"start_sise\"", 12);
    FILE *f = fopen(copy, "w");
    fputs(stale, f);
    fclose(f);
    tu_result w = tu_kvbench("schema", "--write", copy, NULL);
    cr_assert_eq(w.status, 0, "%s", w.err);
    char *fixed = tu_slurp(copy, NULL);
    cr_assert_str_eq(fixed, schema);
    free(fixed);
    free(stale);
    tu_result_free(&w);
    free(block);
    free(schema);
    free(path);
    tu_result_free(&h);
}

/* The budget the matrix reports (run.json, reports, --dry-run) is what the
 * engine's cache holds after every eviction, for every algorithm, strategy
 * and refiner: one sweep run on the tiny test model. */
typedef struct kept_run {
    kv_evictor *ev;
    kv_attn_stats_request req;
    int n_prompt, group, budget;
} kept_run;

static int check_kept(void *user, kv_cache *c, const kv_attn_stats *stats, int step, kv_error *e)
{
    const kept_run *r = user;
    int kept_budget = r->budget;
    if (kv_evictor_step(r->ev, c, &r->req, stats, step, NULL, NULL, e) != 0)
        return -1;
    int total = r->n_prompt + step; /* tokens fed so far */
    int want = total < kept_budget ? total : kept_budget;
    /* per_group evicts whole groups: up to group_size - 1 below the budget */
    int slack = r->group - 1;
    for (int l = 0; l < c->n_layers; l++) {
        int len = c->layers[l].len;
        cr_assert(len <= want && len >= want - slack, "step %d layer %d: %d kept, budget %d", step,
                  l, len, kept_budget);
    }
    return 0;
}

Test(matrix, reported_budget_is_what_the_cache_keeps, .timeout = 300)
{
    char algs[256] = "";
    for (int i = 0; kv_evict_algorithm(i); i++)
        snprintf(algs + strlen(algs), sizeof algs - strlen(algs), "%s\"%s\"", i ? ", " : "",
                 kv_evict_algorithm(i));
    char text[2048];
    snprintf(text, sizeof text,
             "{" BASE ", \"sweep\": ["
             "{\"algorithm\": [%s], \"start_size\": 4, \"recent_size\": 16, "
             "\"intermediate_size\": [0, 44]},"
             "{\"algorithm\": \"h2o\", \"strategy\": [\"per_group\", \"per_head\"], "
             "\"group_size\": 4, \"start_size\": 4, \"recent_size\": 8, \"intermediate_size\": 40},"
             "{\"algorithm\": \"snapkv\", \"refined_algorithm\": [\"kvcrush\", \"criticalkv\"], "
             "\"refined_size\": 8, \"start_size\": 4, \"recent_size\": 16, "
             "\"intermediate_size\": 20}]}",
             algs);
    cr_assert_eq(parse(text), 0, "%s", err.msg);
    char *dir = tu_source("tests/data/models/qwen3-bf16");
    kv_model *model;
    cr_assert_eq(kv_model_load(dir, &model, &err), 0, "%s", err.msg);
    kv_evict_model em;
    cr_assert_eq(kv_evict_model_load(&em, model, true, &err), 0, "%s", err.msg);
    enum { N_PROMPT = 120, N_NEW = 3 };
    int32_t prompt[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++)
        prompt[i] = 10 + 37 * i % 500; /* the tiny model has 512 ids */
    for (size_t c = 1; c < m.n_configs; c++) {
        kv_evict_params p;
        kv_evict_params_default(&p);
        cr_assert_eq(kv_evict_params_from_json(&p, m.configs[c].params, &err), 0, "%s", err.msg);
        cr_assert_eq(m.configs[c].budget, kv_evict_params_budget(&p), "%s", m.configs[c].name);
        cr_assert_lt(m.configs[c].budget, N_PROMPT, "%s evicts", m.configs[c].name);
        kept_run r = {.n_prompt = N_PROMPT,
                      .group = strcmp(p.strategy, "per_group") == 0 ? p.group_size : 1,
                      .budget = (int)m.configs[c].budget};
        r.ev = kv_evictor_new(&p, &em, &err);
        cr_assert_not_null(r.ev, "%s: %s", m.configs[c].name, err.msg);
        kv_evictor_generation_request(r.ev, &r.req);
        kv_generate_opts o = {.max_new_tokens = N_NEW,
                              .ignore_eos = true,
                              .on_step = check_kept,
                              .stats_req = r.req,
                              .user = &r};
        kv_cache *cache = kv_model_cache_new(model, N_PROMPT + N_NEW, &err);
        kv_generation g;
        cr_assert_eq(kv_generate(model, cache, prompt, N_PROMPT, &o, &g, &err), 0, "%s: %s",
                     m.configs[c].name, err.msg);
        kv_generation_free(&g);
        kv_cache_free(cache);
        kv_evictor_free(r.ev);
    }
    kv_evict_model_release(&em);
    kv_model_free(model);
    free(dir);
    kb_matrix_free(&m);
}
