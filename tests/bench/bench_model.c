/* Standalone `bench_model` program: the same benchmark as `kvbench bench
 * model`, usable before (or without) the bench dispatcher.
 *
 *   build/tests/bench_model --model DIR [--prompt-tokens 512,2048] [--gen-tokens 128] ...
 */
#include "cli/bench_model.h"

#include "cli/cli.h"

static const kb_command cmd = {
    .name = "bench_model",
    .summary = "prefill and decode throughput of the engine, and peak RSS",
    .usage = "bench_model --model DIR [options]",
    .options = kb_bench_model_options,
    .run = kb_bench_model_run,
};

int main(int argc, char **argv)
{
    kb_args a;
    int rc = kb_args_parse(&a, &cmd, argc, argv);
    return rc >= 0 ? rc : kb_bench_model_run(&a);
}
