#include "longbench/usertask.h"

#include <stdlib.h>
#include <string.h>

#include "util/vec.h"

/* A definition: the task as every module reads it, and the strings it owns. */
typedef struct entry {
    lb_task task;
    char *name, *file, *prompt, *metric, *language;
} entry;

/* Newest last; entries are never freed (see usertask.h), and they stay
 * reachable from here, so a leak checker does not count them. */
static entry **entries;
static size_t n_entries, cap_entries;

static void entry_free(entry *e)
{
    free(e->name);
    free(e->file);
    free(e->prompt);
    free(e->metric);
    free(e->language);
    free(e);
}

const lb_task *lb_user_task_define(const lb_user_task *def)
{
    entry *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    e->name = strdup(def->name);
    e->file = strdup(def->file);
    e->prompt = strdup(def->prompt);
    e->metric = strdup(def->metric);
    e->language = strdup(def->language);
    if (!e->name || !e->file || !e->prompt || !e->metric || !e->language ||
        KV_VEC_RESERVE(entries, cap_entries, n_entries + 1, 8) < 0) {
        entry_free(e);
        return NULL;
    }
    e->task = (lb_task){
        .name = e->name,
        .base = e->name,
        .family = LB_FAMILY_USER,
        .category = "user",
        .metric = e->metric,
        .max_new_tokens = def->max_new_tokens,
        .language = e->language,
        .chat = def->chat,
        .first_line = def->first_line,
        .newline_stop = false,
        .n_samples = 0, /* no official count */
        .template_kind = LB_TEMPLATE_BRACES,
        .prompt = e->prompt,
    };
    entries[n_entries++] = e;
    return &e->task;
}

const lb_task *lb_user_task_find(const char *name)
{
    for (size_t i = n_entries; i-- > 0;)
        if (strcmp(entries[i]->name, name) == 0)
            return &entries[i]->task;
    return NULL;
}

const char *lb_user_task_file(const lb_task *task)
{
    for (size_t i = 0; i < n_entries; i++)
        if (&entries[i]->task == task)
            return entries[i]->file;
    return NULL;
}
