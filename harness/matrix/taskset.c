#include "matrix/taskset.h"

#include <string.h>

#include "longbench/tasks.h"

/* Task names, groups and categories for the runner and reports, answered
 * from the datasets registry (datasets/longbench/tasks.c), the one table of tasks. */

/* The registry's category names as LongBench's tables print them, in their
 * column order; kvbench's own retrieval tasks come last. */
static const struct {
    const char *registry;
    const char *display;
} categories[] = {
    {"single-doc QA", "Single-Doc QA"}, {"multi-doc QA", "Multi-Doc QA"},
    {"summarization", "Summarization"}, {"few-shot", "Few-shot"},
    {"synthetic", "Synthetic"},         {"code", "Code"},
    {"retrieval", "Retrieval"},
};

const char *const kb_task_categories[] = {
    "Single-Doc QA", "Multi-Doc QA", "Summarization", "Few-shot", "Synthetic", "Code", "Retrieval",
    NULL};

bool kb_task_known(const char *name)
{
    return lb_task_find(name) != NULL;
}

typedef struct group {
    const char *name;
    bool (*member)(const lb_task *t);
    const char *names[128];
    size_t n;
    bool built;
} group;

static bool in_en16(const lb_task *t)
{
    return lb_task_is_english16(t);
}
static bool in_zh(const lb_task *t)
{
    return t->family == LB_FAMILY_V1 && strcmp(t->language, "zh") == 0;
}
static bool in_longbench(const lb_task *t)
{
    return t->family == LB_FAMILY_V1;
}
static bool in_longbench_e(const lb_task *t)
{
    return t->family == LB_FAMILY_E;
}

static group groups[] = {
    {.name = "en16", .member = in_en16},
    {.name = "zh", .member = in_zh},
    {.name = "longbench", .member = in_longbench},
    {.name = "longbench_e", .member = in_longbench_e},
};

const char *kb_task_group_name(size_t i)
{
    return i < sizeof groups / sizeof groups[0] ? groups[i].name : NULL;
}

const char *const *kb_task_group(const char *name, size_t *n)
{
    for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++) {
        group *g = &groups[i];
        if (strcmp(g->name, name) != 0)
            continue;
        if (!g->built) {
            for (size_t k = 0; k < lb_n_tasks && g->n < sizeof g->names / sizeof g->names[0]; k++)
                if (g->member(&lb_tasks[k]))
                    g->names[g->n++] = lb_tasks[k].name;
            g->built = true;
        }
        *n = g->n;
        return g->names;
    }
    return NULL;
}

const char *kb_task_category(const char *name)
{
    const lb_task *t = lb_task_find(name);
    if (t)
        for (size_t i = 0; i < sizeof categories / sizeof categories[0]; i++)
            if (strcmp(categories[i].registry, t->category) == 0)
                return categories[i].display;
    return "Other";
}

bool kb_task_in_en16(const char *name)
{
    const lb_task *t = lb_task_find(name);
    return t && lb_task_is_english16(t);
}

int kb_task_order(const char *name)
{
    const lb_task *t = lb_task_find(name);
    if (!t || t->family == LB_FAMILY_USER) /* no row of the table */
        return (int)lb_n_tasks * 2;
    /* a LongBench-E task sorts right after its base task */
    const lb_task *base = lb_task_find(t->base);
    if (!base)
        base = t;
    return (int)(base - lb_tasks) * 2 + (t != base);
}
