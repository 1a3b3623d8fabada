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

#include "attn_stats.h"
#include "cli.h"
#include "evict.h"
#include "kvcache.h"
#include "model.h"

/* clang-format off */
#define KB_EVICTION_OPTIONS \
    {"eviction", "ALGO", "evict KV-cache tokens with ALGO: snapkv, h2o, streaming, random, knorm"}, \
    {"eviction-config", "FILE.json", "eviction parameters as JSON (keys of docs/eviction.md)"}, \
    {"strategy", "NAME", "eviction granularity: per_token (default), per_group or per_head"}, \
    {"group-size", "N", "tokens per group with per_group (default 32)"}, \
    {"start-size", "N", "first tokens always kept (default 32)"}, \
    {"recent-size", "N", "newest tokens always kept (default 128)"}, \
    {"intermediate-size", "N", "best-scored tokens kept between them (default 512)"}, \
    {"refined-size", "N", "of the intermediate tokens, how many the refiner picks (default 0)"}, \
    {"refined-algorithm", "NAME", "kvcrush (default) or criticalkv"}, \
    {"kvcrush-anchor", "NAME", "alternate (default), random, zeros, ones, mean"}, \
    {"score-aggregation", "NAME", "sum (default) or norm_sum"}, \
    {"window-size", "N", "SnapKV observation window (default 8)"}, \
    {"apply-rerotation", "BOOL", "rotate kept keys to their new slots (default true)"}, \
    {"positions", "NAME", "absolute (default) or compact (kvpress)"}, \
    {"eviction-seed", "N", "seed of the random policy and anchor (default 0)"}, \
    {"trace", "FILE.jsonl", "write one line per eviction: step, layer, kept positions"}
/* clang-format on */

typedef struct kb_eviction kb_eviction;

/* The parameters the options describe (defaults, then --eviction-config,
 * then flags), validated. Returns 1 when no eviction option was given, 0
 * when *p is set, -1 after reporting the error. */
int kb_eviction_params(const kb_args *a, kv_evict_params *p);

/* The policy for model m plus the trace file, or *out = NULL
 * when no eviction was asked for. Returns 0 or an exit code (reported). */
int kb_eviction_open(const kb_args *a, const kv_model *m, kb_eviction **out);
void kb_eviction_close(kb_eviction *e);

/* The statistics every forward must report. */
kv_attn_stats_request kb_eviction_request(const kb_eviction *e);

/* After a forward: observe, compress, trace. */
int kb_eviction_step(kb_eviction *e, kv_cache *c, const kv_attn_stats *stats, int step,
                     kv_error *err);

#endif
