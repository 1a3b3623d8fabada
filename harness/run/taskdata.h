/* A task's data as a run reads it: the samples of <data>/<task>.jsonl (or
 * LongBench v2's data.json) in file order, one at a time, each with its
 * index in that order (what limits, shards and resume go by).
 */
#ifndef KB_TASKDATA_H
#define KB_TASKDATA_H

#include <stdbool.h>

#include "util/error.h"
#include "longbench/sample.h"
#include "longbench/tasks.h"
#include "rundir/predfile.h"

typedef struct kb_taskdata {
    const lb_task *task;
    lb_loader *loader;
    char *path; /* the task's file */
    lb_sample s; /* the current sample, valid until the next call */
    bool has_sample;
    long index; /* of the next sample: the current one is index - 1 */
    long n;     /* lines in the file (for progress); the loader's count is the truth */
    bool empty; /* an empty file taken as a missing task: no samples */
} kb_taskdata;

/* Opens task `name` in the data folder. An unknown task and a missing file
 * are errors; so is an empty one (it would score a 0.00 that averages
 * count) unless empty_missing (--empty-tasks missing): then the task has no
 * samples, so it has no score (a missing cell, not a 0.00). */
int kb_taskdata_open(const char *data, const char *name, bool empty_missing, kb_taskdata *it,
                     kv_error *err);
/* 1 with it->s the next sample, 0 at the end, -1 on an error (file:line). */
int kb_taskdata_next(kb_taskdata *it, kv_error *err);
void kb_taskdata_close(kb_taskdata *it);

/* Adds the id of every sample of a task (not only the first `limit`: an
 * earlier run may have had a larger one) with its index, which resumed
 * lines must name. A repeated _id is an error naming file:line and the id:
 * predictions are kept by _id, so a run would take the second sample for
 * done and drop it. Returns 0, -1 on an error, KB_TASKDATA_REPEATED_ID on a
 * repeated _id (err set in both cases). */
enum { KB_TASKDATA_REPEATED_ID = -2 };
int kb_taskdata_ids(const char *data, const char *name, bool empty_missing, kb_idset *ids,
                    kv_error *err);

/* The number of samples of a task in a data folder, as a run reads them
 * (what merge checks line counts against), or -1 with err set, or
 * KB_TASKDATA_REPEATED_ID: data that no run can complete. */
long kb_task_size(const char *data, const char *task, kv_error *err);

#endif
