/* kvbench run: the config matrix over LongBench, resumable and shardable.
 * The sample loop needs the engine; until it is wired (see runner.h),
 * --dry-run validates a config file and shows exactly what would run. */
#include <stdio.h>

#include "cli.h"
#include "runner.h"

static const kb_option options[] = {
    {"dry-run", NULL, "validate the config and print the expanded matrix; run nothing"},
    {"shard", "I/N", "process only the samples whose index % N == I (0-based)"},
    {"output", "DIR", "folder for run folders (overrides the config's \"output\")"},
    {"name", "NAME", "run name (overrides the config's \"name\")"},
    {"threads", "N", "CPU threads (overrides the config's \"threads\")"},
    {"limit", "N", "only the first N samples of every task (quick checks)"},
    {NULL, NULL, NULL},
};

static int run(const kb_args *a)
{
    kb_runner_options o = {
        .shard = {0, 1}, .output = kb_arg(a, "output"), .name = kb_arg(a, "name")};
    kv_error err = {{0}};
    if (kb_arg(a, "shard") && kb_shard_parse(kb_arg(a, "shard"), &o.shard, &err) < 0) {
        kb_error("run: %s", err.msg);
        return KB_EXIT_USAGE;
    }
    if (kb_arg_long(a, "threads", 1, 4096, &o.threads) < 0 ||
        kb_arg_long(a, "limit", 1, 1L << 40, &o.limit) < 0)
        return KB_EXIT_USAGE;
    kb_matrix m;
    if (kb_matrix_load(a->positional[0], NULL, &m, &err) < 0) {
        kb_error("%s", err.msg);
        return KB_EXIT_FAIL;
    }
    int rc = KB_EXIT_OK;
    if (kb_runner_apply_options(&m, &o) < 0) {
        kb_error("run: out of memory");
        rc = KB_EXIT_FAIL;
    } else if (kb_flag(a, "dry-run")) {
        kb_runner_plan_print(stdout, &m, &o);
    } else {
        kb_error("run: the sample loop is not wired in yet (engine, eviction, datasets and "
                 "scorers are being merged; see harness/runner.h). --dry-run shows the plan.");
        rc = KB_EXIT_USAGE;
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
