/* kvbench run: the config matrix over LongBench, resumable and shardable.
 * runner.c drives the loop (data, prompts, predictions, scores); backend.c
 * is the model behind it (the engine and eviction). */
#include <cjson/cJSON.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "run/backend.h"
#include "cli/cli.h"
#include "cli/fetch.h"
#include "cluster/slurm.h"
#include "matrix/hash.h"
#include "run/runner.h"
#include "cli/version.h"

/* The one static a signal handler needs: the loop polls it between samples,
 * so Ctrl-C finishes the sample in flight and exits cleanly. A second
 * Ctrl-C stops at once: a prediction is one write, a cut-short line is
 * dropped on resume, and the kernel releases the run's lock. */
static volatile sig_atomic_t stop_requested;

static void say(const char *msg)
{
    ssize_t rc = write(STDERR_FILENO, msg, strlen(msg)); /* async-signal-safe */
    (void)rc;
}

static void on_signal(int sig)
{
    (void)sig;
    if (stop_requested) {
        say("\nkvbench: run: stopped at once; run the same command again to resume\n");
        _exit(130);
    }
    stop_requested = 1;
    say("\nkvbench: run: finishing the current sample, then stopping (Ctrl-C again to stop at "
        "once)\n");
}

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* A hub name "ORG/NAME" (not a folder here) is fetched on first use into
 * models/NAME, as `kvbench fetch model` fetches it (progress, resume,
 * checksums). Returns the folder to load (malloc'd) or NULL after reporting. */
static char *resolve_model(const kb_matrix *m)
{
    if (is_dir(m->model))
        return strdup(m->model);
    const char *slash = strchr(m->model, '/');
    if (!slash || strchr(slash + 1, '/') || m->model[0] == '.' || slash == m->model ||
        !slash[1]) {
        kb_error("run: model folder '%s' not found", m->model);
        return NULL;
    }
    size_t n = strlen("models/") + strlen(slash + 1) + 1;
    char *dir = malloc(n);
    if (!dir)
        return NULL;
    snprintf(dir, n, "models/%s", slash + 1);
    char cfg[4096];
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    if (access(cfg, R_OK) == 0)
        return dir;
    fprintf(stderr, "kvbench: run: fetching %s into %s\n", m->model, dir);
    if (kb_fetch_model(m->model, m->model_revision, dir) < 0) {
        kb_error("run: could not fetch %s (see above)", m->model);
        free(dir);
        return NULL;
    }
    return dir;
}

/* --dry-run: the plan, then what can be checked without running: every
 * task's data, and a local model's architecture and tokenizer. */
static int dry_run(const kb_matrix *m, const kb_runner_options *o)
{
    kb_runner_plan_print(stdout, m, o);
    kv_error err = {{0}};
    long samples = 0;
    const char *arch = NULL;
    if (kb_runner_check_data(m, &samples, &err) < 0) {
        kb_error("run: %s", err.msg);
        return KB_EXIT_FAIL;
    }
    printf("\nchecked: the data of %zu tasks (%ld samples)", m->n_tasks, samples);
    if (!is_dir(m->model)) {
        printf("; model %s is fetched by the run (not checked)\n", m->model);
        return KB_EXIT_OK;
    }
    if (kb_engine_model_check(m->model, &arch, &err) < 0) {
        putchar('\n');
        kb_error("run: %s", err.msg);
        return KB_EXIT_FAIL;
    }
    printf(", the model's architecture (%s) and tokenizer\n", arch);
    return KB_EXIT_OK;
}

/* Loads the model once and runs the matrix. */
static int run_matrix(kb_matrix *m, kb_runner_options *o)
{
    kv_error err = {{0}};
    long samples;
    /* a run that cannot read its data stops before it creates anything */
    if (kb_runner_check_data(m, &samples, &err) < 0) {
        kb_error("run: %s", err.msg);
        return KB_EXIT_FAIL;
    }
    char *model_dir = resolve_model(m);
    if (!model_dir)
        return KB_EXIT_FAIL;
    free(m->model);
    m->model = model_dir;
    char hash[17];
    if (kb_hash_model(m->model, hash, &err) < 0) {
        kb_error("run: %s", err.msg);
        return KB_EXIT_FAIL;
    }
    kb_runner_backend b;
    if (kb_engine_backend_open(m, m->model, &b, &err) < 0) {
        kb_error("run: %s", err.msg);
        return KB_EXIT_FAIL;
    }
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    kb_progress *progress = kb_progress_new(&(kb_progress_opts){.out = stderr, .tty = -1}, 0, 0);
    kb_runner_stats stats = {0};
    o->table = stdout; /* the score table, the answer to "how did it go" */
    int rc = kb_runner_run(m, o, KB_VERSION " (" KB_GIT_VERSION ")", hash, &b, &stop_requested,
                           progress, &stats, &err);
    kb_progress_free(progress);
    kb_engine_backend_close(&b);
    if (rc < 0) {
        kb_error("run: %s", err.msg);
        return KB_EXIT_FAIL;
    }
    fprintf(stderr,
            "kvbench: run: %ld samples done, %ld already on disk, %ld prefills (+ %ld of the "
            "question on the full cache, %ld batched over the query-agnostic configs), %ld "
            "decodes in %ld batched steps\n",
            stats.samples_done, stats.samples_skipped, stats.prefills, stats.question_prefills,
            stats.question_batches, stats.decodes, stats.decode_steps);
    if (stats.stopped) {
        kb_error("run: stopped; run the same command again to resume");
        return 130;
    }
    if (o->shard.count <= 1) {
        char *dir = kb_run_dir(m->output, m->run_name, &o->shard);
        printf("\nfull report: %s (summary.md, scores.csv, averages.csv, report.html)\n",
               dir ? dir : m->run_name);
        free(dir);
    }
    return KB_EXIT_OK;
}

static const kb_option options[] = {
    {"dry-run", NULL, "validate the config and print the expanded matrix; run nothing"},
    {"shard", "I/N", "process only the samples whose index % N == I (0-based)"},
    {"model", "DIR|ORG/NAME", "the model (overrides the config's \"model\")"},
    {"data", "DIR", "folder of the task files (overrides the config's \"data\")"},
    {"compute", "f32|bf16", "the engine's compute mode (overrides the config's \"compute\")"},
    {"tasks", "T,...", "tasks or groups (overrides the config's \"tasks\")"},
    {"output", "DIR", "folder for run folders (overrides the config's \"output\")"},
    {"name", "NAME", "run name (overrides the config's \"name\")"},
    {"threads", "N",
     "CPU threads (overrides the config's \"threads\"; in a Slurm job: $SLURM_CPUS_PER_TASK)"},
    {"limit", "N", "only the first N samples of every task (quick checks)"},
    {"empty-tasks", "error|missing",
     "an empty task file: an error naming it (default), or a task without a score"},
    {NULL, NULL, NULL},
};

/* The overrides the command line gives, as run.json records them
 * (kb_matrix_load_with); NULL when there are none or out of memory (*oom). */
static cJSON *overrides_of(const kb_args *a, const kb_runner_options *o, bool *oom)
{
    static const char *const strings[] = {"model", "data", "compute", "name", "output", NULL};
    cJSON *j = cJSON_CreateObject();
    bool ok = j != NULL;
    for (int i = 0; ok && strings[i]; i++)
        if (kb_arg(a, strings[i]))
            ok = cJSON_AddStringToObject(j, strings[i], kb_arg(a, strings[i])) != NULL;
    if (ok && kb_arg(a, "tasks")) {
        cJSON *list = cJSON_AddArrayToObject(j, "tasks");
        char *copy = strdup(kb_arg(a, "tasks")), *save = NULL;
        ok = list && copy;
        for (char *t = copy ? strtok_r(copy, ",", &save) : NULL; ok && t;
             t = strtok_r(NULL, ",", &save))
            ok = cJSON_AddItemToArray(list, cJSON_CreateString(t));
        free(copy);
    }
    if (ok && o->threads > 0)
        ok = cJSON_AddNumberToObject(j, "threads", (double)o->threads) != NULL;
    if (ok && o->limit > 0)
        ok = cJSON_AddNumberToObject(j, "limit", (double)o->limit) != NULL;
    *oom = !ok;
    if (!ok || !j->child) {
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

static int run(const kb_args *a)
{
    kb_runner_options o = {
        .shard = {0, 1}, .output = kb_arg(a, "output"), .name = kb_arg(a, "name")};
    kv_error err = {{0}};
    if (kb_arg(a, "shard") && kb_shard_parse(kb_arg(a, "shard"), &o.shard, &err) < 0) {
        kb_error("run: %s", err.msg);
        return KB_EXIT_USAGE;
    }
    if (o.name && !kb_name_is_safe(o.name)) {
        kb_error("run: --name '%s': a run name is one folder name: letters, digits, '.', '_', "
                 "'-', not empty and not starting with '.' or '-'",
                 o.name);
        return KB_EXIT_USAGE;
    }
    const char *empty = kb_arg(a, "empty-tasks");
    if (empty && strcmp(empty, "error") != 0 && strcmp(empty, "missing") != 0) {
        kb_error("run: --empty-tasks '%s': want error or missing", empty);
        return KB_EXIT_USAGE;
    }
    o.empty_tasks_missing = empty && strcmp(empty, "missing") == 0;
    o.threads = kb_slurm_cpus_per_task(); /* inside a Slurm job: its CPUs, unless told */
    if (kb_arg_long(a, "threads", 1, 4096, &o.threads) < 0 ||
        kb_arg_long(a, "limit", 1, 1L << 40, &o.limit) < 0)
        return KB_EXIT_USAGE;
    bool oom;
    cJSON *overrides = overrides_of(a, &o, &oom);
    if (oom) {
        kb_error("run: out of memory");
        return KB_EXIT_FAIL;
    }
    kb_matrix m;
    int loaded = kb_matrix_load_with(a->positional[0], overrides, &m, &err);
    cJSON_Delete(overrides);
    if (loaded < 0) {
        kb_error("%s", err.msg);
        return KB_EXIT_FAIL;
    }
    int rc = KB_EXIT_OK;
    kb_runner_warn(stderr, &m);
    if (kb_runner_apply_options(&m, &o) < 0) {
        kb_error("run: out of memory");
        rc = KB_EXIT_FAIL;
    } else if (kb_flag(a, "dry-run")) {
        rc = dry_run(&m, &o);
    } else {
        rc = run_matrix(&m, &o);
    }
    kb_matrix_free(&m);
    return rc;
}

const kb_command kb_cmd_run = {
    .name = "run",
    .summary = "run a matrix of eviction configs over LongBench tasks (resumable)",
    .usage = "kvbench run CONFIG.json [--shard I/N] [--dry-run] [options]",
    .description =
        "CONFIG.json (see configs/schema.json) names the model, the tasks and the eviction\n"
        "configs (named configs and/or sweeps; the full cache is always included). Each\n"
        "sample is prefilled once and decoded under every config; one JSON line per (config,\n"
        "sample) goes to results/<run>/predictions/<config>/<task>.jsonl. Running the same\n"
        "command again resumes; --shard I/N splits the samples over machines (kvbench merge\n"
        "joins them).",
    .options = options,
    .min_positional = 1,
    .max_positional = 1,
    .run = run,
};
