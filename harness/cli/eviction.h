/* Eviction on the command line: the options a command splices into its
 * table, and the policy + trace file they describe.
 *
 *   --eviction ALGO, --eviction-config FILE.json, then one flag per
 *   parameter (--start-size 32 ...; flags override the file), --trace FILE.
 *
 * A command lists KB_EVICTION_OPTIONS in its options table, calls
 * kb_eviction_open after loading the model, and runs kb_eviction_step from
 * kv_generate's on_step hook with the request kb_eviction_request gives.
 */
#ifndef KB_EVICTION_H
#define KB_EVICTION_H

#include "model/attn_stats.h"
#include "cli/cli.h"
#include "evict/evict.h"
#include "evict/evict_table.h"
#include "model/kvcache.h"
#include "model/model.h"

/* One flag per row of the parameter table (kvcore/evict/evict_table.h). */
/* clang-format off */
#define KB_EVICTION_OPTION(key, type, dflt, min, max, choices, only_for, flag, metavar, help, \
                           token, abbrev) \
    {flag, metavar, help " (default " dflt ")"},
#define KB_EVICTION_OPTIONS \
    {"eviction-config", "FILE.json", "eviction parameters as JSON (keys of docs/eviction.md)"}, \
    KV_EVICT_PARAM_TABLE(KB_EVICTION_OPTION) \
    {"trace", "FILE.jsonl", "write one line per eviction: step, layer, kept positions"}
/* clang-format on */

typedef struct kb_eviction kb_eviction;

/* The parameters the options describe (defaults, then --eviction-config,
 * then flags), validated. Returns 0 when they ask for eviction, 1 when no
 * eviction option was given (the cache precision options alone ask for
 * none; *p holds them), -1 after reporting the error. */
int kb_eviction_params(const kb_args *a, kv_evict_params *p);

/* The precision the options give the KV cache, with or without eviction,
 * checked against model m. Returns 0 or an exit code (reported). */
int kb_eviction_cache_quant(const kb_args *a, const kv_model *m, kv_cache_quant *q);

/* The policy for model m plus the trace file, or *out = NULL
 * when no eviction was asked for. Returns 0 or an exit code (reported). */
/* n_prompt: the prompt's tokens, which a --compression-ratio's budget is a
 * share of (kv_evict_params_for_prompt); n_context: the tokens before the
 * question (-1: none given), the share's base with --query-aware false. */
int kb_eviction_open(const kb_args *a, const kv_model *m, int n_prompt, int n_context,
                     kb_eviction **out);
void kb_eviction_close(kb_eviction *e);

/* The config's query_aware. */
bool kb_eviction_query_aware(const kb_eviction *e);

/* From now on trace lines say which phase an eviction belongs to: `first`
 * for step 0 ("context": compressed before the question; "question": after
 * it), "decode" for the others. */
void kb_eviction_set_phase(kb_eviction *e, const char *first);

/* The statistics every forward must report. */
kv_attn_stats_request kb_eviction_request(const kb_eviction *e);

/* After a forward: observe, compress, trace. */
int kb_eviction_step(kb_eviction *e, kv_cache *c, const kv_attn_stats *stats, int step,
                     kv_error *err);

/* The "properties" member of configs/schema.json's $defs.eviction, as that
 * file holds it (one key a line): generated from the parameter table and
 * printed by `kvbench schema`; a test checks the committed file holds it.
 * Caller frees; NULL when out of memory. */
char *kb_eviction_schema_text(void);

#endif
