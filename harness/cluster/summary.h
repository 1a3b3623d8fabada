/* <run>/slurm/summary.txt: what each shard of a run submitted to Slurm
 * took, written by `kvbench merge` once the shards are joined. Per shard:
 * samples (lines of the full cache's predictions), wall time (its attempts'
 * time from start to end, summed), attempts (more than one: requeued or
 * preempted) and the nodes it ran on. */
#ifndef KB_SUMMARY_H
#define KB_SUMMARY_H

#include "util/error.h"

/* Writes the summary of run_dir's n_shards shards (all present and merged). */
int kb_slurm_summary_write(const char *run_dir, long n_shards, kv_error *err);

#endif
