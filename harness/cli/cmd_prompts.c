/* kvbench prompts: the exact prompts a task produces, one JSON line per
 * sample — the first thing to look at when a score looks wrong. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "util/file.h"
#include "util/jsonstr.h"
#include "longbench/prompt.h"
#include "longbench/sample.h"
#include "longbench/tasks.h"
#include "tokenizer/tokenizer.h"

static const kb_option options[] = {
    {"task", "T", "LongBench task name (see --list)"},
    {"file", "F", "the task's .jsonl file"},
    {"data", "D",
     "the data folder, holding T.jsonl or data/T.jsonl (`kvbench fetch longbench`); v2: "
     "data.json"},
    {"dir", "D", "the same as --data (its old spelling)"},
    {"model", "DIR", "model folder: its tokenizer truncates and applies the chat template"},
    {"protocol", "P", "longbench (pred.py rules, default) or nncf (chat template everywhere)"},
    {"max-length", "N", "prompt token budget (default: the model's context - 500)"},
    {"limit", "K", "only the first K samples"},
    {"ids", "ID,...", "only these _id values (a NUL in an id as \\u0000)"},
    {"skip-bad-lines", NULL, "skip and count malformed lines instead of stopping"},
    {"list", NULL, "list the known tasks and exit (as `kvbench tasks`)"},
    {NULL, NULL, NULL},
};

/* max_position_embeddings - 500 from DIR/config.json (docs/longbench.md:
 * max_length = n_ctx - 500), or 0 when it cannot be read. */
static long default_max_length(const char *model_dir)
{
    char *path = kv_path_join(model_dir, "config.json");
    char *text = NULL;
    size_t len;
    kv_error err;
    long n = 0;
    if (path && kv_file_read(path, &text, &len, &err) == 0) {
        cJSON *cfg = cJSON_ParseWithLength(text, len);
        cJSON *m = cJSON_GetObjectItemCaseSensitive(cfg, "max_position_embeddings");
        if (cJSON_IsNumber(m) && m->valuedouble > 1000)
            n = (long)m->valuedouble - 500;
        cJSON_Delete(cfg);
    }
    free(text);
    free(path);
    return n;
}

/* "a,b,c" -> ids pointing into a copy of the string. */
static kv_str *split_ids(const char *list, size_t *n, char **copy)
{
    *copy = strdup(list);
    size_t cap = 1;
    for (const char *p = list; *p; p++)
        cap += *p == ',';
    kv_str *ids = calloc(cap, sizeof *ids);
    *n = 0;
    if (!*copy || !ids)
        return ids;
    for (char *tok = strtok(*copy, ","); tok; tok = strtok(NULL, ","))
        ids[(*n)++] = kv_unescape_nul(tok); /* a shell argument cannot hold a NUL */
    return ids;
}

/* n_tokens and n_context < 0: unknown (no tokenizer). */
static int print_line(const lb_task *task, const lb_sample *s, const char *text, size_t len,
                      long n_tokens, long n_context, bool truncated, bool chat)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return -1;
    cJSON_AddItemToObject(o, "id", kv_json_text(s->id.p, s->id.n));
    cJSON_AddStringToObject(o, "task", task->name);
    if (n_tokens >= 0)
        cJSON_AddNumberToObject(o, "n_tokens", (double)n_tokens);
    else
        cJSON_AddNullToObject(o, "n_tokens");
    if (n_context >= 0)
        cJSON_AddNumberToObject(o, "context_tokens", (double)n_context);
    else
        cJSON_AddNullToObject(o, "context_tokens");
    cJSON_AddBoolToObject(o, "truncated", truncated);
    cJSON_AddBoolToObject(o, "chat", chat);
    cJSON_AddItemToObject(o, "prompt", kv_json_text(text, len));
    char *line = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!line)
        return -1;
    int rc = puts(line) == EOF ? -1 : 0; /* a full disk: stop now, main says why */
    free(line);
    return rc;
}

typedef struct counts {
    long samples, truncated;
} counts;

static int one_sample(const lb_task *task, const lb_sample *s, const kv_tokenizer *tok,
                      const lb_prompt_options *po, counts *c)
{
    kv_error err;
    if (!tok) { /* no model: the substituted template only */
        char *text;
        size_t len;
        if (lb_prompt_format(task, s, &text, &len, &err) < 0) {
            kb_error("%s", err.msg);
            return -1;
        }
        int rc = print_line(task, s, text, len, -1, -1, false, false);
        free(text);
        c->samples++;
        return rc;
    }
    lb_prompt p;
    if (lb_prompt_build(task, s, tok, po, &p, &err) < 0) {
        kb_error("%s", err.msg);
        return -1;
    }
    int rc = print_line(task, s, p.text, p.len, (long)p.n_ids, (long)p.n_context, p.truncated,
                        p.chat);
    c->samples++;
    c->truncated += p.truncated;
    lb_prompt_free(&p);
    return rc;
}

/* --data D, or its old spelling --dir: where the task files are read
 * from, as a run's "data" (fetch's --output is where they are written). */
static const char *data_folder(const kb_args *a)
{
    return kb_arg(a, "data") ? kb_arg(a, "data") : kb_arg(a, "dir");
}

static int parse_options(const kb_args *a, const lb_task **task, lb_prompt_options *po,
                         lb_loader_options *lo)
{
    const char *name = kb_arg(a, "task");
    if (!name) {
        kb_error("prompts: --task is required (kvbench prompts --list shows them)");
        return -1;
    }
    *task = lb_task_find(name);
    if (!*task) {
        kb_error("prompts: unknown task \"%s\" (kvbench prompts --list shows them)", name);
        return -1;
    }
    if (!kb_arg(a, "file") == !data_folder(a)) {
        kb_error("prompts: give one of --file F or --data D");
        return -1;
    }
    kv_error err;
    if (kb_arg(a, "protocol") && lb_protocol_parse(kb_arg(a, "protocol"), &po->protocol, &err)) {
        kb_error("--protocol: %s", err.msg);
        return -1;
    }
    if (kb_arg_long(a, "max-length", 0, 100000000, &po->max_length) < 0 ||
        kb_arg_long(a, "limit", 1, 1000000000, &lo->limit) < 0)
        return -1;
    lo->on_error = kb_flag(a, "skip-bad-lines") ? LB_ON_ERROR_SKIP : LB_ON_ERROR_STOP;
    lo->schema = (*task)->family == LB_FAMILY_V2 ? LB_SCHEMA_V2 : LB_SCHEMA_V1;
    return 0;
}

static int run(const kb_args *a)
{
    if (kb_flag(a, "list")) {
        kb_print_tasks(); /* as `kvbench tasks` */
        return KB_EXIT_OK;
    }
    const lb_task *task;
    lb_prompt_options po = {.protocol = LB_PROTOCOL_LONGBENCH};
    lb_loader_options lo = {.on_error = LB_ON_ERROR_STOP};
    if (parse_options(a, &task, &po, &lo) < 0)
        return KB_EXIT_USAGE;
    kv_error err;
    kv_tokenizer *tok = NULL;
    if (kb_arg(a, "model")) {
        tok = kv_tokenizer_load(kb_arg(a, "model"), &err);
        if (!tok) {
            kb_error("%s", err.msg);
            return KB_EXIT_FAIL;
        }
        if (!kb_arg(a, "max-length"))
            po.max_length = default_max_length(kb_arg(a, "model"));
    }
    char *ids_copy = NULL;
    kv_str *ids = kb_arg(a, "ids") ? split_ids(kb_arg(a, "ids"), &lo.n_ids, &ids_copy) : NULL;
    lo.ids = ids;
    char *path =
        kb_arg(a, "file") ? strdup(kb_arg(a, "file")) : lb_sample_path(data_folder(a), task);
    lb_loader *l = path ? lb_loader_open(path, &lo, &err) : NULL;
    int rc = l ? 0 : -1;
    if (!l)
        kb_error("%s", path ? err.msg : "out of memory");
    counts c = {0};
    lb_sample s;
    int got = 0;
    while (rc == 0 && l && (got = lb_loader_next(l, &s, &err)) == 1) {
        rc = one_sample(task, &s, tok, &po, &c);
        lb_sample_free(&s);
    }
    if (l && got < 0) {
        kb_error("%s", err.msg);
        rc = -1;
    }
    if (l) {
        fprintf(stderr, "%ld prompts of %s (%ld truncated to %ld tokens, protocol %s)\n", c.samples,
                task->name, c.truncated, po.max_length, lb_protocol_name(po.protocol));
        if (lb_loader_skipped(l))
            fprintf(stderr, "skipped %ld malformed line%s; the last: %s\n", lb_loader_skipped(l),
                    lb_loader_skipped(l) == 1 ? "" : "s", lb_loader_last_skip(l));
    }
    lb_loader_close(l);
    kv_tokenizer_free(tok);
    free(path);
    free(ids);
    free(ids_copy);
    return rc == 0 ? KB_EXIT_OK : KB_EXIT_FAIL;
}

const kb_command kb_cmd_prompts = {
    .name = "prompts",
    .summary = "print the exact prompts a LongBench task produces (one JSON line each)",
    .usage = "kvbench prompts --task T (--file F | --data D) [--model DIR] [options]",
    .description =
        "Prints {\"id\", \"task\", \"n_tokens\", \"context_tokens\", \"truncated\", \"chat\", "
        "\"prompt\"}\n"
        "per sample: the template filled in, middle-truncated to --max-length tokens as\n"
        "LongBench's pred.py does, and wrapped in the model's chat template where the\n"
        "protocol says so. context_tokens: the first tokens, before the question part\n"
        "(kvpress's cut), which query-agnostic eviction compresses. Without --model only\n"
        "the template is filled in (n_tokens and context_tokens are null).",
    .options = options,
    .run = run,
};
