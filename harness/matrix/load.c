/* A matrix file loaded: read (UTF-8, no BOM, names checked), parsed with
 * the command line's overrides, and its relative paths (model, data,
 * output, user tasks' files) found from the working folder or beside the
 * file, so a config runs from any working folder. */
#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "longbench/usertask.h"
#include "matrix/parse.h"
#include "matrix/usertask.h"
#include "util/file.h"
#include "util/jsonstr.h"
#include "util/utf8.h"

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
        rc =
            kb_failp(err, t->origin, "file: '%s' is no file (from the working folder, nor from %s)",
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
    for (int i = 0; overrides && kb_file_overrides[i] && len < n; i++)
        if (cJSON_GetObjectItemCaseSensitive(overrides, kb_file_overrides[i]))
            len += (size_t)snprintf(out + len, n - len, "%s--%s", given++ ? ", " : " (with ",
                                    kb_file_overrides[i]);
    if (given && len < n)
        snprintf(out + len, n - len, ")");
}

int kb_matrix_load(const char *path, kb_matrix *m, kv_error *err)
{
    return kb_matrix_load_with(path, NULL, m, err);
}

int kb_matrix_load_with(const char *path, const cJSON *overrides, kb_matrix *m, kv_error *err)
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
    int rc = kb_parse_text(text, base, overrides, m, err);
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
