/* kvbench bench KIND: throughput measurements. This file only dispatches to
 * the kinds; each lives in its own bench_KIND.c. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "bench_model.h"
#include "cli.h"

typedef struct bench_kind {
    const char *name;
    const char *summary;
    int (*run)(const kb_args *a); /* NULL: not implemented yet */
    const char *pending;          /* for run == NULL: where the work is tracked */
} bench_kind;

static const bench_kind kinds[] = {
    {"tokenizer", "load time, encode and decode speed of --model's tokenizer on --file",
     kb_bench_tokenizer, NULL},
    {"model", "prefill and decode tokens/s of --model, and peak RSS", kb_bench_model_run, NULL},
    {NULL, NULL, NULL, NULL},
};

/* Every kind's options, in one table (the parser needs them all). */
static const kb_option options[] = {
    {"model", "DIR", "model folder"},
    {"file", "F", "tokenizer: the text to encode (UTF-8)"},
    {"seconds", "S", "tokenizer: measure each phase for at least S seconds (default 2)"},
    {"prompt-tokens", "N,N,..", "model: prompt lengths to measure (default 512,2048,8192)"},
    {"gen-tokens", "N", "model: decode steps after each prompt (default 128)"},
    {"repeats", "N", "model: runs per prompt length; the median is reported (default 3)"},
    {"threads", "N", "model: threads (default: all cores)"},
    {"compute", "f32|bf16", "model: compute mode (default f32)"},
    {"evict-keep", "N", "model: also decode after evicting to N slots per layer"},
    {"json", NULL, "print the measurements as one JSON line"},
    {NULL, NULL, NULL},
};

static void list_kinds(void)
{
    fprintf(stderr, "kinds:\n");
    for (int i = 0; kinds[i].name; i++)
        fprintf(stderr, "  %-10s %s%s\n", kinds[i].name, kinds[i].summary,
                kinds[i].run ? "" : "  [not implemented yet]");
}

static int run(const kb_args *a)
{
    const char *name = a->positional[0];
    for (int i = 0; kinds[i].name; i++) {
        if (strcmp(kinds[i].name, name) != 0)
            continue;
        if (!kinds[i].run) {
            kb_error("bench %s: not implemented yet (tracked in %s)", name, kinds[i].pending);
            return KB_EXIT_USAGE;
        }
        return kinds[i].run(a);
    }
    kb_error("bench: unknown kind '%s'", name);
    list_kinds();
    return KB_EXIT_USAGE;
}

const kb_command kb_cmd_bench = {
    .name = "bench",
    .summary = "measure throughput of the model, tokenizer, loader or scorers",
    .usage = "kvbench bench KIND [options]   (KIND: tokenizer, model)",
    .description = "Measures one part of kvbench and prints what it measured. "
                   "tokenizer: --model DIR --file F (load time, encode and decode tokens/s). "
                   "model: --model DIR [--prompt-tokens 512,2048,8192] [--gen-tokens 128] "
                   "(prefill and decode tokens/s, median of --repeats, and peak RSS).",
    .options = options,
    .min_positional = 1,
    .max_positional = 1,
    .run = run,
};
