#include "cli/cli.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void kb_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("kvbench: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* The option called name (its first len bytes), or by an older spelling. */
static int option_index(const kb_command *cmd, const char *name, size_t len)
{
    for (int i = 0; cmd->aliases && cmd->aliases[i].old; i++)
        if (strlen(cmd->aliases[i].old) == len && strncmp(cmd->aliases[i].old, name, len) == 0) {
            name = cmd->aliases[i].name;
            len = strlen(name);
            break;
        }
    for (int i = 0; cmd->options && cmd->options[i].name; i++)
        if (strlen(cmd->options[i].name) == len && strncmp(cmd->options[i].name, name, len) == 0)
            return i;
    return -1;
}

/* The word that names kind on the command line: "model" of "bench model". */
static const char *kind_word(const kb_command *cmd, const kb_command *kind)
{
    return kind->name + strlen(cmd->name) + 1;
}

const kb_command *kb_find_kind(const kb_command *cmd, const char *word)
{
    for (int i = 0; cmd->kinds && cmd->kinds[i]; i++)
        if (strcmp(kind_word(cmd, cmd->kinds[i]), word) == 0)
            return cmd->kinds[i];
    return NULL;
}

void kb_print_kinds(FILE *f, const kb_command *cmd)
{
    for (int i = 0; cmd->kinds && cmd->kinds[i]; i++)
        fprintf(f, "  %-10s %s%s\n", kind_word(cmd, cmd->kinds[i]), cmd->kinds[i]->summary,
                cmd->kinds[i]->run ? "" : "  [not implemented yet]");
}

void kb_print_command_help(const kb_command *cmd)
{
    printf("usage: %s\n\n%s\n", cmd->usage, cmd->summary);
    if (cmd->description)
        printf("\n%s\n", cmd->description);
    if (cmd->kinds) {
        printf("\nkinds:\n");
        kb_print_kinds(stdout, cmd);
        printf("\nSee 'kvbench %s KIND --help' for the options of a kind.\n", cmd->name);
    }
    printf("\noptions:\n");
    int width = 10;
    for (int i = 0; cmd->options && cmd->options[i].name; i++) {
        const kb_option *o = &cmd->options[i];
        int w = (int)strlen(o->name) + (o->metavar ? (int)strlen(o->metavar) + 1 : 0);
        if (w > width)
            width = w;
    }
    printf("  --%-*s  %s\n", width, "help", "show this help and exit");
    for (int i = 0; cmd->options && cmd->options[i].name; i++) {
        const kb_option *o = &cmd->options[i];
        char left[256];
        snprintf(left, sizeof left, "%s%s%s", o->name, o->metavar ? " " : "",
                 o->metavar ? o->metavar : "");
        printf("  --%-*s  %s", width, left, o->help);
        for (int k = 0; cmd->aliases && cmd->aliases[k].old; k++)
            if (strcmp(cmd->aliases[k].name, o->name) == 0)
                printf(" (also --%s)", cmd->aliases[k].old);
        putchar('\n');
    }
}

int kb_args_parse(kb_args *a, const kb_command *cmd, int argc, char **argv)
{
    memset(a, 0, sizeof *a);
    a->cmd = cmd;
    bool options_done = false;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (options_done || s[0] != '-' || strcmp(s, "-") == 0) {
            if (a->n_positional == KB_MAX_POSITIONAL) {
                kb_error("%s: too many arguments", cmd->name);
                return KB_EXIT_USAGE;
            }
            a->positional[a->n_positional++] = s;
            continue;
        }
        if (strcmp(s, "--") == 0) {
            options_done = true;
            a->n_before_dashdash = a->n_positional;
            continue;
        }
        if (strcmp(s, "--help") == 0 || strcmp(s, "-h") == 0) {
            kb_print_command_help(cmd);
            return KB_EXIT_OK;
        }
        if (s[1] != '-') {
            kb_error("%s: unknown option '%s' (options are long: see 'kvbench %s --help')",
                     cmd->name, s, cmd->name);
            return KB_EXIT_USAGE;
        }
        const char *name = s + 2;
        const char *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        int k = option_index(cmd, name, len);
        if (k < 0) {
            kb_error("%s: unknown option '--%.*s' (see 'kvbench %s --help')", cmd->name,
                     (int)len, name, cmd->name);
            return KB_EXIT_USAGE;
        }
        const kb_option *o = &cmd->options[k];
        if (!o->metavar) {
            if (eq) {
                kb_error("%s: option '--%s' takes no value", cmd->name, o->name);
                return KB_EXIT_USAGE;
            }
            a->values[k] = "";
        } else if (eq) {
            a->values[k] = eq + 1;
        } else if (i + 1 < argc) {
            a->values[k] = argv[++i];
        } else {
            kb_error("%s: option '--%s' needs a value (%s)", cmd->name, o->name, o->metavar);
            return KB_EXIT_USAGE;
        }
    }
    if (!options_done)
        a->n_before_dashdash = a->n_positional;
    if (a->n_positional < cmd->min_positional) {
        kb_error("%s: missing argument; usage: %s", cmd->name, cmd->usage);
        return KB_EXIT_USAGE;
    }
    if (a->n_positional > cmd->max_positional) {
        kb_error("%s: unexpected argument '%s'; usage: %s", cmd->name,
                 a->positional[cmd->max_positional], cmd->usage);
        return KB_EXIT_USAGE;
    }
    return -1;
}

static int lookup(const kb_args *a, const char *name)
{
    int k = option_index(a->cmd, name, strlen(name));
    if (k < 0) {
        fprintf(stderr, "kvbench: internal error: %s has no option --%s\n", a->cmd->name, name);
        abort();
    }
    return k;
}

const char *kb_arg(const kb_args *a, const char *name)
{
    return a->values[lookup(a, name)];
}

bool kb_flag(const kb_args *a, const char *name)
{
    return a->values[lookup(a, name)] != NULL;
}

int kb_arg_long(const kb_args *a, const char *name, long min, long max, long *out)
{
    const char *s = kb_arg(a, name);
    if (!s)
        return 0;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end) {
        kb_error("--%s: '%s' is not an integer", name, s);
        return -1;
    }
    if (v < min || v > max) {
        kb_error("--%s: %ld is out of range [%ld, %ld]", name, v, min, max);
        return -1;
    }
    *out = v;
    return 0;
}

int kb_arg_double(const kb_args *a, const char *name, double min, double max, double *out)
{
    const char *s = kb_arg(a, name);
    if (!s)
        return 0;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v)) {
        kb_error("--%s: '%s' is not a number", name, s);
        return -1;
    }
    if (v < min || v > max) {
        kb_error("--%s: %g is out of range [%g, %g]", name, v, min, max);
        return -1;
    }
    *out = v;
    return 0;
}
