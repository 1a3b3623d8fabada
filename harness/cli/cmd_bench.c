/* kvbench bench KIND: throughput measurements. This file only lists the
 * kinds (main.c dispatches to them) and holds what they share; each lives
 * in its own bench_KIND.c. */
#include <stdio.h>
#include <stdlib.h>

#include "cli/bench.h"
#include "cli/cli.h"

/* The kinds, in the order the help lists them; each (bench_KIND.c) is a
 * command of its own with its options. */
static const kb_command *const kinds[] = {
    &kb_bench_tokenizer_cmd,
    &kb_bench_model_cmd,
    &kb_bench_sweep_cmd,
    &kb_bench_machine_cmd,
    NULL,
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

extern const kb_command kb_cmd_bench;

/* main.c runs the kinds: a word left here names none. */
static int run(const kb_args *a)
{
    kb_error("bench: unknown kind '%s'", a->positional[0]);
    fprintf(stderr, "kinds:\n");
    kb_print_kinds(stderr, &kb_cmd_bench);
    return KB_EXIT_USAGE;
}

const kb_command kb_cmd_bench = {
    .name = "bench",
    .summary = "measure throughput: tokenizer, model, sweep, machine",
    .usage = "kvbench bench KIND [options]   (KIND: tokenizer, model, sweep, machine)",
    .description = "Measures one part of kvbench and prints what it measured.",
    .min_positional = 1,
    .max_positional = 1,
    .run = run,
    .kinds = kinds,
};
