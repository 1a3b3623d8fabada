/* The registry of subcommands. A subcommand that is not implemented yet has
 * run == NULL: it is listed, and invoking it says so and exits 2. */
#include <stddef.h>

#include "cli.h"

extern const kb_command kb_cmd_bench;
extern const kb_command kb_cmd_generate;
extern const kb_command kb_cmd_tokenize;
extern const kb_command kb_cmd_version;

#define PENDING(NAME, SUMMARY, USAGE, WHERE)                                          \
    static const kb_command pending_##NAME = {                                        \
        .name = #NAME, .summary = SUMMARY, .usage = USAGE, .max_positional = 64,      \
        .pending = WHERE }

PENDING(run, "run a matrix of eviction configs over LongBench tasks (resumable)",
        "kvbench run CONFIG.json [options]", "issue 9 (runner)");
PENDING(score, "score prediction files with LongBench's metrics",
        "kvbench score FILE.jsonl|DIR [options]", "issue 8 (scorers)");
PENDING(report, "build scores.csv, summary.md and report.html from runs",
        "kvbench report RUN... [options]", "issue 9 (runner)");
PENDING(fetch, "download LongBench data or a model from the Hugging Face hub",
        "kvbench fetch longbench|model [NAME] [options]", "issue 7 (datasets)");

const kb_command *const kb_commands[] = {
    &pending_run,
    &pending_score,
    &pending_report,
    &pending_fetch,
    &kb_cmd_generate,
    &kb_cmd_tokenize,
    &kb_cmd_bench,
    &kb_cmd_version,
    NULL,
};
