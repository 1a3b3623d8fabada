#include "rundir/merge.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/file.h"
#include "rundir/predfile.h"
#include "rundir/run.h"
#include "rundir/runjson.h"

typedef struct shard_in {
    kb_run run;
    long index;
} shard_in;

static int check_shards(shard_in *s, size_t n, bool allow_unfinished, kv_error *err)
{
    long count = kb_runjson_shard(s[0].run.json).count;
    if (count <= 1)
        return kv_fail(err, "%s: not a shard (run.json has no \"shard\")", s[0].run.dir);
    if ((long)n != count)
        return kv_fail(err, "%zu shard folders for a run split into %ld shards: %s", n, count,
                       (long)n < count ? "some are missing" : "some are extra");
    bool *seen = calloc((size_t)count, sizeof *seen);
    if (!seen)
        return kv_fail(err, "out of memory");
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        const cJSON *a = s[0].run.json, *b = s[i].run.json;
        kb_shard sh = kb_runjson_shard(b);
        s[i].index = sh.index;
        const char *bad = NULL;
        if (sh.count != count)
            bad = "shard count";
        else if (!kb_runjson_same(a, b, "model_hash"))
            bad = "model hash";
        else if (!kb_runjson_same(a, b, "protocol"))
            bad = "protocol";
        else if (strcmp(kb_runjson_compute(a), kb_runjson_compute(b)) != 0)
            bad = "compute mode";
        if (bad)
            rc = kv_fail(err, "%s and %s have a different %s: they are not shards of one run",
                         s[0].run.dir, s[i].run.dir, bad);
        else if (!allow_unfinished && !kb_runjson_finished(b))
            rc = kv_fail(err,
                         "%s: shard %ld/%ld has not finished (run it to the end, or merge "
                         "with --allow-unfinished)",
                         s[i].run.dir, s[i].index, count);
        else if (s[i].index < 0 || s[i].index >= count || seen[s[i].index])
            rc = kv_fail(err, "%s: shard %ld/%ld is given twice or out of range", s[i].run.dir,
                         s[i].index, count);
        else
            seen[s[i].index] = true;
    }
    free(seen);
    return rc;
}

/* run.json of the merged run: shard 0's, without the shard, with the union
 * of configs and tasks and of their bytes per cached token; a config whose
 * hash differs between shards fails. */
static cJSON *merged_run_json(shard_in *s, size_t n, kv_error *err)
{
    cJSON *out = cJSON_Duplicate(s[0].run.json, true);
    if (!out) {
        kv_fail(err, "out of memory");
        return NULL;
    }
    cJSON_ReplaceItemInObjectCaseSensitive(out, "shard", cJSON_CreateNull());
    bool all_finished = true;
    for (size_t i = 0; i < n; i++)
        all_finished &= kb_runjson_finished(s[i].run.json);
    if (!kb_runjson_set_finished(out, all_finished)) {
        kv_fail(err, "out of memory");
        cJSON_Delete(out);
        return NULL;
    }
    cJSON *configs = (cJSON *)kb_runjson_list(out, "configs");
    cJSON *tasks = (cJSON *)kb_runjson_list(out, "tasks");
    if (!cJSON_IsArray(configs) || !cJSON_IsArray(tasks)) {
        kv_fail(err, "%s/run.json: has no matrix.configs or matrix.tasks", s[0].run.dir);
        cJSON_Delete(out);
        return NULL;
    }
    for (size_t i = 1; i < n; i++) {
        char what[600];
        snprintf(what, sizeof what, "%s/run.json", s[i].run.dir);
        if (kb_runjson_join(configs, kb_runjson_list(s[i].run.json, "configs"), "name",
                            kb_runjson_config_keys, "config", what, err) < 0 ||
            kb_runjson_join(tasks, kb_runjson_list(s[i].run.json, "tasks"), "task",
                            kb_runjson_shard_task_keys, "task", what, err) < 0) {
            cJSON_Delete(out);
            return NULL;
        }
        if (kb_runjson_add_bytes_per_token(out, s[i].run.json) < 0) {
            kv_fail(err, "out of memory");
            cJSON_Delete(out);
            return NULL;
        }
    }
    return out;
}

typedef struct merged_line {
    long index;
    const char *text;
} merged_line;

static int cmp_index(const void *a, const void *b)
{
    long x = ((const merged_line *)a)->index, y = ((const merged_line *)b)->index;
    return (x > y) - (x < y);
}

/* Every file name under shard/predictions/<config>/ of every shard. */
static int list_dir(const char *dir, char ***names, size_t *n, bool want_dirs)
{
    char **found;
    size_t n_found;
    kv_error err;
    if (kv_dir_list(dir, want_dirs ? NULL : ".jsonl", &found, &n_found, &err) < 0)
        return errno == ENOENT ? 0 : -1;
    int rc = 0;
    for (size_t k = 0; k < n_found && rc == 0; k++) {
        if (want_dirs) {
            char *full = kv_path_join(dir, found[k]);
            struct stat st;
            bool is_dir = full && stat(full, &st) == 0 && S_ISDIR(st.st_mode);
            free(full);
            if (!is_dir)
                continue;
        }
        bool dup = false;
        for (size_t i = 0; i < *n && !dup; i++)
            dup = strcmp((*names)[i], found[k]) == 0;
        if (dup)
            continue;
        char **g = realloc(*names, (*n + 1) * sizeof *g);
        if (!g) {
            rc = -1;
            break;
        }
        *names = g;
        g[(*n)++] = found[k];
        found[k] = NULL;
    }
    kv_names_free(found, n_found);
    return rc;
}

static void free_names(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

/* The lines a finished run has for each config of a task: its first `limit`
 * samples (all when limit is 0 or null). -1: not checked; -2: the data is
 * refused (err says why). */
static long expected_lines(const cJSON *run_json, const kb_task_sizes *sizes, const char *task,
                           kv_error *err)
{
    if (!sizes || !kb_runjson_finished(run_json))
        return -1;
    const cJSON *matrix = cJSON_GetObjectItemCaseSensitive(run_json, "matrix");
    const cJSON *t = kb_runjson_find(kb_runjson_list(run_json, "tasks"), "task", task);
    const char *data = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(matrix, "data"));
    if (!t || !data)
        return -1; /* not a task of the matrix: nothing to expect */
    long have = sizes->count(sizes->ctx, data, task, err);
    if (have < 0)
        return have == -2 ? -2 : -1;
    const cJSON *limit = cJSON_GetObjectItemCaseSensitive(t, "limit");
    long lim = cJSON_IsNumber(limit) ? (long)limit->valuedouble : 0;
    return lim > 0 && lim < have ? lim : have;
}

static int merge_one_file(shard_in *s, size_t n_shards, const char *config, const char *file,
                          long expected, const char *out_dir, kv_error *err)
{
    kb_pred_lines *in = calloc(n_shards, sizeof *in);
    merged_line *all = NULL;
    size_t total = 0;
    int rc = 0;
    if (!in)
        return kv_fail(err, "out of memory");
    for (size_t i = 0; i < n_shards && rc == 0; i++) {
        char *dir = kb_pred_dir(s[i].run.dir, config);
        char *path = dir ? kv_path_join(dir, file) : NULL;
        if (!path)
            rc = kv_fail(err, "out of memory");
        else if (kv_file_exists(path))
            rc = kb_pred_lines_read(path, &in[i], err);
        free(dir);
        free(path);
        total += in[i].n;
    }
    if (rc == 0 && !(all = malloc((total ? total : 1) * sizeof *all)))
        rc = kv_fail(err, "out of memory");
    size_t k = 0;
    for (size_t i = 0; i < n_shards && rc == 0; i++)
        for (size_t j = 0; j < in[i].n && rc == 0; j++) {
            long index = in[i].line[j].index;
            long count = (long)n_shards;
            if (index % count != s[i].index)
                rc = kv_fail(err,
                             "%s/predictions/%s/%s:%zu: sample index %ld belongs to shard %ld, "
                             "not %ld",
                             s[i].run.dir, config, file, j + 1, index, index % count, s[i].index);
            all[k++] = (merged_line){index, in[i].text[j]};
        }
    if (rc == 0 && expected >= 0 && (long)total != expected)
        rc = kv_fail(err,
                     "%s/%s: the shards hold %zu line%s, the data and limit give %ld samples: "
                     "a shard marked finished is missing lines (run it again to complete it)",
                     config, file, total, total == 1 ? "" : "s", expected);
    if (rc == 0) {
        qsort(all, total, sizeof *all, cmp_index);
        for (size_t i = 1; i < total && rc == 0; i++)
            if (all[i].index == all[i - 1].index)
                rc = kv_fail(err, "%s/%s: sample index %ld appears twice", config, file,
                             all[i].index);
    }
    if (rc == 0) {
        size_t len = 0;
        for (size_t i = 0; i < total; i++)
            len += strlen(all[i].text) + 1;
        char *data = malloc(len + 1), *at = data;
        char *dir = kb_pred_dir(out_dir, config);
        char *path = dir ? kv_path_join(dir, file) : NULL;
        if (!data || !path) {
            rc = kv_fail(err, "out of memory");
        } else {
            for (size_t i = 0; i < total; i++) {
                size_t m = strlen(all[i].text);
                memcpy(at, all[i].text, m);
                at[m] = '\n';
                at += m + 1;
            }
            rc = kv_mkdirs(dir, err);
            if (rc == 0)
                rc = kv_write_atomic(path, data, len, err);
        }
        free(data);
        free(dir);
        free(path);
    }
    free(all);
    for (size_t i = 0; i < n_shards; i++)
        kb_pred_lines_free(&in[i]);
    free(in);
    return rc;
}

/* Every (config, task) of a finished matrix must have a file in some shard. */
static int check_all_files(shard_in *s, size_t n, const cJSON *merged, const kb_task_sizes *sizes,
                           kv_error *err)
{
    const cJSON *configs = kb_runjson_list(merged, "configs"),
                *tasks = kb_runjson_list(merged, "tasks");
    int rc = 0;
    for (const cJSON *c = configs ? configs->child : NULL; c && rc == 0; c = c->next)
        for (const cJSON *t = tasks ? tasks->child : NULL; t && rc == 0; t = t->next) {
            const char *config = kb_runjson_string(c, "name"), *task = kb_runjson_string(t, "task");
            long want = config && task ? expected_lines(merged, sizes, task, err) : -1;
            if (want == -2)
                return -1;
            if (want <= 0)
                continue;
            bool found = false;
            for (size_t i = 0; i < n && !found; i++) {
                char *path = kb_pred_path(s[i].run.dir, config, task);
                if (!path)
                    return kv_fail(err, "out of memory");
                found = kv_file_exists(path);
                free(path);
            }
            if (!found)
                rc = kv_fail(err,
                             "%s/%s.jsonl: no shard has this file, the data gives %ld samples: "
                             "the shards are not complete",
                             config, task, want);
        }
    return rc;
}

static int merge_predictions(shard_in *s, size_t n, const cJSON *merged, const kb_task_sizes *sizes,
                             const char *out_dir, size_t *n_files, kv_error *err)
{
    char **configs = NULL;
    size_t n_configs = 0;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        char *p = kb_pred_dir(s[i].run.dir, NULL);
        if (!p || list_dir(p, &configs, &n_configs, true) < 0)
            rc = kv_fail(err, "%s: cannot list: %s", p ? p : "predictions", strerror(errno));
        free(p);
    }
    for (size_t c = 0; c < n_configs && rc == 0; c++) {
        char **files = NULL;
        size_t n_f = 0;
        for (size_t i = 0; i < n && rc == 0; i++) {
            char *p = kb_pred_dir(s[i].run.dir, configs[c]);
            if (!p || list_dir(p, &files, &n_f, false) < 0)
                rc = kv_fail(err, "%s: cannot list: %s", p ? p : configs[c], strerror(errno));
            free(p);
        }
        for (size_t f = 0; f < n_f && rc == 0; f++) {
            char *task = strndup(files[f], strlen(files[f]) - 6); /* "<task>.jsonl" */
            long want = task ? expected_lines(merged, sizes, task, err) : -1;
            rc = !task       ? kv_fail(err, "out of memory")
                 : want < -1 ? -1
                             : merge_one_file(s, n, configs[c], files[f], want, out_dir, err);
            *n_files += rc == 0;
            free(task);
        }
        free_names(files, n_f);
    }
    free_names(configs, n_configs);
    return rc;
}

int kb_run_merge(const char *const *shard_dirs, size_t n_shards, const char *out_dir,
                 bool allow_unfinished, const kb_task_sizes *sizes, size_t *n_files, kv_error *err)
{
    *n_files = 0;
    if (n_shards == 0)
        return kv_fail(err, "no shard folders to merge");
    shard_in *s = calloc(n_shards, sizeof *s);
    if (!s)
        return kv_fail(err, "out of memory");
    int rc = 0;
    for (size_t i = 0; i < n_shards && rc == 0; i++)
        rc = kb_run_load(shard_dirs[i], &s[i].run, err);
    if (rc == 0)
        rc = check_shards(s, n_shards, allow_unfinished, err);
    cJSON *merged = rc == 0 ? merged_run_json(s, n_shards, err) : NULL;
    if (rc == 0 && !merged)
        rc = -1;
    char *preds = kb_pred_dir(out_dir, NULL);
    char *run_json = kv_path_join(out_dir, "run.json");
    if (rc == 0 && (!preds || !run_json))
        rc = kv_fail(err, "out of memory");
    int lock = -1;
    if (rc == 0 && (rc = kv_mkdirs(out_dir, err)) == 0 && (lock = kb_run_lock(out_dir, err)) < 0)
        rc = -1;
    if (rc == 0)
        rc = kv_mkdirs(preds, err);
    if (rc == 0)
        rc = check_all_files(s, n_shards, merged, sizes, err);
    if (rc == 0)
        rc = merge_predictions(s, n_shards, merged, sizes, out_dir, n_files, err);
    /* run.json last: its presence says the merge finished */
    if (rc == 0)
        rc = kb_runjson_write(run_json, merged, err);
    if (lock >= 0)
        close(lock);
    cJSON_Delete(merged);
    free(preds);
    free(run_json);
    for (size_t i = 0; i < n_shards; i++)
        kb_run_close(&s[i].run);
    free(s);
    return rc;
}
