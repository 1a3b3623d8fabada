#include "rundir/runjson.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/file.h"

const cJSON *kb_runjson_list(const cJSON *run_json, const char *key)
{
    return cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(run_json, "matrix"),
                                            key);
}

const cJSON *kb_runjson_find(const cJSON *list, const char *field, const char *name)
{
    for (const cJSON *c = list ? list->child : NULL; c; c = c->next) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(c, field);
        if (cJSON_IsString(n) && strcmp(n->valuestring, name) == 0)
            return c;
    }
    return NULL;
}

const char *kb_runjson_string(const cJSON *item, const char *key)
{
    return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(item, key));
}

bool kb_runjson_same(const cJSON *a, const cJSON *b, const char *key)
{
    const char *x = kb_runjson_string(a, key), *y = kb_runjson_string(b, key);
    return x && y && strcmp(x, y) == 0;
}

const char *kb_runjson_compute(const cJSON *run_json)
{
    const char *s = kb_runjson_string(run_json, "compute");
    return s ? s : "f32";
}

static long shard_field(const cJSON *run_json, const char *key, long absent)
{
    const cJSON *v =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(run_json, "shard"), key);
    return cJSON_IsNumber(v) ? (long)v->valuedouble : absent;
}

kb_shard kb_runjson_shard(const cJSON *run_json)
{
    return (kb_shard){shard_field(run_json, "index", 0), shard_field(run_json, "count", 1)};
}

bool kb_runjson_finished(const cJSON *run_json)
{
    return cJSON_IsString(cJSON_GetObjectItemCaseSensitive(run_json, "finished"));
}

const char *const kb_runjson_config_keys[] = {"hash", NULL};
const char *const kb_runjson_task_keys[] = {"max_length", "max_new_tokens", "template", "metric",
                                            "chat",       "first_line",     NULL};
const char *const kb_runjson_shard_task_keys[] = {
    "limit", "max_length", "max_new_tokens", "template", "metric", "chat", "first_line", NULL};

/* Equal values, or absent from both (a built-in task has no "template"). */
static bool same_value(const cJSON *a, const cJSON *b)
{
    return (!a && !b) || cJSON_Compare(a, b, true);
}

int kb_runjson_join(cJSON *into, const cJSON *from, const char *field, const char *const *compare,
                    const char *what, const char *path, kv_error *err)
{
    for (const cJSON *c = from ? from->child : NULL; c; c = c->next) {
        const char *name = kb_runjson_string(c, field);
        if (!name)
            continue;
        const cJSON *have = kb_runjson_find(into, field, name);
        if (!have) {
            cJSON *d = cJSON_Duplicate(c, true);
            if (!d || !cJSON_AddItemToArray(into, d)) {
                cJSON_Delete(d);
                return kv_fail(err, "out of memory");
            }
            continue;
        }
        for (int k = 0; compare[k]; k++)
            if (!same_value(cJSON_GetObjectItemCaseSensitive(have, compare[k]),
                            cJSON_GetObjectItemCaseSensitive(c, compare[k])))
                return kv_fail(err,
                               "%s: %s \"%s\" has a different %s than in this run's earlier "
                               "results; use a new run name (\"name\" in the config) or remove "
                               "the old results",
                               path, what, name, compare[k]);
    }
    return 0;
}

bool kb_runjson_set_finished(cJSON *run_json, bool finished)
{
    cJSON *v;
    if (finished) {
        char when[32];
        time_t now = time(NULL);
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
        v = cJSON_CreateString(when);
    } else {
        v = cJSON_CreateNull();
    }
    if (!v)
        return false;
    if (cJSON_GetObjectItemCaseSensitive(run_json, "finished"))
        return cJSON_ReplaceItemInObjectCaseSensitive(run_json, "finished", v);
    return cJSON_AddItemToObject(run_json, "finished", v);
}

int kb_runjson_write(const char *path, const cJSON *run_json, kv_error *err)
{
    char *text = cJSON_Print(run_json);
    if (!text)
        return kv_fail(err, "out of memory");
    size_t len = strlen(text);
    char *withnl = realloc(text, len + 2);
    if (!withnl) {
        free(text);
        return kv_fail(err, "out of memory");
    }
    withnl[len] = '\n';
    withnl[len + 1] = '\0';
    int rc = kv_write_atomic(path, withnl, len + 1, err);
    free(withnl);
    return rc;
}

int kb_runjson_add_bytes_per_token(cJSON *into, const cJSON *from)
{
    const cJSON *given = cJSON_GetObjectItemCaseSensitive(from, "kv_bytes_per_token");
    cJSON *have = cJSON_GetObjectItemCaseSensitive(into, "kv_bytes_per_token");
    if (given && !have && !(have = cJSON_AddObjectToObject(into, "kv_bytes_per_token")))
        return -1;
    for (const cJSON *b = given ? given->child : NULL; b; b = b->next)
        if (!cJSON_GetObjectItemCaseSensitive(have, b->string) &&
            !cJSON_AddNumberToObject(have, b->string, b->valuedouble))
            return -1;
    return 0;
}
