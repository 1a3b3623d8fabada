#include "cluster/summary.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cluster/shardstate.h"
#include "cluster/slurm.h"
#include "rundir/predfile.h"
#include "util/file.h"

/* Samples a shard ran: the lines of its first config (the full cache, which
 * every sample gets) over all its tasks. -1 with err on a read error. */
static long shard_samples(const char *shard_dir, kv_error *err)
{
    kb_run run = {0};
    if (kb_run_load(shard_dir, &run, err) < 0)
        return -1;
    const cJSON *configs = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(run.json, "matrix"), "configs");
    const char *first = cJSON_GetStringValue(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(configs, 0), "name"));
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/predictions/%s", shard_dir, first ? first : "full");
    kb_run_close(&run);
    char **names = NULL;
    size_t n = 0;
    long total = kv_dir_list(dir, ".jsonl", &names, &n, err) < 0 ? -1 : 0;
    for (size_t k = 0; total >= 0 && k < n; k++) {
        char *path = kv_path_join(dir, names[k]);
        long lines = path ? kb_file_lines(path, err) : kv_fail(err, "out of memory");
        total = lines < 0 ? -1 : total + lines;
        free(path);
    }
    kv_names_free(names, n);
    return total;
}

/* One row: shard, samples, wall time, attempts, nodes. */
static void put_row(FILE *f, long shard, long samples, const kb_slurm_attempts *a)
{
    if (a->started == 0) {
        fprintf(f, "%5ld  %7ld  %9s  %8s  %s\n", shard, samples, "-", "0",
                "(not run by the job array)");
        return;
    }
    long s = (long)(a->seconds + 0.5);
    char wall[32];
    snprintf(wall, sizeof wall, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
    fprintf(f, "%5ld  %7ld  %9s  %8ld  %s", shard, samples, wall, a->started, a->nodes);
    if (a->ended < a->started)
        fprintf(f, "  (%ld attempt%s without an end: killed with its node?)", a->started - a->ended,
                a->started - a->ended == 1 ? "" : "s");
    fputc('\n', f);
}

int kb_slurm_summary_write(const char *run_dir, long n_shards, kv_error *err)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return kv_fail(err, "out of memory");
    char when[32];
    time_t now = time(NULL);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    fprintf(f, "run %s: %ld shards, merged %s\n", run_dir, n_shards, when);
    fprintf(f, "shard  samples  wall time  attempts  nodes\n");
    int rc = 0;
    long total = 0;
    for (long i = 0; rc == 0 && i < n_shards; i++) {
        kb_shard shard = {i, n_shards};
        char *dir = kb_shard_dir(run_dir, &shard);
        kb_slurm_attempts a;
        long samples = dir ? shard_samples(dir, err) : kv_fail(err, "out of memory");
        if (samples < 0 || kb_slurm_attempts_read(run_dir, i, &a, err) < 0)
            rc = -1;
        else
            put_row(f, i, samples, &a);
        total += samples;
        free(dir);
    }
    fprintf(f, "total  %7ld\n", total);
    bool bad = ferror(f);
    fclose(f);
    char *path = kb_slurm_path(run_dir, "summary.txt");
    if (rc == 0 && (bad || !path))
        rc = kv_fail(err, "out of memory");
    if (rc == 0)
        rc = kv_write_atomic(path, text, len, err);
    free(path);
    free(text);
    return rc;
}
