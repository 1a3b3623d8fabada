/* A run folder: where `kvbench run` writes, and what makes it resumable.
 *
 *   <output>/<run>/run.json                          what was run (see kb_run_open)
 *   <output>/<run>/run.lock                          held while a run writes the folder
 *   <output>/<run>/predictions/<config>/<task>.jsonl one line per sample (rundir/predfile.h)
 *   <output>/<run>/shards/<i>-of-<n>/...             the same, for `--shard i/n`
 *                                                    (joined by rundir/merge.h)
 */
#ifndef KB_RUN_H
#define KB_RUN_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "util/error.h"
#include "matrix/matrix.h"

/* `--shard i/n`: this process handles the samples whose index % n == i
 * (0 <= i < n, 0-based like SLURM_ARRAY_TASK_ID and JOB_COMPLETION_INDEX).
 * count == 1 is the whole run. */
typedef struct kb_shard {
    long index, count;
} kb_shard;

/* Parses "i/n". */
int kb_shard_parse(const char *s, kb_shard *out, kv_error *err);
bool kb_shard_selects(const kb_shard *s, long sample_index);

struct kb_run;

/* What run.json records about a run. */
typedef struct kb_run_info {
    const char *kvbench_version; /* e.g. "0.1.0 (95ea4ba)" */
    const char *model_hash;      /* kb_hash_model of the model folder */
    const kb_matrix *matrix;     /* model, protocol, tasks and configs */
    kb_shard shard;
    /* [matrix->n_configs]: bytes one cached token takes in each config's
     * caches (run.json's "kv_bytes_per_token", by config name), or NULL. */
    const double *kv_bytes_per_token;
    /* Called, when not NULL, with the folder locked and run->json as it
     * will be written, before it is: a resume it refuses (a kept line that
     * does not belong) leaves run.json as it was. */
    int (*verify)(const struct kb_run *run, const void *ctx, kv_error *err);
    const void *verify_ctx;
} kb_run_info;

typedef struct kb_run {
    char *dir;   /* the folder holding run.json and predictions/ */
    cJSON *json; /* run.json as written */
    int lock_fd; /* run.lock, flock'ed while kb_run_open's caller writes */
    bool locked;
} kb_run;

/* The folder a run (or one shard of it) writes to:
 * <output>/<run> or <output>/<run>/shards/<i>-of-<n>. Caller frees. */
char *kb_run_dir(const char *output, const char *run_name, const kb_shard *shard);
/* <run_dir>/shards/<i>-of-<n>. Caller frees. */
char *kb_shard_dir(const char *run_dir, const kb_shard *shard);

/* Creates dir (and predictions/) or resumes it, holding an exclusive flock
 * on dir/run.lock until kb_run_close: a second run into the same folder
 * fails at once, naming the holder's pid and host (which run.lock records).
 * Predictions without a run.json beside them are refused: nothing tells
 * what made them. A new run writes run.json:
 * {"kvbench_version", "model", "model_hash", "protocol", "shard", "matrix"}.
 * An existing run.json must agree on model hash, protocol and shard, on the
 * hash of every config name both know and on the settings of every task both
 * know; configs and tasks that are new are added (run.json is rewritten
 * atomically), so a matrix can grow between nights. */
int kb_run_open(const char *dir, const kb_run_info *info, kb_run *run, kv_error *err);

/* Whether a kvbench run is writing dir now: 1 with "pid P on host H" in
 * holder, 0 when nobody holds dir's lock (or dir has none), -1 on an error.
 * It takes the lock for no longer than the test. */
int kb_run_lock_holder(const char *dir, char *holder, size_t n, kv_error *err);

/* Records in run.json that the run (or shard) completed: "finished" is the
 * UTC time, null while it runs. kb_run_open resets it (a rerun may add work). */
int kb_run_mark_finished(kb_run *run, kv_error *err);

/* Takes dir's write lock (see kb_run_open) for a writer that is not a
 * run (a merge): the open descriptor, which holds it until closed, or -1
 * with err naming the holder. */
int kb_run_lock(const char *dir, kv_error *err);

/* Reads run.json of a finished or running run, checking nothing. */
int kb_run_load(const char *dir, kb_run *run, kv_error *err);
void kb_run_close(kb_run *run);

/* Fields of run.json: NULL when absent. */
const char *kb_run_string(const kb_run *run, const char *key);
/* The "params" of config `name` in run.json (JSON null for the full cache),
 * or NULL when run.json does not list it. */
const cJSON *kb_run_config(const kb_run *run, const char *name);

/* How many samples a task's data holds (data: run.json's "data" folder);
 * -1 when that cannot be known here (the callback tells the user why; the
 * line count of that task goes unchecked); -2 when the data is one no run
 * could complete (a repeated _id): err says why and the merge fails. */
typedef struct kb_task_sizes {
    long (*count)(void *ctx, const char *data, const char *task, kv_error *err);
    void *ctx;
} kb_task_sizes;

#endif
