#include "matrix/results.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util/file.h"
#include "util/jsonstr.h"
#include "matrix/usertask.h"

static int write_json_atomic(const char *path, const cJSON *j, kv_error *err)
{
    char *text = cJSON_Print(j);
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

static char *path2(const char *a, const char *b)
{
    return kv_path_join(a, b);
}

static char *path3(const char *a, const char *b, const char *c)
{
    char *ab = kv_path_join(a, b);
    char *abc = ab ? kv_path_join(ab, c) : NULL;
    free(ab);
    return abc;
}

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
    char *run_dir = path2(output, run_name);
    if (!run_dir || !shard || shard->count <= 1)
        return run_dir;
    char *dir = kb_shard_dir(run_dir, shard);
    free(run_dir);
    return dir;
}

/* ---- run.json ---------------------------------------------------------- */

const char *kb_run_string(const kb_run *run, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(run->json, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static const cJSON *matrix_list(const cJSON *run_json, const char *key)
{
    return cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(run_json, "matrix"),
                                            key);
}

static const cJSON *find_named(const cJSON *list, const char *field, const char *name)
{
    for (const cJSON *c = list ? list->child : NULL; c; c = c->next) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(c, field);
        if (cJSON_IsString(n) && strcmp(n->valuestring, name) == 0)
            return c;
    }
    return NULL;
}

const cJSON *kb_run_config(const kb_run *run, const char *name)
{
    const cJSON *c = find_named(matrix_list(run->json, "configs"), "name", name);
    return c ? cJSON_GetObjectItemCaseSensitive(c, "params") : NULL;
}

int kb_run_load(const char *dir, kb_run *run, kv_error *err)
{
    memset(run, 0, sizeof *run);
    char *path = path2(dir, "run.json");
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
    int rc = kb_user_tasks_from_json(matrix_list(run->json, "tasks"), path, err);
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
    return o;
}

static bool same_string(const cJSON *a, const cJSON *b, const char *key)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(a, key);
    const cJSON *y = cJSON_GetObjectItemCaseSensitive(b, key);
    return cJSON_IsString(x) && cJSON_IsString(y) && strcmp(x->valuestring, y->valuestring) == 0;
}

/* A run's compute mode; run folders from before BF16 mode ran in F32. */
static const char *run_compute(const cJSON *run_json)
{
    const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(run_json, "compute"));
    return s ? s : "f32";
}

static long shard_field(const cJSON *run_json, const char *key)
{
    const cJSON *v =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(run_json, "shard"), key);
    return cJSON_IsNumber(v) ? (long)v->valuedouble : (strcmp(key, "count") == 0 ? 1 : 0);
}

/* Equal values, or absent from both (a built-in task has no "template"). */
static bool same_value(const cJSON *a, const cJSON *b)
{
    return (!a && !b) || cJSON_Compare(a, b, true);
}

/* Adds to `into` every item of `from` whose `field` it lacks; an item with
 * the same name must be equal in every `compare` key. */
static int union_by_name(cJSON *into, const cJSON *from, const char *field,
                         const char *const *compare, const char *what, const char *path,
                         kv_error *err)
{
    for (const cJSON *c = from ? from->child : NULL; c; c = c->next) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(c, field);
        if (!cJSON_IsString(name))
            continue;
        const cJSON *have = find_named(into, field, name->valuestring);
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
                               path, what, name->valuestring, compare[k]);
    }
    return 0;
}

static const char *const config_keys[] = {"hash", NULL};
/* What makes a task's predictions different. Not "limit": the first N
 * samples come out the same whatever N is, so a run may grow its limit. */
static const char *const task_keys[] = {"max_length", "max_new_tokens", "template", "metric",
                                        "chat",       "first_line",     NULL};
static const char *const shard_task_keys[] = {"limit",  "max_length", "max_new_tokens", "template",
                                              "metric", "chat",       "first_line",     NULL};

/* After a resume run.json records the limits asked for now. */
static int update_limits(cJSON *old_tasks, const cJSON *now_tasks, kv_error *err)
{
    for (const cJSON *t = now_tasks ? now_tasks->child : NULL; t; t = t->next) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "task");
        cJSON *have =
            cJSON_IsString(name) ? (cJSON *)find_named(old_tasks, "task", name->valuestring) : NULL;
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

/* Checks an existing run.json against this run and merges the matrices. */
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

static int resume_run_json(cJSON *old, const cJSON *now, const char *path, kv_error *err)
{
    if (!same_string(old, now, "model_hash"))
        return kv_fail(err,
                       "%s: this run was made with a different model (hash %s, now %s); use a new "
                       "run name",
                       path, cJSON_GetStringValue(cJSON_GetObjectItem(old, "model_hash")),
                       cJSON_GetStringValue(cJSON_GetObjectItem(now, "model_hash")));
    if (!same_string(old, now, "protocol"))
        return kv_fail(err, "%s: this run used protocol \"%s\", not \"%s\"; use a new run name",
                       path, cJSON_GetStringValue(cJSON_GetObjectItem(old, "protocol")),
                       cJSON_GetStringValue(cJSON_GetObjectItem(now, "protocol")));
    if (strcmp(run_compute(old), run_compute(now)) != 0)
        return kv_fail(err,
                       "%s: this run computed in %s, not %s (\"compute\" in the config); use a "
                       "new run name",
                       path, run_compute(old), run_compute(now));
    if (shard_field(old, "count") != shard_field(now, "count") ||
        shard_field(old, "index") != shard_field(now, "index"))
        return kv_fail(err, "%s: this folder holds a different shard", path);
    cJSON *old_configs = (cJSON *)matrix_list(old, "configs");
    cJSON *old_tasks = (cJSON *)matrix_list(old, "tasks");
    if (!cJSON_IsArray(old_configs) || !cJSON_IsArray(old_tasks))
        return kv_fail(err, "%s: has no matrix.configs or matrix.tasks", path);
    if (union_by_name(old_configs, matrix_list(now, "configs"), "name", config_keys, "config", path,
                      err) < 0 ||
        union_by_name(old_tasks, matrix_list(now, "tasks"), "task", task_keys, "task", path, err) <
            0)
        return -1;
    if (keep_overrides(old, now) < 0)
        return kv_fail(err, "out of memory");
    return update_limits(old_tasks, matrix_list(now, "tasks"), err);
}

/* "finished": the UTC time the run (or shard) completed, null while it runs. */
static bool set_finished(cJSON *run_json, bool finished)
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

int kb_run_mark_finished(kb_run *run, kv_error *err)
{
    char *path = path2(run->dir, "run.json");
    int rc = path && set_finished(run->json, true) ? write_json_atomic(path, run->json, err)
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
    char *path = path2(dir, "run.lock");
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
static int lock_run_dir(const char *dir, kv_error *err)
{
    char *path = path2(dir, "run.lock");
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
    char *preds = path2(dir, "predictions");
    char *path = path2(dir, "run.json");
    cJSON *now = new_run_json(info);
    int rc = 0, lock = -1;
    if (!preds || !path || !now) {
        rc = kv_fail(err, "out of memory");
        goto out;
    }
    if ((rc = kv_mkdirs(dir, err)) < 0)
        goto out;
    if ((lock = lock_run_dir(dir, err)) < 0) {
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
    if (!set_finished(run->json, false)) { /* running (again) */
        rc = kv_fail(err, "out of memory");
        goto out;
    }
    if ((rc = write_json_atomic(path, run->json, err)) < 0)
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

/* ---- id sets ----------------------------------------------------------- */

static size_t str_hash(const char *s)
{
    size_t h = 1469598103934665603ULL;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

/* The slot of id, or the empty slot where it would go (cap > 0). */
static size_t idset_slot(const kb_idset *s, const char *id)
{
    size_t i = str_hash(id) & (s->cap - 1);
    while (s->slots[i] && strcmp(s->slots[i], id) != 0)
        i = (i + 1) & (s->cap - 1);
    return i;
}

bool kb_idset_has(const kb_idset *s, const char *id)
{
    return kb_idset_pos(s, id) != -2;
}

long kb_idset_pos(const kb_idset *s, const char *id)
{
    if (!s->cap)
        return -2;
    size_t i = idset_slot(s, id);
    return s->slots[i] ? s->pos[i] : -2;
}

static int idset_grow(kb_idset *s)
{
    size_t cap = s->cap ? s->cap * 2 : 64;
    kb_idset g = {calloc(cap, sizeof *g.slots), malloc(cap * sizeof *g.pos), cap, s->n};
    if (!g.slots || !g.pos) {
        free(g.slots);
        free(g.pos);
        return -1;
    }
    for (size_t i = 0; i < s->cap; i++) {
        if (!s->slots[i])
            continue;
        size_t j = idset_slot(&g, s->slots[i]);
        g.slots[j] = s->slots[i];
        g.pos[j] = s->pos[i];
    }
    free(s->slots);
    free(s->pos);
    *s = g;
    return 0;
}

int kb_idset_add_at(kb_idset *s, const char *id, long pos)
{
    if ((s->n + 1) * 2 > s->cap && idset_grow(s) < 0)
        return -1;
    size_t i = idset_slot(s, id);
    if (s->slots[i]) {
        s->pos[i] = -1;
        return 0;
    }
    if (!(s->slots[i] = strdup(id)))
        return -1;
    s->pos[i] = pos;
    s->n++;
    return 1;
}

int kb_idset_add(kb_idset *s, const char *id)
{
    return kb_idset_has(s, id) ? 0 : kb_idset_add_at(s, id, -1);
}

void kb_idset_free(kb_idset *s)
{
    for (size_t i = 0; i < s->cap; i++)
        free(s->slots[i]);
    free(s->slots);
    free(s->pos);
    memset(s, 0, sizeof *s);
}

/* ---- reading prediction files ------------------------------------------ */

void kb_pred_lines_free(kb_pred_lines *l)
{
    for (size_t i = 0; i < l->n; i++) {
        free(l->text[i]);
        cJSON_Delete(l->json[i]);
    }
    free(l->text);
    free(l->json);
    memset(l, 0, sizeof *l);
}

static bool valid_line(const cJSON *j)
{
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(j, "id");
    const cJSON *index = cJSON_GetObjectItemCaseSensitive(j, "index");
    return cJSON_IsObject(j) && cJSON_IsString(id) && cJSON_IsNumber(index) &&
           index->valuedouble >= 0 && index->valuedouble == floor(index->valuedouble);
}

static bool blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n' && s[i] != '\0')
            return false;
    return true;
}

static int push_line(kb_pred_lines *l, size_t *cap, const char *s, size_t n, cJSON *j)
{
    if (l->n == *cap) {
        size_t c = *cap ? 2 * *cap : 64;
        char **t = realloc(l->text, c * sizeof *t);
        if (t)
            l->text = t;
        cJSON **js = t ? realloc(l->json, c * sizeof *js) : NULL;
        if (!js)
            return -1;
        l->json = js;
        *cap = c;
    }
    if (!(l->text[l->n] = strndup(s, n)))
        return -1;
    l->json[l->n++] = j;
    return 0;
}

/* Splits data into complete, valid lines. A cut-short or unparsable last line
 * is dropped (counted); a bad line before the last is an error. */
static int split_lines(const char *path, const char *data, size_t len, kb_pred_lines *out,
                       kv_error *err)
{
    memset(out, 0, sizeof *out);
    size_t cap = 0, pos = 0;
    long lineno = 0;
    while (pos < len) {
        lineno++;
        const char *s = data + pos;
        const char *nl = memchr(s, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - s) : len - pos;
        size_t next = pos + n + (nl ? 1 : 0);
        bool last = blank(data + next, len - next);
        if (blank(s, n) && !last) {
            kb_pred_lines_free(out);
            return kv_fail(err, "%s:%ld: blank line inside a prediction file", path, lineno);
        }
        /* a NUL byte is never part of JSON text; it is what a crash can leave */
        bool parsable = nl && !blank(s, n) && !memchr(s, '\0', n);
        /* cJSON would cut an id at "\u0000": read it as KV_ID_NUL (jsonstr.h) */
        char *ids = parsable && s && memmem(s, n, "\\u0000", 6) ? strndup(s, n) : NULL;
        const char *js = ids ? ids : s, *end = NULL;
        size_t jn = ids ? kv_json_ids_in(ids, n) : n;
        cJSON *j = parsable ? cJSON_ParseWithLengthOpts(js, jn, &end, false) : NULL;
        if (j && !blank(end, jn - (size_t)(end - js))) { /* "{...} junk" is not a line */
            cJSON_Delete(j);
            j = NULL;
        }
        free(ids);
        if (!j || !valid_line(j)) {
            cJSON_Delete(j);
            if (last) { /* what an interruption leaves: redo that sample */
                out->n_dropped += !blank(s, n);
                break;
            }
            kb_pred_lines_free(out);
            return kv_fail(err,
                           "%s:%ld: not a prediction line (JSON object with \"id\" and "
                           "\"index\"); the file is damaged before its last line: fix or delete "
                           "it",
                           path, lineno);
        }
        if (push_line(out, &cap, s, n, j) < 0) {
            cJSON_Delete(j);
            kb_pred_lines_free(out);
            return kv_fail(err, "out of memory");
        }
        pos = next;
    }
    return 0;
}

int kb_pred_lines_read(const char *path, kb_pred_lines *out, kv_error *err)
{
    memset(out, 0, sizeof *out);
    char *data = NULL;
    size_t len = 0;
    if (kv_file_read(path, &data, &len, err) < 0)
        return -1;
    int rc = split_lines(path, data, len, out, err);
    free(data);
    return rc;
}

static const char *line_string(const cJSON *line, const char *key)
{
    return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(line, key));
}

/* The way out offered for a line that does not belong: the file's other
 * lines are fine, so removing the line (the sample is then redone) or the
 * file (the task is redone) is all a rerun needs. */
#define REMOVE_LINE "remove that line (or the file) and run again to redo the sample"

int kb_pred_lines_check(const kb_pred_lines *l, const char *path, const kb_pred_expect *x,
                        kv_error *err)
{
    for (size_t i = 0; i < l->n; i++) {
        const cJSON *j = l->json[i];
        const char *id = line_string(j, "id");
        const char *task = line_string(j, "dataset"), *config = line_string(j, "config");
        const char *hash = line_string(j, "config_hash");
        if (x->task && (!task || strcmp(task, x->task) != 0))
            return kv_fail(err, "%s:%zu: a line of task \"%s\" in the file of task \"%s\"; %s",
                           path, i + 1, task ? task : "(none)", x->task, REMOVE_LINE);
        if (x->config && (!config || strcmp(config, x->config) != 0))
            return kv_fail(err, "%s:%zu: a line of config \"%s\" in the file of config \"%s\"; %s",
                           path, i + 1, config ? config : "(none)", x->config, REMOVE_LINE);
        if (x->config_hash && !hash)
            return kv_fail(err,
                           "%s:%zu: no config_hash (written by hand or by an older kvbench), so "
                           "nothing shows it was made with config \"%s\" as run.json gives it; %s",
                           path, i + 1, x->config ? x->config : "?", REMOVE_LINE);
        if (x->config_hash && strcmp(hash, x->config_hash) != 0)
            return kv_fail(err,
                           "%s:%zu: config hash %s, but run.json gives config \"%s\" hash %s "
                           "(the line was made with other parameters); %s",
                           path, i + 1, hash, x->config ? x->config : "?", x->config_hash,
                           REMOVE_LINE);
        long pos = x->ids ? kb_idset_pos(x->ids, id) : -1;
        if (pos == -2)
            return kv_fail(err, "%s:%zu: sample \"%s\" is not in the task's data; %s", path, i + 1,
                           id, REMOVE_LINE);
        /* shards, merges and --limit go by index: it must be the id's place */
        long index = (long)cJSON_GetObjectItemCaseSensitive(j, "index")->valuedouble;
        if (pos >= 0 && index != pos)
            return kv_fail(err,
                           "%s:%zu: sample \"%s\" has index %ld, but it is sample %ld of the "
                           "task's data (the data changed since, or the line comes from other "
                           "data); %s",
                           path, i + 1, id, index, pos, REMOVE_LINE);
        /* a shard's folder holds only its own samples, or merge would
         * count a sample twice */
        if (x->shard.count > 1 && !kb_shard_selects(&x->shard, index))
            return kv_fail(err,
                           "%s:%zu: sample \"%s\" has index %ld, which shard %ld of %ld runs, "
                           "not this folder's shard %ld; %s",
                           path, i + 1, id, index, index % x->shard.count, x->shard.count,
                           x->shard.index, REMOVE_LINE);
    }
    return 0;
}

/* ---- appending --------------------------------------------------------- */

static char *join_lines(const kb_pred_lines *l, size_t *len)
{
    size_t n = 0;
    for (size_t i = 0; i < l->n; i++)
        n += strlen(l->text[i]) + 1;
    char *s = malloc(n + 1);
    if (!s)
        return NULL;
    size_t at = 0;
    for (size_t i = 0; i < l->n; i++) {
        size_t k = strlen(l->text[i]);
        memcpy(s + at, l->text[i], k);
        s[at + k] = '\n';
        at += k + 1;
    }
    s[at] = '\0';
    *len = at;
    return s;
}

/* Checks every line against x and puts its id in done: a sample twice in
 * one file is an error too. */
static int check_lines(const kb_pred_lines *l, const char *path, const kb_pred_expect *x,
                       kb_idset *done, kv_error *err)
{
    if (kb_pred_lines_check(l, path, x, err) < 0)
        return -1;
    for (size_t i = 0; i < l->n; i++) {
        const char *id = cJSON_GetObjectItemCaseSensitive(l->json[i], "id")->valuestring;
        int added = kb_idset_add(done, id);
        if (added < 0)
            return kv_fail(err, "out of memory");
        if (added == 0)
            return kv_fail(err, "%s:%zu: sample \"%s\" appears twice", path, i + 1, id);
    }
    return 0;
}

/* Reads what is there, checks every line against x, drops a cut-short tail
 * (atomically) and fills done. */
static int recover(kb_pred_file *pf, const kb_pred_expect *x, kv_error *err)
{
    if (!kv_file_exists(pf->path))
        return 0;
    char *data = NULL;
    size_t len = 0;
    if (kv_file_read(pf->path, &data, &len, err) < 0)
        return -1;
    kb_pred_lines l;
    int rc = split_lines(pf->path, data, len, &l, err);
    if (rc < 0) {
        free(data);
        return -1;
    }
    rc = check_lines(&l, pf->path, x, &pf->done, err);
    pf->n_lines = (long)l.n;
    pf->n_dropped = l.n_dropped;
    /* rewrite only when the bytes on disk are not exactly the valid lines */
    size_t keep_len = 0;
    char *keep = rc == 0 ? join_lines(&l, &keep_len) : NULL;
    if (rc == 0 && !keep)
        rc = kv_fail(err, "out of memory");
    if (rc == 0 && (keep_len != len || memcmp(keep, data, len) != 0))
        rc = kv_write_atomic(pf->path, keep, keep_len, err);
    free(keep);
    free(data);
    kb_pred_lines_free(&l);
    return rc;
}

/* The hash run.json records for a config, NULL when it lists none. */
static const char *run_config_hash(const kb_run *run, const char *config)
{
    return line_string(find_named(matrix_list(run->json, "configs"), "name", config), "hash");
}

/* predictions/<config>/<task>.jsonl of a run. NULL on OOM. */
static char *pred_path(const kb_run *run, const char *config, const char *task)
{
    char *name = NULL, *path = NULL;
    if (asprintf(&name, "%s/%s.jsonl", config, task) >= 0)
        path = path3(run->dir, "predictions", name);
    free(name);
    return path;
}

/* What every line of a prediction file of the run must say. */
static kb_pred_expect pred_expect(const kb_run *run, const char *config, const char *task,
                                  const kb_idset *ids)
{
    return (kb_pred_expect){
        .task = task,
        .config = config,
        .config_hash = run_config_hash(run, config),
        .ids = ids,
        .shard = {shard_field(run->json, "index"), shard_field(run->json, "count")}};
}

long kb_pred_file_lines(const kb_run *run, const char *config, const char *task)
{
    char *path = pred_path(run, config, task), *data = NULL;
    size_t len = 0;
    kv_error err;
    long n = 0;
    if (path && kv_file_exists(path) && kv_file_read(path, &data, &len, &err) == 0)
        for (size_t i = 0; i < len; i++)
            n += data[i] == '\n';
    free(data);
    free(path);
    return n;
}

int kb_pred_file_verify(const kb_run *run, const char *config, const char *task,
                        const kb_idset *ids, kv_error *err)
{
    char *path = pred_path(run, config, task);
    if (!path)
        return kv_fail(err, "out of memory");
    kb_pred_lines l;
    int rc = 0;
    if (kv_file_exists(path) && (rc = kb_pred_lines_read(path, &l, err)) == 0) {
        kb_idset seen = {0};
        kb_pred_expect x = pred_expect(run, config, task, ids);
        rc = check_lines(&l, path, &x, &seen, err);
        kb_idset_free(&seen);
        kb_pred_lines_free(&l);
    }
    free(path);
    return rc;
}

int kb_pred_file_open(const kb_run *run, const char *config, const char *task, const kb_idset *ids,
                      kb_pred_file *pf, kv_error *err)
{
    memset(pf, 0, sizeof *pf);
    pf->fd = -1;
    char *dir = path3(run->dir, "predictions", config);
    if (!dir || !(pf->path = pred_path(run, config, task))) {
        free(dir);
        return kv_fail(err, "out of memory");
    }
    int rc = kv_mkdirs(dir, err);
    free(dir);
    kb_pred_expect x = pred_expect(run, config, task, ids);
    if (rc == 0)
        rc = recover(pf, &x, err);
    if (rc == 0) {
        pf->fd = open(pf->path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0666);
        if (pf->fd < 0)
            rc = kv_fail(err, "%s: cannot open for appending: %s", pf->path, strerror(errno));
    }
    if (rc < 0)
        kb_pred_file_close(pf);
    return rc;
}

bool kb_pred_file_done(const kb_pred_file *pf, const char *id)
{
    return kb_idset_has(&pf->done, id);
}

int kb_pred_file_append(kb_pred_file *pf, const cJSON *line, kv_error *err)
{
    if (!valid_line(line))
        return kv_fail(err, "%s: a prediction needs \"id\" and \"index\"", pf->path);
    const char *id = cJSON_GetObjectItemCaseSensitive(line, "id")->valuestring;
    if (kb_pred_file_done(pf, id))
        return kv_fail(err, "%s: sample \"%s\" is already there", pf->path, id);
    char *text = cJSON_PrintUnformatted(line);
    if (!text || !(text = kv_json_ids_out(text)))
        return kv_fail(err, "out of memory");
    size_t n = strlen(text);
    char *withnl = realloc(text, n + 2);
    if (!withnl) {
        free(text);
        return kv_fail(err, "out of memory");
    }
    withnl[n] = '\n';
    /* one write: an interruption leaves a prefix of this line, never a mix */
    int rc = 0;
    if (kv_write_all(pf->fd, withnl, n + 1) < 0 || fsync(pf->fd) < 0)
        rc = kv_fail(err, "%s: cannot write: %s", pf->path, strerror(errno));
    free(withnl);
    if (rc == 0) {
        if (kb_idset_add(&pf->done, id) < 0)
            return kv_fail(err, "out of memory");
        pf->n_lines++;
    }
    return rc;
}

void kb_pred_file_close(kb_pred_file *pf)
{
    if (pf->fd >= 0)
        close(pf->fd);
    free(pf->path);
    kb_idset_free(&pf->done);
    memset(pf, 0, sizeof *pf);
    pf->fd = -1;
}

/* A JSON array of the texts (NULs kept), or NULL on OOM. */
static cJSON *text_array(const kv_str *v, size_t n)
{
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; a && i < n; i++) {
        cJSON *e = kv_json_text(v[i].p, v[i].n);
        if (!e || !cJSON_AddItemToArray(a, e)) {
            cJSON_Delete(e);
            cJSON_Delete(a);
            return NULL;
        }
    }
    return a;
}

/* "length": LongBench's word count, or v2's class; v2 adds its answer
 * letter and difficulty. */
static bool add_length(cJSON *o, const kb_prediction *p)
{
    if (!p->length_class)
        return cJSON_AddNumberToObject(o, "length", (double)p->length);
    return cJSON_AddStringToObject(o, "length", p->length_class) &&
           (!p->difficulty || cJSON_AddStringToObject(o, "difficulty", p->difficulty)) &&
           (p->n_answers == 0 ||
            cJSON_AddItemToObject(o, "answer", kv_json_text(p->answers[0].p, p->answers[0].n)));
}

cJSON *kb_prediction_json(const kb_prediction *p)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *answers = text_array(p->answers, p->n_answers);
    cJSON *classes =
        p->all_classes ? text_array(p->all_classes, p->n_classes) : cJSON_CreateNull();
    bool ok = o && answers && classes && cJSON_AddStringToObject(o, "id", p->id) &&
              cJSON_AddNumberToObject(o, "index", (double)p->index) &&
              cJSON_AddStringToObject(o, "dataset", p->task) &&
              cJSON_AddStringToObject(o, "config", p->config) &&
              (!p->config_hash || cJSON_AddStringToObject(o, "config_hash", p->config_hash)) &&
              cJSON_AddItemToObject(
                  o, "pred", kv_json_text(p->pred, p->pred_len ? p->pred_len : strlen(p->pred)));
    if (ok) {
        cJSON_AddItemToObject(o, "answers", answers);
        cJSON_AddItemToObject(o, "all_classes", classes);
        answers = classes = NULL;
        ok = add_length(o, p) &&
             cJSON_AddNumberToObject(o, "prompt_tokens", (double)p->prompt_tokens) &&
             cJSON_AddNumberToObject(o, "kept_tokens", (double)p->kept_tokens) &&
             cJSON_AddNumberToObject(o, "context_tokens", (double)p->context_tokens) &&
             cJSON_AddNumberToObject(o, "kept_context_tokens", (double)p->kept_context_tokens) &&
             cJSON_AddNumberToObject(o, "generated_tokens", (double)p->generated_tokens) &&
             cJSON_AddNumberToObject(o, "prefill_s", p->prefill_s) &&
             cJSON_AddNumberToObject(o, "decode_s", p->decode_s);
    }
    cJSON_Delete(answers);
    cJSON_Delete(classes);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* ---- merging shards ---------------------------------------------------- */

typedef struct shard_in {
    kb_run run;
    long index;
} shard_in;

static int check_shards(shard_in *s, size_t n, bool allow_unfinished, kv_error *err)
{
    long count = shard_field(s[0].run.json, "count");
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
        s[i].index = shard_field(b, "index");
        const char *bad = NULL;
        if (shard_field(b, "count") != count)
            bad = "shard count";
        else if (!same_string(a, b, "model_hash"))
            bad = "model hash";
        else if (!same_string(a, b, "protocol"))
            bad = "protocol";
        else if (strcmp(run_compute(a), run_compute(b)) != 0)
            bad = "compute mode";
        if (bad)
            rc = kv_fail(err, "%s and %s have a different %s: they are not shards of one run",
                         s[0].run.dir, s[i].run.dir, bad);
        else if (!allow_unfinished &&
                 !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(b, "finished")))
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
 * of configs and tasks; a config whose hash differs between shards fails. */
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
        all_finished &= cJSON_IsString(cJSON_GetObjectItemCaseSensitive(s[i].run.json, "finished"));
    if (!set_finished(out, all_finished)) {
        kv_fail(err, "out of memory");
        cJSON_Delete(out);
        return NULL;
    }
    cJSON *configs = (cJSON *)matrix_list(out, "configs");
    cJSON *tasks = (cJSON *)matrix_list(out, "tasks");
    if (!cJSON_IsArray(configs) || !cJSON_IsArray(tasks)) {
        kv_fail(err, "%s/run.json: has no matrix.configs or matrix.tasks", s[0].run.dir);
        cJSON_Delete(out);
        return NULL;
    }
    for (size_t i = 1; i < n; i++) {
        char what[600];
        snprintf(what, sizeof what, "%s/run.json", s[i].run.dir);
        if (union_by_name(configs, matrix_list(s[i].run.json, "configs"), "name", config_keys,
                          "config", what, err) < 0 ||
            union_by_name(tasks, matrix_list(s[i].run.json, "tasks"), "task", shard_task_keys,
                          "task", what, err) < 0) {
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
            char *full = path2(dir, found[k]);
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
    if (!sizes || !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(run_json, "finished")))
        return -1;
    const cJSON *matrix = cJSON_GetObjectItemCaseSensitive(run_json, "matrix");
    const cJSON *t = find_named(matrix_list(run_json, "tasks"), "task", task);
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
        char *dir = path3(s[i].run.dir, "predictions", config);
        char *path = dir ? path2(dir, file) : NULL;
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
            long index =
                (long)cJSON_GetObjectItemCaseSensitive(in[i].json[j], "index")->valuedouble;
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
        char *dir = path3(out_dir, "predictions", config);
        char *path = dir ? path2(dir, file) : NULL;
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
    const cJSON *configs = matrix_list(merged, "configs"), *tasks = matrix_list(merged, "tasks");
    int rc = 0;
    for (const cJSON *c = configs ? configs->child : NULL; c && rc == 0; c = c->next)
        for (const cJSON *t = tasks ? tasks->child : NULL; t && rc == 0; t = t->next) {
            const char *config = line_string(c, "name"), *task = line_string(t, "task");
            long want = config && task ? expected_lines(merged, sizes, task, err) : -1;
            if (want == -2)
                return -1;
            if (want <= 0)
                continue;
            bool found = false;
            for (size_t i = 0; i < n && !found; i++) {
                char *path = NULL;
                if (asprintf(&path, "%s/predictions/%s/%s.jsonl", s[i].run.dir, config, task) < 0)
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
        char *p = path2(s[i].run.dir, "predictions");
        if (!p || list_dir(p, &configs, &n_configs, true) < 0)
            rc = kv_fail(err, "%s: cannot list: %s", p ? p : "predictions", strerror(errno));
        free(p);
    }
    for (size_t c = 0; c < n_configs && rc == 0; c++) {
        char **files = NULL;
        size_t n_f = 0;
        for (size_t i = 0; i < n && rc == 0; i++) {
            char *p = path3(s[i].run.dir, "predictions", configs[c]);
            if (!p || list_dir(p, &files, &n_f, false) < 0)
                rc = kv_fail(err, "%s: cannot list: %s", p ? p : configs[c], strerror(errno));
            free(p);
        }
        for (size_t f = 0; f < n_f && rc == 0; f++) {
            char *task = strndup(files[f], strlen(files[f]) - 6); /* "<task>.jsonl" */
            long want = task ? expected_lines(merged, sizes, task, err) : -1;
            rc = !task      ? kv_fail(err, "out of memory")
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
    char *preds = path2(out_dir, "predictions");
    char *run_json = path2(out_dir, "run.json");
    if (rc == 0 && (!preds || !run_json))
        rc = kv_fail(err, "out of memory");
    int lock = -1;
    if (rc == 0 && (rc = kv_mkdirs(out_dir, err)) == 0 && (lock = lock_run_dir(out_dir, err)) < 0)
        rc = -1;
    if (rc == 0)
        rc = kv_mkdirs(preds, err);
    if (rc == 0)
        rc = check_all_files(s, n_shards, merged, sizes, err);
    if (rc == 0)
        rc = merge_predictions(s, n_shards, merged, sizes, out_dir, n_files, err);
    /* run.json last: its presence says the merge finished */
    if (rc == 0)
        rc = write_json_atomic(run_json, merged, err);
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
