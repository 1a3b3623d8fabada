/* kvbench merge: join the outputs of `kvbench run --shard i/n` into one run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>

#include "cluster/summary.h"
#include "run/taskdata.h"
#include "cli/cli.h"
#include "util/file.h"
#include "rundir/merge.h"
#include "rundir/predfile.h"

static const kb_option options[] = {
    {"output", "DIR", "write the merged run here (default: RUN when given RUN with RUN/shards/)"},
    {"allow-unfinished", NULL, "merge shards that have not finished (a partial run)"},
    {NULL, NULL, NULL},
};

/* RUN/shards/<i>-of-<n> folders, sorted; 0 when RUN has no shards/. */
static int shard_folders(const char *run, char ***out, size_t *n)
{
    *out = NULL;
    *n = 0;
    char *dir = kv_path_join(run, "shards");
    kv_error err;
    if (!dir || kv_dir_list(dir, NULL, out, n, &err) < 0) {
        free(dir);
        return 0;
    }
    for (size_t i = 0; i < *n; i++) { /* names to paths, in place */
        char *path = kv_path_join(dir, (*out)[i]);
        free((*out)[i]);
        (*out)[i] = path;
    }
    free(dir);
    return 0;
}

/* A merge may run where the data is not (a laptop joining a cluster's
 * shards): then the line counts go unchecked, and the user is told. Data
 * that no run could complete (a repeated _id) fails the merge as it fails
 * the run. */
static long task_size(void *ctx, const char *data, const char *task, kv_error *err)
{
    (void)ctx;
    long n = kb_task_size(data, task, err); /* KB_TASKDATA_REPEATED_ID fails the merge */
    if (n == -1)
        fprintf(stderr, "kvbench: merge: note: %s; the line count of %s is not checked\n",
                err->msg, task);
    return n;
}

/* A run submitted with `kvbench submit slurm` (it has slurm/) also gets
 * slurm/summary.txt: what each shard took, where. */
static int write_slurm_summary(const char *run_dir, long n_shards)
{
    char *dir = kv_path_join(run_dir, "slurm");
    struct stat st;
    kv_error err = {{0}};
    int rc = 0;
    if (!dir || (stat(dir, &st) == 0 && S_ISDIR(st.st_mode))) {
        rc = dir ? kb_slurm_summary_write(run_dir, n_shards, &err) : kv_fail(&err, "out of memory");
        if (rc < 0)
            kb_error("merge: the shards are merged, but not summarised: %s", err.msg);
        else
            printf("wrote %s/summary.txt\n", dir);
    }
    free(dir);
    return rc;
}

static int run(const kb_args *a)
{
    const char *output = kb_arg(a, "output");
    char **found = NULL;
    size_t n_found = 0;
    const char *const *dirs = a->positional;
    size_t n = (size_t)a->n_positional;
    if (n == 1) {
        shard_folders(a->positional[0], &found, &n_found);
        if (n_found) {
            dirs = (const char *const *)found;
            n = n_found;
            if (!output)
                output = a->positional[0];
        }
    }
    int rc = KB_EXIT_OK;
    if (!output) {
        kb_error("merge: give --output DIR (or a run folder that holds shards/)");
        rc = KB_EXIT_USAGE;
    } else {
        kv_error err = {{0}};
        size_t n_files = 0;
        kb_task_sizes sizes = {.count = task_size};
        if (kb_run_merge(dirs, n, output, kb_flag(a, "allow-unfinished"), &sizes, &n_files, &err) <
            0) {
            kb_error("merge: %s", err.msg);
            rc = KB_EXIT_FAIL;
        } else {
            printf("merged %zu shards into %s (%zu prediction files)\n", n, output, n_files);
            if (n_found && write_slurm_summary(a->positional[0], (long)n) < 0)
                rc = KB_EXIT_FAIL;
        }
    }
    for (size_t i = 0; i < n_found; i++)
        free(found[i]);
    free(found);
    return rc;
}

const kb_command kb_cmd_merge = {
    .name = "merge",
    .summary = "join the shards of a run (kvbench run --shard i/n) into one run folder",
    .usage = "kvbench merge RUN | SHARD_DIR... --output DIR",
    .description =
        "Checks that the shards belong to one run (same model hash, protocol, shard count and\n"
        "config hashes; every shard 0..n-1 present once; every line in its own shard; as many\n"
        "lines per config and task as the data and limit give), then\n"
        "writes each predictions/<config>/<task>.jsonl sorted by sample index, so the merged\n"
        "run equals an unsharded one line for line. Lines are copied verbatim.",
    .options = options,
    .min_positional = 1,
    .max_positional = KB_MAX_POSITIONAL,
    .run = run,
};
