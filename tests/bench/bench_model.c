/* Standalone `bench_model` program: `kvbench bench model`'s command (its
 * options, help and run) as a program of its own.
 *
 *   build/tests/bench_model --model DIR [--prompt-tokens 512,2048] [--gen-tokens 128] ...
 */
#include "cli/bench.h"
#include "cli/cli.h"

int main(int argc, char **argv)
{
    kb_args a;
    int rc = kb_args_parse(&a, &kb_bench_model_cmd, argc, argv);
    return rc >= 0 ? rc : kb_bench_model_cmd.run(&a);
}
