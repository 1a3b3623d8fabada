/* The two reads every part of the report makes of run.json
 * objects: a number (NaN when absent or not a number) and a string (NULL
 * when absent or not a string), so that a missing field is a value the
 * caller checks, never a crash.
 */
#ifndef KB_REPORT_JSON_GET_H
#define KB_REPORT_JSON_GET_H

#include <cjson/cJSON.h>
#include <math.h>

static inline double kb_json_num(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static inline const char *kb_json_str(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

#endif
