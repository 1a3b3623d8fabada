/* kvbench submit slurm: a sharded run as a Slurm job array plus a finish job
 * (merge, report) that waits for it. The scripts and their record live in
 * the run folder (cluster/slurm.h); only what is missing is submitted
 * (cluster/shardstate.h). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cluster/shardstate.h"
#include "cluster/slurm.h"
#include "run/runner.h"

static const kb_option options[] = {
    {"shards", "N", "split the samples over N array tasks (required)"},
    {"dry-run", NULL, "write the scripts and print them; submit nothing"},
    {"baseline", "RUN",
     "compare the report with this run and fail on a regression (default: the config's "
     "\"baseline\")"},
    {"name", "NAME", "run name (overrides the config's \"name\")"},
    {"output", "DIR", "folder for run folders (overrides the config's \"output\")"},
    {"limit", "N", "only the first N samples of every task (quick checks)"},
    {NULL, NULL, NULL},
};

/* What the command line asks for. */
typedef struct submit_request {
    const char *config;
    long n_shards;
    const char *const *sbatch_opts; /* after "--", NULL-ended */
    const char *run_args[8];        /* CONFIG and the overrides `kvbench run` gets, NULL-ended */
    kb_runner_options overrides;
} submit_request;

static int parse_request(const kb_args *a, submit_request *r)
{
    memset(r, 0, sizeof *r);
    if (a->n_before_dashdash != 2) {
        kb_error("submit: %s; usage: %s",
                 a->n_before_dashdash < 2 ? "missing argument" : "unexpected argument before --",
                 a->cmd->usage);
        return -1;
    }
    if (strcmp(a->positional[0], "slurm") != 0) {
        kb_error("submit: unknown scheduler '%s' (kvbench submits to: slurm)", a->positional[0]);
        return -1;
    }
    r->config = a->positional[1];
    r->sbatch_opts = a->positional + 2;
    r->n_shards = LONG_MIN;
    if (kb_arg_long(a, "shards", LONG_MIN, LONG_MAX, &r->n_shards) < 0)
        return -1;
    if (r->n_shards == LONG_MIN) {
        kb_error("submit: --shards N is required (the number of array tasks)");
        return -1;
    }
    if (r->n_shards < 1) {
        kb_error("submit: --shards %ld: a run needs at least 1 shard", r->n_shards);
        return -1;
    }
    r->overrides.name = kb_arg(a, "name");
    r->overrides.output = kb_arg(a, "output");
    if (kb_arg_long(a, "limit", 1, 1L << 40, &r->overrides.limit) < 0)
        return -1;
    size_t k = 0;
    r->run_args[k++] = r->config;
    static const char *const passed[][2] = {
        {"name", "--name"}, {"output", "--output"}, {"limit", "--limit"}};
    for (size_t i = 0; i < sizeof passed / sizeof *passed; i++)
        if (kb_arg(a, passed[i][0])) {
            r->run_args[k++] = passed[i][1];
            r->run_args[k++] = kb_arg(a, passed[i][0]);
        }
    return 0;
}

/* The unfinished shards as an --array list: "0-2", "1,4-6". */
static char *array_list(const kb_shard_state *st)
{
    size_t cap = 32 + (size_t)st->n_shards * 22, len = 0;
    char *s = malloc(cap);
    if (!s)
        return NULL;
    s[0] = '\0';
    for (long i = 0; i < st->n_shards; i++) {
        if (st->finished[i])
            continue;
        long j = i;
        while (j + 1 < st->n_shards && !st->finished[j + 1])
            j++;
        len += (size_t)snprintf(s + len, cap - len, "%s%ld", len ? "," : "", i);
        if (j > i)
            len += (size_t)snprintf(s + len, cap - len, "-%ld", j);
        i = j;
    }
    return s;
}

/* Whether the sbatch options give each task its CPUs. */
static bool sets_cpus(const char *const *opts)
{
    for (; *opts; opts++)
        if (strncmp(*opts, "--cpus-per-task", 15) == 0 || strncmp(*opts, "-c", 2) == 0)
            return true;
    return false;
}

/* `sbatch --parsable USER_OPTS... OURS... SCRIPT`: ours come last, so the
 * array list and the dependency are the ones that count. */
static int submit_one(const submit_request *req, const char *run_dir, const char *script,
                      const char *extra1, const char *extra2, char *id, size_t n, kv_error *err)
{
    size_t n_user = 0;
    while (req->sbatch_opts[n_user])
        n_user++;
    const char **opts = calloc(n_user + 3, sizeof *opts);
    char *path = kb_slurm_path(run_dir, script);
    int rc = -1;
    if (!opts || !path) {
        kv_fail(err, "out of memory");
    } else {
        memcpy(opts, req->sbatch_opts, n_user * sizeof *opts);
        opts[n_user] = extra1;
        opts[n_user + 1] = extra1 ? extra2 : NULL;
        rc = kb_sbatch(opts, path, id, n, err);
    }
    free(opts);
    free(path);
    return rc;
}

static void print_scripts(const kb_slurm_run *r, const char *list, bool finish_waits)
{
    char *array = kb_slurm_array_script(r), *finish = kb_slurm_finish_script(r);
    if (list)
        printf("# %s/slurm/array.sbatch (would be submitted with --array=%s)\n%s\n", r->run_dir,
               list, array ? array : "");
    printf("# %s/slurm/finish.sbatch (would be submitted%s)\n%s", r->run_dir,
           finish_waits ? " with --dependency=afterok:<array job> --kill-on-invalid-dep=yes" : "",
           finish ? finish : "");
    free(array);
    free(finish);
}

/* Submits the array (when list is not NULL), then the finish job after it,
 * and prints their ids and how to watch and cancel them. */
static int submit_jobs(const submit_request *req, const kb_shard_state *st, const char *list)
{
    kv_error err = {{0}};
    char array_id[32] = "", finish_id[32] = "", array_opt[64] = "", dep[64] = "";
    if (list) {
        char *opt = malloc(strlen(list) + 16);
        if (!opt)
            return KB_EXIT_FAIL;
        sprintf(opt, "--array=%s", list);
        int rc = submit_one(req, st->run_dir, "array.sbatch", opt, NULL, array_id, sizeof array_id,
                            &err);
        free(opt);
        if (rc < 0) {
            kb_error("submit: %s", err.msg);
            return KB_EXIT_FAIL;
        }
        snprintf(dep, sizeof dep, "--dependency=afterok:%s", array_id);
        snprintf(array_opt, sizeof array_opt, "--kill-on-invalid-dep=yes");
    }
    if (submit_one(req, st->run_dir, "finish.sbatch", list ? dep : NULL, array_opt, finish_id,
                   sizeof finish_id, &err) < 0) {
        kb_error("submit: %s", err.msg);
        if (list)
            kb_error("submit: the array job %s was submitted and runs; submit again once the "
                     "problem is fixed (finished shards are kept), or cancel it: scancel %s",
                     array_id, array_id);
        return KB_EXIT_FAIL;
    }
    const char *ids[] = {array_id, finish_id};
    if (kb_slurm_jobs_write(st->run_dir, list ? ids : ids + 1, list ? 2 : 1, &err) < 0)
        kb_error("submit: note: %s (the jobs run all the same)", err.msg);
    if (list)
        printf("array job:  %s (shards %s of %ld)\n", array_id, list, st->n_shards);
    printf("finish job: %s (merge and report%s)\n", finish_id,
           list ? " once every shard succeeded" : "; every shard had finished");
    printf("watch:  squeue --jobs=%s%s%s; tail -f %s/slurm/logs/*.log\n", array_id, list ? "," : "",
           finish_id, st->run_dir);
    printf("cancel: scancel %s%s%s\n", array_id, list ? " " : "", finish_id);
    return KB_EXIT_OK;
}

/* Nothing runs twice: a submission whose jobs are still queued blocks a new one. */
static int check_queue(const char *run_dir)
{
    kv_error err = {{0}};
    char queued[256];
    if (kb_slurm_jobs_queued(run_dir, queued, sizeof queued, &err) < 0) {
        kb_error("submit: %s", err.msg);
        return -1;
    }
    if (queued[0]) {
        kb_error("submit: the jobs of the last submission of %s are still queued or running "
                 "(%s): wait for them, or cancel them (scancel %s) and submit again",
                 run_dir, queued, queued);
        return -1;
    }
    return 0;
}

/* Writes the scripts into the run folder, then prints them (dry_run) or
 * submits the unfinished shards and the finish job. */
static int write_and_submit(const submit_request *req, const kb_matrix *m, const kb_shard_state *st,
                            bool dry_run, const char *baseline)
{
    char cwd[PATH_MAX], exe[PATH_MAX];
    ssize_t n_exe = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (!getcwd(cwd, sizeof cwd) || n_exe < 0) {
        kb_error("submit: cannot tell this folder or this program's path");
        return KB_EXIT_FAIL;
    }
    exe[n_exe] = '\0';
    kb_slurm_run r = {.kvbench = exe,
                      .workdir = cwd,
                      .run_dir = st->run_dir,
                      .run_name = m->run_name,
                      .n_shards = req->n_shards,
                      .run_args = req->run_args,
                      .baseline = baseline};
    kv_error err = {{0}};
    char *list = array_list(st);
    if (!list || kb_slurm_write_scripts(&r, &err) < 0) {
        kb_error("submit: %s", list ? err.msg : "out of memory");
        free(list);
        return KB_EXIT_FAIL;
    }
    fprintf(stderr, "kvbench: submit: run %s: %ld samples in %ld shards, %ld to run\n", st->run_dir,
            st->total_samples, st->n_shards, st->n_unfinished);
    if (!sets_cpus(req->sbatch_opts))
        fprintf(stderr, "kvbench: submit: note: no --cpus-per-task after --: each shard "
                        "runs with the config's threads (or all cores of its node)\n");
    const char *todo = st->n_unfinished ? list : NULL;
    int rc = KB_EXIT_OK;
    if (dry_run)
        print_scripts(&r, todo, todo != NULL);
    else
        rc = submit_jobs(req, st, todo);
    free(list);
    return rc;
}

static int submit(const submit_request *req, const kb_matrix *m, bool dry_run, const char *baseline)
{
    /* the queue first: a shard of a running submission is not probed */
    char *run_dir = kb_run_dir(m->output, m->run_name, NULL);
    int queued = !run_dir ? -1 : dry_run ? 0 : check_queue(run_dir);
    free(run_dir);
    if (queued < 0)
        return KB_EXIT_FAIL;
    kv_error err = {{0}};
    kb_shard_state st;
    if (kb_shard_state_read(m, req->n_shards, &st, &err) < 0) {
        kb_error("submit: %s", err.msg);
        return KB_EXIT_FAIL;
    }
    int rc = KB_EXIT_OK;
    if (req->n_shards > st.max_samples) {
        kb_error("submit: --shards %ld: the largest task of %s has %ld samples, so shards %ld "
                 "and above would have nothing to do; give --shards %ld or fewer",
                 req->n_shards, req->config, st.max_samples, st.max_samples, st.max_samples);
        rc = KB_EXIT_USAGE;
    } else if (st.merged) {
        if (st.n_shards > 1)
            printf("nothing to submit: run %s is complete (its %ld shards finished, then were "
                   "merged and reported)\n",
                   st.run_dir, st.n_shards);
        else
            printf("nothing to submit: run %s is complete (finished and reported)\n", st.run_dir);
    } else {
        rc = write_and_submit(req, m, &st, dry_run, baseline);
    }
    kb_shard_state_free(&st);
    return rc;
}

static int run(const kb_args *a)
{
    submit_request req;
    if (parse_request(a, &req) < 0)
        return KB_EXIT_USAGE;
    kv_error err = {{0}};
    kb_matrix m;
    if (kb_matrix_load(req.config, &m, &err) < 0) {
        kb_error("%s", err.msg);
        return KB_EXIT_FAIL;
    }
    int rc = KB_EXIT_FAIL;
    if (kb_runner_apply_options(&m, &req.overrides) < 0)
        kb_error("submit: out of memory");
    else
        rc = submit(&req, &m, kb_flag(a, "dry-run"),
                    kb_arg(a, "baseline") ? kb_arg(a, "baseline") : m.baseline);
    kb_matrix_free(&m);
    return rc;
}

const kb_command kb_cmd_submit = {
    .name = "submit",
    .summary = "run a sweep on a cluster: a Slurm job array of shards, then merge and report",
    .usage = "kvbench submit slurm CONFIG.json --shards N [--dry-run] [--baseline RUN] "
             "[options] [-- SBATCH_OPTIONS...]",
    .description =
        "Writes results/<run>/slurm/array.sbatch (a job array of N tasks; task i runs\n"
        "`kvbench run CONFIG --shard i/N`, --requeue, logs in slurm/logs/) and finish.sbatch\n"
        "(kvbench merge, then kvbench report; with --baseline, --fail-on-regression), and\n"
        "submits both with `sbatch --parsable`, the second with --dependency=afterok on the\n"
        "first. Options after -- go to both sbatch calls (partition, account, time,\n"
        "cpus-per-task: a shard's threads default to its --cpus-per-task). Submitting again\n"
        "submits only what is missing: finished shards are not run again, and a run that is\n"
        "merged and reported submits nothing.",
    .options = options,
    .min_positional = 2,
    .max_positional = KB_MAX_POSITIONAL,
    .run = run,
};
