/* Joining the shard folders of a run (`kvbench merge`) into one run folder
 * that equals, line for line, the run made unsharded.
 */
#ifndef KB_MERGE_H
#define KB_MERGE_H

#include <stdbool.h>
#include <stddef.h>

#include "util/error.h"
#include "rundir/run.h"

/* Joins the shard folders (each with run.json and predictions/) into out_dir:
 * refuses shards of different models, protocols, shard counts or config
 * hashes, an incomplete or repeated shard set, a shard that has not finished
 * (unless allow_unfinished), a line in the wrong shard, and (sizes not NULL,
 * every shard finished) a (config, task) of the matrix whose merged lines
 * are not exactly the task's first `limit` samples in number;
 * writes each (config, task) file sorted by sample index, and a run.json
 * without the shard. Lines are copied verbatim. *n_files receives the number
 * of prediction files written. */
int kb_run_merge(const char *const *shard_dirs, size_t n_shards, const char *out_dir,
                 bool allow_unfinished, const kb_task_sizes *sizes, size_t *n_files, kv_error *err);

#endif
