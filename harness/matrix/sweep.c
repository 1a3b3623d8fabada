/* A matrix's "sweep": an object whose list-valued keys are multiplied out
 * (cartesian product, keys in file order, the last key varying fastest),
 * each combination one config named from its parameters. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "matrix/parse.h"

/* A sweep that expands past this is a typo (a list where a scalar was meant),
 * not an experiment anyone can afford to run. */
enum { MAX_SWEEP_CONFIGS = 100000 };

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
        kb_value_text(cJSON_GetObjectItemCaseSensitive(params, k->string), text, sizeof text);
        len += (size_t)snprintf(out + len, n - len, "%s%s=%s", first ? "" : ",", k->string, text);
        first = false;
    }
    if (len < n)
        snprintf(out + len, n - len, "}");
}

static int check_sweep_shape(kb_parser *p, const cJSON *s, const char *path, long *count)
{
    if (!cJSON_IsObject(s) || !s->child)
        return kb_failp(p->err, path, "a sweep is a non-empty object whose values are lists");
    *count = 1;
    char sub[512];
    for (const cJSON *k = s->child; k; k = k->next) {
        snprintf(sub, sizeof sub, "%s.%s", path, k->string);
        if (strcmp(k->string, "name") == 0)
            return kb_failp(p->err, sub, "sweep configs are named from their parameters");
        if (cJSON_IsObject(k))
            return kb_failp(p->err, sub, "must be a value or a list of values");
        if (!cJSON_IsArray(k))
            continue;
        long n = cJSON_GetArraySize(k);
        if (n == 0)
            return kb_failp(p->err, sub, "an empty list gives no configs");
        int j = 0;
        for (const cJSON *e = k->child; e; e = e->next, j++)
            if (cJSON_IsArray(e) || cJSON_IsObject(e))
                return kb_failp(p->err, sub, "[%d]: must be a number, string or boolean", j);
        if (*count > MAX_SWEEP_CONFIGS / n)
            return kb_failp(p->err, path, "expands to more than %d configs", MAX_SWEEP_CONFIGS);
        *count *= n;
    }
    return 0;
}

/* Combination `index` of `count` (mixed radix over the list-valued keys,
 * the last key varying fastest). */
static cJSON *sweep_point(const cJSON *s, long index, long count)
{
    cJSON *o = cJSON_CreateObject();
    long stride = count; /* combinations per value of the key at hand */
    for (const cJSON *k = s->child; o && k; k = k->next) {
        const cJSON *pick = k;
        if (cJSON_IsArray(k)) {
            long n = cJSON_GetArraySize(k);
            stride /= n;
            pick = cJSON_GetArrayItem(k, (int)(index / stride % n));
        }
        cJSON *d = cJSON_Duplicate(pick, true);
        if (!d || !cJSON_AddItemToObject(o, k->string, d)) {
            cJSON_Delete(d);
            cJSON_Delete(o);
            return NULL;
        }
    }
    return o;
}

static int expand_sweep(kb_parser *p, const cJSON *s, const char *path)
{
    long count = 0;
    if (check_sweep_shape(p, s, path, &count) < 0)
        return -1;
    for (long i = 0; i < count; i++) {
        cJSON *params = sweep_point(s, i, count);
        if (!params)
            return kv_fail(p->err, "out of memory");
        char where[768];
        combination_path(where, sizeof where, path, params, s);
        if (kb_add_config_object(p, params, NULL, where) < 0)
            return -1;
    }
    return 0;
}

int kb_parse_sweep(kb_parser *p, const cJSON *v)
{
    if (cJSON_IsObject(v))
        return expand_sweep(p, v, "sweep");
    if (!cJSON_IsArray(v))
        return kb_failp(p->err, "sweep", "must be an object of lists, or a list of such objects");
    int i = 0;
    for (const cJSON *c = v->child; c; c = c->next, i++) {
        char path[64];
        snprintf(path, sizeof path, "sweep[%d]", i);
        if (expand_sweep(p, c, path) < 0)
            return -1;
    }
    return 0;
}
