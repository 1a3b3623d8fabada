#include "rundir/run.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "util/file.h"
#include "matrix/usertask.h"
#include "rundir/runjson.h"

/* ---- shards ------------------------------------------------------------ */

int kb_shard_parse(const char *s, kb_shard *out, kv_error *err)
{
    char *end;
    errno = 0;
    long i = strtol(s, &end, 10);
    if (errno || end == s || *end != '/')
        return kv_fail(err, "--shard: '%s' is not I/N (e.g. 0/4)", s);
    const char *n_text = end + 1;
    long n = strtol(n_text, &end, 10);
    if (errno || end == n_text || *end)
        return kv_fail(err, "--shard: '%s' is not I/N (e.g. 0/4)", s);
    if (n < 1 || i < 0 || i >= n)
        return kv_fail(err, "--shard: '%s': need 0 <= I < N (shards are numbered from 0)", s);
    out->index = i;
    out->count = n;
    return 0;
}

bool kb_shard_selects(const kb_shard *s, long sample_index)
{
    return s->count <= 1 || sample_index % s->count == s->index;
}

char *kb_shard_dir(const char *run_dir, const kb_shard *shard)
{
    char *dir = NULL;
    if (asprintf(&dir, "%s/shards/%ld-of-%ld", run_dir, shard->index, shard->count) < 0)
        return NULL;
    return dir;
}

char *kb_run_dir(const char *output, const char *run_name, const kb_shard *shard)
{
    char *run_dir = kv_path_join(output, run_name);
    if (!run_dir || !shard || shard->count <= 1)
        return run_dir;
    char *dir = kb_shard_dir(run_dir, shard);
    free(run_dir);
    return dir;
}

/* ---- run.json ---------------------------------------------------------- */

const char *kb_run_string(const kb_run *run, const char *key)
{
    return kb_runjson_string(run->json, key);
}

const cJSON *kb_run_config(const kb_run *run, const char *name)
{
    const cJSON *c = kb_runjson_find(kb_runjson_list(run->json, "configs"), "name", name);
    return c ? cJSON_GetObjectItemCaseSensitive(c, "params") : NULL;
}

int kb_run_load(const char *dir, kb_run *run, kv_error *err)
{
    memset(run, 0, sizeof *run);
    char *path = kv_path_join(dir, "run.json");
    char *text = NULL;
    size_t len;
    if (!path)
        return kv_fail(err, "out of memory");
    if (kv_file_read(path, &text, &len, err) < 0) {
        free(path);
        return -1;
    }
    run->json = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsObject(run->json)) {
        kv_fail(err, "%s: not a kvbench run.json (invalid JSON)", path);
        free(path);
        cJSON_Delete(run->json);
        run->json = NULL;
        return -1;
    }
    /* the tasks it defines, so that its files are read and scored as they were made */
    int rc = kb_user_tasks_from_json(kb_runjson_list(run->json, "tasks"), path, err);
    free(path);
    if (rc == 0 && !(run->dir = strdup(dir)))
        rc = kv_fail(err, "out of memory");
    if (rc < 0)
        kb_run_close(run);
    return rc;
}

void kb_run_close(kb_run *run)
{
    if (run->locked)
        close(run->lock_fd); /* releases the flock */
    free(run->dir);
    cJSON_Delete(run->json);
    memset(run, 0, sizeof *run);
}

static cJSON *shard_json(const kb_shard *s)
{
    if (s->count <= 1)
        return cJSON_CreateNull();
    cJSON *o = cJSON_CreateObject();
    if (o && (!cJSON_AddNumberToObject(o, "index", (double)s->index) ||
              !cJSON_AddNumberToObject(o, "count", (double)s->count))) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* run.json's "kv_bytes_per_token": {config name: bytes[i]} (bytes NULL:
 * none). Beside the matrix, not in its configs: those are the settings
 * that a resume and `submit` compare. */
static bool add_bytes_per_token(cJSON *o, const kb_matrix *m, const double *bytes)
{
    cJSON *map = bytes ? cJSON_AddObjectToObject(o, "kv_bytes_per_token") : NULL;
    for (size_t i = 0; map && i < m->n_configs; i++)
        if (!cJSON_AddNumberToObject(map, m->configs[i].name, bytes[i]))
            return false;
    return !bytes || map;
}

static cJSON *new_run_json(const kb_run_info *info)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *m = kb_matrix_to_json(info->matrix);
    cJSON *sh = shard_json(&info->shard);
    char when[32];
    time_t now = time(NULL);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    if (!o || !m || !sh || !cJSON_AddStringToObject(o, "kvbench_version", info->kvbench_version) ||
        !cJSON_AddStringToObject(o, "model", info->matrix->model) ||
        !cJSON_AddStringToObject(o, "model_hash", info->model_hash) ||
        !cJSON_AddStringToObject(o, "protocol", info->matrix->protocol) ||
        !cJSON_AddStringToObject(o, "compute", info->matrix->compute) ||
        !cJSON_AddStringToObject(o, "created", when)) {
        cJSON_Delete(o);
        cJSON_Delete(m);
        cJSON_Delete(sh);
        return NULL;
    }
    cJSON_AddItemToObject(o, "shard", sh);
    cJSON_AddItemToObject(o, "matrix", m);
    if (!add_bytes_per_token(o, info->matrix, info->kv_bytes_per_token)) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* After a resume run.json records the limits asked for now. */
static int update_limits(cJSON *old_tasks, const cJSON *now_tasks, kv_error *err)
{
    for (const cJSON *t = now_tasks ? now_tasks->child : NULL; t; t = t->next) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "task");
        cJSON *have = cJSON_IsString(name)
                          ? (cJSON *)kb_runjson_find(old_tasks, "task", name->valuestring)
                          : NULL;
        const cJSON *limit = cJSON_GetObjectItemCaseSensitive(t, "limit");
        if (!have || !limit)
            continue;
        cJSON *copy = cJSON_Duplicate(limit, true);
        if (!copy || !cJSON_ReplaceItemInObjectCaseSensitive(have, "limit", copy)) {
            cJSON_Delete(copy);
            return kv_fail(err, "out of memory");
        }
    }
    return 0;
}

/* The command line's overrides of the latest run into old's matrix (none:
 * none recorded), so run.json says how the folder was last run. */
static int keep_overrides(cJSON *old, const cJSON *now)
{
    cJSON *matrix = cJSON_GetObjectItemCaseSensitive(old, "matrix");
    const cJSON *given = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(now, "matrix"), "overrides");
    cJSON_DeleteItemFromObjectCaseSensitive(matrix, "overrides");
    cJSON *copy = given ? cJSON_Duplicate(given, true) : NULL;
    if (given && (!copy || !cJSON_AddItemToObject(matrix, "overrides", copy))) {
        cJSON_Delete(copy);
        return -1;
    }
    return 0;
}

/* Checks an existing run.json against this run and merges the matrices. */
static int resume_run_json(cJSON *old, const cJSON *now, const char *path, kv_error *err)
{
    if (!kb_runjson_same(old, now, "model_hash"))
        return kv_fail(err,
                       "%s: this run was made with a different model (hash %s, now %s); use a new "
                       "run name",
                       path, cJSON_GetStringValue(cJSON_GetObjectItem(old, "model_hash")),
                       cJSON_GetStringValue(cJSON_GetObjectItem(now, "model_hash")));
    if (!kb_runjson_same(old, now, "protocol"))
        return kv_fail(err, "%s: this run used protocol \"%s\", not \"%s\"; use a new run name",
                       path, cJSON_GetStringValue(cJSON_GetObjectItem(old, "protocol")),
                       cJSON_GetStringValue(cJSON_GetObjectItem(now, "protocol")));
    if (strcmp(kb_runjson_compute(old), kb_runjson_compute(now)) != 0)
        return kv_fail(err,
                       "%s: this run computed in %s, not %s (\"compute\" in the config); use a "
                       "new run name",
                       path, kb_runjson_compute(old), kb_runjson_compute(now));
    kb_shard was = kb_runjson_shard(old), is = kb_runjson_shard(now);
    if (was.index != is.index || was.count != is.count)
        return kv_fail(err, "%s: this folder holds a different shard", path);
    cJSON *old_configs = (cJSON *)kb_runjson_list(old, "configs");
    cJSON *old_tasks = (cJSON *)kb_runjson_list(old, "tasks");
    if (!cJSON_IsArray(old_configs) || !cJSON_IsArray(old_tasks))
        return kv_fail(err, "%s: has no matrix.configs or matrix.tasks", path);
    if (kb_runjson_join(old_configs, kb_runjson_list(now, "configs"), "name",
                        kb_runjson_config_keys, "config", path, err) < 0 ||
        kb_runjson_join(old_tasks, kb_runjson_list(now, "tasks"), "task", kb_runjson_task_keys,
                        "task", path, err) < 0)
        return -1;
    if (keep_overrides(old, now) < 0 || kb_runjson_add_bytes_per_token(old, now) < 0)
        return kv_fail(err, "out of memory");
    return update_limits(old_tasks, kb_runjson_list(now, "tasks"), err);
}

int kb_run_mark_finished(kb_run *run, kv_error *err)
{
    char *path = kv_path_join(run->dir, "run.json");
    int rc = path && kb_runjson_set_finished(run->json, true)
                 ? kb_runjson_write(path, run->json, err)
                 : kv_fail(err, "out of memory");
    free(path);
    return rc;
}

/* "pid P on host H", from what the holder of run.lock wrote into it. */
static void lock_holder(int fd, char *out, size_t n)
{
    char text[256] = "", host[200] = "?";
    ssize_t len = pread(fd, text, sizeof text - 1, 0);
    text[len > 0 ? len : 0] = '\0';
    long pid = 0;
    if (sscanf(text, "%ld %199s", &pid, host) < 1)
        pid = 0;
    snprintf(out, n, "pid %ld on host %s", pid, host);
}

int kb_run_lock_holder(const char *dir, char *holder, size_t n, kv_error *err)
{
    char *path = kv_path_join(dir, "run.lock");
    if (!path)
        return kv_fail(err, "out of memory");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    int rc = 0;
    if (fd < 0) {
        if (errno != ENOENT)
            rc = kv_fail(err, "%s: cannot open: %s", path, strerror(errno));
    } else if (flock(fd, LOCK_SH | LOCK_NB) == 0) {
        flock(fd, LOCK_UN); /* free: let go at once, a shard may be starting */
    } else if (errno == EWOULDBLOCK) {
        lock_holder(fd, holder, n);
        rc = 1;
    } else {
        rc = kv_fail(err, "%s: cannot lock: %s", path, strerror(errno));
    }
    if (fd >= 0)
        close(fd);
    free(path);
    return rc;
}

/* Takes the folder's write lock: an exclusive flock on dir/run.lock, which
 * then records "pid host" for whoever finds it taken. The kernel drops the
 * lock when the process ends, however it ends, so a crash never leaves a
 * folder locked. Returns the open descriptor, or -1 after reporting. */
int kb_run_lock(const char *dir, kv_error *err)
{
    char *path = kv_path_join(dir, "run.lock");
    if (!path)
        return kv_fail(err, "out of memory");
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) {
        kv_fail(err, "%s: cannot open: %s", path, strerror(errno));
        free(path);
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        if (errno == EWOULDBLOCK) {
            char holder[256];
            lock_holder(fd, holder, sizeof holder);
            kv_fail(err,
                    "%s: another kvbench run (%s) is writing this run folder; "
                    "wait for it to end, or give this run another name (--name)",
                    dir, holder);
        } else {
            kv_fail(err, "%s: cannot lock: %s", path, strerror(errno));
        }
        close(fd);
        free(path);
        return -1;
    }
    char me[300], host[256] = "?";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    int n = snprintf(me, sizeof me, "%ld %s\n", (long)getpid(), host);
    if (ftruncate(fd, 0) < 0 || pwrite(fd, me, (size_t)n, 0) != n) {
        kv_fail(err, "%s: cannot write: %s", path, strerror(errno));
        close(fd);
        free(path);
        return -1;
    }
    free(path);
    return fd;
}

/* True when dir/predictions holds anything. */
static bool has_predictions(const char *preds)
{
    char **names = NULL;
    size_t n = 0;
    kv_error ignored; /* no folder: no predictions */
    if (kv_dir_list(preds, NULL, &names, &n, &ignored) < 0)
        return false;
    kv_names_free(names, n);
    return n > 0;
}

int kb_run_open(const char *dir, const kb_run_info *info, kb_run *run, kv_error *err)
{
    memset(run, 0, sizeof *run);
    char *preds = kv_path_join(dir, "predictions");
    char *path = kv_path_join(dir, "run.json");
    cJSON *now = new_run_json(info);
    int rc = 0, lock = -1;
    if (!preds || !path || !now) {
        rc = kv_fail(err, "out of memory");
        goto out;
    }
    if ((rc = kv_mkdirs(dir, err)) < 0)
        goto out;
    if ((lock = kb_run_lock(dir, err)) < 0) {
        rc = -1;
        goto out;
    }
    if (!kv_file_exists(path) && has_predictions(preds)) {
        rc = kv_fail(err,
                     "%s: predictions/ without run.json: nothing tells which model and configs "
                     "made them, so they cannot be resumed; move predictions/ away (or restore "
                     "run.json), or give this run another name (--name)",
                     dir);
        goto out;
    }
    if ((rc = kv_mkdirs(preds, err)) < 0)
        goto out;
    if (kv_file_exists(path)) {
        kb_run old;
        if ((rc = kb_run_load(dir, &old, err)) < 0)
            goto out;
        rc = resume_run_json(old.json, now, path, err);
        if (rc == 0) {
            cJSON_Delete(now);
            now = old.json; /* keeps "created" and every config ever run here */
            old.json = NULL;
        }
        kb_run_close(&old);
        if (rc < 0)
            goto out;
    }
    if (!(run->dir = strdup(dir))) {
        rc = kv_fail(err, "out of memory");
        goto out;
    }
    run->json = now;
    now = NULL;
    /* a resume refused here leaves run.json (and "finished") as it was */
    if (info->verify && (rc = info->verify(run, info->verify_ctx, err)) < 0)
        goto out;
    if (!kb_runjson_set_finished(run->json, false)) { /* running (again) */
        rc = kv_fail(err, "out of memory");
        goto out;
    }
    if ((rc = kb_runjson_write(path, run->json, err)) < 0)
        goto out;
    run->lock_fd = lock;
    run->locked = true;
out:
    if (rc < 0 && lock >= 0)
        close(lock);
    if (rc < 0) {
        cJSON_Delete(run->json);
        free(run->dir);
        memset(run, 0, sizeof *run);
    }
    cJSON_Delete(now);
    free(preds);
    free(path);
    return rc;
}
