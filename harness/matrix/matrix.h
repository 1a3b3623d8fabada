/* The config matrix: what one `kvbench run` evaluates (configs/NAME.json).
 *
 * A matrix file names a model, the tasks (names or groups such as "en16"),
 * run settings, and the eviction configs: a list of named configs and/or one
 * or more `sweep` objects whose list-valued keys are multiplied out
 * (cartesian product, keys in file order, the last key varying fastest).
 * The full-cache baseline is always configs[0], named "full", whether or not
 * the file lists it: every delta in a report is taken against it.
 *
 * The structure is validated here; each config's eviction parameters are
 * decoded and checked once by the eviction module (evict/evict_params.h,
 * which knows the table, the defaults and the rules between keys) and kept
 * decoded in its kb_config. Every error names the file and the key path:
 * "configs/x.json: configs[3].window_size: must be > 0".
 *
 * configs/schema.json documents the same format for editors and readers.
 */
#ifndef KB_MATRIX_H
#define KB_MATRIX_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "evict/evict.h"
#include "util/error.h"

/* The largest max_length and max_new_tokens a matrix accepts, checked when
 * it is loaded (so --dry-run refuses what a run could not do): the engine
 * counts prompt tokens in an int, and the decode cache holds the prompt plus
 * up to max_new_tokens answer tokens. */
#define KB_MAX_LENGTH     2147483647L
#define KB_MAX_NEW_TOKENS (1L << 20)

typedef struct kb_task_spec {
    char *name;
    long limit;          /* first `limit` samples; 0 = all */
    long max_length;     /* prompt tokens before middle truncation; 0 = the model's default */
    long max_new_tokens; /* 0 = the task's own (dataset2maxlen) */
    const struct lb_task *user; /* a task the file defines (matrix/usertask.h); NULL: built-in */
    char *origin;               /* where a user task is defined: "tasks[2]" */
} kb_task_spec;

typedef struct kb_config {
    char *name;    /* file-system safe: [a-z0-9_.-]; "full" for the baseline */
    char hash[17]; /* stable hash of the canonical params (see kb_config_hash) */
    cJSON *params; /* the eviction parameters as the user gave them (a budget
                    * as its intermediate_size, names lower-cased); NULL for
                    * the baseline; {"algorithm": "full", ...} for a full cache
                    * at another precision (kb_config_is_full) */
    kv_evict_params evict; /* params decoded and checked, defaults applied: what
                            * the engine runs (a full cache: its precision keys
                            * on the defaults) */
    char *origin;  /* where it came from: "configs[2]", "sweep[0]{algorithm=h2o,...}" */
    long budget;   /* start + intermediate + recent (KV entries per layer); -1: full cache;
                    * KB_BUDGET_PER_PROMPT: a compression_ratio's */
    long budget_asked; /* the file's "budget" that set intermediate_size; 0: none */
} kb_config;

typedef struct kb_matrix {
    char *run_name;
    char *description;    /* may be NULL */
    char *model;          /* a folder or a hub name "ORG/NAME" */
    char *model_revision; /* hub revision, may be NULL */
    char *protocol;       /* "longbench" | "nncf" */
    char *compute;        /* the engine's compute mode: "f32" (default) | "bf16" */
    char *output;         /* folder that holds run folders; default "results" */
    bool output_given;    /* the file sets "output" (not the default) */
    char *data;           /* folder with <task>.jsonl; default "datasets/longbench" */
    long threads;         /* 0 = all cores */
    char *baseline;       /* a run folder the nightly report compares with (kvbench submit); may be NULL */
    bool empty_tasks_missing; /* kvbench run --empty-tasks missing: an empty task file is
                               * a task without samples (no score), not an error */
    kb_task_spec *tasks;
    size_t n_tasks;
    kb_config *configs; /* configs[0] is the full-cache baseline */
    size_t n_configs;
    cJSON *overrides; /* what the command line changed (run --model ...); NULL: nothing */
} kb_matrix;

/* Parses text. default_run_name is used when the file has no "name" (the
 * config file's base name). On error nothing is left to free and err holds
 * "PATH: message". */
int kb_matrix_parse(const char *text, const char *default_run_name, kb_matrix *m, kv_error *err);

/* A run or config name that is safe as one folder name: not empty, only
 * letters, digits, '.', '_', '-', not starting with '.' or '-' (so never
 * "..", never a path). */
bool kb_name_is_safe(const char *s);

/* Reads and parses a file; errors are prefixed with the file name. Relative
 * paths (model, data, an explicit output) that do not exist from the
 * working folder are taken relative to the file's own folder when they
 * exist there (output: always then), so a config runs from any working
 * folder. A model must be a folder or a hub name ORG/NAME whose ORG is no
 * local folder: a missing local model is an error, never a download. */
int kb_matrix_load(const char *path, kb_matrix *m, kv_error *err);

/* The same with the command line's overrides, an object such as {"model":
 * "DIR", "tasks": ["trec"], "limit": 5}: its keys "model", "data",
 * "compute" and "tasks" replace the file's before it is parsed, so they
 * are checked (and paths resolved) as the file's would be, and errors say
 * which flags were given. The whole object is kept in m->overrides, and
 * so in run.json; the runner applies the other keys (name, output,
 * threads, limit: kb_runner_apply_options). */
int kb_matrix_load_with(const char *path, const cJSON *overrides, kb_matrix *m, kv_error *err);

void kb_matrix_free(kb_matrix *m);

/* The expanded matrix as JSON (for run.json): settings, tasks, and every
 * config with its name, hash, budget and params. Caller frees. NULL on OOM. */
cJSON *kb_matrix_to_json(const kb_matrix *m);

/* The index of the config called name, or -1. */
int kb_matrix_find_config(const kb_matrix *m, const char *name);

/* Canonical JSON of a value: object keys sorted, no spaces, integers without
 * a fraction, other numbers as %.17g. Two configs mean the same thing exactly
 * when their canonical texts are equal. Caller frees; NULL on OOM. */
char *kb_json_canonical(const cJSON *v);

/* hash = 16 hex digits of c's canonical params with every default applied
 * (kv_evict_params_to_json of c->evict), so configs equal once defaults
 * apply share it; of "full" for the baseline (params NULL), of "algorithm":
 * "full" and the cache keys off their defaults for a full cache at another
 * precision. */
int kb_config_hash(const kb_config *c, char hash[17]);
/* The same of a config as JSON (run.json's "params"; NULL: the baseline),
 * read by kv_evict_params_from_json; -1 when that refuses it. */
int kb_config_hash_json(const cJSON *params, char hash[17]);

/* The deterministic name of a config: the algorithm, then one short token
 * per parameter in the parameter table's order and spelling
 * (kvcore/evict/evict_table.h), e.g. "snapkv_s32_r64_i128_w8_normsum". Only keys
 * present in params appear. Caller frees; NULL on OOM. */
char *kb_config_name(const cJSON *params);

/* The budget of a config with a compression_ratio: its own for each prompt. */
#define KB_BUDGET_PER_PROMPT (-2L)

/* How reports write a budget that is no number: "full" or "per prompt". */
const char *kb_budget_label(long budget);

/* Does params run no eviction: NULL (the baseline) or {"algorithm":
 * "full"} with only the cache's precision keys (a full cache at bf16, u8,
 * ...: docs/eviction.md "KV-cache precision")? */
bool kb_config_is_full(const cJSON *params);

/* kv_evict_params_warning of a config as JSON (run.json's "params"), with
 * defaults applied: NULL for the full cache and for consistent (or invalid)
 * params. */
const char *kb_config_warning(const cJSON *params);

#endif
