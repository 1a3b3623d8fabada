/* kvbench submit slurm without a cluster (issue 26): the scripts it writes,
 * what it counts as finished (only the rest is submitted), and its clear
 * refusals; kvbench merge's per-shard summary; --threads from
 * $SLURM_CPUS_PER_TASK. A real Slurm runs the scripts in test_slurm.sh.
 * Runs use the committed demo model on synth_passkey: 4 samples, 4 tokens. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "support/testutil.h"

/* Each test's folder, tu_dir, holds c.json and runs/. */
TestSuite(submit, .init = tu_dir_make, .fini = tu_dir_remove, .timeout = 300);

/* c.json: the demo model on synth_passkey, 4 samples of 4 new tokens, the
 * full cache and one StreamingLLM config; the run folder is runs/sub.
 * extra: more top-level keys, each followed by a comma. */
static char *write_config_with(const char *extra)
{
    return tu_write_demo_matrix(
        "c", NULL,
        "%s\"name\": \"sub\",\n \"limit\": 4, \"max_new_tokens\": 4, \"threads\": 1, "
        "\"tasks\": [\"synth_passkey\"],\n"
        " \"configs\": [{\"algorithm\": \"streaming\", \"start_size\": 4, \"recent_size\": 60,\n"
        "               \"intermediate_size\": 0}]",
        extra);
}

static char *write_config(void)
{
    return write_config_with("");
}

static void run_shard(const char *config, const char *shard)
{
    tu_result r = tu_kvbench("run", config, "--shard", shard, NULL);
    cr_assert_eq(r.status, 0, "run --shard %s: %s", shard, r.err);
    tu_result_free(&r);
}

Test(submit, dry_run_writes_both_scripts_and_submits_nothing)
{
    char *config = write_config();
    tu_result r = tu_kvbench("submit", "slurm", config, "--shards", "3", "--dry-run", "--baseline",
                             "runs/yesterday", "--", "--cpus-per-task=2", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    char *array_path = tu_at("runs/sub/slurm/array.sbatch");
    char *finish_path = tu_at("runs/sub/slurm/finish.sbatch");
    char *array = tu_slurp(array_path, NULL), *finish = tu_slurp(finish_path, NULL);
    /* the printed scripts are the written ones */
    cr_assert(strstr(r.out, array) && strstr(r.out, finish), "%s", r.out);
    cr_assert(strstr(r.out, "--array=0-2"), "%s", r.out);
    static const char *const in_array[] = {
        "#SBATCH --array=0-2\n", "#SBATCH --requeue\n", "#SBATCH --open-mode=append\n",
        "/runs/sub/slurm/logs/shard-%a.log\n", " --shard \"$shard/3\" &\n"};
    for (size_t k = 0; k < sizeof in_array / sizeof *in_array; k++)
        cr_assert(strstr(array, in_array[k]), "array.sbatch lacks %s:\n%s", in_array[k], array);
    cr_assert(strstr(array, " run "), "%s", array);
    cr_assert(strstr(array, config), "%s", array);
    cr_assert(strstr(finish, " merge ") && strstr(finish, " report "), "%s", finish);
    cr_assert(strstr(finish, "--baseline runs/yesterday --fail-on-regression\n"), "%s", finish);
    cr_assert(strstr(finish, "/runs/sub/slurm/logs/finish.log\n"), "%s", finish);
    char *jobs = tu_at("runs/sub/slurm/jobs");
    cr_assert_eq(access(jobs, F_OK), -1, "a dry run recorded jobs");
    free(jobs);
    free(array);
    free(finish);
    free(array_path);
    free(finish_path);
    free(config);
    tu_result_free(&r);
}

/* One shard is the whole run: it reports itself, and the finish job only
 * reports again (there is nothing to merge); once reported, nothing is
 * submitted. */
Test(submit, one_shard_is_the_whole_run)
{
    char *config = write_config();
    tu_result r = tu_kvbench("submit", "slurm", config, "--shards", "1", "--dry-run", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "(would be submitted with --array=0)"), "%s", r.out);
    char *finish_path = tu_at("runs/sub/slurm/finish.sbatch");
    char *finish = tu_slurp(finish_path, NULL);
    cr_assert_null(strstr(finish, " merge "), "%s", finish);
    cr_assert(strstr(finish, " report "), "%s", finish);
    tu_result_free(&r);
    run_shard(config, "0/1");
    r = tu_kvbench("submit", "slurm", config, "--shards", "1", "--dry-run", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "nothing to submit: run "), "%s", r.out);
    cr_assert(strstr(r.out, " is complete (finished and reported)\n"), "%s", r.out);
    tu_result_free(&r);
    free(finish);
    free(finish_path);
    free(config);
}

/* A config's "baseline" makes the finish job fail on a regression against
 * it; --baseline overrides it. */
Test(submit, the_configs_baseline_is_the_default_baseline)
{
    char *config = write_config_with("\"baseline\": \"runs/golden\", ");
    char *finish_path = tu_at("runs/sub/slurm/finish.sbatch");
    tu_result r = tu_kvbench("submit", "slurm", config, "--shards", "2", "--dry-run", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    char *finish = tu_slurp(finish_path, NULL);
    cr_assert(strstr(finish, " --baseline runs/golden --fail-on-regression\n"), "%s", finish);
    free(finish);
    tu_result_free(&r);
    r = tu_kvbench("submit", "slurm", config, "--shards", "2", "--dry-run", "--baseline",
                   "runs/last night", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    finish = tu_slurp(finish_path, NULL);
    cr_assert(strstr(finish, " --baseline 'runs/last night' --fail-on-regression\n"), "%s", finish);
    free(finish);
    tu_result_free(&r);
    free(finish_path);
    free(config);
}

/* The usage errors, each a one-line message that says what to give. */
Test(submit, refuses_bad_shard_counts_and_schedulers)
{
    char *config = write_config();
    static const struct {
        const char *shards, *scheduler, *message;
    } cases[] = {
        {"0", "slurm", "kvbench: submit: --shards 0: a run needs at least 1 shard\n"},
        {"-2", "slurm", "kvbench: submit: --shards -2: a run needs at least 1 shard\n"},
        {"5", "slurm",
         "has 4 samples, so shards 4 and above would have nothing to do; give "
         "--shards 4 or fewer\n"},
        {"2", "pbs", "kvbench: submit: unknown scheduler 'pbs' (kvbench submits to: slurm)\n"},
        {NULL, "slurm", "kvbench: submit: --shards N is required"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        tu_result r = cases[k].shards ? tu_kvbench("submit", cases[k].scheduler, config, "--shards",
                                                   cases[k].shards, "--dry-run", NULL)
                                      : tu_kvbench("submit", "slurm", config, "--dry-run", NULL);
        cr_assert_eq(r.status, 2, "case %zu: %d %s", k, r.status, r.err);
        cr_assert(strstr(r.err, cases[k].message), "case %zu: %s", k, r.err);
        tu_result_free(&r);
    }
    /* a word before -- is not an sbatch option */
    tu_result r = tu_kvbench("submit", "slurm", config, "extra", "--shards", "2", NULL);
    cr_assert_eq(r.status, 2);
    cr_assert(strstr(r.err, "unexpected argument before --"), "%s", r.err);
    tu_result_free(&r);
    free(config);
}

Test(submit, says_when_sbatch_is_not_on_path)
{
    char *config = write_config();
    setenv("PATH", "/nonexistent", 1);
    tu_result r = tu_kvbench("submit", "slurm", config, "--shards", "2", "--", "-c", "1", NULL);
    cr_assert_eq(r.status, 1, "%s", r.err);
    cr_assert(strstr(r.err, "kvbench: submit: sbatch not found on PATH"), "%s", r.err);
    tu_result_free(&r);
    free(config);
}

/* A shard being written (its run.lock held) is work in progress: nothing
 * is submitted, and the message names the holder. */
Test(submit, refuses_a_run_folder_locked_by_a_running_shard)
{
    char *config = write_config();
    char *shard = tu_at("runs/sub/shards/1-of-2");
    char *lock = tu_at("runs/sub/shards/1-of-2/run.lock");
    tu_result mk = tu_run_argv((char *[]){"/bin/mkdir", "-p", shard, NULL});
    tu_result_free(&mk);
    int fd = open(lock, O_RDWR | O_CREAT, 0644);
    cr_assert_geq(fd, 0);
    cr_assert_eq(flock(fd, LOCK_EX), 0);
    cr_assert_eq(write(fd, "4242 nodeB\n", 11), 11);
    tu_result r = tu_kvbench("submit", "slurm", config, "--shards", "2", "--dry-run", NULL);
    cr_assert_eq(r.status, 1, "%s", r.err);
    cr_assert(strstr(r.err, "shards/1-of-2 is locked by a running shard (pid 4242 on host nodeB)"),
              "%s", r.err);
    char *array = tu_at("runs/sub/slurm/array.sbatch");
    cr_assert_eq(access(array, F_OK), -1, "scripts written for a locked run");
    close(fd);
    free(array);
    free(lock);
    free(shard);
    free(config);
    tu_result_free(&r);
}

/* Only what is missing is submitted: a finished shard is left out of the
 * array; once every shard finished and the run was merged (with its
 * summary) and reported, nothing is; a higher limit makes every shard
 * unfinished again (merge wants shards run alike). */
Test(submit, submits_only_the_shards_that_have_not_finished)
{
    char *config = write_config();
    run_shard(config, "1/3");
    tu_result r = tu_kvbench("submit", "slurm", config, "--shards", "3", "--dry-run", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "(would be submitted with --array=0,2)"), "%s", r.out);
    cr_assert(strstr(r.err, "4 samples in 3 shards, 2 to run"), "%s", r.err);
    tu_result_free(&r);

    run_shard(config, "0/3");
    run_shard(config, "2/3");
    r = tu_kvbench("submit", "slurm", config, "--shards", "3", "--dry-run", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert_null(strstr(r.out, "array.sbatch (would"), "%s", r.out);
    cr_assert(strstr(r.out, "finish.sbatch (would be submitted)"), "%s", r.out);
    tu_result_free(&r);

    char *run_dir = tu_at("runs/sub");
    tu_kvbench_ok("merge", run_dir, NULL);
    tu_kvbench_ok("report", run_dir, NULL);
    r = tu_kvbench("submit", "slurm", config, "--shards", "3", "--dry-run", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "nothing to submit: run "), "%s", r.out);
    tu_result_free(&r);

    r = tu_kvbench("submit", "slurm", config, "--shards", "3", "--limit", "5", "--dry-run", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "--array=0-2)"), "%s", r.out);
    cr_assert(strstr(r.out, " --limit 5 --shard \"$shard/3\""), "%s", r.out);
    tu_result_free(&r);
    free(run_dir);
    free(config);
}

/* merge of a run with slurm/ writes slurm/summary.txt from the shards'
 * predictions and the array tasks' attempt records: a requeued shard shows
 * both attempts, their summed wall time and nodes; a shard run by hand says so. */
Test(submit, merge_writes_the_per_shard_summary)
{
    char *config = write_config();
    run_shard(config, "0/2");
    run_shard(config, "1/2");
    char *attempts = tu_at("runs/sub/slurm/attempts");
    tu_result mk = tu_run_argv((char *[]){"/bin/mkdir", "-p", attempts, NULL});
    tu_result_free(&mk);
    char *rec = tu_at("runs/sub/slurm/attempts/0.tsv");
    FILE *f = fopen(rec, "w");
    fputs("start\t1000\tnodeA\t17\n" /* requeued after 30 s: no end line */
          "start\t1100\tnodeB\t17\n"
          "end\t1190\t0\n",
          f);
    fclose(f);
    char *run_dir = tu_at("runs/sub");
    tu_kvbench_ok("merge", run_dir, NULL);
    char *path = tu_at("runs/sub/slurm/summary.txt");
    char *summary = tu_slurp(path, NULL);
    /* shard 0 ran indices 0 and 2, shard 1 indices 1 and 3 */
    cr_assert(strstr(summary, "shard  samples  wall time  attempts  nodes\n"), "%s", summary);
    cr_assert(strstr(summary, "\n    0        2    0:01:30         2  nodeA,nodeB  (1 attempt "
                              "without an end: killed with its node?)\n"),
              "%s", summary);
    cr_assert(strstr(summary, "\n    1        2          -         0  (not run by the job "
                              "array)\n"),
              "%s", summary);
    cr_assert(strstr(summary, "\ntotal        4\n"), "%s", summary);

    /* a damaged record is named, and the merge itself stands */
    f = fopen(rec, "a");
    fputs("stop\t1200\n", f);
    fclose(f);
    tu_result r = tu_kvbench("merge", run_dir, NULL);
    cr_assert_eq(r.status, 1);
    cr_assert(strstr(r.err, "attempts/0.tsv:4: not an attempt record"), "%s", r.err);
    tu_result_free(&r);
    free(summary);
    free(path);
    free(run_dir);
    free(rec);
    free(attempts);
    free(config);
}

/* Inside a Slurm job, a run's threads are the job's CPUs unless --threads says otherwise. */
Test(submit, run_threads_default_to_slurm_cpus_per_task)
{
    char *config = write_config();
    setenv("SLURM_CPUS_PER_TASK", "3", 1);
    tu_result r = tu_kvbench("run", config, "--dry-run", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "threads 3"), "%s", r.out);
    tu_result_free(&r);
    r = tu_kvbench("run", config, "--dry-run", "--threads", "2", NULL);
    cr_assert(strstr(r.out, "threads 2"), "%s", r.out);
    tu_result_free(&r);
    unsetenv("SLURM_CPUS_PER_TASK");
    r = tu_kvbench("run", config, "--dry-run", NULL);
    cr_assert(strstr(r.out, "threads 1"), "%s", r.out);
    tu_result_free(&r);
    free(config);
}
