/* kvbench tasks: the tasks and groups a config can name, and a config's own tasks. */
#include <stdio.h>
#include <stdlib.h>

#include "cli/cli.h"
#include "longbench/tasks.h"
#include "longbench/usertask.h"
#include "matrix/matrix.h"
#include "matrix/taskset.h"

static const kb_option options[] = {
    {NULL, NULL, NULL},
};

static void task_line(const lb_task *t)
{
    printf("%-24s %-13s %-16s %-22s %7d %-5s %-5s %s\n", t->name, lb_family_name(t->family),
           t->category, t->metric, t->max_new_tokens, t->language, t->chat ? "yes" : "no",
           t->first_line ? "yes" : "no");
}

static void task_header(void)
{
    printf("%-24s %-13s %-16s %-22s %7s %-5s %-5s %s\n", "task", "family", "category", "metric",
           "max_new", "lang", "chat", "first-line");
}

void kb_print_tasks(void)
{
    task_header();
    for (size_t i = 0; i < lb_n_tasks; i++)
        task_line(&lb_tasks[i]);
    printf("\ngroups:\n");
    for (size_t g = 0; kb_task_group_name(g); g++) {
        size_t n = 0;
        const char *const *names = kb_task_group(kb_task_group_name(g), &n);
        printf("%-12s %2zu tasks:", kb_task_group_name(g), n);
        for (size_t i = 0; i < n; i++)
            printf(" %s", names[i]);
        putchar('\n');
    }
}

/* The tasks a config file defines, with their files. */
static int print_user_tasks(const char *config)
{
    kb_matrix m;
    kv_error err;
    if (kb_matrix_load(config, &m, &err) < 0) {
        kb_error("%s", err.msg);
        return KB_EXIT_FAIL;
    }
    size_t n = 0;
    for (size_t i = 0; i < m.n_tasks; i++)
        n += m.tasks[i].user != NULL;
    printf("\n%s defines %zu task%s%s\n", config, n, n == 1 ? "" : "s", n ? ":" : "");
    if (n)
        task_header();
    for (size_t i = 0; i < m.n_tasks; i++)
        if (m.tasks[i].user) {
            task_line(m.tasks[i].user);
            printf("%-24s file %s\n", "", lb_user_task_file(m.tasks[i].user));
        }
    kb_matrix_free(&m);
    return KB_EXIT_OK;
}

static int run(const kb_args *a)
{
    kb_print_tasks();
    int rc = a->n_positional ? print_user_tasks(a->positional[0]) : KB_EXIT_OK;
    return fflush(stdout) == 0 && !ferror(stdout) ? rc : (kb_error("tasks: cannot write"), KB_EXIT_FAIL);
}

const kb_command kb_cmd_tasks = {
    .name = "tasks",
    .summary = "list the tasks and groups a config can name (and a config's own tasks)",
    .usage = "kvbench tasks [CONFIG]",
    .description =
        "Lists LongBench's tasks (v1, LongBench-E, v2) and kvbench's synthetic ones with\n"
        "their family, category, metric, max new tokens, language, chat rule and first-line\n"
        "rule, then the groups a config's \"tasks\" may name. Given a config file, also the\n"
        "tasks it defines itself (entries with file, template and metric), checked as a\n"
        "run checks them.",
    .options = options,
    .min_positional = 0,
    .max_positional = 1,
    .run = run,
};
