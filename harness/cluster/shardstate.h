/* What a sharded run has done so far, read from its folder: which of the
 * N shards are finished, whether one is being written now, and whether the
 * merged run is up to date. `kvbench submit` submits only what is missing.
 *
 * A shard is finished when its run.json says "finished" and every (config,
 * task) of the matrix has exactly the lines the task's data and limit give
 * that shard: the prediction files are the truth, as they are for resume.
 * A matrix that grew since the shard ran (a new config, a higher limit)
 * makes the shard unfinished again, and its rerun does only the new work.
 */
#ifndef KB_SHARDSTATE_H
#define KB_SHARDSTATE_H

#include <stdbool.h>

#include "matrix/matrix.h"
#include "util/error.h"

typedef struct kb_shard_state {
    char *run_dir; /* <output>/<run> */
    long n_shards;
    long max_samples;   /* the largest task's samples (limit applied) */
    long total_samples; /* every task's samples (limit applied) */
    bool *finished;     /* [n_shards]; NULL when n_shards > max_samples */
    long n_unfinished;
    bool merged; /* every shard finished, then merged (slurm/summary.txt) and reported */
} kb_shard_state;

/* Complete lines ('\n'-ended) in a file (a cut-short last line is not
 * one); 0 when there is no file. */
long kb_file_lines(const char *path, kv_error *err);

/* Samples of a task of `size` samples that shard i of n runs. */
long kb_shard_samples(long size, long i, long n);

/* Reads the state of m's run split in n_shards shards (m with the
 * command line's overrides applied). Fails when a task's data cannot be
 * read, and when a kvbench run holds the run folder or a shard folder's
 * lock: its work is not done yet, and a second writer would be refused.
 * With more shards than max_samples (some would have nothing to do) it
 * reads only the sample counts, for the caller to refuse. */
int kb_shard_state_read(const kb_matrix *m, long n_shards, kb_shard_state *st, kv_error *err);
void kb_shard_state_free(kb_shard_state *st);

#endif
