#include "matrix/matrix.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "evict/evict.h"
#include "util/file.h"
#include "matrix/hash.h"
#include "util/jsonstr.h"
#include "score/score.h"
#include "util/strbuf.h"
#include "util/utf8.h"
#include "matrix/taskset.h"
#include "matrix/usertask.h"
#include "longbench/usertask.h"
#include "util/vec.h"

/* A sweep that expands past this is a typo (a list where a scalar was meant),
 * not an experiment anyone can afford to run. */
enum { MAX_SWEEP_CONFIGS = 100000 };

/* ---- small helpers ---------------------------------------------------- */

/* "PATH: message" into err; returns -1. */
static int failp(kv_error *err, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int failp(kv_error *err, const char *path, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return kv_fail(err, "%s: %s", path, msg);
}

/* The largest integer a JSON number holds exactly (2^53 - 1): cJSON reads
 * numbers as doubles, so a larger one (9223372036854775807) is already
 * rounded, and may not even fit a long. */
#define MAX_EXACT_INT 9007199254740991L

/* An integer-valued JSON number in [min, max]. */
static int get_long(const cJSON *v, const char *path, long min, long max, long *out, kv_error *err)
{
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble != floor(v->valuedouble))
        return failp(err, path, "must be an integer");
    if (max > MAX_EXACT_INT)
        max = MAX_EXACT_INT;
    if (v->valuedouble < (double)min)
        return min == 1 ? failp(err, path, "must be > 0") : failp(err, path, "must be >= %ld", min);
    if (v->valuedouble > (double)max)
        return failp(err, path, "must be <= %ld", max);
    *out = (long)v->valuedouble;
    return 0;
}

static int get_string(const cJSON *v, const char *path, char **out, kv_error *err)
{
    if (!cJSON_IsString(v) || !v->valuestring[0])
        return failp(err, path, "must be a non-empty string");
    free(*out);
    if (!(*out = strdup(v->valuestring)))
        return kv_fail(err, "out of memory");
    return 0;
}

/* Names that become folder names: no separators, no dot files (so no ".."),
 * no spaces, not empty. */
bool kb_name_is_safe(const char *s)
{
    if (!s[0] || s[0] == '.' || s[0] == '-')
        return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && !strchr("._-", *s))
            return false;
    return true;
}

/* cJSON keeps duplicate keys; a config file with one twice is a mistake whose
 * effect (which one wins?) nobody should have to guess. */
static int check_duplicate_keys(const cJSON *v, const char *path, kv_error *err)
{
    int i = 0;
    for (const cJSON *c = v->child; c; c = c->next, i++) {
        char sub[512];
        if (cJSON_IsObject(v)) {
            for (const cJSON *d = v->child; d != c; d = d->next)
                if (strcmp(d->string, c->string) == 0)
                    return failp(err, path[0] ? path : "(top level)", "key \"%s\" appears twice",
                                 c->string);
            snprintf(sub, sizeof sub, "%s%s%s", path, path[0] ? "." : "", c->string);
        } else {
            snprintf(sub, sizeof sub, "%s[%d]", path, i);
        }
        if ((cJSON_IsObject(c) || cJSON_IsArray(c)) && check_duplicate_keys(c, sub, err) < 0)
            return -1;
    }
    return 0;
}

/* ---- canonical JSON and config identity -------------------------------- */

static void canon_string(kv_strbuf *b, const char *s)
{
    cJSON *tmp = cJSON_CreateString(s);
    char *q = tmp ? cJSON_PrintUnformatted(tmp) : NULL;
    if (!q)
        b->oom = true;
    else
        kv_strbuf_puts(b, q);
    free(q);
    cJSON_Delete(tmp);
}

static int cmp_keys(const void *a, const void *b)
{
    return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

static void canon(kv_strbuf *b, const cJSON *v)
{
    char num[64];
    if (cJSON_IsObject(v)) {
        size_t n = (size_t)cJSON_GetArraySize(v), i = 0;
        const cJSON **kids = malloc((n ? n : 1) * sizeof *kids);
        if (!kids) {
            b->oom = true;
            return;
        }
        for (const cJSON *c = v->child; c; c = c->next)
            kids[i++] = c;
        qsort(kids, n, sizeof *kids, cmp_keys);
        kv_strbuf_puts(b, "{");
        for (i = 0; i < n; i++) {
            if (i)
                kv_strbuf_puts(b, ",");
            canon_string(b, kids[i]->string);
            kv_strbuf_puts(b, ":");
            canon(b, kids[i]);
        }
        kv_strbuf_puts(b, "}");
        free(kids);
    } else if (cJSON_IsArray(v)) {
        kv_strbuf_puts(b, "[");
        for (const cJSON *c = v->child; c; c = c->next) {
            canon(b, c);
            if (c->next)
                kv_strbuf_puts(b, ",");
        }
        kv_strbuf_puts(b, "]");
    } else if (cJSON_IsNumber(v)) {
        double d = v->valuedouble + 0.0; /* -0 and 0 are one value */
        if (d == floor(d) && fabs(d) < 9007199254740992.0)
            snprintf(num, sizeof num, "%.0f", d);
        else if (snprintf(num, sizeof num, "%.15g", d), strtod(num, NULL) != d)
            snprintf(num, sizeof num, "%.17g", d); /* the shortest text that reads back as d */
        kv_strbuf_puts(b, num);
    } else if (cJSON_IsString(v)) {
        canon_string(b, v->valuestring);
    } else if (cJSON_IsTrue(v)) {
        kv_strbuf_puts(b, "true");
    } else if (cJSON_IsFalse(v)) {
        kv_strbuf_puts(b, "false");
    } else {
        kv_strbuf_puts(b, "null");
    }
}

char *kb_json_canonical(const cJSON *v)
{
    kv_strbuf b = {0};
    canon(&b, v);
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s;
}

/* The parameters every config hash has spelt out since hashes were frozen
 * (tests/unit/matrix/test_hash.c): a parameter added to the table later joins the
 * canonical text only when it differs from its default, so the configs
 * stored before it keep their hashes. */
static const char *const hashed_always[] = {
    "algorithm",         "strategy",          "group_size",     "start_size",
    "recent_size",       "intermediate_size", "refined_algorithm", "refined_size",
    "kvcrush_anchor",    "window_size",       "score_aggregation", "apply_rerotation",
    "positions",         "seed",
};

static bool is_hashed_always(const char *key)
{
    for (size_t i = 0; i < sizeof hashed_always / sizeof hashed_always[0]; i++)
        if (strcmp(hashed_always[i], key) == 0)
            return true;
    return false;
}

static const char *param_str(const cJSON *p, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(p, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static const kv_evict_param_def *param_def(const char *key);
static int check_param(const kv_evict_param_def *d, const cJSON *v, char *err, size_t n);

bool kb_config_is_full(const cJSON *params)
{
    const char *alg = params ? param_str(params, "algorithm") : NULL;
    return !params || (alg && strcasecmp(alg, "full") == 0);
}

/* The parameters of a full-cache config decoded on the table's defaults:
 * only the cache's precision keys may be set (the algorithm stays the
 * table's default, which nothing runs). */
static int decode_full(const cJSON *params, kv_evict_params *p, kv_error *err)
{
    kv_evict_params_default(p);
    for (const cJSON *c = params ? params->child : NULL; c; c = c->next) {
        if (strcmp(c->string, "algorithm") == 0 || strcmp(c->string, "name") == 0)
            continue;
        if (!kv_evict_param_is_cache(c->string))
            return kv_fail(err, "%s: the full cache takes no eviction parameters, only the "
                                "cache's precision (kv_cache_precision, key_quant, value_quant, "
                                "key_group_size, value_group_size)",
                           c->string);
        char msg[512];
        if (check_param(param_def(c->string), c, msg, sizeof msg) < 0)
            return kv_fail(err, "%s", msg);
        cJSON *one = cJSON_CreateObject();
        if (!one || !cJSON_AddItemToObject(one, c->string, cJSON_Duplicate(c, true))) {
            cJSON_Delete(one);
            return kv_fail(err, "out of memory");
        }
        int rc = kv_evict_params_from_json(p, one, err);
        cJSON_Delete(one);
        if (rc != 0)
            return -1;
    }
    return kv_evict_params_validate(p, err);
}

int kb_config_cache_quant(const cJSON *params, kv_cache_quant *q, kv_error *err)
{
    kv_evict_params p;
    if (kb_config_is_full(params) ? decode_full(params, &p, err) != 0
                                  : (kv_evict_params_default(&p),
                                     kv_evict_params_from_json(&p, params, err) != 0))
        return -1;
    *q = kv_evict_params_cache_quant(&p);
    return 0;
}

/* A full-cache config at another precision, canonically: "algorithm":
 * "full" and the cache keys that differ from their defaults. */
static char *canonical_full(const cJSON *params)
{
    kv_evict_params p;
    kv_error err;
    if (decode_full(params, &p, &err) != 0)
        return kb_json_canonical(params);
    cJSON *j = kv_evict_params_to_json(&p), *out = cJSON_CreateObject();
    kv_evict_params d;
    kv_evict_params_default(&d);
    cJSON *dflt = kv_evict_params_to_json(&d);
    char *c = NULL;
    if (j && out && dflt && cJSON_AddStringToObject(out, "algorithm", "full")) {
        bool ok = true;
        for (const cJSON *v = j->child; v && ok; v = v->next)
            if (kv_evict_param_is_cache(v->string) &&
                !cJSON_Compare(v, cJSON_GetObjectItemCaseSensitive(dflt, v->string), true))
                ok = cJSON_AddItemToObject(out, v->string, cJSON_Duplicate(v, true));
        c = ok ? kb_json_canonical(out) : NULL;
    }
    cJSON_Delete(j);
    cJSON_Delete(out);
    cJSON_Delete(dflt);
    return c;
}

/* Drops from full the later parameters that hold their defaults. */
static int drop_later_defaults(cJSON *full)
{
    kv_evict_params d;
    kv_evict_params_default(&d);
    cJSON *dflt = kv_evict_params_to_json(&d);
    if (!dflt)
        return -1;
    for (cJSON *c = full->child, *next; c; c = next) {
        next = c->next;
        if (!is_hashed_always(c->string) &&
            cJSON_Compare(c, cJSON_GetObjectItemCaseSensitive(dflt, c->string), true))
            cJSON_DeleteItemFromObjectCaseSensitive(full, c->string);
    }
    cJSON_Delete(dflt);
    return 0;
}

/* The canonical text of a config as the engine runs it: every parameter,
 * defaults applied and resolved (snapkv's window), so configs that only
 * spell out defaults are one config. Params that do not parse (a matrix
 * without the eviction checks) stand for themselves. NULL on OOM. */
static char *canonical_params(const cJSON *params)
{
    if (kb_config_is_full(params))
        return canonical_full(params);
    kv_evict_params p;
    kv_error err;
    kv_evict_params_default(&p);
    if (kv_evict_params_from_json(&p, params, &err) != 0)
        return kb_json_canonical(params);
    kv_evict_params_resolve(&p);
    cJSON *full = kv_evict_params_to_json(&p);
    char *c = full && drop_later_defaults(full) == 0 ? kb_json_canonical(full) : NULL;
    cJSON_Delete(full);
    return c;
}

int kb_config_hash(const cJSON *params, char hash[17])
{
    if (!params) {
        kb_hash_hex(kb_hash_bytes("full", 4), hash);
        return 0;
    }
    char *c = canonical_params(params);
    if (!c)
        return -1;
    kb_hash_hex(kb_hash_bytes(c, strlen(c)), hash);
    free(c);
    return 0;
}


long kb_config_budget(const cJSON *params)
{
    if (kb_config_is_full(params))
        return -1;
    kv_evict_params p;
    kv_error err;
    kv_evict_params_default(&p);
    if (kv_evict_params_from_json(&p, params, &err) != 0 || kv_evict_params_validate(&p, &err) != 0)
        return -1;
    return p.compression_ratio > 0 ? KB_BUDGET_PER_PROMPT : kv_evict_params_budget(&p);
}

const char *kb_budget_label(long budget)
{
    return budget == KB_BUDGET_PER_PROMPT ? "per prompt" : "full";
}

const char *kb_config_warning(const cJSON *params)
{
    if (kb_config_is_full(params))
        return NULL;
    kv_evict_params p;
    kv_error err;
    kv_evict_params_default(&p);
    if (kv_evict_params_from_json(&p, params, &err) != 0)
        return NULL;
    return kv_evict_params_warning(&p);
}

/* A parameter's row in the table, by its exact config key. */
static const kv_evict_param_def *param_def(const char *key)
{
    const kv_evict_param_def *d;
    for (int i = 0; (d = kv_evict_param(i)); i++)
        if (strcmp(d->key, key) == 0)
            return d;
    return NULL;
}

/* Appends "_token" with everything outside [a-z0-9.-] turned into '-'. */
static void name_token(kv_strbuf *b, const char *tok)
{
    if (!tok[0])
        return;
    if (b->len)
        kv_strbuf_puts(b, "_");
    for (const char *p = tok; *p; p++) {
        char c = (char)tolower((unsigned char)*p);
        if (!isalnum((unsigned char)c) && c != '.' && c != '-')
            c = '-';
        kv_strbuf_add(b, &c, 1);
    }
}

static void value_text(const cJSON *v, char *out, size_t n)
{
    if (cJSON_IsString(v))
        snprintf(out, n, "%s", v->valuestring);
    else if (cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble))
        snprintf(out, n, "%.0f", v->valuedouble + 0.0); /* -0 is 0, as in the hash */
    else if (cJSON_IsNumber(v))
        snprintf(out, n, "%g", v->valuedouble);
    else if (cJSON_IsBool(v))
        snprintf(out, n, "%s", cJSON_IsTrue(v) ? "true" : "false");
    else
        snprintf(out, n, "x");
}

/* The table's short token for a value ("per_group=pg" in abbrev), or the
 * token prefix and the value spelt out ("s" + "32"). */
static void name_value(kv_strbuf *b, const kv_evict_param_def *d, const cJSON *v)
{
    char text[256], tok[300];
    value_text(v, text, sizeof text);
    snprintf(tok, sizeof tok, "%s%s", d->token, text);
    size_t n = strlen(text);
    for (const char *a = d->abbrev; *a; a += strspn(a, " ")) {
        size_t len = strcspn(a, " ");
        if (len > n && a[n] == '=' && strncmp(a, text, n) == 0) {
            snprintf(tok, sizeof tok, "%.*s", (int)(len - n - 1), a + n + 1);
            break;
        }
        a += len;
    }
    name_token(b, tok);
}

char *kb_config_name(const cJSON *params)
{
    if (!params)
        return strdup("full");
    kv_strbuf b = {0};
    const kv_evict_param_def *d;
    for (int i = 0; (d = kv_evict_param(i)); i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(params, d->key);
        if (v && d->token)
            name_value(&b, d, v);
    }
    /* keys outside the table still make names unique */
    for (const cJSON *c = params->child; c; c = c->next) {
        if (strcmp(c->string, "name") == 0 || param_def(c->string))
            continue;
        char text[256], tok[600];
        value_text(c, text, sizeof text);
        snprintf(tok, sizeof tok, "%s-%s", c->string, text);
        name_token(&b, tok);
    }
    if (!b.len)
        kv_strbuf_puts(&b, "default");
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s;
}

/* ---- the nearest known key, for a hint --------------------------------- */

/* Edit distance of two keys, '-' and '_' alike and case ignored, so that
 * the CLI's "intermediate-size" is at distance 0 from intermediate_size. */
static size_t key_distance(const char *a, const char *b)
{
    size_t n = strlen(b), row[64];
    if (n >= 64 || strlen(a) >= 64)
        return SIZE_MAX;
    for (size_t j = 0; j <= n; j++)
        row[j] = j;
    for (size_t i = 1; a[i - 1]; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= n; j++) {
            char x = (char)tolower((unsigned char)a[i - 1]), y = (char)tolower((unsigned char)b[j - 1]);
            bool same = x == y || (strchr("-_", x) && strchr("-_", y));
            size_t best = diag + !same;
            best = row[j] + 1 < best ? row[j] + 1 : best;
            best = row[j - 1] + 1 < best ? row[j - 1] + 1 : best;
            diag = row[j];
            row[j] = best;
        }
    }
    return row[n];
}

typedef struct nearest {
    const char *key, *best;
    size_t distance;
} nearest;

static void nearest_consider(nearest *nr, const char *candidate)
{
    size_t d = key_distance(nr->key, candidate);
    if (d < nr->distance) {
        nr->distance = d;
        nr->best = candidate;
    }
}

/* " (did you mean \"KEY\"?)" for the closest candidate when it is close
 * (a third of the key's letters or fewer differ), else "". */
static const char *nearest_hint(const nearest *nr, char *buf, size_t n)
{
    size_t len = strlen(nr->key), most = len / 3 > 2 ? len / 3 : 2;
    if (!nr->best || nr->distance > most) {
        buf[0] = '\0';
        return buf;
    }
    snprintf(buf, n, " (did you mean \"%s\"?)", nr->best);
    return buf;
}

/* ---- eviction configs, checked against the parameter table ------------- */

/* "a, b, c": a name parameter's choices (the algorithm's: the registry). */
static void choices_text(const kv_evict_param_def *d, char *list, size_t n)
{
    list[0] = '\0';
    for (int i = 0;; i++) {
        const char *c = d->choices ? d->choices[i] : kv_evict_algorithm(i);
        if (!c)
            return;
        strncat(list, i ? ", " : "", n - strlen(list) - 1);
        strncat(list, c, n - strlen(list) - 1);
    }
}

/* Names are case-insensitive, as the engine's parser and the CLI take
 * them ("SnapKV" is NNCF's enum value). */
static bool choice_ok(const kv_evict_param_def *d, const char *v)
{
    for (int i = 0;; i++) {
        const char *c = d->choices ? d->choices[i] : kv_evict_algorithm(i);
        if (!c)
            return false;
        if (strcasecmp(v, c) == 0)
            return true;
    }
}

/* One key's JSON type and range, as "KEY: problem" so the matrix can point
 * at its path. */
static int check_param(const kv_evict_param_def *d, const cJSON *v, char *err, size_t n)
{
    switch (d->type) {
    case KV_PARAM_WINDOW:
        if (cJSON_IsNull(v))
            return 0; /* none: the algorithm's own */
        /* fall through */
    case KV_PARAM_INT:
    case KV_PARAM_SEED:
        if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble))
            return snprintf(err, n, "%s: must be an integer", d->key), -1;
        if (v->valuedouble < (double)d->min)
            return snprintf(err, n, d->min == 1 ? "%s: must be > 0" : "%s: must be >= %lld", d->key,
                            d->min),
                   -1;
        if (v->valuedouble > (double)d->max)
            return snprintf(err, n, "%s: must be <= %lld", d->key, d->max), -1;
        return 0;
    case KV_PARAM_NUMBER:
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
            return snprintf(err, n, "%s: must be a finite number", d->key), -1;
        return 0;
    case KV_PARAM_BOOL:
        if (!cJSON_IsBool(v))
            return snprintf(err, n, "%s: must be true or false", d->key), -1;
        return 0;
    case KV_PARAM_NAME:
        if (cJSON_IsString(v) && choice_ok(d, v->valuestring))
            return 0;
        char list[256];
        choices_text(d, list, sizeof list);
        return snprintf(err, n, "%s: must be one of %s", d->key, list), -1;
    }
    return 0;
}

/* Whether a given (non-null) key applies to the config's algorithm. */
static int check_applies(const kv_evict_param_def *d, const cJSON *v, const char *alg, char *err,
                         size_t n)
{
    if (!d->only_for || cJSON_IsNull(v) || strcasecmp(alg, d->only_for) == 0)
        return 0;
    return snprintf(err, n, "%s: only supported for the %s algorithm", d->key, d->only_for), -1;
}

int kb_matrix_validate_eviction(const cJSON *cfg, char *err, size_t n)
{
    if (!cJSON_IsObject(cfg))
        return snprintf(err, n, "an eviction config must be an object"), -1;
    for (const cJSON *c = cfg->child; c; c = c->next) {
        const kv_evict_param_def *d = param_def(c->string);
        if (!d) {
            nearest nr = {.key = c->string, .distance = SIZE_MAX};
            for (int i = 0; kv_evict_param_key(i); i++)
                nearest_consider(&nr, kv_evict_param_key(i));
            nearest_consider(&nr, "budget");
            nearest_consider(&nr, "name");
            char hint[128];
            return snprintf(err, n, "%s: unknown eviction parameter%s", c->string,
                            nearest_hint(&nr, hint, sizeof hint)),
                   -1;
        }
        if (check_param(d, c, err, n) < 0)
            return -1;
    }
    const char *alg = param_str(cfg, "algorithm");
    if (!alg)
        alg = param_def("algorithm")->dflt;
    for (const cJSON *c = cfg->child; c; c = c->next)
        if (check_applies(param_def(c->string), c, alg, err, n) < 0)
            return -1;
    /* the cross-field rules, with NNCF's messages (docs/eviction.md) */
    kv_evict_params p;
    kv_error e;
    kv_evict_params_default(&p);
    if (kv_evict_params_from_json(&p, cfg, &e) != 0 || kv_evict_params_validate(&p, &e) != 0)
        return snprintf(err, n, "%s", e.msg), -1;
    return 0;
}

/* ---- the matrix itself ------------------------------------------------- */

typedef struct parser {
    const kb_matrix_hooks *hooks;
    kb_matrix *m;
    kv_error *err;
    /* defaults for tasks, from the top-level keys */
    long limit, max_length, max_new_tokens;
    size_t cap_tasks, cap_configs;
} parser;

static int add_task(parser *p, const char *name, long limit, long max_length, long max_new,
                    const char *path)
{
    kb_metric metric;
    bool first_line;
    /* refused now, not after the whole inference when the run scores it */
    if (kb_task_metric(name, &metric, &first_line) < 0)
        return failp(p->err, path, "task \"%s\" has no metric: kvbench cannot score it", name);
    kb_matrix *m = p->m;
    for (size_t i = 0; i < m->n_tasks; i++)
        if (strcmp(m->tasks[i].name, name) == 0)
            return failp(p->err, path, "task \"%s\" is listed twice", name);
    if (KV_VEC_RESERVE(m->tasks, p->cap_tasks, m->n_tasks + 1, 16) < 0)
        return kv_fail(p->err, "out of memory");
    kb_task_spec *t = &m->tasks[m->n_tasks];
    *t = (kb_task_spec){0};
    if (!(t->name = strdup(name)))
        return kv_fail(p->err, "out of memory");
    t->limit = limit;
    t->max_length = max_length;
    t->max_new_tokens = max_new;
    m->n_tasks++;
    return 0;
}

/* A task name or a group; a group adds each of its tasks. */
static int add_task_or_group(parser *p, const char *name, long limit, long max_length, long max_new,
                             const char *path)
{
    size_t n = 0;
    const char *const *group = p->hooks->task_group(name, &n);
    if (group) {
        for (size_t i = 0; i < n; i++)
            if (add_task(p, group[i], limit, max_length, max_new, path) < 0)
                return -1;
        return 0;
    }
    if (!p->hooks->task_known(name))
        return failp(p->err, path,
                     "unknown task or group \"%s\" (groups: en16, zh, longbench, longbench_e)",
                     name);
    return add_task(p, name, limit, max_length, max_new, path);
}

static int parse_task_object(parser *p, const cJSON *o, const char *path)
{
    const char *name = NULL;
    bool user = false; /* the entry defines a task of its own */
    long limit = p->limit, max_length = p->max_length, max_new = p->max_new_tokens;
    char sub[512];
    for (const cJSON *c = o->child; c; c = c->next) {
        snprintf(sub, sizeof sub, "%s.%s", path, c->string);
        if (strcmp(c->string, "task") == 0) {
            if (!cJSON_IsString(c) || !c->valuestring[0])
                return failp(p->err, sub, "must be a task or group name");
            name = c->valuestring;
        } else if (strcmp(c->string, "limit") == 0) {
            if (get_long(c, sub, 1, LONG_MAX, &limit, p->err) < 0)
                return -1;
        } else if (strcmp(c->string, "max_length") == 0) {
            if (get_long(c, sub, 1, KB_MAX_LENGTH, &max_length, p->err) < 0)
                return -1;
        } else if (strcmp(c->string, "max_new_tokens") == 0) {
            if (get_long(c, sub, 1, KB_MAX_NEW_TOKENS, &max_new, p->err) < 0)
                return -1;
        } else if (kb_user_task_key(c->string)) {
            user = true; /* checked below, with the name */
        } else {
            return failp(p->err, sub,
                         "unknown key (a task entry has task, limit, max_length, "
                         "max_new_tokens; a user task also file, template, metric, language, "
                         "chat, first_line)");
        }
    }
    if (!name)
        return failp(p->err, path, "a task entry needs \"task\"");
    if (!user)
        return add_task_or_group(p, name, limit, max_length, max_new, path);
    const lb_task *defined;
    if (kb_user_task_parse(o, name, path, &defined, p->err) < 0 ||
        add_task(p, name, limit, max_length, max_new, path) < 0)
        return -1;
    kb_task_spec *t = &p->m->tasks[p->m->n_tasks - 1];
    t->user = defined;
    return (t->origin = strdup(path)) ? 0 : kv_fail(p->err, "out of memory");
}

static int parse_tasks(parser *p, const cJSON *v)
{
    if (!cJSON_IsArray(v) || !v->child)
        return failp(p->err, "tasks", "must be a non-empty list of task names or objects");
    int i = 0;
    for (const cJSON *c = v->child; c; c = c->next, i++) {
        char path[64];
        snprintf(path, sizeof path, "tasks[%d]", i);
        int rc;
        if (cJSON_IsString(c))
            rc = add_task_or_group(p, c->valuestring, p->limit, p->max_length, p->max_new_tokens,
                                   path);
        else if (cJSON_IsObject(c))
            rc = parse_task_object(p, c, path);
        else
            rc = failp(p->err, path, "must be a task name or an object {\"task\": ...}");
        if (rc < 0)
            return -1;
    }
    return 0;
}

/* Joins the validator's "KEY: msg" onto the config's path when KEY is one of
 * its keys, so the user reads "configs[3].window_size: must be > 0". */
static int fail_validation(kv_error *err, const char *path, const cJSON *params, const char *msg)
{
    const char *colon = strstr(msg, ": ");
    if (colon) {
        char key[128];
        size_t len = (size_t)(colon - msg);
        if (len < sizeof key) {
            memcpy(key, msg, len);
            key[len] = '\0';
            if (cJSON_GetObjectItemCaseSensitive(params, key))
                return kv_fail(err, "%s.%s: %s", path, key, colon + 2);
        }
    }
    return kv_fail(err, "%s: %s", path, msg);
}

/* Adds a config (takes ownership of params, NULL = full cache). */
static int add_config(parser *p, cJSON *params, const char *name, const char *origin)
{
    kb_matrix *m = p->m;
    kb_config c = {0};
    if (params && kb_config_is_full(params)) {
        /* the baseline's precision (F32) is no parameter: such a config is
         * the baseline; another precision is a config of its own */
        kv_cache_quant q;
        kv_error e;
        if (kb_config_cache_quant(params, &q, &e) != 0) {
            cJSON_Delete(params);
            return failp(p->err, origin, "%s", e.msg);
        }
        if (q.precision == KV_PREC_F32) {
            cJSON_Delete(params);
            params = NULL;
        }
    }
    c.params = params;
    c.budget = kb_config_budget(params);
    if (kb_config_hash(params, c.hash) < 0 || !(c.origin = strdup(origin)) ||
        !(c.name = name ? strdup(name) : kb_config_name(params))) {
        cJSON_Delete(params);
        free(c.origin);
        return kv_fail(p->err, "out of memory");
    }
    for (size_t i = 0; i < m->n_configs; i++) {
        const kb_config *o = &m->configs[i];
        bool same = strcmp(o->hash, c.hash) == 0;
        if (!same && strcmp(o->name, c.name) != 0)
            continue;
        /* the implicit baseline may be listed explicitly once */
        if (i == 0 && !params && strcmp(c.name, "full") == 0 && !m->configs[0].origin[0]) {
            free(m->configs[0].origin);
            m->configs[0].origin = c.origin;
            free(c.name);
            return 0;
        }
        kv_fail(p->err, "%s (\"%s\") %s %s (\"%s\"); %s", origin, c.name,
                same ? "is the same config as" : "has the same name as",
                o->origin[0] ? o->origin : "the full-cache baseline", o->name,
                same ? "remove one" : "give one of them a \"name\"");
        free(c.name);
        free(c.origin);
        cJSON_Delete(params);
        return -1;
    }
    if (KV_VEC_RESERVE(m->configs, p->cap_configs, m->n_configs + 1, 16) < 0) {
        free(c.name);
        free(c.origin);
        cJSON_Delete(params);
        return kv_fail(p->err, "out of memory");
    }
    m->configs[m->n_configs++] = c;
    return 0;
}

/* "budget": N, the tokens every layer keeps, in place of intermediate_size
 * (and "compression_ratio", kvpress's per-prompt budget, in place of both):
 * start + intermediate + recent is what each algorithm keeps, so
 * intermediate_size = N - start_size - recent_size with the config's own
 * (or default) start and recent sizes, rounded down to a multiple of
 * group_size under per_group (whose sizes must divide by it). params is
 * rewritten to the intermediate_size config, so its hash is that config's;
 * *asked receives N (0: no budget). Errors are "KEY: problem". */
static int apply_budget(cJSON *params, long *asked, char *msg, size_t n)
{
    *asked = 0;
    cJSON *b = cJSON_GetObjectItemCaseSensitive(params, "budget");
    bool sized = cJSON_GetObjectItemCaseSensitive(params, "intermediate_size") != NULL;
    if (cJSON_GetObjectItemCaseSensitive(params, "compression_ratio") && (b || sized))
        return snprintf(msg, n,
                        "compression_ratio: sets the budget of each prompt: give it without %s",
                        b ? "budget" : "intermediate_size"),
               -1;
    if (!b)
        return 0;
    if (!cJSON_IsNumber(b) || b->valuedouble != floor(b->valuedouble) || b->valuedouble < 1 ||
        b->valuedouble > KV_EVICT_MAX_BUDGET)
        return snprintf(msg, n, "budget: must be an integer in 1..%d", KV_EVICT_MAX_BUDGET), -1;
    if (sized)
        return snprintf(msg, n, "budget: give budget or intermediate_size, not both"), -1;
    long budget = (long)b->valuedouble;
    cJSON *rest = cJSON_Duplicate(params, true);
    if (!rest)
        return snprintf(msg, n, "out of memory"), -1;
    cJSON_DeleteItemFromObjectCaseSensitive(rest, "budget");
    kv_evict_params e;
    kv_error err;
    kv_evict_params_default(&e);
    int parsed = kv_evict_params_from_json(&e, rest, &err);
    cJSON_Delete(rest);
    if (parsed != 0)
        return 0; /* the validation names the key at fault */
    long fixed = (long)e.start_size + e.recent_size;
    long inter = budget - fixed;
    if (inter < 0)
        return snprintf(msg, n,
                        "budget: %ld is below start_size + recent_size = %ld, which every "
                        "config keeps: lower them or raise the budget",
                        budget, fixed),
               -1;
    if (strcmp(e.strategy, "per_group") == 0 && e.group_size > 0)
        inter -= inter % e.group_size;
    cJSON_DeleteItemFromObjectCaseSensitive(params, "budget");
    if (!cJSON_AddNumberToObject(params, "intermediate_size", (double)inter))
        return snprintf(msg, n, "out of memory"), -1;
    *asked = budget;
    return 0;
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

/* Names in lower case, as the engine reads them ("SnapKV" is snapkv), so
 * that run.json and the plan show one spelling. */
static void lower_names(cJSON *params)
{
    for (cJSON *c = params->child; c; c = c->next) {
        const kv_evict_param_def *d = param_def(c->string);
        if (d && d->type == KV_PARAM_NAME && cJSON_IsString(c))
            for (char *s = c->valuestring; *s; s++)
                *s = (char)tolower((unsigned char)*s);
    }
}

/* Validates and adds one config object (params without "name"). */
static int validate_and_add(parser *p, cJSON *params, const char *name, const char *path)
{
    long asked = 0;
    char *derived = NULL;
    if (!kb_config_is_full(params)) {
        char msg[768] = "";
        if (apply_budget(params, &asked, msg, sizeof msg) < 0 ||
            p->hooks->validate_eviction(params, msg, sizeof msg) < 0) {
            fail_validation(p->err, path, params, msg[0] ? msg : "invalid eviction config");
            cJSON_Delete(params);
            return -1;
        }
        lower_names(params);
        if (asked && !name && !(name = derived = budget_name(params, asked))) {
            cJSON_Delete(params);
            return kv_fail(p->err, "out of memory");
        }
    }
    int rc = add_config(p, params, name, path);
    if (rc == 0)
        p->m->configs[p->m->n_configs - 1].budget_asked = asked;
    free(derived);
    return rc;
}

static int parse_config_entry(parser *p, const cJSON *c, const char *path)
{
    if (cJSON_IsString(c)) {
        if (strcmp(c->valuestring, "full") != 0)
            return failp(p->err, path,
                         "a config is an object of eviction parameters (or \"full\")");
        return add_config(p, NULL, "full", path);
    }
    if (!cJSON_IsObject(c))
        return failp(p->err, path, "a config is an object of eviction parameters (or \"full\")");
    cJSON *params = cJSON_Duplicate(c, true);
    if (!params)
        return kv_fail(p->err, "out of memory");
    cJSON *name = cJSON_DetachItemFromObjectCaseSensitive(params, "name");
    char sub[512];
    snprintf(sub, sizeof sub, "%s.name", path);
    if (name && (!cJSON_IsString(name) || !kb_name_is_safe(name->valuestring))) {
        cJSON_Delete(name);
        cJSON_Delete(params);
        return failp(p->err, sub, "must be a non-empty string of letters, digits, '.', '_', '-'");
    }
    int rc = validate_and_add(p, params, name ? name->valuestring : NULL, path);
    cJSON_Delete(name);
    return rc;
}

static int parse_configs(parser *p, const cJSON *v)
{
    if (!cJSON_IsArray(v))
        return failp(p->err, "configs", "must be a list of config objects");
    int i = 0;
    for (const cJSON *c = v->child; c; c = c->next, i++) {
        char path[64];
        snprintf(path, sizeof path, "configs[%d]", i);
        if (parse_config_entry(p, c, path) < 0)
            return -1;
    }
    return 0;
}

/* "sweep[0]{algorithm=h2o,intermediate_size=128}": names the combination. */
static void combination_path(char *out, size_t n, const char *base, const cJSON *params,
                             const cJSON *sweep)
{
    size_t len = (size_t)snprintf(out, n, "%s{", base);
    bool first = true;
    for (const cJSON *k = sweep->child; k && len < n; k = k->next) {
        if (!cJSON_IsArray(k))
            continue;
        char text[128];
        value_text(cJSON_GetObjectItemCaseSensitive(params, k->string), text, sizeof text);
        len += (size_t)snprintf(out + len, n - len, "%s%s=%s", first ? "" : ",", k->string, text);
        first = false;
    }
    if (len < n)
        snprintf(out + len, n - len, "}");
}

static int check_sweep_shape(parser *p, const cJSON *s, const char *path, long *count)
{
    if (!cJSON_IsObject(s) || !s->child)
        return failp(p->err, path, "a sweep is a non-empty object whose values are lists");
    *count = 1;
    char sub[512];
    for (const cJSON *k = s->child; k; k = k->next) {
        snprintf(sub, sizeof sub, "%s.%s", path, k->string);
        if (strcmp(k->string, "name") == 0)
            return failp(p->err, sub, "sweep configs are named from their parameters");
        if (cJSON_IsObject(k))
            return failp(p->err, sub, "must be a value or a list of values");
        if (!cJSON_IsArray(k))
            continue;
        long n = cJSON_GetArraySize(k);
        if (n == 0)
            return failp(p->err, sub, "an empty list gives no configs");
        int j = 0;
        for (const cJSON *e = k->child; e; e = e->next, j++)
            if (cJSON_IsArray(e) || cJSON_IsObject(e))
                return failp(p->err, sub, "[%d]: must be a number, string or boolean", j);
        if (*count > MAX_SWEEP_CONFIGS / n)
            return failp(p->err, path, "expands to more than %d configs", MAX_SWEEP_CONFIGS);
        *count *= n;
    }
    return 0;
}

/* Combination `index` (mixed radix over the list-valued keys, the last key
 * varying fastest). */
static cJSON *sweep_point(const cJSON *s, long index)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    /* digits are taken from the last key backwards */
    long rest = index;
    int n_keys = cJSON_GetArraySize(s);
    const cJSON **keys = malloc((size_t)n_keys * sizeof *keys);
    if (!keys) {
        cJSON_Delete(o);
        return NULL;
    }
    int i = 0;
    for (const cJSON *k = s->child; k; k = k->next)
        keys[i++] = k;
    const cJSON **pick = calloc((size_t)n_keys, sizeof *pick);
    if (!pick) {
        free(keys);
        cJSON_Delete(o);
        return NULL;
    }
    for (i = n_keys - 1; i >= 0; i--) {
        if (!cJSON_IsArray(keys[i])) {
            pick[i] = keys[i];
            continue;
        }
        long n = cJSON_GetArraySize(keys[i]);
        pick[i] = cJSON_GetArrayItem(keys[i], (int)(rest % n));
        rest /= n;
    }
    bool ok = true;
    for (i = 0; i < n_keys && ok; i++) {
        cJSON *d = cJSON_Duplicate(pick[i], true);
        ok = d && cJSON_AddItemToObject(o, keys[i]->string, d);
    }
    free(pick);
    free(keys);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static int expand_sweep(parser *p, const cJSON *s, const char *path)
{
    long count = 0;
    if (check_sweep_shape(p, s, path, &count) < 0)
        return -1;
    for (long i = 0; i < count; i++) {
        cJSON *params = sweep_point(s, i);
        if (!params)
            return kv_fail(p->err, "out of memory");
        char where[768];
        combination_path(where, sizeof where, path, params, s);
        if (validate_and_add(p, params, NULL, where) < 0)
            return -1;
    }
    return 0;
}

static int parse_sweep(parser *p, const cJSON *v)
{
    if (cJSON_IsObject(v))
        return expand_sweep(p, v, "sweep");
    if (!cJSON_IsArray(v))
        return failp(p->err, "sweep", "must be an object of lists, or a list of such objects");
    int i = 0;
    for (const cJSON *c = v->child; c; c = c->next, i++) {
        char path[64];
        snprintf(path, sizeof path, "sweep[%d]", i);
        if (expand_sweep(p, c, path) < 0)
            return -1;
    }
    return 0;
}

static const char *const top_keys[] = {
    "$schema", "name",   "description", "model", "model_revision", "protocol",       "compute",
    "threads", "output", "data",        "limit", "max_length",     "max_new_tokens", "tasks",
    "configs", "sweep",  "baseline", NULL,
};

static int parse_settings(parser *p, const cJSON *root)
{
    kb_matrix *m = p->m;
    for (const cJSON *c = root->child; c; c = c->next) {
        const char *k = c->string;
        int known = 0;
        for (int i = 0; top_keys[i]; i++)
            known |= strcmp(top_keys[i], k) == 0;
        if (!known) {
            nearest nr = {.key = k, .distance = SIZE_MAX};
            for (int i = 0; top_keys[i]; i++)
                nearest_consider(&nr, top_keys[i]);
            char hint[128];
            return failp(p->err, k,
                         "unknown key%s (known: name, description, model, model_revision, "
                         "protocol, compute, threads, output, data, limit, max_length, "
                         "max_new_tokens, tasks, configs, sweep, baseline)",
                         nearest_hint(&nr, hint, sizeof hint));
        }
        int rc = 0;
        if (strcmp(k, "name") == 0) {
            rc = get_string(c, k, &m->run_name, p->err);
            if (rc == 0 && !kb_name_is_safe(m->run_name))
                rc = failp(p->err, k, "must use only letters, digits, '.', '_', '-'");
        } else if (strcmp(k, "description") == 0) {
            rc = get_string(c, k, &m->description, p->err);
        } else if (strcmp(k, "model") == 0) {
            rc = get_string(c, k, &m->model, p->err);
        } else if (strcmp(k, "model_revision") == 0) {
            rc = get_string(c, k, &m->model_revision, p->err);
        } else if (strcmp(k, "protocol") == 0) {
            rc = get_string(c, k, &m->protocol, p->err);
            if (rc == 0 && strcmp(m->protocol, "longbench") && strcmp(m->protocol, "nncf"))
                rc = failp(p->err, k, "must be \"longbench\" or \"nncf\"");
        } else if (strcmp(k, "compute") == 0) {
            rc = get_string(c, k, &m->compute, p->err);
            if (rc == 0 && strcmp(m->compute, "f32") && strcmp(m->compute, "bf16"))
                rc = failp(p->err, k, "must be \"f32\" or \"bf16\"");
        } else if (strcmp(k, "threads") == 0) {
            rc = get_long(c, k, 0, 4096, &m->threads, p->err);
        } else if (strcmp(k, "output") == 0) {
            rc = get_string(c, k, &m->output, p->err);
            m->output_given = true;
        } else if (strcmp(k, "data") == 0) {
            rc = get_string(c, k, &m->data, p->err);
        } else if (strcmp(k, "baseline") == 0) {
            rc = get_string(c, k, &m->baseline, p->err);
        } else if (strcmp(k, "limit") == 0) {
            rc = get_long(c, k, 1, LONG_MAX, &p->limit, p->err);
        } else if (strcmp(k, "max_length") == 0) {
            rc = get_long(c, k, 1, KB_MAX_LENGTH, &p->max_length, p->err);
        } else if (strcmp(k, "max_new_tokens") == 0) {
            rc = get_long(c, k, 1, KB_MAX_NEW_TOKENS, &p->max_new_tokens, p->err);
        }
        if (rc < 0)
            return -1;
    }
    if (!m->model)
        return failp(p->err, "model", "required: a model folder or a hub name (ORG/NAME)");
    if (!cJSON_GetObjectItemCaseSensitive(root, "tasks"))
        return failp(p->err, "tasks", "required: a list of task names or groups (e.g. \"en16\")");
    return 0;
}

static int fill_defaults(parser *p, const char *default_run_name)
{
    kb_matrix *m = p->m;
    if (!m->run_name) {
        if (!default_run_name || !kb_name_is_safe(default_run_name))
            return failp(p->err, "name", "required (the run folder's name)");
        m->run_name = strdup(default_run_name);
    }
    if (!m->protocol)
        m->protocol = strdup("longbench");
    if (!m->compute)
        m->compute = strdup("f32");
    if (!m->output)
        m->output = strdup("results");
    if (!m->data)
        m->data = strdup("datasets/longbench");
    if (!m->run_name || !m->protocol || !m->compute || !m->output || !m->data)
        return kv_fail(p->err, "out of memory");
    return 0;
}

static int invalid_json(const char *text, kv_error *err)
{
    const char *at = cJSON_GetErrorPtr();
    if (!at)
        return kv_fail(err, "invalid JSON");
    int line = 1, col = 1;
    for (const char *s = text; s < at && *s; s++) {
        if (*s == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    return kv_fail(err, "line %d, column %d: invalid JSON", line, col);
}

static int parse_root(parser *p, const cJSON *root, const char *default_run_name)
{
    if (!cJSON_IsObject(root))
        return kv_fail(p->err, "the matrix must be a JSON object");
    if (check_duplicate_keys(root, "", p->err) < 0 || parse_settings(p, root) < 0 ||
        fill_defaults(p, default_run_name) < 0)
        return -1;
    if (parse_tasks(p, cJSON_GetObjectItemCaseSensitive(root, "tasks")) < 0)
        return -1;
    /* the baseline first, always; its empty origin marks it implicit */
    if (add_config(p, NULL, "full", "") < 0)
        return -1;
    const cJSON *configs = cJSON_GetObjectItemCaseSensitive(root, "configs");
    const cJSON *sweep = cJSON_GetObjectItemCaseSensitive(root, "sweep");
    if (configs && parse_configs(p, configs) < 0)
        return -1;
    if (sweep && parse_sweep(p, sweep) < 0)
        return -1;
    return 0;
}

/* The keys of the file that overrides replace before it is parsed. */
static const char *const file_overrides[] = {"model", "data", "compute", "tasks", NULL};

static int apply_overrides(cJSON *root, const cJSON *overrides, kv_error *err)
{
    for (int i = 0; overrides && file_overrides[i]; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(overrides, file_overrides[i]);
        cJSON *copy = v ? cJSON_Duplicate(v, true) : NULL;
        if (v && !copy)
            return kv_fail(err, "out of memory");
        if (!copy)
            continue;
        if (cJSON_GetObjectItemCaseSensitive(root, file_overrides[i]))
            cJSON_ReplaceItemInObjectCaseSensitive(root, file_overrides[i], copy);
        else
            cJSON_AddItemToObject(root, file_overrides[i], copy);
    }
    return 0;
}

static int parse_overridden(const char *text, const char *default_run_name,
                            const kb_matrix_hooks *hooks, const cJSON *overrides, kb_matrix *m,
                            kv_error *err)
{
    memset(m, 0, sizeof *m);
    kb_matrix_hooks h = hooks ? *hooks : (kb_matrix_hooks){0};
    if (!h.validate_eviction)
        h.validate_eviction = kb_matrix_validate_eviction;
    if (!h.task_known)
        h.task_known = kb_task_known;
    if (!h.task_group)
        h.task_group = kb_task_group;
    parser p = {.hooks = &h, .m = m, .err = err};
    cJSON *root = cJSON_ParseWithOpts(text, NULL, true);
    if (!root)
        return invalid_json(text, err);
    int rc = cJSON_IsObject(root) ? apply_overrides(root, overrides, err) : 0;
    if (rc == 0)
        rc = parse_root(&p, root, default_run_name);
    if (rc == 0 && overrides && !(m->overrides = cJSON_Duplicate(overrides, true)))
        rc = kv_fail(err, "out of memory");
    cJSON_Delete(root);
    if (rc < 0)
        kb_matrix_free(m);
    return rc;
}

int kb_matrix_parse(const char *text, const char *default_run_name, const kb_matrix_hooks *hooks,
                    kb_matrix *m, kv_error *err)
{
    return parse_overridden(text, default_run_name, hooks, NULL, m, err);
}

/* "configs/nightly.json" -> "nightly"; the run name of a file without
 * "name", so characters a folder name must not have become '_'
 * ("my config.json" -> "my_config"). */
static char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    const char *b = slash ? slash + 1 : path;
    size_t n = strlen(b);
    if (n > 5 && strcmp(b + n - 5, ".json") == 0)
        n -= 5;
    char *name = strndup(b, n);
    for (size_t i = 0; name && name[i]; i++)
        if (!isalnum((unsigned char)name[i]) && !strchr("._-", name[i]))
            name[i] = '_';
    if (name && (name[0] == '.' || name[0] == '-'))
        name[0] = '_';
    return name;
}

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* A relative path of the file that does not exist from the working folder
 * but does beside the config file is taken from there, so that a config
 * runs from any working folder. With fallback_beside, a path found in
 * neither place is taken beside the config too (the output folder, which
 * the run creates). Returns 1 when it exists where *path now points. */
static int resolve_beside(char **path, const char *config_dir, bool fallback_beside, kv_error *err)
{
    if ((*path)[0] == '/' || exists(*path))
        return 1;
    char *beside = kv_path_join(config_dir, *path);
    if (!beside)
        return kv_fail(err, "out of memory");
    bool found = exists(beside);
    char *real = found ? realpath(beside, NULL) : NULL; /* "configs/../models/x": say where */
    if (real) {
        free(beside);
        beside = real;
    }
    if (found || fallback_beside) {
        free(*path);
        *path = beside;
    } else {
        free(beside);
    }
    return found;
}

/* "ORG/NAME" with ORG no folder here nor beside the config: a hub name. */
static bool is_hub_name(const char *model, const char *config_dir)
{
    const char *slash = strchr(model, '/');
    if (!slash || slash == model || !slash[1] || strchr(slash + 1, '/') || model[0] == '.')
        return false;
    char *org = strndup(model, (size_t)(slash - model));
    char *beside = org ? kv_path_join(config_dir, org) : NULL;
    bool local = !org || !beside || exists(org) || exists(beside);
    free(org);
    free(beside);
    return !local;
}

/* A user task's file, found as the data folder is (see resolve_beside). */
static int locate_user_task(kb_task_spec *t, const char *config_dir, kv_error *err)
{
    char *file = strdup(lb_user_task_file(t->user));
    int rc = file ? resolve_beside(&file, config_dir, false, err) : kv_fail(err, "out of memory");
    if (rc == 0)
        rc = failp(err, t->origin, "file: '%s' is no file (from the working folder, nor from %s)",
                   file, config_dir);
    if (rc > 0)
        rc = kb_user_task_relocate(&t->user, file, err);
    free(file);
    return rc;
}

/* model, data and output of a loaded file (see resolve_beside). A model
 * that is neither a folder nor a hub name is an error now, not a failed
 * download later. */
static int resolve_paths(kb_matrix *m, const char *config_path, kv_error *err)
{
    const char *slash = strrchr(config_path, '/');
    char *dir = slash ? strndup(config_path, (size_t)(slash - config_path + 1)) : strdup(".");
    if (!dir)
        return kv_fail(err, "out of memory");
    int rc = resolve_beside(&m->model, dir, false, err);
    if (rc == 0 && !is_hub_name(m->model, dir))
        rc = kv_fail(err,
                     "model: '%s' is no folder (from the working folder, nor from %s) and no hub "
                     "name ORG/NAME",
                     m->model, dir);
    if (rc >= 0)
        rc = resolve_beside(&m->data, dir, false, err);
    if (rc >= 0 && m->output_given)
        rc = resolve_beside(&m->output, dir, true, err);
    for (size_t i = 0; rc >= 0 && i < m->n_tasks; i++)
        if (m->tasks[i].user)
            rc = locate_user_task(&m->tasks[i], dir, err);
    free(dir);
    return rc < 0 ? -1 : 0;
}

/* "FILE" or, when the command line changed it, "FILE (with --model, --tasks)":
 * the prefix of a load's errors. */
static void error_prefix(const char *path, const cJSON *overrides, char *out, size_t n)
{
    size_t len = (size_t)snprintf(out, n, "%s", path);
    int given = 0;
    for (int i = 0; overrides && file_overrides[i] && len < n; i++)
        if (cJSON_GetObjectItemCaseSensitive(overrides, file_overrides[i]))
            len += (size_t)snprintf(out + len, n - len, "%s--%s", given++ ? ", " : " (with ",
                                    file_overrides[i]);
    if (given && len < n)
        snprintf(out + len, n - len, ")");
}

int kb_matrix_load(const char *path, const kb_matrix_hooks *hooks, kb_matrix *m, kv_error *err)
{
    return kb_matrix_load_with(path, NULL, hooks, m, err);
}

int kb_matrix_load_with(const char *path, const cJSON *overrides, const kb_matrix_hooks *hooks,
                        kb_matrix *m, kv_error *err)
{
    memset(m, 0, sizeof *m);
    char *text = NULL;
    size_t len = 0;
    if (kv_file_read(path, &text, &len, err) < 0)
        return -1;
    if (kv_utf8_has_bom(text, len)) {
        free(text);
        return kv_fail(err, "%s: the file " KV_UTF8_BOM_ERROR, path);
    }
    if (kv_json_check_names(path, text, len, err) < 0) {
        free(text);
        return -1;
    }
    char *base = base_name(path);
    if (!base) {
        free(text);
        return kv_fail(err, "out of memory");
    }
    int rc = parse_overridden(text, base, hooks, overrides, m, err);
    free(base);
    free(text);
    if (rc == 0 && (rc = resolve_paths(m, path, err)) < 0)
        kb_matrix_free(m);
    if (rc < 0) {
        char prefix[1024];
        error_prefix(path, overrides, prefix, sizeof prefix);
        kv_fail_prefix(err, prefix);
    }
    return rc;
}

void kb_matrix_free(kb_matrix *m)
{
    free(m->run_name);
    free(m->description);
    free(m->model);
    free(m->model_revision);
    free(m->protocol);
    free(m->compute);
    free(m->output);
    free(m->data);
    free(m->baseline);
    for (size_t i = 0; i < m->n_tasks; i++) {
        free(m->tasks[i].name);
        free(m->tasks[i].origin);
    }
    free(m->tasks);
    for (size_t i = 0; i < m->n_configs; i++) {
        free(m->configs[i].name);
        free(m->configs[i].origin);
        cJSON_Delete(m->configs[i].params);
    }
    free(m->configs);
    cJSON_Delete(m->overrides);
    memset(m, 0, sizeof *m);
}

int kb_matrix_find_config(const kb_matrix *m, const char *name)
{
    for (size_t i = 0; i < m->n_configs; i++)
        if (strcmp(m->configs[i].name, name) == 0)
            return (int)i;
    return -1;
}

static bool add_opt_string(cJSON *o, const char *k, const char *v)
{
    return v ? cJSON_AddStringToObject(o, k, v) != NULL : cJSON_AddNullToObject(o, k) != NULL;
}

static cJSON *tasks_json(const kb_matrix *m)
{
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; a && i < m->n_tasks; i++) {
        const kb_task_spec *t = &m->tasks[i];
        cJSON *o = cJSON_CreateObject();
        if (!o || !cJSON_AddItemToArray(a, o) || !cJSON_AddStringToObject(o, "task", t->name) ||
            !cJSON_AddNumberToObject(o, "limit", (double)t->limit) ||
            !cJSON_AddNumberToObject(o, "max_length", (double)t->max_length) ||
            !cJSON_AddNumberToObject(o, "max_new_tokens", (double)t->max_new_tokens) ||
            (t->user && !kb_user_task_to_json(t->user, o))) {
            cJSON_Delete(a);
            return NULL;
        }
    }
    return a;
}

static cJSON *configs_json(const kb_matrix *m)
{
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; a && i < m->n_configs; i++) {
        const kb_config *c = &m->configs[i];
        cJSON *o = cJSON_CreateObject();
        cJSON *params = c->params ? cJSON_Duplicate(c->params, true) : cJSON_CreateNull();
        if (!o || !cJSON_AddItemToArray(a, o) || !params ||
            !cJSON_AddStringToObject(o, "name", c->name) ||
            !cJSON_AddStringToObject(o, "hash", c->hash) ||
            !cJSON_AddNumberToObject(o, "budget", (double)c->budget) ||
            !cJSON_AddItemToObject(o, "params", params)) {
            if (o && !cJSON_GetObjectItemCaseSensitive(o, "params"))
                cJSON_Delete(params);
            cJSON_Delete(a);
            return NULL;
        }
    }
    return a;
}

cJSON *kb_matrix_to_json(const kb_matrix *m)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *tasks = tasks_json(m), *configs = configs_json(m);
    if (!o || !tasks || !configs || !add_opt_string(o, "name", m->run_name) ||
        !add_opt_string(o, "description", m->description) ||
        !add_opt_string(o, "model", m->model) ||
        !add_opt_string(o, "model_revision", m->model_revision) ||
        !add_opt_string(o, "protocol", m->protocol) || !add_opt_string(o, "compute", m->compute) ||
        !add_opt_string(o, "output", m->output) || !add_opt_string(o, "data", m->data) ||
        !cJSON_AddNumberToObject(o, "threads", (double)m->threads)) {
        cJSON_Delete(o);
        cJSON_Delete(tasks);
        cJSON_Delete(configs);
        return NULL;
    }
    cJSON_AddItemToObject(o, "tasks", tasks);
    cJSON_AddItemToObject(o, "configs", configs);
    cJSON *overrides = m->overrides ? cJSON_Duplicate(m->overrides, true) : NULL;
    if (m->overrides && (!overrides || !cJSON_AddItemToObject(o, "overrides", overrides))) {
        cJSON_Delete(overrides);
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}
