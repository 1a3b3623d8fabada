/* Eviction parameters as a user writes them -- a config's JSON keys, a
 * command line's flags -- decoded and checked once against the parameter
 * table (evict_table.h): each key's type, range, choices and algorithm,
 * then the rules between keys (kv_evict_params_validate). A problem names
 * the key at fault apart from the message, so the caller says where it is
 * ("configs[3].window_size: must be > 0", "--window-size: must be > 0")
 * without reading it back out of the text.
 *
 * kv_evict_params_set and kv_evict_params_from_json (evict.h) stay the
 * engine's lenient setters: they take any value the type holds and leave
 * the ranges to kv_evict_params_validate's NNCF messages.
 */
#ifndef KV_EVICT_PARAMS_H
#define KV_EVICT_PARAMS_H

#include <stdint.h>

#include "evict/evict.h"

/* A set of the table's keys: bit i is row i (kv_evict_param(i)). */
typedef uint64_t kv_evict_keys;
#define KV_EVICT_KEY(i) ((kv_evict_keys)1 << (i))

typedef struct kv_evict_problem {
    const char *key; /* the key at fault: the table's own string when it is one of
                      * its keys, else the input's (valid while the input is);
                      * NULL: a rule between keys */
    kv_error err;    /* the problem, without the key: "must be >= 0" */
} kv_evict_problem;

/* The row of a key spelt exactly as a config file spells it ("start_size",
 * not the flag's "start-size"), or NULL. */
const kv_evict_param_def *kv_evict_param_exact(const char *key);

/* Sets one key (config spelling or flag: "start_size", "--start-size") from
 * text as typed on a command line, after checking it against the table:
 * "expected an integer, got 'lots'", "must be >= 0", "must be one of ...". */
int kv_evict_param_set_checked(kv_evict_params *p, const char *key, const char *value,
                               kv_evict_problem *pr);

/* Sets every key of a JSON object onto *p (which holds the defaults, or
 * what came before), each checked against the table ("must be an
 * integer", "must be one of ...", "unknown eviction parameter" for a key
 * the table lacks, spelt exactly as in a config file). *given receives the
 * keys that obj sets (a null window_size sets none). */
int kv_evict_params_decode(kv_evict_params *p, const struct cJSON *obj, kv_evict_keys *given,
                           kv_evict_problem *pr);

/* Whether the given keys apply to p's algorithm ("only supported for the
 * snapkv algorithm"), then the rules between keys (kv_evict_params_validate,
 * with key NULL). */
int kv_evict_params_check(const kv_evict_params *p, kv_evict_keys given, kv_evict_problem *pr);

/* The keys whose value in p differs from the table's default. */
kv_evict_keys kv_evict_params_moved(const kv_evict_params *p);

#endif
