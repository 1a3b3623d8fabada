#include "run/taskdata.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/jsonstr.h"

/* Lines with something on them: the samples of a JSON Lines task file. */
static long count_lines(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    long n = 0;
    bool filled = false; /* the current line has a non-blank byte */
    char buf[1 << 16];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0)
        for (size_t i = 0; i < got; i++) {
            if (buf[i] == '\n') {
                n += filled;
                filled = false;
            } else if (!strchr(" \t\r", buf[i])) {
                filled = true;
            }
        }
    fclose(f);
    return n + filled;
}

void kb_taskdata_close(kb_taskdata *it)
{
    if (it->has_sample)
        lb_sample_free(&it->s);
    lb_loader_close(it->loader);
    free(it->path);
    *it = (kb_taskdata){0};
}

int kb_taskdata_open(const char *data, const char *name, bool empty_missing, kb_taskdata *it,
                     kv_error *err)
{
    *it = (kb_taskdata){0};
    if (!(it->task = lb_task_find(name)))
        return kv_fail(err, "%s: not a task kvbench knows", name);
    char *path = it->path = lb_sample_path(data, it->task);
    if (!path)
        return kv_fail(err, "out of memory");
    lb_loader_options lo = {.schema =
                                it->task->family == LB_FAMILY_V2 ? LB_SCHEMA_V2 : LB_SCHEMA_V1};
    int rc = (it->loader = lb_loader_open(path, &lo, err)) ? 0 : -1;
    it->n = rc == 0 ? count_lines(path) : -1;
    it->empty = rc == 0 && it->n == 0;
    if (it->empty && !empty_missing) /* scored, it would be a 0.00 that averages count */
        rc = kv_fail(err,
                     "%s: empty task file (no samples): fetch it again, leave the task out or "
                     "report it as missing (--empty-tasks missing)",
                     path);
    if (rc < 0)
        kb_taskdata_close(it);
    return rc;
}

int kb_taskdata_next(kb_taskdata *it, kv_error *err)
{
    if (it->has_sample)
        lb_sample_free(&it->s);
    it->has_sample = false;
    if (it->empty)
        return 0;
    int rc = lb_loader_next(it->loader, &it->s, err);
    if (rc <= 0)
        return rc;
    it->has_sample = true;
    it->index++;
    return 1;
}

int kb_taskdata_ids(const char *data, const char *name, bool empty_missing, kb_idset *ids,
                    kv_error *err)
{
    kb_taskdata it;
    if (kb_taskdata_open(data, name, empty_missing, &it, err) < 0)
        return -1;
    int got;
    while ((got = kb_taskdata_next(&it, err)) > 0) {
        long first = kb_idset_pos(ids, it.s.id);
        int added = kb_idset_add_at(ids, it.s.id, it.index - 1);
        if (added < 0) {
            got = kv_fail(err, "out of memory");
            break;
        }
        if (added == 0) {
            char id[160];
            kv_fail(err,
                    "%s:%ld: _id %s is also the _id of the sample at index %ld: a task's "
                    "samples need distinct _ids (a run keeps predictions by _id)",
                    it.path, it.s.lineno, kv_json_quote_to(id, sizeof id, it.s.id.p, it.s.id.n),
                    first);
            got = KB_TASKDATA_REPEATED_ID;
            break;
        }
    }
    kb_taskdata_close(&it);
    return got < 0 ? got : 0;
}

long kb_task_size(const char *data, const char *task, kv_error *err)
{
    kb_idset ids = {0};
    /* an empty file: size 0; the loader's count, v2 too */
    long n = kb_taskdata_ids(data, task, true, &ids, err);
    if (n == 0)
        n = (long)kb_idset_size(&ids);
    kb_idset_free(&ids);
    return n;
}
