/* A config's identity: its canonical JSON, its hash and its name. */
#include <ctype.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "evict/evict.h"
#include "evict/evict_params.h"
#include "matrix/hash.h"
#include "matrix/matrix.h"
#include "matrix/parse.h"
#include "util/strbuf.h"

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
    "algorithm",         "strategy",          "group_size",   "start_size",     "recent_size",
    "intermediate_size", "refined_algorithm", "refined_size", "kvcrush_anchor", "window_size",
    "score_aggregation", "apply_rerotation",  "positions",    "seed",
};

static bool is_hashed_always(const char *key)
{
    for (size_t i = 0; i < sizeof hashed_always / sizeof hashed_always[0]; i++)
        if (strcmp(hashed_always[i], key) == 0)
            return true;
    return false;
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
 * spell out defaults are one config. NULL on OOM. */
static char *canonical_params(const kv_evict_params *params)
{
    kv_evict_params p = *params;
    kv_evict_params_resolve(&p);
    cJSON *full = kv_evict_params_to_json(&p);
    char *c = full && drop_later_defaults(full) == 0 ? kb_json_canonical(full) : NULL;
    cJSON_Delete(full);
    return c;
}

/* A full cache at another precision, canonically: "algorithm": "full" and
 * the cache keys that differ from their defaults. NULL on OOM. */
static char *canonical_full(const kv_evict_params *p)
{
    kv_evict_params d;
    kv_evict_params_default(&d);
    cJSON *j = kv_evict_params_to_json(p), *dflt = kv_evict_params_to_json(&d);
    cJSON *out = cJSON_CreateObject();
    char *c = NULL;
    if (j && dflt && out && cJSON_AddStringToObject(out, "algorithm", "full")) {
        bool ok = true;
        for (const cJSON *v = j->child; v && ok; v = v->next)
            if (kv_evict_param_is_cache(v->string) &&
                !cJSON_Compare(v, cJSON_GetObjectItemCaseSensitive(dflt, v->string), true))
                ok = cJSON_AddItemToObject(out, v->string, cJSON_Duplicate(v, true));
        c = ok ? kb_json_canonical(out) : NULL;
    }
    cJSON_Delete(j);
    cJSON_Delete(dflt);
    cJSON_Delete(out);
    return c;
}

int kb_config_hash(const kb_config *c, char hash[17])
{
    if (!c->params) {
        kb_hash_hex(kb_hash_bytes("full", 4), hash);
        return 0;
    }
    char *text = kb_config_is_full(c->params) ? canonical_full(&c->evict)
                                              : canonical_params(&c->evict);
    if (!text)
        return -1;
    kb_hash_hex(kb_hash_bytes(text, strlen(text)), hash);
    free(text);
    return 0;
}

/* params as kv_evict_params_from_json reads them onto the defaults; a full
 * cache's without its "algorithm": "full". */
static int decode_json(const cJSON *params, kv_evict_params *p)
{
    kv_error err;
    kv_evict_params_default(p);
    if (!kb_config_is_full(params))
        return kv_evict_params_from_json(p, params, &err);
    cJSON *keys = cJSON_Duplicate(params, true);
    cJSON_DeleteItemFromObjectCaseSensitive(keys, "algorithm");
    int rc = keys ? kv_evict_params_from_json(p, keys, &err) : -1;
    cJSON_Delete(keys);
    return rc;
}

int kb_config_hash_json(const cJSON *params, char hash[17])
{
    kb_config c = {.params = (cJSON *)params};
    if (params && decode_json(params, &c.evict) != 0)
        return -1;
    return kb_config_hash(&c, hash);
}

const char *kb_budget_label(long budget)
{
    return budget == KB_BUDGET_PER_PROMPT ? "per prompt" : "full";
}

const char *kb_config_warning(const cJSON *params)
{
    kv_evict_params p;
    if (kb_config_is_full(params) || decode_json(params, &p) != 0)
        return NULL;
    return kv_evict_params_warning(&p);
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

void kb_value_text(const cJSON *v, char *out, size_t n)
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
    kb_value_text(v, text, sizeof text);
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
        if (strcmp(c->string, "name") == 0 || kv_evict_param_exact(c->string))
            continue;
        char text[256], tok[600];
        kb_value_text(c, text, sizeof text);
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
