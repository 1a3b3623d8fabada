#include "cluster/shardstate.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "rundir/predfile.h"
#include "run/taskdata.h"
#include "util/file.h"

long kb_shard_samples(long size, long i, long n)
{
    return size > i ? (size - 1 - i) / n + 1 : 0;
}

/* The samples a run reads of each task: its data's, cut at its limit. */
static long *task_samples(const kb_matrix *m, kv_error *err)
{
    long *n = calloc(m->n_tasks ? m->n_tasks : 1, sizeof *n);
    if (!n) {
        kv_fail(err, "out of memory");
        return NULL;
    }
    for (size_t t = 0; t < m->n_tasks; t++) {
        n[t] = kb_task_size(m->data, m->tasks[t].name, err);
        if (n[t] < 0) {
            free(n);
            return NULL;
        }
        if (m->tasks[t].limit > 0 && m->tasks[t].limit < n[t])
            n[t] = m->tasks[t].limit;
    }
    return n;
}

long kb_file_lines(const char *path, kv_error *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : kv_fail(err, "%s: cannot open: %s", path, strerror(errno));
    char buf[1 << 16];
    long lines = 0;
    ssize_t got;
    while ((got = read(fd, buf, sizeof buf)) > 0)
        for (ssize_t k = 0; k < got; k++)
            lines += buf[k] == '\n';
    int e = errno;
    close(fd);
    return got < 0 ? kv_fail(err, "%s: cannot read: %s", path, strerror(e)) : lines;
}

/* The entry of list whose `key` is the string `name`. */
static const cJSON *entry_named(const cJSON *list, const char *key, const char *name)
{
    const cJSON *e;
    cJSON_ArrayForEach(e, list)
    {
        const char *v = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, key));
        if (v && name && strcmp(v, name) == 0)
            return e;
    }
    return NULL;
}

/* Whether `list` of run.json's matrix holds every entry of `now`'s list,
 * the same in every setting (compared canonically). */
static bool holds_all(const cJSON *run_json, const cJSON *now, const char *list, const char *key)
{
    const cJSON *had = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(run_json, "matrix"), list);
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(now, list))
    {
        const cJSON *old =
            entry_named(had, key, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, key)));
        char *a = old ? kb_json_canonical(old) : NULL, *b = old ? kb_json_canonical(e) : NULL;
        bool same = a && b && strcmp(a, b) == 0;
        free(a);
        free(b);
        if (!same)
            return false;
    }
    return true;
}

/* 1 when the shard in dir has finished the matrix now (kb_matrix_to_json of
 * m): its run.json says "finished" and has every task and config of now
 * with the same settings (a shard run with another limit runs again: merge
 * wants its shards alike), and it holds every line it should (sizes[t]:
 * task t's samples). 0 when not, -1 on an error. */
static int shard_finished(const kb_matrix *m, const cJSON *now, const long *sizes,
                          const kb_shard *shard, const char *dir, kv_error *err)
{
    kb_run run = {0};
    kv_error ignored;
    if (kb_run_load(dir, &run, &ignored) < 0)
        return 0; /* no run.json: never started */
    bool finished = kb_run_string(&run, "finished") != NULL &&
                    holds_all(run.json, now, "tasks", "task") &&
                    holds_all(run.json, now, "configs", "name");
    kb_run_close(&run);
    if (!finished)
        return 0;
    char path[4096];
    for (size_t c = 0; c < m->n_configs; c++)
        for (size_t t = 0; t < m->n_tasks; t++) {
            snprintf(path, sizeof path, "%s/predictions/%s/%s.jsonl", dir, m->configs[c].name,
                     m->tasks[t].name);
            long have = kb_file_lines(path, err);
            if (have < 0)
                return -1;
            if (have != kb_shard_samples(sizes[t], shard->index, shard->count))
                return 0;
        }
    return 1;
}

/* Fails naming the holder when a kvbench run is writing dir. */
static int check_unlocked(const char *dir, kv_error *err)
{
    char holder[300];
    int held = kb_run_lock_holder(dir, holder, sizeof holder, err);
    if (held > 0)
        return kv_fail(err,
                       "%s is locked by a running shard (%s): wait for it to end (or cancel "
                       "its job), then submit again",
                       dir, holder);
    return held;
}

static double mtime_of(const char *path)
{
    struct stat st;
    if (stat(path, &st) < 0)
        return -1;
    return (double)st.st_mtim.tv_sec + st.st_mtim.tv_nsec * 1e-9;
}

/* The merged run is up to date when the finish job got through it after
 * the last shard finished: merge's summary.txt is newer than every
 * shard's run.json, and the report newer than the summary. A run of one
 * shard is not merged: its report is newer than its run.json. */
static bool merged_after(const char *run_dir, long n_shards, double newest_shard)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/slurm/summary.txt", run_dir);
    double summary = n_shards > 1 ? mtime_of(path) : newest_shard;
    snprintf(path, sizeof path, "%s/report.html", run_dir); /* written last by kvbench report */
    double report = mtime_of(path);
    return summary >= newest_shard && report >= summary;
}

int kb_shard_state_read(const kb_matrix *m, long n_shards, kb_shard_state *st, kv_error *err)
{
    memset(st, 0, sizeof *st);
    st->n_shards = n_shards;
    kb_shard whole = {0, 1};
    st->run_dir = kb_run_dir(m->output, m->run_name, &whole);
    long *sizes = NULL;
    cJSON *now = kb_matrix_to_json(m);
    int rc = st->run_dir && now ? 0 : kv_fail(err, "out of memory");
    if (rc == 0 && !(sizes = task_samples(m, err)))
        rc = -1;
    for (size_t t = 0; rc == 0 && t < m->n_tasks; t++) {
        st->total_samples += sizes[t];
        if (sizes[t] > st->max_samples)
            st->max_samples = sizes[t];
    }
    bool too_many = n_shards > st->max_samples; /* the caller refuses: look no further */
    if (rc == 0 && !too_many && !(st->finished = calloc((size_t)n_shards, sizeof *st->finished)))
        rc = kv_fail(err, "out of memory");
    if (rc == 0)
        rc = check_unlocked(st->run_dir, err);
    double newest = 0;
    for (long i = 0; rc == 0 && !too_many && i < n_shards; i++) {
        kb_shard shard = {i, n_shards};
        char *dir = kb_run_dir(m->output, m->run_name, &shard);
        char *run_json = dir ? kv_path_join(dir, "run.json") : NULL;
        int done = run_json ? check_unlocked(dir, err) : kv_fail(err, "out of memory");
        if (done == 0)
            done = shard_finished(m, now, sizes, &shard, dir, err);
        if (done >= 0) {
            st->finished[i] = done == 1;
            st->n_unfinished += done == 0;
            double t = mtime_of(run_json);
            newest = t > newest ? t : newest;
        }
        rc = done < 0 ? -1 : 0;
        free(run_json);
        free(dir);
    }
    if (rc == 0 && !too_many)
        st->merged = st->n_unfinished == 0 && merged_after(st->run_dir, n_shards, newest);
    free(sizes);
    cJSON_Delete(now);
    if (rc < 0)
        kb_shard_state_free(st);
    return rc;
}

void kb_shard_state_free(kb_shard_state *st)
{
    free(st->run_dir);
    free(st->finished);
    memset(st, 0, sizeof *st);
}
