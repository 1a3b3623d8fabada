/* A matrix's eviction configs: each entry of "configs", and each point of a
 * sweep (sweep.c), decoded once (kvcore/evict/evict_params.h) into the
 * kb_config that keeps it beside the JSON of the keys the user gave; a
 * "budget" turned into an intermediate_size; named, hashed, and added
 * unless it repeats a config before it. A full cache ({"algorithm":
 * "full"}) may set the cache's precision and nothing else. */
#include <ctype.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "evict/evict_params.h"
#include "matrix/parse.h"
#include "util/vec.h"

void kb_config_free(kb_config *c)
{
    free(c->name);
    free(c->origin);
    cJSON_Delete(c->params);
    memset(c, 0, sizeof *c);
}

/* ---- identity and adding ---------------------------------------------- */

/* KV entries per layer c keeps (kb_config.budget). */
static long budget_of(const kb_config *c)
{
    if (kb_config_is_full(c->params))
        return -1;
    if (c->evict.compression_ratio > 0)
        return KB_BUDGET_PER_PROMPT;
    return kv_evict_params_budget(&c->evict);
}

/* The name of a budget config: the name its intermediate_size would get,
 * with the budget ("b256") in place of "i..". NULL on OOM. */
static char *budget_name(const cJSON *params, long budget)
{
    cJSON *named = cJSON_Duplicate(params, true);
    if (!named)
        return NULL;
    cJSON_DeleteItemFromObjectCaseSensitive(named, "intermediate_size");
    char *base = kb_config_name(named), *name = NULL;
    cJSON_Delete(named);
    if (base && asprintf(&name, "%s_b%ld", base, budget) < 0)
        name = NULL;
    free(base);
    return name;
}

/* c's name (the given one, else derived from its keys), origin, hash and
 * budget. */
static int identify(kb_parser *p, kb_config *c, const char *name, const char *origin)
{
    c->budget = budget_of(c);
    if (name)
        c->name = strdup(name);
    else if (c->budget_asked)
        c->name = budget_name(c->params, c->budget_asked);
    else
        c->name = kb_config_name(c->params);
    if (!c->name || !(c->origin = strdup(origin)) ||
        kb_config_hash(c, c->hash) < 0)
        return kv_fail(p->err, "out of memory");
    return 0;
}

/* Adds c to the matrix unless a config before it is the same config or has
 * its name. c is the matrix's afterwards, or freed. */
static int add_config(kb_parser *p, kb_config *c)
{
    kb_matrix *m = p->m;
    for (size_t i = 0; i < m->n_configs; i++) {
        kb_config *o = &m->configs[i];
        bool same = strcmp(o->hash, c->hash) == 0;
        if (!same && strcmp(o->name, c->name) != 0)
            continue;
        /* the implicit baseline may be listed explicitly once */
        if (i == 0 && !c->params && strcmp(c->name, "full") == 0 && !o->origin[0]) {
            free(o->origin);
            o->origin = c->origin;
            c->origin = NULL;
            kb_config_free(c);
            return 0;
        }
        kv_fail(p->err, "%s (\"%s\") %s %s (\"%s\"); %s", c->origin, c->name,
                same ? "is the same config as" : "has the same name as",
                o->origin[0] ? o->origin : "the full-cache baseline", o->name,
                same ? "remove one" : "give one of them a \"name\"");
        kb_config_free(c);
        return -1;
    }
    if (KV_VEC_RESERVE(m->configs, p->cap_configs, m->n_configs + 1, 16) < 0) {
        kb_config_free(c);
        return kv_fail(p->err, "out of memory");
    }
    m->configs[m->n_configs++] = *c;
    return 0;
}

/* ---- decoding one eviction config --------------------------------------- */

/* "budget": N, the tokens every layer keeps, in place of intermediate_size
 * (and "compression_ratio", kvpress's per-prompt budget, in place of both),
 * checked and taken out of params; *asked receives N (0: none). */
static int take_budget(kb_parser *p, cJSON *params, const char *path, long *asked)
{
    *asked = 0;
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(params, "budget");
    bool sized = cJSON_GetObjectItemCaseSensitive(params, "intermediate_size") != NULL;
    if (cJSON_GetObjectItemCaseSensitive(params, "compression_ratio") && (b || sized))
        return kv_fail(p->err,
                       "%s.compression_ratio: sets the budget of each prompt: give it without %s",
                       path, b ? "budget" : "intermediate_size");
    if (!b)
        return 0;
    if (!cJSON_IsNumber(b) || b->valuedouble != floor(b->valuedouble) || b->valuedouble < 1 ||
        b->valuedouble > KV_EVICT_MAX_BUDGET)
        return kv_fail(p->err, "%s.budget: must be an integer in 1..%d", path, KV_EVICT_MAX_BUDGET);
    if (sized)
        return kv_fail(p->err, "%s.budget: give budget or intermediate_size, not both", path);
    *asked = (long)b->valuedouble;
    cJSON_DeleteItemFromObjectCaseSensitive(params, "budget");
    return 0;
}

/* start + intermediate + recent is what each algorithm keeps, so a budget N
 * is intermediate_size = N - start_size - recent_size with the config's own
 * (or default) sizes, rounded down to a multiple of group_size under
 * per_group (whose sizes must divide by it); set in c->params too, so the
 * config's hash is that of the intermediate_size config. */
static int apply_budget(kb_parser *p, kb_config *c, long budget, const char *path)
{
    kv_evict_params *e = &c->evict;
    long fixed = (long)e->start_size + e->recent_size;
    long inter = budget - fixed;
    if (inter < 0)
        return kv_fail(p->err,
                       "%s.budget: %ld is below start_size + recent_size = %ld, which every "
                       "config keeps: lower them or raise the budget",
                       path, budget, fixed);
    if (strcmp(e->strategy, "per_group") == 0 && e->group_size > 0)
        inter -= inter % e->group_size;
    e->intermediate_size = (int)inter;
    if (!cJSON_AddNumberToObject(c->params, "intermediate_size", (double)inter))
        return kv_fail(p->err, "out of memory");
    return 0;
}

/* "PATH.KEY: problem" (with a hint when KEY is no parameter), or "PATH:
 * problem" for a rule between keys. */
static int fail_problem(kb_parser *p, const char *path, const kv_evict_problem *pr)
{
    if (!pr->key)
        return kb_failp(p->err, path, "%s", pr->err.msg);
    if (kv_evict_param_exact(pr->key))
        return kv_fail(p->err, "%s.%s: %s", path, pr->key, pr->err.msg);
    kb_nearest nr = kb_nearest_start(pr->key);
    for (int i = 0; kv_evict_param_key(i); i++)
        kb_nearest_consider(&nr, kv_evict_param_key(i));
    kb_nearest_consider(&nr, "budget");
    kb_nearest_consider(&nr, "name");
    char hint[128];
    return kv_fail(p->err, "%s.%s: unknown eviction parameter%s", path, pr->key,
                   kb_nearest_hint(&nr, hint, sizeof hint));
}

/* Names in lower case, as the engine reads them ("SnapKV" is snapkv), so
 * that run.json and the plan show one spelling. */
static void lower_names(cJSON *params)
{
    for (cJSON *c = params->child; c; c = c->next) {
        const kv_evict_param_def *d = kv_evict_param_exact(c->string);
        if (d && d->type == KV_PARAM_NAME && cJSON_IsString(c))
            for (char *s = c->valuestring; *s; s++)
                *s = (char)tolower((unsigned char)*s);
    }
}

/* c->params decoded into c->evict, once: the budget's keys, each key
 * against the parameter table, the budget, then the rules between keys. */
static int decode(kb_parser *p, kb_config *c, const char *path)
{
    long asked;
    if (take_budget(p, c->params, path, &asked) < 0)
        return -1;
    kv_evict_params_default(&c->evict);
    kv_evict_keys given;
    kv_evict_problem pr;
    if (kv_evict_params_decode(&c->evict, c->params, &given, &pr) < 0)
        return fail_problem(p, path, &pr);
    if (asked && apply_budget(p, c, asked, path) < 0)
        return -1;
    if (kv_evict_params_check(&c->evict, given, &pr) < 0)
        return fail_problem(p, path, &pr);
    lower_names(c->params);
    c->budget_asked = asked;
    return 0;
}

/* ---- the full cache ----------------------------------------------------- */

bool kb_config_is_full(const cJSON *params)
{
    if (!params)
        return true;
    const cJSON *alg = cJSON_GetObjectItemCaseSensitive(params, "algorithm");
    return cJSON_IsString(alg) && strcasecmp(alg->valuestring, "full") == 0;
}

/* A full cache's keys beside "algorithm": only the cache's precision
 * (kv_cache_precision, key_quant, ...), decoded onto the defaults as any
 * config's keys are. With kb_config_is_full, the one place that says what
 * a full-cache config may hold. */
static int decode_full(kb_parser *p, kb_config *c, const char *path)
{
    cJSON *keys = cJSON_Duplicate(c->params, true);
    if (!keys)
        return kv_fail(p->err, "out of memory");
    cJSON_DeleteItemFromObjectCaseSensitive(keys, "algorithm");
    int rc = 0;
    for (const cJSON *k = keys->child; k && rc == 0; k = k->next)
        if (!kv_evict_param_is_cache(k->string))
            rc = kv_fail(p->err,
                         "%s.%s: the full cache takes no eviction parameters, only the cache's "
                         "precision (kv_cache_precision, key_quant, value_quant, key_group_size, "
                         "value_group_size)",
                         path, k->string);
    kv_evict_keys given;
    kv_evict_problem pr;
    kv_evict_params_default(&c->evict);
    if (rc == 0 && (kv_evict_params_decode(&c->evict, keys, &given, &pr) < 0 ||
                    kv_evict_params_check(&c->evict, given, &pr) < 0))
        rc = fail_problem(p, path, &pr);
    cJSON_Delete(keys);
    return rc;
}

/* The baseline: every token kept at F32 (params NULL, c.evict the
 * defaults), named name or "full". */
static int add_baseline_as(kb_parser *p, const char *name, const char *origin)
{
    kb_config c = {0};
    kv_evict_params_default(&c.evict);
    if (identify(p, &c, name, origin) < 0) {
        kb_config_free(&c);
        return -1;
    }
    return add_config(p, &c);
}

int kb_add_baseline(kb_parser *p)
{
    return add_baseline_as(p, "full", "");
}

/* {"algorithm": "full", ...}: at F32 the baseline itself, at another
 * precision a config of its own (every token kept, stored at it). */
static int add_full(kb_parser *p, cJSON *params, const char *name, const char *path)
{
    kb_config c = {.params = params};
    if (decode_full(p, &c, path) < 0) {
        kb_config_free(&c);
        return -1;
    }
    if (kv_evict_params_cache_quant(&c.evict).precision == KV_PREC_F32) {
        kb_config_free(&c);
        return add_baseline_as(p, name, path);
    }
    if (identify(p, &c, name, path) < 0) {
        kb_config_free(&c);
        return -1;
    }
    return add_config(p, &c);
}

int kb_add_config_object(kb_parser *p, cJSON *params, const char *name, const char *path)
{
    if (kb_config_is_full(params))
        return add_full(p, params, name, path);
    kb_config c = {.params = params};
    if (decode(p, &c, path) < 0 || identify(p, &c, name, path) < 0) {
        kb_config_free(&c);
        return -1;
    }
    return add_config(p, &c);
}

/* ---- "configs" ---------------------------------------------------------- */

static int parse_config_entry(kb_parser *p, const cJSON *c, const char *path)
{
    if (cJSON_IsString(c)) {
        if (strcmp(c->valuestring, "full") != 0)
            return kb_failp(p->err, path,
                            "a config is an object of eviction parameters (or \"full\")");
        return add_baseline_as(p, "full", path);
    }
    if (!cJSON_IsObject(c))
        return kb_failp(p->err, path, "a config is an object of eviction parameters (or \"full\")");
    cJSON *params = cJSON_Duplicate(c, true);
    if (!params)
        return kv_fail(p->err, "out of memory");
    cJSON *name = cJSON_DetachItemFromObjectCaseSensitive(params, "name");
    if (name && (!cJSON_IsString(name) || !kb_name_is_safe(name->valuestring))) {
        cJSON_Delete(name);
        cJSON_Delete(params);
        return kv_fail(
            p->err, "%s.name: must be a non-empty string of letters, digits, '.', '_', '-'", path);
    }
    int rc = kb_add_config_object(p, params, name ? name->valuestring : NULL, path);
    cJSON_Delete(name);
    return rc;
}

int kb_parse_configs(kb_parser *p, const cJSON *v)
{
    if (!cJSON_IsArray(v))
        return kb_failp(p->err, "configs", "must be a list of config objects");
    int i = 0;
    for (const cJSON *c = v->child; c; c = c->next, i++) {
        char path[64];
        snprintf(path, sizeof path, "configs[%d]", i);
        if (parse_config_entry(p, c, path) < 0)
            return -1;
    }
    return 0;
}
