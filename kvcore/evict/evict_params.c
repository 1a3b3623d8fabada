/* Eviction parameters: defaults, the one parser (JSON or text), validation,
 * and the checked decoding of what a user wrote (evict_params.h). */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "evict/evict_impl.h"
#include "evict/evict_params.h"
#include "evict/evict_table.h"

/* ---- the table (evict_table.h), one row per key ---- */

/* clang-format off */
#define ROW(key, type, dflt, min, max, choices, only_for, flag, metavar, help, token, abbrev) \
    {#key, KV_PARAM_##type, offsetof(kv_evict_params, key), dflt, min, max, choices, only_for, \
     flag, metavar, help, token, abbrev},
/* clang-format on */
static const kv_evict_param_def fields[] = {KV_EVICT_PARAM_TABLE(ROW)};
#undef ROW
#define N_FIELDS (sizeof fields / sizeof fields[0])
typedef kv_evict_param_def field;

const kv_evict_param_def *kv_evict_param(int i)
{
    return i >= 0 && (size_t)i < N_FIELDS ? &fields[i] : NULL;
}

const char *kv_evict_param_key(int i)
{
    return i >= 0 && (size_t)i < N_FIELDS ? fields[i].key : NULL;
}

/* "--start-size", "start-size" and "start_size" all name start_size; so
 * does the flag ("--eviction" is algorithm). */
const kv_evict_param_def *kv_evict_param_find(const char *key)
{
    while (key[0] == '-')
        key++;
    char norm[64];
    size_t n = strlen(key);
    if (n >= sizeof norm)
        return NULL;
    for (size_t i = 0; i <= n; i++)
        norm[i] = key[i] == '-' ? '_' : key[i];
    for (size_t i = 0; i < N_FIELDS; i++)
        if (strcmp(fields[i].key, norm) == 0 || strcmp(fields[i].flag, key) == 0)
            return &fields[i];
    return NULL;
}

static int set_field(kv_evict_params *p, const field *f, const char *v, kv_error *err);

void kv_evict_params_default(kv_evict_params *p)
{
    memset(p, 0, sizeof *p);
    kv_error err;
    for (size_t i = 0; i < N_FIELDS; i++)
        if (set_field(p, &fields[i], fields[i].dflt, &err) != 0)
            abort(); /* a malformed default in evict_table.h: test_evict catches it */
}

bool kv_evict_param_is_cache(const char *key)
{
    static const char *const cache_keys[] = {"kv_cache_precision", "key_quant", "value_quant",
                                             "key_group_size", "value_group_size"};
    for (size_t i = 0; i < sizeof cache_keys / sizeof *cache_keys; i++)
        if (strcmp(key, cache_keys[i]) == 0)
            return true;
    return false;
}

kv_cache_quant kv_evict_params_cache_quant(const kv_evict_params *p)
{
    int precision = kv_precision_parse(p->kv_cache_precision);
    return (kv_cache_quant){
        .precision = precision < 0 ? KV_PREC_F32 : (kv_precision)precision,
        .key_by_channel = strcmp(p->key_quant, "by_channel") == 0,
        .key_group = p->key_group_size,
        .value_group = p->value_group_size,
    };
}

int kv_evict_params_budget(const kv_evict_params *p)
{
    return p->start_size + p->intermediate_size + p->recent_size;
}

int kv_evict_layer_intermediate(const kv_evict_params *p, int n_layers, int layer)
{
    if (strcmp(p->layer_budget, "pyramid") != 0 || n_layers <= 1)
        return p->intermediate_size;
    int G = strcmp(p->strategy, "per_group") == 0 ? p->group_size : 1;
    double K = (double)(p->intermediate_size / G);
    double lo = K / p->pyramid_beta, hi = 2.0 * K - lo;
    double step = (hi - lo) / (double)(n_layers - 1);
    /* nearbyint rounds half to even in the default rounding mode, as
     * Python's round does; round() would round half away from zero */
    return G * (int)nearbyint(hi - (double)layer * step);
}

int kv_evict_pyramid_kvpress(int q, double r, int w, double beta, int n_layers, int layer)
{
    double mcp = w + q * (1.0 - r);
    double lo = (mcp - w) / beta, hi = (mcp - w) * 2.0 - lo;
    if (hi >= q - w) {
        hi = q - w;
        lo = (mcp - w) * 2.0 - hi;
    }
    if (!(q >= hi && hi >= lo && lo >= w))
        return (int)nearbyint(q * (1.0 - r));
    double steps = (hi - lo) / (double)(n_layers - 1);
    return (int)nearbyint(hi - layer * steps);
}

int kv_evict_pyramid_original(int q, int max_capacity_prompt, int w, int beta, int n_layers,
                              int layer)
{
    int base = max_capacity_prompt - w;
    if (q < max_capacity_prompt)
        return q - w;
    if (q < 2 * base)
        return base;
    int lo = base / beta, hi = 2 * base - lo;
    if (hi >= q - w) {
        hi = q - w;
        lo = 2 * base - hi;
    }
    return hi - layer * ((hi - lo) / (n_layers - 1));
}

int kv_evict_params_window(const kv_evict_params *p)
{
    if (p->has_window)
        return p->window_size;
    return strcmp(p->algorithm, "snapkv") == 0 ? 8 : 0; /* NNCF's SnapKV default */
}

void kv_evict_params_resolve(kv_evict_params *p)
{
    int w = kv_evict_params_window(p);
    p->has_window = w > 0;
    p->window_size = w;
    /* a schedule's parameter does nothing without its schedule */
    kv_evict_params d;
    kv_evict_params_default(&d);
    if (strcmp(p->layer_budget, "pyramid") != 0)
        p->pyramid_beta = d.pyramid_beta;
    if (strcmp(p->head_budget, "adaptive") != 0)
        p->alpha_safeguard = d.alpha_safeguard;
}

static int unknown_key(const char *key, kv_error *err)
{
    char known[1024] = "";
    for (size_t i = 0; i < N_FIELDS; i++) {
        strcat(known, i ? ", " : "");
        strcat(known, fields[i].key);
    }
    return kv_fail(err, "eviction config: unknown key '%s' (known keys: %s)", key, known);
}

/* Names are stored lower-cased so "SnapKV" (NNCF's enum value) and
 * "snapkv" are the same; validation checks whether the name exists. */
static int set_name(char *dst, const field *f, const char *v, kv_error *err)
{
    size_t n = strlen(v);
    if (n >= KV_EVICT_NAME_MAX)
        return kv_fail(err, "eviction config: %s: '%.40s' is not a known name", f->key, v);
    for (size_t i = 0; i <= n; i++)
        dst[i] = (char)tolower((unsigned char)v[i]);
    return 0;
}

static int parse_int(const field *f, const char *v, int *out, kv_error *err)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (end == v || *end != '\0' || errno || x < INT_MIN || x > INT_MAX)
        return kv_fail(err, "eviction config: %s: expected an integer, got '%s'", f->key, v);
    *out = (int)x;
    return 0;
}

static int parse_number(const field *f, const char *v, double *out, kv_error *err)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || *end != '\0' || errno == ERANGE || !isfinite(x))
        return kv_fail(err, "eviction config: %s: expected a finite number, got '%s'", f->key, v);
    *out = x;
    return 0;
}

static int parse_bool(const field *f, const char *v, bool *out, kv_error *err)
{
    if (!strcasecmp(v, "true") || !strcmp(v, "1") || !strcasecmp(v, "yes"))
        *out = true;
    else if (!strcasecmp(v, "false") || !strcmp(v, "0") || !strcasecmp(v, "no"))
        *out = false;
    else
        return kv_fail(err, "eviction config: %s: expected true or false, got '%s'", f->key, v);
    return 0;
}

/* Every input form ends here, with the value as text. */
static int set_field(kv_evict_params *p, const field *f, const char *v, kv_error *err)
{
    char *base = (char *)p + f->offset;
    switch (f->type) {
    case KV_PARAM_INT:
        return parse_int(f, v, (int *)base, err);
    case KV_PARAM_NAME:
        return set_name(base, f, v, err);
    case KV_PARAM_BOOL:
        return parse_bool(f, v, (bool *)base, err);
    case KV_PARAM_WINDOW:
        if (!strcasecmp(v, "none") || !strcasecmp(v, "null")) {
            p->has_window = false;
            p->window_size = 0;
            return 0;
        }
        p->has_window = true;
        return parse_int(f, v, &p->window_size, err);
    case KV_PARAM_SEED: {
        char *end;
        errno = 0;
        unsigned long long x = strtoull(v, &end, 10);
        if (end == v || *end != '\0' || errno || x > UINT32_MAX || v[0] == '-')
            return kv_fail(err, "eviction config: seed: expected an integer 0..%u, got '%s'",
                           UINT32_MAX, v);
        p->seed = (uint32_t)x;
        return 0;
    }
    case KV_PARAM_NUMBER:
        return parse_number(f, v, (double *)base, err);
    }
    return kv_fail(err, "eviction config: %s: unsupported field", f->key);
}

int kv_evict_params_set(kv_evict_params *p, const char *key, const char *value, kv_error *err)
{
    const field *f = kv_evict_param_find(key);
    if (!f)
        return unknown_key(key, err);
    return set_field(p, f, value, err);
}

/* A JSON value as the text set_field parses, checking its JSON type. */
static int json_text(const field *f, const cJSON *v, char *buf, size_t n, kv_error *err)
{
    if (f->type == KV_PARAM_WINDOW && cJSON_IsNull(v)) {
        snprintf(buf, n, "none");
        return 0;
    }
    if (f->type == KV_PARAM_NAME) {
        if (!cJSON_IsString(v))
            return kv_fail(err, "eviction config: %s: expected a string", f->key);
        if (strlen(v->valuestring) >= n)
            return kv_fail(err, "eviction config: %s: '%.40s...' is not a known name", f->key,
                           v->valuestring);
        snprintf(buf, n, "%s", v->valuestring);
        return 0;
    }
    if (f->type == KV_PARAM_BOOL) {
        if (!cJSON_IsBool(v))
            return kv_fail(err, "eviction config: %s: expected true or false", f->key);
        snprintf(buf, n, "%s", cJSON_IsTrue(v) ? "true" : "false");
        return 0;
    }
    double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (f->type == KV_PARAM_NUMBER) {
        if (!isfinite(d))
            return kv_fail(err, "eviction config: %s: expected a finite number", f->key);
        snprintf(buf, n, "%.17g", d); /* round-trips */
        return 0;
    }
    if (!isfinite(d) || d != floor(d) || fabs(d) > 4294967295.0)
        return kv_fail(err, "eviction config: %s: expected an integer%s", f->key,
                       f->type == KV_PARAM_WINDOW ? " or null" : "");
    snprintf(buf, n, "%.0f", d);
    return 0;
}

int kv_evict_params_from_json(kv_evict_params *p, const cJSON *obj, kv_error *err)
{
    if (!cJSON_IsObject(obj))
        return kv_fail(err, "eviction config: expected a JSON object");
    for (const cJSON *it = obj->child; it; it = it->next) {
        const field *f = kv_evict_param_find(it->string);
        if (!f)
            return unknown_key(it->string, err);
        char text[64];
        if (json_text(f, it, text, sizeof text, err) != 0 || set_field(p, f, text, err) != 0)
            return -1;
    }
    return 0;
}

cJSON *kv_evict_params_to_json(const kv_evict_params *p)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    bool ok = true;
    for (size_t i = 0; i < N_FIELDS; i++) {
        const field *f = &fields[i];
        const char *base = (const char *)p + f->offset;
        cJSON *v = NULL;
        switch (f->type) {
        case KV_PARAM_INT:
            v = cJSON_CreateNumber(*(const int *)base);
            break;
        case KV_PARAM_NAME:
            v = cJSON_CreateString(base);
            break;
        case KV_PARAM_BOOL:
            v = cJSON_CreateBool(*(const bool *)base);
            break;
        case KV_PARAM_WINDOW:
            v = p->has_window ? cJSON_CreateNumber(p->window_size) : cJSON_CreateNull();
            break;
        case KV_PARAM_SEED:
            v = cJSON_CreateNumber(p->seed);
            break;
        case KV_PARAM_NUMBER:
            v = cJSON_CreateNumber(*(const double *)base);
            break;
        }
        ok = ok && v && cJSON_AddItemToObject(o, f->key, v);
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* ---- validation ---- */

static bool name_in(const char *v, const char *const *names)
{
    for (; *names; names++)
        if (strcmp(v, *names) == 0)
            return true;
    return false;
}

/* Whether p's value of a NAME parameter is one of the table's choices. */
static bool name_ok(const kv_evict_params *p, const char *key)
{
    const field *f = kv_evict_param_find(key);
    return name_in((const char *)p + f->offset, f->choices);
}

static int check_names(const kv_evict_params *p, kv_error *err)
{
    if (!kv_scorer_find(p->algorithm)) {
        char known[256] = "";
        for (int i = 0; kv_evict_algorithm(i); i++) {
            strcat(known, i ? ", " : "");
            strcat(known, kv_evict_algorithm(i));
        }
        return kv_fail(err, "Unknown eviction algorithm '%s' (known: %s).", p->algorithm, known);
    }
    if (!kv_refiner_find(p->refined_algorithm))
        return kv_fail(err, "Unknown refined_algorithm '%s' (known: kvcrush, criticalkv).",
                       p->refined_algorithm);
    return 0;
}

/* §2.2 in order; the message of the first failing check. */
static int check_nncf(const kv_evict_params *p, kv_error *err)
{
    int S = p->start_size, R = p->recent_size, I = p->intermediate_size, F = p->refined_size;
    bool per_group = strcmp(p->strategy, "per_group") == 0;
    if (S < 0 || R < 0 || I < 0 || F < 0)
        return kv_fail(err, "KV cache sizes must be non-negative integers.");
    if (F > I)
        return kv_fail(err, "refined_size cannot be greater than intermediate_size.");
    if ((long)S + R + I + F <= 0)
        return kv_fail(err, "At least one of the KV cache sizes must be greater than zero.");
    if (per_group && p->group_size <= 0)
        return kv_fail(err, "group_size must be a positive integer (got %d).", p->group_size);
    int g = per_group ? p->group_size : 1;
    if (S % g || R % g || I % g || F % g)
        return kv_fail(err, "KV cache part sizes must be divisible by the group size.");
    if (!name_ok(p, "score_aggregation"))
        return kv_fail(err, "score_aggregation must be 'sum' or 'norm_sum' (got '%s').",
                       p->score_aggregation);
    if (p->has_window && strcmp(p->algorithm, "snapkv") != 0)
        return kv_fail(err, "Window size is only supported for SNAPKV algorithm.");
    if (p->has_window && p->window_size <= 0)
        return kv_fail(err, "window_size must be a positive integer (got %d).", p->window_size);
    if (!name_ok(p, "strategy"))
        return kv_fail(err, "strategy must be 'per_token', 'per_group' or 'per_head' (got '%s').",
                       p->strategy);
    if (!name_ok(p, "kvcrush_anchor"))
        return kv_fail(err,
                       "kvcrush_anchor must be one of random, zeros, ones, mean, alternate "
                       "(got '%s').",
                       p->kvcrush_anchor);
    return 0;
}

/* kvbench's own rules, after NNCF's. */
static int check_kvbench(const kv_evict_params *p, kv_error *err)
{
    if (strcmp(p->strategy, "per_group") == 0 && p->recent_size == 0)
        return kv_fail(err, "recent_size must be greater than zero with strategy per_group "
                            "(the partial last group counts as recent).");
    /* NNCF raises this only at the first eviction; a sweep is better off
     * learning it before any prefill runs. per_group with group_size 1 is
     * per-token to the refiner (evict.c's cfg.group; libFuzzer found it
     * passing validation and failing at the first eviction). */
    bool per_token = strcmp(p->strategy, "per_group") != 0 || p->group_size == 1;
    if (p->refined_size > 0 && strcmp(p->refined_algorithm, "kvcrush") == 0 && per_token &&
        strcmp(p->kvcrush_anchor, "mean") == 0)
        return kv_fail(err, "Mean anchor is not supported for KVCrush in per-token mode.");
    if (!name_ok(p, "positions"))
        return kv_fail(err, "positions must be 'absolute' or 'compact' (got '%s').", p->positions);
    /* in 64 bits: each size may be up to INT_MAX, their sum may not */
    long long budget = (long long)p->start_size + p->intermediate_size + p->recent_size;
    if (budget > KV_EVICT_MAX_BUDGET)
        return kv_fail(err,
                       "start_size + intermediate_size + recent_size = %lld: must be <= %d "
                       "(a budget at least the prompt's length keeps every token).",
                       budget, KV_EVICT_MAX_BUDGET);
    return 0;
}

/* The rules of the policies after NNCF's (kvpress's scorers), checked last. */
static int check_policies(const kv_evict_params *p, kv_error *err)
{
    if (strcmp(p->score_aggregation, "norm_sum") == 0 && kv_scorer_find(p->algorithm)->recomputes)
        return kv_fail(err, "score_aggregation 'norm_sum' needs an accumulating algorithm ('h2o' "
                            "or 'snapkv').");
    if (p->ea_n_future_positions < 1)
        return kv_fail(err, "ea_n_future_positions must be >= 1.");
    if (!isfinite(p->ea_epsilon))
        return kv_fail(err, "ea_epsilon must be a finite number.");
    return 0;
}

/* The budget schedules' rules (PyramidKV, AdaKV), after kvbench's. */
static int check_budgets(const kv_evict_params *p, kv_error *err)
{
    bool adaptive = strcmp(p->head_budget, "adaptive") == 0;
    if (adaptive && strcmp(p->strategy, "per_head") != 0)
        return kv_fail(err, "head_budget 'adaptive' (AdaKV) needs strategy 'per_head'.");
    if (!(p->alpha_safeguard >= 0.0 && p->alpha_safeguard <= 1.0))
        return kv_fail(err, "alpha_safeguard must be in [0, 1].");
    /* a head's kept tokens differ in number under AdaKV: the refiners'
     * slot-based picks have no common count to work in */
    if (adaptive && p->refined_size > 0)
        return kv_fail(err, "refined_size must be 0 with strategy 'per_head'.");
    if (!(p->pyramid_beta >= 1.0))
        return kv_fail(err, "pyramid_beta must be >= 1.");
    if (!(p->compression_ratio >= 0.0 && p->compression_ratio < 1.0))
        return kv_fail(err, "compression_ratio must be in [0, 1).");
    /* the lowest pyramid layer keeps up to 2 I */
    long long lowest = (long long)p->start_size + 2LL * p->intermediate_size + p->recent_size;
    if (strcmp(p->layer_budget, "pyramid") == 0 && lowest > KV_EVICT_MAX_BUDGET)
        return kv_fail(err,
                       "start_size + 2 * intermediate_size + recent_size = %lld: must be <= %d "
                       "with layer_budget 'pyramid' (its first layer keeps up to twice the "
                       "intermediate size).",
                       lowest, KV_EVICT_MAX_BUDGET);
    if (!name_ok(p, "layer_budget"))
        return kv_fail(err, "layer_budget must be 'uniform' or 'pyramid' (got '%s').",
                       p->layer_budget);
    if (!name_ok(p, "head_budget"))
        return kv_fail(err, "head_budget must be 'uniform' or 'adaptive' (got '%s').",
                       p->head_budget);
    return 0;
}

int kv_evict_params_validate(const kv_evict_params *p, kv_error *err)
{
    if (check_names(p, err) || check_nncf(p, err) || check_kvbench(p, err) ||
        check_policies(p, err) || check_budgets(p, err))
        return -1;
    return 0;
}

void kv_evict_params_for_prompt(kv_evict_params *p, int n_prompt)
{
    if (!(p->compression_ratio > 0))
        return;
    long kept = (long)((double)n_prompt * (1.0 - p->compression_ratio)); /* kvpress's int() */
    long inter = kept - p->start_size - p->recent_size;
    if (inter < 0)
        inter = 0;
    if (strcmp(p->strategy, "per_group") == 0 && p->group_size > 0)
        inter -= inter % p->group_size;
    p->intermediate_size = (int)inter;
    if (p->refined_size > p->intermediate_size)
        p->refined_size = p->intermediate_size;
}

const char *kv_evict_params_warning(const kv_evict_params *p)
{
    if (p->apply_rerotation && strcmp(p->positions, "absolute") == 0)
        return "apply_rerotation with positions \"absolute\" moves the kept keys to slots "
               "0..k-1 while new tokens keep their absolute positions, a gap that can ruin "
               "the answers; set \"positions\": \"compact\" (kvpress) or "
               "\"apply_rerotation\": false (NNCF's LongBench script)";
    return NULL;
}

int kv_evict_params_validate_layers(const kv_evict_params *p, int n_layers, kv_error *err)
{
    if (kv_evict_params_validate(p, err) != 0)
        return -1;
    int smallest = p->intermediate_size;
    for (int l = 0; l < n_layers; l++) {
        int i = kv_evict_layer_intermediate(p, n_layers, l);
        smallest = i < smallest ? i : smallest;
    }
    if (p->refined_size > smallest)
        return kv_fail(err, "refined_size %d exceeds the smallest pyramid layer budget %d.",
                       p->refined_size, smallest);
    return 0;
}

/* ---- checked input: what a user wrote, against the table ---- */

_Static_assert(N_FIELDS <= 64, "kv_evict_keys holds one bit per row of the table");

static int fault(kv_evict_problem *pr, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fault(kv_evict_problem *pr, const char *key, const char *fmt, ...)
{
    pr->key = key;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pr->err.msg, sizeof pr->err.msg, fmt, ap);
    va_end(ap);
    return -1;
}

/* The i-th name a NAME row accepts: its choices, or the scorer registry. */
static const char *choice(const field *f, int i)
{
    return f->choices ? f->choices[i] : kv_evict_algorithm(i);
}

/* Names are case-insensitive ("SnapKV" is NNCF's enum value). */
static int check_name(const field *f, const char *v, kv_evict_problem *pr)
{
    for (int i = 0; choice(f, i); i++)
        if (strcasecmp(v, choice(f, i)) == 0)
            return 0;
    char list[256] = "";
    for (int i = 0; choice(f, i); i++) {
        strncat(list, i ? ", " : "", sizeof list - strlen(list) - 1);
        strncat(list, choice(f, i), sizeof list - strlen(list) - 1);
    }
    return fault(pr, f->key, "must be one of %s", list);
}

/* An integer row's range (INT, WINDOW, SEED). */
static int check_range(const field *f, double v, kv_evict_problem *pr)
{
    if (v < (double)f->min && f->min == 1)
        return fault(pr, f->key, "must be > 0");
    if (v < (double)f->min)
        return fault(pr, f->key, "must be >= %lld", f->min);
    if (v > (double)f->max)
        return fault(pr, f->key, "must be <= %lld", f->max);
    return 0;
}

/* A JSON value's type, range and choices. */
static int check_json(const field *f, const cJSON *v, kv_evict_problem *pr)
{
    switch (f->type) {
    case KV_PARAM_WINDOW:
        if (cJSON_IsNull(v))
            return 0; /* none: the algorithm's own */
        /* fall through */
    case KV_PARAM_INT:
    case KV_PARAM_SEED:
        if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble))
            return fault(pr, f->key, "must be an integer");
        return check_range(f, v->valuedouble, pr);
    case KV_PARAM_NUMBER:
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
            return fault(pr, f->key, "must be a finite number");
        return 0;
    case KV_PARAM_BOOL:
        if (!cJSON_IsBool(v))
            return fault(pr, f->key, "must be true or false");
        return 0;
    case KV_PARAM_NAME:
        if (!cJSON_IsString(v))
            return check_name(f, "", pr);
        return check_name(f, v->valuestring, pr);
    }
    return 0;
}

/* A typed value's form, range and choices; set_field's parsers accept
 * what passes. */
static int check_text(const field *f, const char *v, kv_evict_problem *pr)
{
    kv_error err;
    switch (f->type) {
    case KV_PARAM_WINDOW:
        if (!strcasecmp(v, "none") || !strcasecmp(v, "null"))
            return 0;
        /* fall through */
    case KV_PARAM_INT:
    case KV_PARAM_SEED: {
        char *end;
        errno = 0;
        long long x = strtoll(v, &end, 10);
        if (end == v || *end != '\0' || errno)
            return fault(pr, f->key, "expected an integer, got '%s'", v);
        return check_range(f, (double)x, pr);
    }
    case KV_PARAM_NUMBER: {
        double x;
        if (parse_number(f, v, &x, &err) != 0)
            return fault(pr, f->key, "expected a finite number, got '%s'", v);
        return 0;
    }
    case KV_PARAM_BOOL: {
        bool b;
        if (parse_bool(f, v, &b, &err) != 0)
            return fault(pr, f->key, "expected true or false, got '%s'", v);
        return 0;
    }
    case KV_PARAM_NAME:
        return check_name(f, v, pr);
    }
    return 0;
}

int kv_evict_param_set_checked(kv_evict_params *p, const char *key, const char *value,
                               kv_evict_problem *pr)
{
    const field *f = kv_evict_param_find(key);
    if (!f)
        return fault(pr, key, "unknown eviction parameter");
    kv_error err;
    if (check_text(f, value, pr) != 0)
        return -1;
    if (set_field(p, f, value, &err) != 0)
        return fault(pr, f->key, "%s", err.msg);
    return 0;
}

const kv_evict_param_def *kv_evict_param_exact(const char *key)
{
    for (size_t i = 0; i < N_FIELDS; i++)
        if (strcmp(fields[i].key, key) == 0)
            return &fields[i];
    return NULL;
}

int kv_evict_params_decode(kv_evict_params *p, const cJSON *obj, kv_evict_keys *given,
                           kv_evict_problem *pr)
{
    *given = 0;
    if (!cJSON_IsObject(obj))
        return fault(pr, NULL, "an eviction config must be an object");
    for (const cJSON *it = obj->child; it; it = it->next) {
        const field *f = kv_evict_param_exact(it->string);
        if (!f)
            return fault(pr, it->string, "unknown eviction parameter");
        char text[64];
        kv_error err;
        if (check_json(f, it, pr) != 0)
            return -1;
        if (json_text(f, it, text, sizeof text, &err) != 0 || set_field(p, f, text, &err) != 0)
            return fault(pr, f->key, "%s", err.msg);
        if (!cJSON_IsNull(it))
            *given |= KV_EVICT_KEY(f - fields);
    }
    return 0;
}

int kv_evict_params_check(const kv_evict_params *p, kv_evict_keys given, kv_evict_problem *pr)
{
    for (size_t i = 0; i < N_FIELDS; i++)
        if ((given & KV_EVICT_KEY(i)) && fields[i].only_for &&
            strcmp(p->algorithm, fields[i].only_for) != 0)
            return fault(pr, fields[i].key, "only supported for the %s algorithm",
                         fields[i].only_for);
    if (kv_evict_params_validate(p, &pr->err) != 0) {
        pr->key = NULL;
        return -1;
    }
    return 0;
}

/* Whether a and b hold the same value of row f. */
static bool same_value(const field *f, const kv_evict_params *a, const kv_evict_params *b)
{
    const char *x = (const char *)a + f->offset, *y = (const char *)b + f->offset;
    switch (f->type) {
    case KV_PARAM_INT:
        return *(const int *)x == *(const int *)y;
    case KV_PARAM_NAME:
        return strcmp(x, y) == 0;
    case KV_PARAM_BOOL:
        return *(const bool *)x == *(const bool *)y;
    case KV_PARAM_WINDOW:
        return a->has_window == b->has_window && (!a->has_window || a->window_size == b->window_size);
    case KV_PARAM_SEED:
        return a->seed == b->seed;
    case KV_PARAM_NUMBER:
        return *(const double *)x == *(const double *)y;
    }
    return false;
}

kv_evict_keys kv_evict_params_moved(const kv_evict_params *p)
{
    kv_evict_params d;
    kv_evict_params_default(&d);
    kv_evict_keys moved = 0;
    for (size_t i = 0; i < N_FIELDS; i++)
        if (!same_value(&fields[i], p, &d))
            moved |= KV_EVICT_KEY(i);
    return moved;
}

/* ---- the JSON schema of the keys ---- */

static cJSON *schema_default(const field *f)
{
    switch (f->type) {
    case KV_PARAM_NAME:
        return cJSON_CreateString(f->dflt);
    case KV_PARAM_BOOL:
        return cJSON_CreateBool(strcmp(f->dflt, "true") == 0);
    case KV_PARAM_WINDOW:
        if (strcmp(f->dflt, "none") == 0)
            return cJSON_CreateNull();
        return cJSON_CreateNumber(strtod(f->dflt, NULL));
    case KV_PARAM_INT:
    case KV_PARAM_SEED:
    case KV_PARAM_NUMBER:
        return cJSON_CreateNumber(strtod(f->dflt, NULL));
    }
    return NULL;
}

/* The accepted names; the algorithm's are the scorer registry plus "full",
 * the matrix's full-cache baseline. */
static cJSON *schema_enum(const field *f)
{
    cJSON *a = cJSON_CreateArray();
    if (f->choices) {
        for (int i = 0; a && f->choices[i]; i++)
            cJSON_AddItemToArray(a, cJSON_CreateString(f->choices[i]));
        return a;
    }
    cJSON_AddItemToArray(a, cJSON_CreateString("full"));
    for (int i = 0; a && kv_evict_algorithm(i); i++)
        cJSON_AddItemToArray(a, cJSON_CreateString(kv_evict_algorithm(i)));
    return a;
}

static cJSON *schema_property(const field *f)
{
    cJSON *o = cJSON_CreateObject();
    char desc[256];
    snprintf(desc, sizeof desc, "%s%s%s%s", f->help, f->only_for ? " (only with algorithm " : "",
             f->only_for ? f->only_for : "", f->only_for ? ")" : "");
    cJSON_AddStringToObject(o, "description", desc);
    if (f->type == KV_PARAM_NAME) {
        cJSON_AddItemToObject(o, "enum", schema_enum(f));
    } else if (f->type == KV_PARAM_BOOL) {
        cJSON_AddStringToObject(o, "type", "boolean");
    } else if (f->type == KV_PARAM_NUMBER) {
        cJSON_AddStringToObject(o, "type", "number");
    } else {
        if (f->type == KV_PARAM_WINDOW) {
            const char *types[] = {"integer", "null"};
            cJSON_AddItemToObject(o, "type", cJSON_CreateStringArray(types, 2));
        } else {
            cJSON_AddStringToObject(o, "type", "integer");
        }
        cJSON_AddNumberToObject(o, "minimum", (double)f->min);
        cJSON_AddNumberToObject(o, "maximum", (double)f->max);
    }
    cJSON_AddItemToObject(o, "default", schema_default(f));
    return o;
}

cJSON *kv_evict_params_schema(void)
{
    cJSON *props = cJSON_CreateObject();
    for (size_t i = 0; props && i < N_FIELDS; i++)
        cJSON_AddItemToObject(props, fields[i].key, schema_property(&fields[i]));
    /* cJSON's builders skip NULL items: out of memory shows as a missing
     * property or default */
    bool complete = props && cJSON_GetArraySize(props) == (int)N_FIELDS;
    for (size_t i = 0; complete && i < N_FIELDS; i++) {
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(props, fields[i].key);
        complete = cJSON_GetObjectItemCaseSensitive(o, "default") != NULL;
    }
    if (!complete) {
        cJSON_Delete(props);
        return NULL;
    }
    return props;
}
