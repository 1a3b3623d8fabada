/* run.json as a document: its fields, the matrix lists it keeps, joining
 * two of them (a resume, a merge of shards), "finished", and writing it.
 * What run.c (one run folder) and merge.c (shard folders into one) share.
 */
#ifndef KB_RUNJSON_H
#define KB_RUNJSON_H

#include <cjson/cJSON.h>
#include <stdbool.h>

#include "util/error.h"
#include "rundir/run.h"

/* matrix.<key> ("configs" or "tasks"), NULL when absent. */
const cJSON *kb_runjson_list(const cJSON *run_json, const char *key);
/* The item of list whose `field` is the string name, or NULL. */
const cJSON *kb_runjson_find(const cJSON *list, const char *field, const char *name);
/* A string field of an item, NULL when absent or not a string. */
const char *kb_runjson_string(const cJSON *item, const char *key);
/* Whether a and b hold the same string at key (both must hold one). */
bool kb_runjson_same(const cJSON *a, const cJSON *b, const char *key);
/* A run's compute mode; run folders from before BF16 mode ran in F32. */
const char *kb_runjson_compute(const cJSON *run_json);
/* The shard run.json records ({0, 1}: the whole run). */
kb_shard kb_runjson_shard(const cJSON *run_json);
/* Whether run.json records a finish time. */
bool kb_runjson_finished(const cJSON *run_json);

/* What must agree between two run.json files for an item of the same name:
 * a config's hash; a task's settings (not "limit": the first N samples come
 * out the same whatever N is, so a run may grow its limit); and between
 * shards of one run, the task's limit too. NULL-terminated. */
extern const char *const kb_runjson_config_keys[];
extern const char *const kb_runjson_task_keys[];
extern const char *const kb_runjson_shard_task_keys[];

/* Adds to the list `into` every item of `from` whose `field` it lacks; an
 * item with the same name must be equal in every `compare` key, else the
 * error names path, what ("config", "task"), the item and the key. */
int kb_runjson_join(cJSON *into, const cJSON *from, const char *field, const char *const *compare,
                    const char *what, const char *path, kv_error *err);

/* `into` takes from `from`'s "kv_bytes_per_token" the bytes per cached
 * token of each config it has none for: a config new to a resumed folder,
 * a run.json from before they were recorded, a config that only another
 * shard ran. They follow from the config's hash and the model, which the
 * callers check equal. -1: out of memory. */
int kb_runjson_add_bytes_per_token(cJSON *into, const cJSON *from);

/* Sets "finished": now (UTC) or null. False when out of memory. */
bool kb_runjson_set_finished(cJSON *run_json, bool finished);

/* Writes run_json (indented, with a final newline) to path atomically. */
int kb_runjson_write(const char *path, const cJSON *run_json, kv_error *err);

#endif
