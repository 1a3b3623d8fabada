/* The matrix parser's parts and what they share (internal to harness/matrix):
 *   matrix.c    the file's settings, the order of the parts, run.json
 *   load.c      a file read, parsed, and its paths found
 *   tasklist.c  "tasks": names, groups and user tasks
 *   configs.c   "configs": each eviction config decoded once, named, hashed
 *   sweep.c     "sweep": lists multiplied out into configs
 *   config_id.c canonical JSON, config hashes and names
 *   nearest.c   "did you mean" hints for unknown keys
 * Every error is "PATH: message", PATH the key path in the file.
 */
#ifndef KB_MATRIX_PARSE_H
#define KB_MATRIX_PARSE_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "matrix/matrix.h"

typedef struct kb_parser {
    kb_matrix *m;
    kv_error *err;
    /* defaults for tasks, from the top-level keys */
    long limit, max_length, max_new_tokens;
    size_t cap_tasks, cap_configs;
} kb_parser;

/* kb_matrix_parse with the command line's overrides (kb_matrix_load_with). */
int kb_parse_text(const char *text, const char *default_run_name, const cJSON *overrides,
                  kb_matrix *m, kv_error *err);
/* The keys of the file that overrides replace before it is parsed. */
extern const char *const kb_file_overrides[];

/* "PATH: message" into err; returns -1. */
int kb_failp(kv_error *err, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* An integer-valued JSON number in [min, max] ("must be > 0", "must be <= N"). */
int kb_get_long(const cJSON *v, const char *path, long min, long max, long *out, kv_error *err);

/* "tasks": every entry added to p->m->tasks. */
int kb_parse_tasks(kb_parser *p, const cJSON *v);

/* Frees what c holds. */
void kb_config_free(kb_config *c);

/* The implicit full-cache baseline, configs[0]; its empty origin marks it
 * implicit (an explicit "full" may then take its place once). */
int kb_add_baseline(kb_parser *p);
/* "configs": each entry decoded and added. */
int kb_parse_configs(kb_parser *p, const cJSON *v);
/* One config object (its "name" already taken out: name, NULL to derive it)
 * decoded and added; takes ownership of params. */
int kb_add_config_object(kb_parser *p, cJSON *params, const char *name, const char *path);
/* "sweep": an object of lists, or a list of them, multiplied out. */
int kb_parse_sweep(kb_parser *p, const cJSON *v);

/* A scalar JSON value as a config name or path shows it: "h2o", "128",
 * "0.5", "true"; "x" for anything else. */
void kb_value_text(const cJSON *v, char *out, size_t n);

/* The closest of the candidates a key is compared with, for a hint. */
typedef struct kb_nearest {
    const char *key, *best;
    size_t distance;
} kb_nearest;

/* Starts a search for the candidate closest to key. */
kb_nearest kb_nearest_start(const char *key);
void kb_nearest_consider(kb_nearest *nr, const char *candidate);
/* " (did you mean \"KEY\"?)" for the closest candidate when it is close
 * (a third of the key's letters or fewer differ), else "". Returns buf. */
const char *kb_nearest_hint(const kb_nearest *nr, char *buf, size_t n);

#endif
