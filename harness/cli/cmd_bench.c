/* kvbench bench KIND: throughput measurements. This file only dispatches to
 * the kinds; each lives in its own bench_KIND.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/bench.h"
#include "cli/bench_model.h"
#include "cli/cli.h"
#include "cli/eviction.h"

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
    {"sweep", "full cache alone vs 1 + K configs decoded batched and one after another",
     kb_bench_sweep, NULL},
    {"machine", "FP32 and BF16 arithmetic peak at the kernel level in use, memory read bandwidth",
     kb_bench_machine, NULL},
    {NULL, NULL, NULL, NULL},
};

/* Every kind's options, in one table (the parser needs them all). */
static const kb_option options[] = {
    {"model", "DIR", "model folder"},
    {"file", "F", "tokenizer: the text to encode (UTF-8)"},
    {"seconds", "S", "tokenizer: measure each phase for at least S seconds (default 2)"},
    {"prompt-tokens", "N,N,..", "model: prompt lengths to measure (default 512,2048,8192); sweep: one length (default 2048)"},
    {"gen-tokens", "N", "model, sweep: decode steps after each prompt (default 128; sweep 64)"},
    {"repeats", "N", "model: runs per prompt length; machine: runs per figure; the median is reported (default 3; machine 5)"},
    {"warmup", "N", "model: unmeasured runs before the repeats of each prompt length, as llama-bench's warmup (default 0)"},
    {"threads", "N", "model, sweep, machine: threads (default: all cores)"},
    {"compute", "f32|bf16", "model: compute mode (default f32)"},
    {"evict-keep", "N", "model: also decode after evicting to N slots per layer"},
    {"configs", "K,K,..", "sweep: eviction configs next to the full cache (default 4,16,31)"},
    {"buffer-mib", "N", "machine, sweep: read-bandwidth buffer (default: 8x the last-level cache, at least 512)"},
    {"against", "PRECISION", "model: decode speed against caches at PRECISION: one prefill forked to both, decoded in turn, the ratio"},
    {"json", NULL, "print the measurements as one JSON line"},
    KB_EVICTION_OPTIONS, /* model, sweep: of them only the cache precision's apply */
    {NULL, NULL, NULL},
};

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double kb_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int kb_parse_int_list(const char *s, const char *flag, int *out, int max, long lo, long hi)
{
    int n = 0;
    while (s && *s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < lo || v > hi || n == max || (*end && *end != ',')) {
            kb_error("--%s: want up to %d comma-separated numbers of %ld..%ld", flag, max, lo, hi);
            return -1;
        }
        out[n++] = (int)v;
        s = *end == ',' ? end + 1 : end;
    }
    if (n == 0)
        kb_error("--%s: want up to %d comma-separated numbers of %ld..%ld", flag, max, lo, hi);
    return n > 0 ? n : -1;
}

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
    .summary = "measure throughput: tokenizer, model, sweep, machine",
    .usage = "kvbench bench KIND [options]   (KIND: tokenizer, model, sweep, machine)",
    .description = "Measures one part of kvbench and prints what it measured. "
                   "tokenizer: --model DIR --file F (load time, encode and decode tokens/s). "
                   "model: --model DIR [--prompt-tokens 512,2048,8192] [--gen-tokens 128] [--warmup 0] "
                   "(prefill and decode tokens/s, median of --repeats, and peak RSS). "
                   "sweep: --model DIR [--prompt-tokens 2048] [--gen-tokens 64] "
                   "[--configs 4,16,31] [--repeats 1] [--buffer-mib N] (wall time of the full cache "
                   "alone, of 1 + K configs decoded batched and one after another, the ratios, "
                   "and the ratio at the machine's measured FMA peak and read bandwidth). "
                   "machine: [--threads N] [--repeats 5] [--buffer-mib N] (FP32 FMA and BF16 "
                   "dot-product GFLOP/s at the kernel level in use, memory read GB/s).",
    .options = options,
    .min_positional = 1,
    .max_positional = 1,
    .run = run,
};
