/* A sharded run on Slurm: its two batch scripts, their submission, and the
 * record its array tasks keep. Everything lives in the run folder:
 *
 *   <run>/slurm/array.sbatch        a job array of N tasks; task i runs
 *                                   `kvbench run CONFIG --shard i/N` (--requeue:
 *                                   a stopped task runs again and resumes its shard)
 *   <run>/slurm/finish.sbatch       once the array succeeded: kvbench merge, kvbench report
 *   <run>/slurm/logs/shard-<i>.log  every attempt of shard i, appended; finish.log
 *   <run>/slurm/attempts/<i>.tsv    one line per attempt of shard i as it starts,
 *                                   "start<TAB>UNIX_TIME<TAB>NODE<TAB>JOB_ID", and one
 *                                   as it ends, "end<TAB>UNIX_TIME<TAB>EXIT_STATUS"
 *                                   (none when the node died under it)
 *   <run>/slurm/jobs                the job ids of the last submission, one a line
 */
#ifndef KB_SLURM_H
#define KB_SLURM_H

#include <stdbool.h>
#include <stddef.h>

#include "util/error.h"

typedef struct kb_slurm_run {
    const char *kvbench; /* the kvbench binary the jobs run (absolute) */
    const char *workdir; /* the jobs' working folder: where `submit` ran (absolute) */
    const char *run_dir; /* <output>/<run>, as `kvbench run` names it */
    const char *run_name;
    long n_shards;
    const char *const *run_args; /* CONFIG and the overrides for `kvbench run`, NULL-ended */
    const char *baseline;        /* the report's --baseline; NULL: none */
} kb_slurm_run;

/* The two scripts' text (caller frees); NULL when out of memory. */
char *kb_slurm_array_script(const kb_slurm_run *r);
char *kb_slurm_finish_script(const kb_slurm_run *r);

/* Writes both scripts into <run>/slurm/ and creates logs/ and attempts/. */
int kb_slurm_write_scripts(const kb_slurm_run *r, kv_error *err);

/* "<run>/slurm/NAME" (caller frees). */
char *kb_slurm_path(const char *run_dir, const char *name);

/* Runs `sbatch --parsable OPTS... SCRIPT` (OPTS NULL-ended) and puts the job
 * id it prints into id. Fails with "sbatch not found on PATH" or with what
 * sbatch said when it refused. */
int kb_sbatch(const char *const *opts, const char *script, char *id, size_t n, kv_error *err);

/* Records the submitted job ids in <run>/slurm/jobs. */
int kb_slurm_jobs_write(const char *run_dir, const char *const *ids, size_t n_ids, kv_error *err);

/* The jobs of the last submission that are still in Slurm's queue (pending
 * or running), as "ID ID..." in queued (empty when none). -1 when squeue
 * cannot tell. */
int kb_slurm_jobs_queued(const char *run_dir, char *queued, size_t n, kv_error *err);

/* Inside a Slurm job given --cpus-per-task: that count ($SLURM_CPUS_PER_TASK),
 * the threads a run should use there. 0 elsewhere. */
long kb_slurm_cpus_per_task(void);

/* One shard's attempts, from attempts/<i>.tsv. */
typedef struct kb_slurm_attempts {
    long started;    /* attempts that started */
    long ended;      /* ... and recorded their end */
    double seconds;  /* wall time of the attempts that ended */
    char nodes[256]; /* the nodes they ran on, in order, without repeats: "n1,n2" */
} kb_slurm_attempts;

/* Reads attempts/<shard>.tsv; all zero when there is none (a shard run
 * outside the job array). A damaged line is an error naming it. */
int kb_slurm_attempts_read(const char *run_dir, long shard, kb_slurm_attempts *a, kv_error *err);
/* The same on the file's text (changed in place); path names it in errors.
 * An "end" needs an open "start" and a time not before it. */
int kb_slurm_attempts_parse(char *text, const char *path, kb_slurm_attempts *a, kv_error *err);

#endif
