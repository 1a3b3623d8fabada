/* Tasks that a config file defines ("user tasks"): a name, a JSON Lines file
 * in LongBench's format, a template with {context} and {input}, one of
 * LongBench's metrics. Once defined, a user task is found by lb_task_find
 * like a built-in one, so prompts, loaders, scorers and reports treat it the
 * same; only its file is its own (lb_sample_path gives it).
 *
 * The registry lives for the process: a definition is never freed, so a
 * task pointer stays valid; defining a name again replaces what
 * lb_task_find answers (a test, or `kvbench report` over two runs).
 */
#ifndef LB_USERTASK_H
#define LB_USERTASK_H

#include <stdbool.h>

#include "longbench/tasks.h"

typedef struct lb_user_task {
    const char *name;
    const char *file;     /* the data, a LongBench-format .jsonl */
    const char *prompt;   /* the template: {context}, {input}, {{ and }} */
    const char *metric;   /* metrics.py's function name: "qa_f1_score" */
    const char *language; /* "en", "zh" or "code" */
    int max_new_tokens;
    bool chat;       /* wrapped in the chat template (protocol longbench) */
    bool first_line; /* only the prediction's first line is scored */
} lb_user_task;

/* Defines (or redefines) a user task; the strings are copied. The task as
 * the registry holds it, or NULL when out of memory. The caller has checked
 * the definition (harness/matrix/usertask.h) and that name is no built-in
 * task. */
const lb_task *lb_user_task_define(const lb_user_task *def);

/* The user task called name (its latest definition), or NULL. */
const lb_task *lb_user_task_find(const char *name);

/* The data file of a user task; NULL for any other task. */
const char *lb_user_task_file(const lb_task *task);

#endif
