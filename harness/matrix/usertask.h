/* User tasks in a config file: a tasks[] entry with "file", "template" and
 * "metric" defines a task of one's own,
 *
 *   {"task": "mytask", "file": "data/mytask.jsonl",
 *    "template": "Read this.\n\n{context}\n\nQuestion: {input}\nAnswer:",
 *    "metric": "qa_f1", "max_new_tokens": 64, "language": "en"}
 *
 * checked as a built-in task is (a name that is no built-in task or group
 * and can name a file, a template lb_prompt_format can fill, one of
 * LongBench's metrics, a file that exists) and then defined in the task
 * registry (datasets/longbench/usertask.h), so that it runs, scores and
 * reports like any other. run.json records the definition, so a run
 * folder can be rescored and reported without its config.
 */
#ifndef KB_USERTASK_H
#define KB_USERTASK_H

#include <cjson/cJSON.h>
#include <stdbool.h>

#include "longbench/tasks.h"
#include "util/error.h"

/* What a user task has when its entry does not say. */
#define KB_USER_TASK_MAX_NEW_TOKENS 64

/* Whether key is one of a user task's definition keys: file, template,
 * metric, language, chat, first_line (an entry with any of them defines a
 * task). */
bool kb_user_task_key(const char *key);

/* Checks the definition keys of the tasks[] entry o, found at `path`
 * ("tasks[2]"), for the task called name, and defines it. Errors name the
 * key: "tasks[2].metric: unknown metric \"f1\" (LongBench's: qa_f1, ...)".
 * The file is only recorded: kb_user_task_locate finds it. */
int kb_user_task_parse(const cJSON *o, const char *name, const char *path, const lb_task **out,
                       kv_error *err);

/* Redefines *task with its file at `file` (the path the config's folder
 * resolved it to). */
int kb_user_task_relocate(const lb_task **task, const char *file, kv_error *err);

/* Adds the definition of user task t to its run.json task entry. */
bool kb_user_task_to_json(const lb_task *t, cJSON *entry);

/* Defines every user task a run.json task list records (those with
 * "template"), so that a run folder is scored and reported without its
 * config. path names run.json in errors. */
int kb_user_tasks_from_json(const cJSON *tasks, const char *path, kv_error *err);

#endif
