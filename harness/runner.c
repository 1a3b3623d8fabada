#include "runner.h"

#include <stdlib.h>
#include <string.h>

int kb_runner_apply_options(kb_matrix *m, const kb_runner_options *o)
{
    if (o->output) {
        char *s = strdup(o->output);
        if (!s)
            return -1;
        free(m->output);
        m->output = s;
    }
    if (o->name) {
        char *s = strdup(o->name);
        if (!s)
            return -1;
        free(m->run_name);
        m->run_name = s;
    }
    if (o->threads > 0)
        m->threads = o->threads;
    for (size_t i = 0; o->limit > 0 && i < m->n_tasks; i++)
        m->tasks[i].limit = o->limit;
    return 0;
}

static void print_setting(FILE *f, const char *what, long v, const char *zero)
{
    if (v > 0)
        fprintf(f, " %s %ld", what, v);
    else
        fprintf(f, " %s %s", what, zero);
}

void kb_runner_plan_print(FILE *f, const kb_matrix *m, const kb_runner_options *o)
{
    char *dir = kb_run_dir(m->output, m->run_name, &o->shard);
    fprintf(f, "run %s -> %s\nmodel %s%s%s\nprotocol %s, data %s, threads ", m->run_name,
            dir ? dir : "?", m->model, m->model_revision ? " @ " : "",
            m->model_revision ? m->model_revision : "", m->protocol, m->data);
    if (m->threads > 0)
        fprintf(f, "%ld\n", m->threads);
    else
        fputs("all\n", f);
    free(dir);
    if (o->shard.count > 1)
        fprintf(f, "shard %ld/%ld: samples whose index %% %ld == %ld\n", o->shard.index,
                o->shard.count, o->shard.count, o->shard.index);
    fprintf(f, "\n%zu tasks:\n", m->n_tasks);
    for (size_t i = 0; i < m->n_tasks; i++) {
        const kb_task_spec *t = &m->tasks[i];
        fprintf(f, "  %-22s", t->name);
        print_setting(f, "limit", t->limit, "all");
        print_setting(f, "max_length", t->max_length, "model default");
        print_setting(f, "max_new_tokens", t->max_new_tokens, "task default");
        fputc('\n', f);
    }
    fprintf(f, "\n%zu configs (one prefill per sample, shared by all):\n", m->n_configs);
    for (size_t i = 0; i < m->n_configs; i++) {
        const kb_config *c = &m->configs[i];
        char *canon = c->params ? kb_json_canonical(c->params) : NULL;
        fprintf(f, "  %-40s %s  ", c->name, c->hash);
        if (c->budget >= 0)
            fprintf(f, "budget %-6ld", c->budget);
        else
            fputs("full cache  ", f);
        fprintf(f, " %s\n", canon ? canon : "");
        free(canon);
    }
}
