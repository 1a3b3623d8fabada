#include "report/series.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "evict/evict.h"
#include "util/strbuf.h"

/* Ten colours apart in hue and lightness (Okabe and Ito's colour-blind safe
 * set without its yellow and black, and four more), then the same ten
 * dashed three ways. */
static const char *const colours[KB_SERIES_COLOURS] = {
    "#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00",
    "#56b4e9", "#6a3d9a", "#8c564b", "#7f7f7f", "#a6a600"};
static const char *const dashes[KB_SERIES_STYLES / KB_SERIES_COLOURS] = {"", "8 4", "2 3",
                                                                           "8 3 2 3"};

kb_series_style kb_series_style_of(size_t i)
{
    i %= KB_SERIES_STYLES;
    return (kb_series_style){colours[i % KB_SERIES_COLOURS], dashes[i / KB_SERIES_COLOURS]};
}

cJSON *kb_series_params(const cJSON *params)
{
    if (!params || cJSON_IsNull(params))
        return NULL;
    kv_evict_params p;
    kv_error err;
    kv_evict_params_default(&p);
    if (kv_evict_params_from_json(&p, params, &err) != 0)
        return NULL;
    cJSON *all = kv_evict_params_to_json(&p);
    /* without a refiner its settings mean nothing: plain SnapKV is one
     * series, SnapKV + KVCrush another */
    static const char *const refiner[] = {"refined_algorithm", "kvcrush_anchor"};
    for (size_t i = 0; all && p.refined_size == 0 && i < sizeof refiner / sizeof *refiner; i++)
        cJSON_ReplaceItemInObjectCaseSensitive(all, refiner[i], cJSON_CreateNull());
    const cJSON *refined = cJSON_GetObjectItemCaseSensitive(all, "refined_algorithm");
    if (all && !(cJSON_IsString(refined) && strcmp(refined->valuestring, "kvcrush") == 0))
        cJSON_ReplaceItemInObjectCaseSensitive(all, "kvcrush_anchor", cJSON_CreateNull());
    static const char *const sizes[] = {"start_size", "recent_size", "intermediate_size",
                                        "refined_size"};
    for (size_t i = 0; all && i < sizeof sizes / sizeof *sizes; i++)
        cJSON_DeleteItemFromObjectCaseSensitive(all, sizes[i]);
    return all;
}

/* Whether key has the same value in every series that has it. */
static bool same_everywhere(cJSON *const *params, size_t n, const char *key)
{
    const cJSON *first = NULL;
    for (size_t i = 0; i < n; i++) {
        const cJSON *v = params[i] ? cJSON_GetObjectItemCaseSensitive(params[i], key) : NULL;
        if (!v)
            continue;
        if (!first)
            first = v;
        else if (!cJSON_Compare(first, v, true))
            return false;
    }
    return true;
}

static void add_value(kv_strbuf *b, const cJSON *v)
{
    char *text = cJSON_IsString(v) ? NULL : cJSON_PrintUnformatted(v);
    kv_strbuf_puts(b, cJSON_IsString(v) ? v->valuestring : text ? text : "?");
    free(text);
}

void kb_series_labels(cJSON *const *params, size_t n, char **labels)
{
    for (size_t i = 0; i < n; i++) {
        kv_strbuf b = {0};
        const cJSON *algorithm = params[i] ? cJSON_GetObjectItemCaseSensitive(params[i], "algorithm")
                                           : NULL;
        kv_strbuf_puts(&b, !params[i] ? "full cache"
                           : cJSON_IsString(algorithm) ? algorithm->valuestring
                                                       : "?");
        for (const cJSON *k = params[i] ? params[i]->child : NULL; k; k = k->next)
            if (strcmp(k->string, "algorithm") != 0 && !cJSON_IsNull(k) && /* null: not its own */
                !same_everywhere(params, n, k->string)) {
                kv_strbuf_puts(&b, " ");
                kv_strbuf_puts(&b, k->string);
                kv_strbuf_puts(&b, "=");
                add_value(&b, k);
            }
        labels[i] = b.oom ? (kv_strbuf_free(&b), NULL) : b.s;
    }
}
