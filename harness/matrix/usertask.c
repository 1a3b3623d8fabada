#include "matrix/usertask.h"

#include <stdio.h>
#include <string.h>

#include "longbench/prompt.h"
#include "longbench/usertask.h"
#include "matrix/matrix.h"
#include "matrix/taskset.h"
#include "score/metrics.h"

static const char *const definition_keys[] = {"file",     "template", "metric",
                                              "language", "chat",     "first_line"};

bool kb_user_task_key(const char *key)
{
    for (size_t i = 0; i < sizeof definition_keys / sizeof definition_keys[0]; i++)
        if (strcmp(key, definition_keys[i]) == 0)
            return true;
    return false;
}

/* "qa_f1" or metrics.py's "qa_f1_score": any metric of LongBench v1 (v2's
 * accuracy needs its multiple-choice records). */
static int metric_named(const char *name, kb_metric *out)
{
    char full[64];
    snprintf(full, sizeof full, "%s_score", name);
    if (kb_metric_from_name(name, out) < 0 && kb_metric_from_name(full, out) < 0)
        return -1;
    return *out == KB_ACCURACY ? -1 : 0;
}

static int unknown_metric(const char *path, const char *name, kv_error *err)
{
    char list[256] = "";
    for (int m = 0; m < KB_N_METRICS; m++)
        if (m != KB_ACCURACY) {
            const char *full = kb_metric_name((kb_metric)m);
            size_t len = strlen(full) - strlen("_score");
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%.*s", m ? ", " : "",
                     (int)len, full);
        }
    return kv_fail(err, "%s.metric: unknown metric \"%s\" (LongBench's: %s)", path, name, list);
}

static const char *string_of(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* A string key: required (no default) or optional. */
static int get_text(const cJSON *o, const char *key, const char *dflt, const char *path,
                    const char **out, kv_error *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v && dflt) {
        *out = dflt;
        return 0;
    }
    if (!v)
        return kv_fail(err, "%s: a user task needs \"%s\" (a task of one's own has file, "
                            "template and metric)",
                       path, key);
    if (!cJSON_IsString(v) || !v->valuestring[0])
        return kv_fail(err, "%s.%s: must be a non-empty string", path, key);
    *out = v->valuestring;
    return 0;
}

static int get_bool(const cJSON *o, const char *key, bool dflt, const char *path, bool *out,
                    kv_error *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (v && !cJSON_IsBool(v))
        return kv_fail(err, "%s.%s: must be true or false", path, key);
    *out = v ? cJSON_IsTrue(v) : dflt;
    return 0;
}

/* The name: one folder-safe word that no built-in task or group has. */
static int check_name(const char *name, const char *path, kv_error *err)
{
    const lb_task *t = lb_task_find(name);
    size_t n;
    if ((t && t->family != LB_FAMILY_USER) || kb_task_group(name, &n))
        return kv_fail(err,
                       "%s.task: \"%s\" is a built-in task or group: a user task needs a name "
                       "of its own (see `kvbench tasks`)",
                       path, name);
    if (!kb_name_is_safe(name))
        return kv_fail(err,
                       "%s.task: \"%s\" cannot name a file (letters, digits, '.', '_', '-'; not "
                       "starting with '.' or '-')",
                       path, name);
    return 0;
}

int kb_user_task_parse(const cJSON *o, const char *name, const char *path, const lb_task **out,
                       kv_error *err)
{
    lb_user_task d = {.name = name};
    kb_metric metric;
    char msg[256];
    const cJSON *max_new = cJSON_GetObjectItemCaseSensitive(o, "max_new_tokens");
    if (check_name(name, path, err) < 0 || get_text(o, "file", NULL, path, &d.file, err) < 0 ||
        get_text(o, "template", NULL, path, &d.prompt, err) < 0 ||
        get_text(o, "metric", NULL, path, &d.metric, err) < 0 ||
        get_text(o, "language", "en", path, &d.language, err) < 0 ||
        get_bool(o, "chat", true, path, &d.chat, err) < 0 ||
        get_bool(o, "first_line", false, path, &d.first_line, err) < 0)
        return -1;
    if (lb_template_check(d.prompt, msg, sizeof msg) < 0)
        return kv_fail(err, "%s.template: %s", path, msg);
    if (metric_named(d.metric, &metric) < 0)
        return unknown_metric(path, d.metric, err);
    d.metric = kb_metric_name(metric);
    if (strcmp(d.language, "en") != 0 && strcmp(d.language, "zh") != 0 &&
        strcmp(d.language, "code") != 0)
        return kv_fail(err, "%s.language: must be \"en\", \"zh\" or \"code\"", path);
    /* the entry's max_new_tokens is checked as every task's; it is this task's own */
    d.max_new_tokens = cJSON_IsNumber(max_new) ? (int)max_new->valuedouble
                                               : KB_USER_TASK_MAX_NEW_TOKENS;
    if (!(*out = lb_user_task_define(&d)))
        return kv_fail(err, "out of memory");
    return 0;
}

/* The definition a registered task was made from. */
static lb_user_task definition_of(const lb_task *t)
{
    return (lb_user_task){.name = t->name,
                          .file = lb_user_task_file(t),
                          .prompt = t->prompt,
                          .metric = t->metric,
                          .language = t->language,
                          .max_new_tokens = t->max_new_tokens,
                          .chat = t->chat,
                          .first_line = t->first_line};
}

int kb_user_task_relocate(const lb_task **task, const char *file, kv_error *err)
{
    lb_user_task d = definition_of(*task);
    d.file = file;
    if (!(*task = lb_user_task_define(&d)))
        return kv_fail(err, "out of memory");
    return 0;
}

bool kb_user_task_to_json(const lb_task *t, cJSON *entry)
{
    lb_user_task d = definition_of(t);
    return cJSON_AddStringToObject(entry, "file", d.file) &&
           cJSON_AddStringToObject(entry, "template", d.prompt) &&
           cJSON_AddStringToObject(entry, "metric", d.metric) &&
           cJSON_AddStringToObject(entry, "language", d.language) &&
           cJSON_AddBoolToObject(entry, "chat", d.chat) &&
           cJSON_AddBoolToObject(entry, "first_line", d.first_line);
}

int kb_user_tasks_from_json(const cJSON *tasks, const char *path, kv_error *err)
{
    int i = 0;
    for (const cJSON *t = tasks ? tasks->child : NULL; t; t = t->next, i++) {
        if (!cJSON_GetObjectItemCaseSensitive(t, "template"))
            continue;
        /* the entry's max_new_tokens (0: the task's own) is what a run decoded */
        const cJSON *max_new = cJSON_GetObjectItemCaseSensitive(t, "max_new_tokens");
        lb_user_task d = {.name = string_of(t, "task"),
                          .file = string_of(t, "file"),
                          .prompt = string_of(t, "template"),
                          .metric = string_of(t, "metric"),
                          .language = string_of(t, "language"),
                          .max_new_tokens = cJSON_IsNumber(max_new) && max_new->valuedouble >= 1
                                              ? (int)max_new->valuedouble
                                              : KB_USER_TASK_MAX_NEW_TOKENS,
                          .chat = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(t, "chat")),
                          .first_line =
                              cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(t, "first_line"))};
        kb_metric metric;
        if (!d.name || !d.file || !d.prompt || !d.metric || !d.language ||
            kb_metric_from_name(d.metric, &metric) < 0)
            return kv_fail(err, "%s: matrix.tasks[%d]: a user task's definition is incomplete",
                           path, i);
        const lb_task *have = lb_task_find(d.name);
        if (have && have->family != LB_FAMILY_USER)
            return kv_fail(err, "%s: matrix.tasks[%d]: user task \"%s\" has a built-in task's name",
                           path, i, d.name);
        if (!lb_user_task_define(&d))
            return kv_fail(err, "out of memory");
    }
    return 0;
}
