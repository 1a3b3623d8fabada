/* The registry of subcommands. A subcommand that is not implemented yet has
 * run == NULL: it is listed, and invoking it says so and exits 2. */
#include <stddef.h>

#include "cli.h"

extern const kb_command kb_cmd_version;
extern const kb_command kb_cmd_score;
extern const kb_command kb_cmd_run;
extern const kb_command kb_cmd_report;
extern const kb_command kb_cmd_merge;

#define PENDING(NAME, SUMMARY, USAGE, WHERE)                                          \
    static const kb_command pending_##NAME = {                                        \
        .name = #NAME, .summary = SUMMARY, .usage = USAGE, .max_positional = 64,      \
        .pending = WHERE }

PENDING(fetch, "download LongBench data or a model from the Hugging Face hub",
        "kvbench fetch longbench|model [NAME] [options]", "issue 7 (datasets)");
PENDING(generate, "greedy generation from one prompt, with or without eviction",
        "kvbench generate --model DIR (--prompt TEXT | --prompt-file F | --tokens IDS) [options]",
        "issue 3 (engine)");
PENDING(tokenize, "encode or decode text with a model's tokenizer",
        "kvbench tokenize --model DIR (--text T | --file F | --jsonl F) [options]",
        "issue 4 (tokenizer)");
PENDING(bench, "measure throughput of the model, tokenizer, loader or scorers",
        "kvbench bench model|tokenizer|... [options]", "issues 3, 4, 7, 8");

const kb_command *const kb_commands[] = {
    &kb_cmd_run,
    &kb_cmd_score,
    &kb_cmd_report,
    &kb_cmd_merge,
    &pending_fetch,
    &pending_generate,
    &pending_tokenize,
    &pending_bench,
    &kb_cmd_version,
    NULL,
};
