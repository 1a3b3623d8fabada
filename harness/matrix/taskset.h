/* Task names, groups and categories as the runner and reports need them,
 * answered from the datasets registry (datasets/longbench/tasks.h), which owns the
 * LongBench task table.
 */
#ifndef KB_TASKSET_H
#define KB_TASKSET_H

#include <stdbool.h>
#include <stddef.h>

/* True when name is a task kvbench can run (e.g. "qasper", "qasper_e"). */
bool kb_task_known(const char *name);

/* The tasks of a group ("en16", "zh", "longbench", "longbench_e"), in the
 * LongBench table order, or NULL when name is not a group. *n receives the
 * count. The returned array is static and must not be freed. */
const char *const *kb_task_group(const char *name, size_t *n);
/* The name of group i (0, 1, ...) that kb_task_group knows; NULL past the last. */
const char *kb_task_group_name(size_t i);

/* The category a task is reported under ("Single-Doc QA", ...); "Other" for a
 * task the table does not know. A LongBench-E task ("qasper_e") has the
 * category of its base task. */
const char *kb_task_category(const char *name);

/* The categories in the order LongBench's tables print them; NULL-terminated. */
extern const char *const kb_task_categories[];

/* True when the task belongs to the 16 English tasks whose mean papers report
 * as the "EN16" average. */
bool kb_task_in_en16(const char *name);

/* Position of a task in the LongBench table (for stable column order);
 * unknown tasks sort after known ones. */
int kb_task_order(const char *name);

#endif
