/* kvcore/evict: what a user wrote, decoded and checked once against the
 * parameter table (evict_params.h) -- each problem with the key at fault
 * apart from its message, the keys given, the keys moved from their
 * defaults -- and the same parameters as the engine's lenient parser reads. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "evict/evict_params.h"

static kv_evict_params p;
static kv_evict_problem pr;

/* Setting key to value from text fails with exactly this key and message. */
static void expect_set_problem(const char *key, const char *value, const char *want_key,
                               const char *want_msg)
{
    kv_evict_params_default(&p);
    cr_assert_neq(kv_evict_param_set_checked(&p, key, value, &pr), 0, "%s=%s accepted", key, value);
    cr_assert_str_eq(pr.key, want_key, "%s=%s", key, value);
    cr_assert_str_eq(pr.err.msg, want_msg, "%s=%s", key, value);
}

static cJSON *json; /* the last decoded; a problem's key may point into it */

/* Decoding text (a JSON object onto the defaults); *given gets its keys. */
static int decode(const char *text, kv_evict_keys *given)
{
    cJSON_Delete(json);
    json = cJSON_Parse(text);
    cr_assert_not_null(json, "%s", text);
    kv_evict_params_default(&p);
    return kv_evict_params_decode(&p, json, given, &pr);
}

static void fini(void)
{
    cJSON_Delete(json);
    json = NULL;
}

TestSuite(evict_checked, .fini = fini);

static void expect_decode_problem(const char *text, const char *want_key, const char *want_msg)
{
    kv_evict_keys given;
    cr_assert_neq(decode(text, &given), 0, "accepted: %s", text);
    if (want_key)
        cr_assert_str_eq(pr.key, want_key, "%s", text);
    else
        cr_assert_null(pr.key, "%s", text);
    cr_assert_str_eq(pr.err.msg, want_msg, "%s", text);
}

/* The bit of a table key. */
static kv_evict_keys key_bit(const char *key)
{
    const kv_evict_param_def *d = kv_evict_param_exact(key);
    cr_assert_not_null(d, "%s", key);
    return KV_EVICT_KEY(d - kv_evict_param(0));
}

Test(evict_checked, text_values_are_checked_against_the_table)
{
    expect_set_problem("--start-size", "-4", "start_size", "must be >= 0");
    expect_set_problem("group-size", "0", "group_size", "must be > 0");
    expect_set_problem("seed", "4294967296", "seed", "must be <= 4294967295");
    expect_set_problem("key_group_size", "513", "key_group_size", "must be <= 512");
    expect_set_problem("start_size", "lots", "start_size", "expected an integer, got 'lots'");
    expect_set_problem("window_size", "0", "window_size", "must be > 0");
    expect_set_problem("ea_epsilon", "nan", "ea_epsilon", "expected a finite number, got 'nan'");
    expect_set_problem("apply_rerotation", "maybe", "apply_rerotation",
                       "expected true or false, got 'maybe'");
    expect_set_problem("strategy", "per_layer", "strategy",
                       "must be one of per_token, per_group, per_head");
    expect_set_problem("--budget", "3", "--budget", "unknown eviction parameter");
    /* what passes is set, names in lower case */
    kv_evict_params_default(&p);
    cr_assert_eq(kv_evict_param_set_checked(&p, "--eviction", "SnapKV", &pr), 0, "%s", pr.err.msg);
    cr_assert_str_eq(p.algorithm, "snapkv");
    cr_assert_eq(kv_evict_param_set_checked(&p, "window_size", "none", &pr), 0, "%s", pr.err.msg);
    cr_assert(!p.has_window);
    cr_assert_eq(kv_evict_param_set_checked(&p, "eviction-seed", "4294967295", &pr), 0);
    cr_assert_eq(p.seed, 4294967295u);
}

/* Every row's default passes as text, and a word where its type wants
 * something else is refused under the row's key. */
Test(evict_checked, every_row_checks_its_own_type)
{
    const kv_evict_param_def *d;
    for (int i = 0; (d = kv_evict_param(i)); i++) {
        kv_evict_params_default(&p);
        cr_assert_eq(kv_evict_param_set_checked(&p, d->flag, d->dflt, &pr), 0, "%s: %s", d->key,
                     pr.err.msg);
        cr_assert_neq(kv_evict_param_set_checked(&p, d->key, "many", &pr), 0, "%s", d->key);
        cr_assert_str_eq(pr.key, d->key);
    }
}

Test(evict_checked, json_keys_are_checked_and_given)
{
    kv_evict_keys given;
    cr_assert_eq(decode("{\"algorithm\": \"SnapKV\", \"window_size\": null, \"start_size\": 4}",
                        &given),
                 0, "%s", pr.err.msg);
    cr_assert_eq(given, key_bit("algorithm") | key_bit("start_size"), "a null window is none given");
    cr_assert_str_eq(p.algorithm, "snapkv");
    cr_assert_eq(p.start_size, 4);
    expect_decode_problem("{\"start-size\": 4}", "start-size", "unknown eviction parameter");
    expect_decode_problem("{\"start_size\": 1.5}", "start_size", "must be an integer");
    expect_decode_problem("{\"start_size\": 3e9}", "start_size", "must be <= 2147483647");
    expect_decode_problem("{\"ea_epsilon\": \"x\"}", "ea_epsilon", "must be a finite number");
    expect_decode_problem("{\"apply_rerotation\": 1}", "apply_rerotation", "must be true or false");
    expect_decode_problem("{\"positions\": 3}", "positions", "must be one of absolute, compact");
    expect_decode_problem("[1]", NULL, "an eviction config must be an object");
}

Test(evict_checked, given_keys_must_apply_then_the_rules_between_keys)
{
    kv_evict_keys given;
    cr_assert_eq(decode("{\"algorithm\": \"h2o\", \"window_size\": 8}", &given), 0);
    cr_assert_neq(kv_evict_params_check(&p, given, &pr), 0);
    cr_assert_str_eq(pr.key, "window_size");
    cr_assert_str_eq(pr.err.msg, "only supported for the snapkv algorithm");
    /* given at its default it is still given; not moved from it, it is not */
    cr_assert_eq(decode("{\"algorithm\": \"h2o\", \"ea_epsilon\": 0}", &given), 0);
    cr_assert_neq(kv_evict_params_check(&p, given, &pr), 0);
    cr_assert_str_eq(pr.key, "ea_epsilon");
    cr_assert_eq(kv_evict_params_check(&p, kv_evict_params_moved(&p), &pr), 0, "%s", pr.err.msg);
    cr_assert_eq(decode("{\"algorithm\": \"h2o\", \"window_size\": null}", &given), 0);
    cr_assert_eq(kv_evict_params_check(&p, given, &pr), 0, "%s", pr.err.msg);
    /* a rule between keys names none, with NNCF's message */
    cr_assert_eq(decode("{\"refined_size\": 64, \"intermediate_size\": 32}", &given), 0);
    cr_assert_neq(kv_evict_params_check(&p, given, &pr), 0);
    cr_assert_null(pr.key);
    cr_assert_str_eq(pr.err.msg, "refined_size cannot be greater than intermediate_size.");
}

Test(evict_checked, moved_keys_are_those_off_their_defaults)
{
    kv_evict_params_default(&p);
    cr_assert_eq(kv_evict_params_moved(&p), 0);
    cr_assert_eq(kv_evict_param_set_checked(&p, "start_size", "4", &pr), 0);
    cr_assert_eq(kv_evict_param_set_checked(&p, "recent_size", "128", &pr), 0, "the default");
    cr_assert_eq(kv_evict_param_set_checked(&p, "window_size", "8", &pr), 0);
    cr_assert_eq(kv_evict_params_moved(&p), key_bit("start_size") | key_bit("window_size"));
}

/* What the checked decoding sets is what the engine's own parser reads. */
Test(evict_checked, decoding_agrees_with_the_engines_parser)
{
    static const char *const configs[] = {
        "{\"algorithm\": \"SnapKV\", \"strategy\": \"per_group\", \"group_size\": 4, "
        "\"start_size\": 4, \"recent_size\": 32, \"intermediate_size\": 92, \"window_size\": 16}",
        "{\"algorithm\": \"expected_attention\", \"ea_epsilon\": 0.001, \"seed\": 4294967295, "
        "\"kv_cache_precision\": \"U8\", \"query_aware\": false, \"compression_ratio\": 0.5}",
    };
    for (size_t i = 0; i < sizeof configs / sizeof *configs; i++) {
        kv_evict_keys given;
        cr_assert_eq(decode(configs[i], &given), 0, "%s", pr.err.msg);
        kv_evict_params q;
        kv_error err;
        kv_evict_params_default(&q);
        cJSON *j = cJSON_Parse(configs[i]);
        cr_assert_eq(kv_evict_params_from_json(&q, j, &err), 0, "%s", err.msg);
        cJSON *a = kv_evict_params_to_json(&p), *b = kv_evict_params_to_json(&q);
        cr_assert(cJSON_Compare(a, b, true), "%s", configs[i]);
        cJSON_Delete(a);
        cJSON_Delete(b);
        cJSON_Delete(j);
    }
}
