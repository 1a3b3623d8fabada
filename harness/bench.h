/* The kinds of `kvbench bench`: each measures one part of kvbench and prints
 * what it measured. A kind is one function here, one file bench_KIND.c and
 * one line in cmd_bench.c's table (plus its options there). */
#ifndef KB_BENCH_H
#define KB_BENCH_H

#include "cli.h"

/* Tokenizer load time and encode/decode throughput (--model, --file). */
int kb_bench_tokenizer(const kb_args *a);

#endif
