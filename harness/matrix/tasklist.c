/* A matrix's "tasks": task names, groups (each adds its tasks) and entries
 * with their own limit, max_length, max_new_tokens or a task of their own
 * (usertask.h). */
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "longbench/usertask.h"
#include "matrix/parse.h"
#include "matrix/taskset.h"
#include "matrix/usertask.h"
#include "score/score.h"
#include "util/vec.h"

static int add_task(kb_parser *p, const char *name, long limit, long max_length, long max_new,
                    const char *path)
{
    kb_metric metric;
    bool first_line;
    /* refused now, not after the whole inference when the run scores it */
    if (kb_task_metric(name, &metric, &first_line) < 0)
        return kb_failp(p->err, path, "task \"%s\" has no metric: kvbench cannot score it", name);
    kb_matrix *m = p->m;
    for (size_t i = 0; i < m->n_tasks; i++)
        if (strcmp(m->tasks[i].name, name) == 0)
            return kb_failp(p->err, path, "task \"%s\" is listed twice", name);
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
static int add_task_or_group(kb_parser *p, const char *name, long limit, long max_length,
                             long max_new, const char *path)
{
    size_t n = 0;
    const char *const *group = kb_task_group(name, &n);
    if (group) {
        for (size_t i = 0; i < n; i++)
            if (add_task(p, group[i], limit, max_length, max_new, path) < 0)
                return -1;
        return 0;
    }
    if (!kb_task_known(name))
        return kb_failp(p->err, path,
                        "unknown task or group \"%s\" (groups: en16, zh, longbench, longbench_e)",
                        name);
    return add_task(p, name, limit, max_length, max_new, path);
}

static int parse_task_object(kb_parser *p, const cJSON *o, const char *path)
{
    const char *name = NULL;
    bool user = false; /* the entry defines a task of its own */
    long limit = p->limit, max_length = p->max_length, max_new = p->max_new_tokens;
    char sub[512];
    for (const cJSON *c = o->child; c; c = c->next) {
        snprintf(sub, sizeof sub, "%s.%s", path, c->string);
        if (strcmp(c->string, "task") == 0) {
            if (!cJSON_IsString(c) || !c->valuestring[0])
                return kb_failp(p->err, sub, "must be a task or group name");
            name = c->valuestring;
        } else if (strcmp(c->string, "limit") == 0) {
            if (kb_get_long(c, sub, 1, LONG_MAX, &limit, p->err) < 0)
                return -1;
        } else if (strcmp(c->string, "max_length") == 0) {
            if (kb_get_long(c, sub, 1, KB_MAX_LENGTH, &max_length, p->err) < 0)
                return -1;
        } else if (strcmp(c->string, "max_new_tokens") == 0) {
            if (kb_get_long(c, sub, 1, KB_MAX_NEW_TOKENS, &max_new, p->err) < 0)
                return -1;
        } else if (kb_user_task_key(c->string)) {
            user = true; /* checked below, with the name */
        } else {
            return kb_failp(p->err, sub,
                            "unknown key (a task entry has task, limit, max_length, "
                            "max_new_tokens; a user task also file, template, metric, language, "
                            "chat, first_line)");
        }
    }
    if (!name)
        return kb_failp(p->err, path, "a task entry needs \"task\"");
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

int kb_parse_tasks(kb_parser *p, const cJSON *v)
{
    if (!cJSON_IsArray(v) || !v->child)
        return kb_failp(p->err, "tasks", "must be a non-empty list of task names or objects");
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
            rc = kb_failp(p->err, path, "must be a task name or an object {\"task\": ...}");
        if (rc < 0)
            return -1;
    }
    return 0;
}
