/* The registry of subcommands. A subcommand that is not implemented yet has
 * run == NULL: it is listed, and invoking it says so and exits 2. */
#include <stddef.h>

#include "cli.h"

extern const kb_command kb_cmd_fetch;
extern const kb_command kb_cmd_prompts;
extern const kb_command kb_cmd_bench;
extern const kb_command kb_cmd_tokenize;
extern const kb_command kb_cmd_version;
extern const kb_command kb_cmd_score;
extern const kb_command kb_cmd_run;
extern const kb_command kb_cmd_report;
extern const kb_command kb_cmd_merge;

#define PENDING(NAME, SUMMARY, USAGE, WHERE)                                          \
    static const kb_command pending_##NAME = {                                        \
        .name = #NAME, .summary = SUMMARY, .usage = USAGE, .max_positional = 64,      \
        .pending = WHERE }

PENDING(generate, "greedy generation from one prompt, with or without eviction",
        "kvbench generate --model DIR (--prompt TEXT | --prompt-file F | --tokens IDS) [options]",
        "issue 3 (engine)");

const kb_command *const kb_commands[] = {
    &kb_cmd_run,
    &kb_cmd_score,
    &kb_cmd_report,
    &kb_cmd_merge,
    &kb_cmd_fetch,
    &kb_cmd_prompts,
    &pending_generate,
    &kb_cmd_tokenize,
    &kb_cmd_bench,
    &kb_cmd_version,
    NULL,
};
