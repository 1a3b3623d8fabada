/* The kvbench command line: subcommands, their options, help and errors.
 *
 * Each subcommand is a kb_command value in its own cmd_*.c file: a name, a
 * one-line summary, a usage line, a table of options and a run function.
 * The parser and the help text both come from that one table, so what
 * `kvbench CMD --help` lists is exactly what CMD accepts.
 *
 * Exit codes: 0 ok, 1 the work failed, 2 usage error (bad or unknown option,
 * or a subcommand that is not implemented yet).
 */
#ifndef KB_CLI_H
#define KB_CLI_H

#include <stdbool.h>
#include <stdio.h>

enum { KB_EXIT_OK = 0, KB_EXIT_FAIL = 1, KB_EXIT_USAGE = 2 };

typedef struct kb_option {
    const char *name;     /* long name without the dashes: "max-new-tokens" */
    const char *metavar;  /* "N", "FILE"...; NULL for a flag that takes no value */
    const char *help;     /* one line; mention the default when there is one */
} kb_option;

#define KB_MAX_OPTIONS 64
#define KB_MAX_POSITIONAL 64

typedef struct kb_args {
    const char *values[KB_MAX_OPTIONS]; /* NULL: not given; "" for a given flag */
    const char *positional[KB_MAX_POSITIONAL];
    int n_positional;
    int n_before_dashdash; /* positionals given before "--" (all of them when there is none) */
    const struct kb_command *cmd;
} kb_args;

/* An older spelling of an option that is still accepted: "--out" for "--output". */
typedef struct kb_alias {
    const char *old, *name;
} kb_alias;

typedef struct kb_command {
    const char *name;
    const char *summary;       /* one line for `kvbench --help` */
    const char *usage;         /* "kvbench score FILE.jsonl|DIR [options]" */
    const char *description;   /* a paragraph for `kvbench CMD --help`, may be NULL */
    const kb_option *options;  /* terminated by an entry with name == NULL */
    const kb_alias *aliases;   /* NULL, or terminated by an entry with old == NULL */
    int min_positional, max_positional;
    int (*run)(const kb_args *args); /* NULL: not implemented yet */
    const char *pending;       /* for run == NULL: where the work is tracked */
    /* NULL, or NULL-terminated: the kinds `kvbench CMD KIND ...` runs, each a
     * command of its own named "CMD KIND" with its own options and help. */
    const struct kb_command *const *kinds;
} kb_command;

/* Parses argv (argv[0] is the subcommand name). Returns -1 when parsing
 * succeeded, otherwise the exit code to return (0 after --help, 2 on a usage
 * error, already reported on stderr). */
int kb_args_parse(kb_args *a, const kb_command *cmd, int argc, char **argv);

/* The value of option `name`, or NULL when it was not given. A name the
 * command does not declare is a programming error and aborts. */
const char *kb_arg(const kb_args *a, const char *name);
bool kb_flag(const kb_args *a, const char *name);

/* Integer and float options with range checks; on a bad value they report
 * "kvbench: --name: ..." and return -1. Absent options leave *out alone. */
int kb_arg_long(const kb_args *a, const char *name, long min, long max, long *out);
int kb_arg_double(const kb_args *a, const char *name, double min, double max, double *out);

void kb_print_command_help(const kb_command *cmd);

/* The kind of cmd that word names ("model" for `bench model`), or NULL. */
const kb_command *kb_find_kind(const kb_command *cmd, const char *word);

/* cmd's kinds, a line each ("  model      its summary"), on f. */
void kb_print_kinds(FILE *f, const kb_command *cmd);

/* The task table and groups, as `kvbench tasks` (and `prompts --list`) print them. */
void kb_print_tasks(void);

/* "kvbench: <message>" on stderr. */
void kb_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The registry of subcommands, in the order `kvbench --help` lists them. */
extern const kb_command *const kb_commands[];

#endif
