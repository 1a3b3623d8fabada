#include "run/taskdata.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    *it = (kb_taskdata){0};
}

int kb_taskdata_open(const char *data, const char *name, bool empty_missing, kb_taskdata *it,
                     kv_error *err)
{
    *it = (kb_taskdata){0};
    if (!(it->task = lb_task_find(name)))
        return kv_fail(err, "%s: not a task kvbench knows", name);
    char *path = lb_sample_path(data, it->task);
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
    free(path);
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

long kb_task_size(const char *data, const char *task, kv_error *err)
{
    kb_taskdata it;
    if (kb_taskdata_open(data, task, true, &it, err) < 0) /* an empty file: size 0 */
        return -1;
    int got;
    while ((got = kb_taskdata_next(&it, err)) > 0) /* the loader's count, v2 too */
        ;
    long n = it.index;
    kb_taskdata_close(&it);
    return got < 0 ? -1 : n;
}
