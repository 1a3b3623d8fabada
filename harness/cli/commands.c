/* The registry of subcommands, in the order `kvbench --help` lists them.
 * A subcommand that is not implemented yet is listed with run == NULL:
 * invoking it says so and exits 2 (main.c). */
#include <stddef.h>

#include "cli/cli.h"

extern const kb_command kb_cmd_run;
extern const kb_command kb_cmd_score;
extern const kb_command kb_cmd_report;
extern const kb_command kb_cmd_merge;
extern const kb_command kb_cmd_submit;
extern const kb_command kb_cmd_fetch;
extern const kb_command kb_cmd_prompts;
extern const kb_command kb_cmd_tasks;
extern const kb_command kb_cmd_generate;
extern const kb_command kb_cmd_tokenize;
extern const kb_command kb_cmd_bench;
extern const kb_command kb_cmd_schema;
extern const kb_command kb_cmd_version;

const kb_command *const kb_commands[] = {
    &kb_cmd_run,
    &kb_cmd_score,
    &kb_cmd_report,
    &kb_cmd_merge,
    &kb_cmd_submit,
    &kb_cmd_fetch,
    &kb_cmd_prompts,
    &kb_cmd_tasks,
    &kb_cmd_generate,
    &kb_cmd_tokenize,
    &kb_cmd_bench,
    &kb_cmd_schema,
    &kb_cmd_version,
    NULL,
};
