/* The LongBench task registry: one const row per task.
 *
 * Every number and string here comes from LongBench's own files (commit
 * 2e00731f8d0b, docs/longbench.md): the prompt template from
 * LongBench/config/dataset2prompt.json (verbatim, typos included), max new
 * tokens from dataset2maxlen.json, the metric from eval.py's dataset2metric,
 * the chat rule from pred.py and the first-line rule from eval.py. The table
 * in tasks.c is laid out so that a reader can check it against those files
 * line by line.
 */
#ifndef LB_TASKS_H
#define LB_TASKS_H

#include <stdbool.h>
#include <stddef.h>

typedef enum lb_family {
    LB_FAMILY_V1,        /* LongBench (21 tasks), files data/<task>.jsonl */
    LB_FAMILY_E,         /* LongBench-E (13 tasks), files data/<task>_e.jsonl */
    LB_FAMILY_V2,        /* LongBench v2: 4-way multiple choice, data.json */
    LB_FAMILY_SYNTHETIC, /* kvbench's own generated retrieval tasks (datasets/synthetic/) */
    LB_FAMILY_USER,      /* defined in a config file (longbench/usertask.h) */
} lb_family;

/* Which fields a template substitutes: LongBench v1/E use {context} and
 * {input}; v2 uses $DOC$ $Q$ $C_A$..$C_D$ (and $COT$). */
typedef enum lb_template_kind {
    LB_TEMPLATE_BRACES,
    LB_TEMPLATE_DOLLARS,
} lb_template_kind;

typedef struct lb_task {
    const char *name; /* file/config name: "qasper", "qasper_e", "v2_0shot" */
    const char *base; /* the v1 task whose prompt and metric it uses ("qasper" for
                         "qasper_e"); equal to name otherwise */
    lb_family family;
    const char *category; /* "single-doc QA", "few-shot", ... */
    const char *metric;   /* eval.py's metric function name: "qa_f1_score" */
    int max_new_tokens;   /* dataset2maxlen */
    const char *language; /* "en", "zh" or "code" (the data's `language` for code is
                             the programming language) */
    bool chat;            /* pred.py wraps the prompt in the chat template */
    bool first_line;      /* eval.py scores only the first line of the prediction */
    bool newline_stop;    /* pred.py also stops at the single "\n" token (samsum) */
    int n_samples;        /* official number of samples (task.md) */
    lb_template_kind template_kind;
    const char *prompt; /* the template, verbatim */
    /* where the template's question part starts: the first occurrence of this
     * text (kvpress's cut; tasks.c). Everything from there on, the chat
     * template's end of turn included, is the prompt's question part; NULL:
     * right after the context (lb_task_question_at) */
    const char *question_from;
} lb_task;

/* All tasks, in LongBench's order: v1, then E, then v2, then synthetic. */
extern const lb_task lb_tasks[];
extern const size_t lb_n_tasks;

/* The task called name (a built-in one, else a user task: usertask.h), or NULL. */
const lb_task *lb_task_find(const char *name);

/* The byte offset in task->prompt where its question part starts: at
 * question_from, or, for a template without one, right after its context
 * placeholder. */
size_t lb_task_question_at(const lb_task *task);

/* The tasks of one family, in table order: *n receives their number. */
const lb_task *lb_tasks_of(lb_family family, size_t *n);

/* "longbench", "longbench-e", "longbench-v2", "synthetic", "user". */
const char *lb_family_name(lb_family family);

/* The 16 tasks that papers average as "English" (the non-zh v1 tasks). */
bool lb_task_is_english16(const lb_task *task);

#endif
