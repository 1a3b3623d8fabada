/* The config matrix: the file's settings, then its tasks (tasklist.c), the
 * full-cache baseline and its configs (configs.c, sweep.c), with the command
 * line's overrides; the expanded matrix as run.json holds it. Reading a file
 * and finding its paths: load.c. */
#include "matrix/matrix.h"

#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "matrix/parse.h"
#include "matrix/usertask.h"

/* ---- small helpers ---------------------------------------------------- */

int kb_failp(kv_error *err, const char *path, const char *fmt, ...)
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

int kb_get_long(const cJSON *v, const char *path, long min, long max, long *out, kv_error *err)
{
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble != floor(v->valuedouble))
        return kb_failp(err, path, "must be an integer");
    if (max > MAX_EXACT_INT)
        max = MAX_EXACT_INT;
    if (v->valuedouble < (double)min)
        return min == 1 ? kb_failp(err, path, "must be > 0")
                        : kb_failp(err, path, "must be >= %ld", min);
    if (v->valuedouble > (double)max)
        return kb_failp(err, path, "must be <= %ld", max);
    *out = (long)v->valuedouble;
    return 0;
}

static int get_string(const cJSON *v, const char *path, char **out, kv_error *err)
{
    if (!cJSON_IsString(v) || !v->valuestring[0])
        return kb_failp(err, path, "must be a non-empty string");
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
                    return kb_failp(err, path[0] ? path : "(top level)", "key \"%s\" appears twice",
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

/* ---- the file ------------------------------------------------------- */

static const char *const top_keys[] = {
    "$schema",        "name",    "description", "model", "model_revision", "protocol",
    "compute",        "threads", "output",      "data",  "limit",          "max_length",
    "max_new_tokens", "tasks",   "configs",     "sweep", "baseline",       NULL,
};

/* A top-level key the format lacks, with a hint at the nearest one. */
static int check_top_key(kb_parser *p, const char *k)
{
    for (int i = 0; top_keys[i]; i++)
        if (strcmp(top_keys[i], k) == 0)
            return 0;
    kb_nearest nr = kb_nearest_start(k);
    for (int i = 0; top_keys[i]; i++)
        kb_nearest_consider(&nr, top_keys[i]);
    char hint[128];
    return kb_failp(p->err, k,
                    "unknown key%s (known: name, description, model, model_revision, "
                    "protocol, compute, threads, output, data, limit, max_length, "
                    "max_new_tokens, tasks, configs, sweep, baseline)",
                    kb_nearest_hint(&nr, hint, sizeof hint));
}

/* get_string, then a check that the value is one of two. */
static int get_either(const cJSON *c, const char *k, char **out, const char *a, const char *b,
                      kv_error *err)
{
    if (get_string(c, k, out, err) < 0)
        return -1;
    if (strcmp(*out, a) != 0 && strcmp(*out, b) != 0)
        return kb_failp(err, k, "must be \"%s\" or \"%s\"", a, b);
    return 0;
}

/* One top-level setting; tasks, configs and sweep are parsed after all of them. */
static int parse_setting(kb_parser *p, const cJSON *c)
{
    kb_matrix *m = p->m;
    const char *k = c->string;
    if (strcmp(k, "name") == 0) {
        if (get_string(c, k, &m->run_name, p->err) < 0)
            return -1;
        if (!kb_name_is_safe(m->run_name))
            return kb_failp(p->err, k, "must use only letters, digits, '.', '_', '-'");
        return 0;
    }
    if (strcmp(k, "output") == 0)
        m->output_given = true;
    char **text = strcmp(k, "description") == 0      ? &m->description
                  : strcmp(k, "model") == 0          ? &m->model
                  : strcmp(k, "model_revision") == 0 ? &m->model_revision
                  : strcmp(k, "output") == 0         ? &m->output
                  : strcmp(k, "data") == 0           ? &m->data
                  : strcmp(k, "baseline") == 0       ? &m->baseline
                                                     : NULL;
    if (text)
        return get_string(c, k, text, p->err);
    if (strcmp(k, "protocol") == 0)
        return get_either(c, k, &m->protocol, "longbench", "nncf", p->err);
    if (strcmp(k, "compute") == 0)
        return get_either(c, k, &m->compute, "f32", "bf16", p->err);
    if (strcmp(k, "threads") == 0)
        return kb_get_long(c, k, 0, 4096, &m->threads, p->err);
    if (strcmp(k, "limit") == 0)
        return kb_get_long(c, k, 1, LONG_MAX, &p->limit, p->err);
    if (strcmp(k, "max_length") == 0)
        return kb_get_long(c, k, 1, KB_MAX_LENGTH, &p->max_length, p->err);
    if (strcmp(k, "max_new_tokens") == 0)
        return kb_get_long(c, k, 1, KB_MAX_NEW_TOKENS, &p->max_new_tokens, p->err);
    return 0;
}

static int parse_settings(kb_parser *p, const cJSON *root)
{
    for (const cJSON *c = root->child; c; c = c->next)
        if (check_top_key(p, c->string) < 0 || parse_setting(p, c) < 0)
            return -1;
    if (!p->m->model)
        return kb_failp(p->err, "model", "required: a model folder or a hub name (ORG/NAME)");
    if (!cJSON_GetObjectItemCaseSensitive(root, "tasks"))
        return kb_failp(p->err, "tasks",
                        "required: a list of task names or groups (e.g. \"en16\")");
    return 0;
}

static int fill_defaults(kb_parser *p, const char *default_run_name)
{
    kb_matrix *m = p->m;
    if (!m->run_name) {
        if (!default_run_name || !kb_name_is_safe(default_run_name))
            return kb_failp(p->err, "name", "required (the run folder's name)");
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

static int parse_root(kb_parser *p, const cJSON *root, const char *default_run_name)
{
    if (!cJSON_IsObject(root))
        return kv_fail(p->err, "the matrix must be a JSON object");
    if (check_duplicate_keys(root, "", p->err) < 0 || parse_settings(p, root) < 0 ||
        fill_defaults(p, default_run_name) < 0)
        return -1;
    if (kb_parse_tasks(p, cJSON_GetObjectItemCaseSensitive(root, "tasks")) < 0)
        return -1;
    /* the baseline first, always */
    if (kb_add_baseline(p) < 0)
        return -1;
    const cJSON *configs = cJSON_GetObjectItemCaseSensitive(root, "configs");
    const cJSON *sweep = cJSON_GetObjectItemCaseSensitive(root, "sweep");
    if (configs && kb_parse_configs(p, configs) < 0)
        return -1;
    if (sweep && kb_parse_sweep(p, sweep) < 0)
        return -1;
    return 0;
}

/* The keys of the file that overrides replace before it is parsed. */
const char *const kb_file_overrides[] = {"model", "data", "compute", "tasks", NULL};

static int apply_overrides(cJSON *root, const cJSON *overrides, kv_error *err)
{
    for (int i = 0; overrides && kb_file_overrides[i]; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(overrides, kb_file_overrides[i]);
        cJSON *copy = v ? cJSON_Duplicate(v, true) : NULL;
        if (v && !copy)
            return kv_fail(err, "out of memory");
        if (!copy)
            continue;
        if (cJSON_GetObjectItemCaseSensitive(root, kb_file_overrides[i]))
            cJSON_ReplaceItemInObjectCaseSensitive(root, kb_file_overrides[i], copy);
        else
            cJSON_AddItemToObject(root, kb_file_overrides[i], copy);
    }
    return 0;
}

int kb_parse_text(const char *text, const char *default_run_name, const cJSON *overrides,
                  kb_matrix *m, kv_error *err)
{
    memset(m, 0, sizeof *m);
    kb_parser p = {.m = m, .err = err};
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

int kb_matrix_parse(const char *text, const char *default_run_name, kb_matrix *m, kv_error *err)
{
    return kb_parse_text(text, default_run_name, NULL, m, err);
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
    for (size_t i = 0; i < m->n_configs; i++)
        kb_config_free(&m->configs[i]);
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
