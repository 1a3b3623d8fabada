/* kvbench: LongBench evaluation of KV-cache eviction. This file only
 * dispatches to the subcommands registered in commands.c. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/memory.h"
#include "cli/version.h"

static void print_main_help(void)
{
    printf("usage: kvbench [--help] [--version] <command> [<args>]\n\n"
           "kvbench measures how much accuracy each KV-cache eviction configuration\n"
           "costs on LongBench, with its own CPU transformer engine.\n\ncommands:\n");
    for (int i = 0; kb_commands[i]; i++)
        printf("  %-10s %s%s\n", kb_commands[i]->name, kb_commands[i]->summary,
               kb_commands[i]->run ? "" : "  [not implemented yet]");
    printf("\nSee 'kvbench <command> --help' for the options of a command.\n");
}

static const kb_command *find_command(const char *name)
{
    for (int i = 0; kb_commands[i]; i++)
        if (strcmp(kb_commands[i]->name, name) == 0)
            return kb_commands[i];
    return NULL;
}

/* The command that words (n of them, at least one) name, and how many of
 * them name it: a command, or a command's kind (`bench model`), which
 * parses its own options; a word that names no kind is left to the
 * command, which reports it. NULL after saying why none can run. */
static const kb_command *command_named(int n, char **words, int *used)
{
    const kb_command *cmd = find_command(words[0]);
    if (!cmd) {
        kb_error("'%s' is not a kvbench command. See 'kvbench --help'.", words[0]);
        return NULL;
    }
    *used = 1;
    if (n > 1 && kb_find_kind(cmd, words[1])) {
        cmd = kb_find_kind(cmd, words[1]);
        *used = 2;
    }
    if (!cmd->run) {
        kb_error("%s: not implemented yet (tracked in %s)", cmd->name, cmd->pending);
        return NULL;
    }
    return cmd;
}

/* Output that did not reach its file (a full disk, a closed pipe) is a
 * failure, whatever the command thought: stdio only reports it at the
 * flush, or as the stream's error flag after a failed write (whose errno
 * is still the reason: commands stop at a failed write). */
static int check_stdout(const char *cmd, int rc)
{
    if (fflush(stdout) == 0 && !ferror(stdout))
        return rc;
    kb_error("%s: cannot write the output: %s", cmd, strerror(errno));
    return KB_EXIT_FAIL;
}

int main(int argc, char **argv)
{
    kb_memory_setup(argv);
    if (argc < 2) {
        print_main_help();
        return KB_EXIT_USAGE;
    }
    const char *name = argv[1];
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0) {
        print_main_help();
        return KB_EXIT_OK;
    }
    if (strcmp(name, "--version") == 0) {
        printf("kvbench %s (%s)\n", KB_VERSION, KB_GIT_VERSION);
        return KB_EXIT_OK;
    }
    if (strcmp(name, "help") == 0) {
        if (argc < 3) {
            print_main_help();
            return KB_EXIT_OK;
        }
        int words;
        const kb_command *cmd = command_named(argc - 2, argv + 2, &words);
        if (!cmd)
            return KB_EXIT_USAGE;
        kb_print_command_help(cmd); /* `kvbench help bench model` too */
        return KB_EXIT_OK;
    }
    int words;
    const kb_command *cmd = command_named(argc - 1, argv + 1, &words);
    if (!cmd)
        return KB_EXIT_USAGE;
    /* argv[0] of what kb_args_parse reads: the command's last word. */
    kb_args args;
    int rc = kb_args_parse(&args, cmd, argc - words, argv + words);
    if (rc >= 0)
        return rc;
    return check_stdout(cmd->name, cmd->run(&args));
}
