/* KV-cache eviction: which tokens a layer's cache keeps once it is full.
 *
 * Semantics are those of docs/eviction.md (the NNCF pull request's):
 * after every forward, each layer folds the attention statistics of
 * that forward into per-slot scores; whenever a layer holds more than
 * M = start_size + intermediate_size + recent_size slots it keeps
 *   - the first start_size slots,
 *   - the intermediate_size best-scored slots between start and recent
 *     (refined_size of them picked by a refiner: KVCrush or CriticalKV),
 *   - the last recent_size slots,
 * per token or per group of group_size consecutive slots, and compacts the
 * cache to them (slot order kept), optionally rerotating the surviving keys.
 * With strategy per_head each KV head of a layer does this on its own
 * scores (summed over the query heads that share it), keeping its own
 * tokens -- the same number in every head (SnapKV's and kvpress's way).
 *
 * A policy is a scorer (how importance accumulates or is recomputed: h2o,
 * snapkv, streaming, random, knorm, tova, keydiff, expected_attention; one
 * file each, one registry line) + this shared selection machinery + an
 * optional refiner.
 *
 * Driving it (one prompt):
 *     kv_evictor *ev = kv_evictor_new(&params, &model, &err);
 *     kv_evictor_stats_request(ev, true, &req);   // what the prefill must report
 *     ... prefill, filling stats[layer] for req ...
 *     for each layer: kv_evictor_observe(ev, layer, &req, &stats[layer], true, &err);
 *     kv_evictor_compress(ev, cache, trace, ctx, &err);
 *     then per decode step: the same with prefill = false.
 * Prefill once, fork many: kv_evict_stats_request() gives the union request
 * of a set of configs; every config's evictor then observes the same
 * prefill statistics and compresses its own kv_cache_fork() of the cache.
 */
#ifndef KV_EVICT_H
#define KV_EVICT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/attn_stats.h"
#include "util/error.h"
#include "model/kvcache.h"

struct cJSON;
struct kv_pool;

/* Longest accepted name value ("per_token", "criticalkv", ...). */
#define KV_EVICT_NAME_MAX 24

/* The parameters, named as docs/eviction.md lists them (NNCF's
 * KVCacheCompressionParameters) plus kvbench's `positions` and `seed`;
 * their defaults, ranges and choices are the rows of evict_table.h.
 * Names are stored in lower case; kv_evict_params_validate() checks them. */
typedef struct kv_evict_params {
    char algorithm[KV_EVICT_NAME_MAX]; /* the scorer registry's names */
    char strategy[KV_EVICT_NAME_MAX];
    int group_size; /* only with per_group */
    int start_size;
    int recent_size;
    int intermediate_size;
    int refined_size; /* part of intermediate_size */
    char score_aggregation[KV_EVICT_NAME_MAX];
    bool apply_rerotation;
    bool has_window; /* false: window_size is none */
    int window_size; /* SnapKV rows; none -> 8 for snapkv */
    char refined_algorithm[KV_EVICT_NAME_MAX];
    char kvcrush_anchor[KV_EVICT_NAME_MAX];
    char positions[KV_EVICT_NAME_MAX]; /* absolute | compact (kvpress) */
    uint32_t seed;                     /* random scorer, KVCrush random anchor */
    /* expected_attention (kvpress's ExpectedAttentionPress) */
    int ea_n_future_positions; /* future query positions its rotation averages */
    bool ea_use_covariance;    /* the queries' covariance term */
    bool ea_use_vnorm;         /* scores times the value's L2 norm */
    double ea_epsilon;         /* added to the score before the value norm */
    char layer_budget[KV_EVICT_NAME_MAX]; /* uniform | pyramid (PyramidKV) */
    double pyramid_beta;                  /* pyramid: >= 1 */
    char head_budget[KV_EVICT_NAME_MAX];  /* uniform | adaptive (AdaKV, per_head only) */
    double alpha_safeguard;               /* adaptive: in [0, 1] */
    /* the cache's precision (kv_cache_quant, kvcore/model/kvcache.h) */
    char kv_cache_precision[KV_EVICT_NAME_MAX]; /* f32 | bf16 | f16 | u8 | u4 */
    char key_quant[KV_EVICT_NAME_MAX];          /* by_token | by_channel */
    char value_quant[KV_EVICT_NAME_MAX];        /* by_token */
    int key_group_size;                         /* 0: the default of key_quant */
    int value_group_size;                       /* 0: head_dim */
    double compression_ratio; /* kvpress: the prompt's share to evict, [0, 1); 0: none */
    /* false: the context is compressed once, before the question is read
     * (kvpress's query-agnostic protocol, docs/eviction.md) */
    bool query_aware;
} kv_evict_params;

/* The table's defaults (evict_table.h). */
void kv_evict_params_default(kv_evict_params *p);

/* Sets one parameter from text: key as in the config file ("start_size") or
 * as a CLI flag ("--start-size", "start-size"); value as typed. Unknown keys
 * and malformed values fail with a message naming the key. */
int kv_evict_params_set(kv_evict_params *p, const char *key, const char *value, kv_error *err);

/* Sets every key of a JSON object (config file); same rules, JSON types
 * (numbers, true/false, strings, null for window_size). */
int kv_evict_params_from_json(kv_evict_params *p, const struct cJSON *obj, kv_error *err);

/* The full parameter set as a new JSON object (every key, window_size null
 * when None), or NULL when out of memory. */
struct cJSON *kv_evict_params_to_json(const kv_evict_params *p);

/* The checks of docs/eviction.md in NNCF's order (first failure reported
 * with NNCF's message), then kvbench's own (per_group needs recent_size > 0,
 * per_token KVCrush cannot use the mean anchor, positions, M at most
 * KV_EVICT_MAX_BUDGET, summed without overflow). */
int kv_evict_params_validate(const kv_evict_params *p, kv_error *err);
/* compression_ratio r > 0 (kvpress's meaning, per sample): the cache keeps
 * int(n_prompt * (1 - r)) tokens, so intermediate_size becomes that less
 * start_size and recent_size (at least 0; per_group: rounded down to a
 * multiple of group_size) and refined_size at most it. Nothing changes when
 * r is 0. */
void kv_evict_params_for_prompt(kv_evict_params *p, int n_prompt);

/* Parameters that are valid but contradict each other, silently ruining a
 * run: NULL, or one line that says what goes wrong and the fix. Today one
 * case: apply_rerotation with "absolute" positions (NNCF's defaults, kept
 * so that config hashes stay) rotates the kept keys to slots 0..k-1 while
 * new tokens keep their absolute positions, so heads that look a fixed
 * distance back miss (the demo model's SnapKV falls to 0). */
const char *kv_evict_params_warning(const kv_evict_params *p);
/* The same, then the checks that need the number of layers: refined_size
 * at most the smallest pyramid layer's intermediate size. */
int kv_evict_params_validate_layers(const kv_evict_params *p, int n_layers, kv_error *err);

/* The largest M kv_evict_params_validate accepts: sums of a few sizes and
 * slot counts stay far from INT_MAX, yet no real context reaches it. */
#define KV_EVICT_MAX_BUDGET (1 << 30)

/* M = start + intermediate + recent: the cache length after an eviction
 * (validated params: at most KV_EVICT_MAX_BUDGET), for every algorithm
 * (streaming's intermediate area keeps the newest candidates). The one
 * budget: reports and plans show this number. With layer_budget pyramid it
 * is the mean over the layers (exact up to the rounding of each layer's
 * intermediate size), with head_budget adaptive the mean over a layer's
 * KV heads (exact: the heads share Hkv * intermediate_size tokens). */
int kv_evict_params_budget(const kv_evict_params *p);

/* The intermediate size of layer `layer` of n_layers: intermediate_size,
 * or with layer_budget pyramid PyramidKV's linear schedule (kvpress's
 * arithmetic without the window and the cap, docs/eviction.md): in units
 * of K = I / G (G = group_size with per_group, else 1), lo = K / beta,
 * hi = 2K - lo, step = (hi - lo) / (n_layers - 1), and layer l keeps
 * G * round_half_even(hi - l * step) -- in double, in that order. The mean
 * over the layers is intermediate_size up to that rounding. */
int kv_evict_layer_intermediate(const kv_evict_params *p, int n_layers, int layer);

/* kvpress's own PyramidKV budget of a layer (get_layer_budget, window
 * included, with its cap and its silent fallback to round(q (1 - r))),
 * for parity checks: q the prompt length, r the compression ratio, w the
 * window. */
int kv_evict_pyramid_kvpress(int q, double r, int w, double beta, int n_layers, int layer);
/* The original's (KVCache-Factory's) budget of a layer, the window kept on
 * top: integer floor arithmetic on base = max_capacity_prompt - w; all q
 * tokens (less the window) when q < max_capacity_prompt, base when q <
 * 2 base. For parity checks. */
int kv_evict_pyramid_original(int q, int max_capacity_prompt, int w, int beta, int n_layers,
                              int layer);

/* The SnapKV observation window the policy uses: window_size, or 8 for
 * snapkv without one (NNCF's default); 0 for the other algorithms. */
int kv_evict_params_window(const kv_evict_params *p);

/* Spells out what "none" means (window_size: kv_evict_params_window), so
 * two parameter sets that run alike compare and hash alike. */
void kv_evict_params_resolve(kv_evict_params *p);

/* The JSON schema of an eviction config's keys (configs/schema.json's
 * $defs.eviction.properties), from the table; "full" is an algorithm
 * there. NULL when out of memory. */
struct cJSON *kv_evict_params_schema(void);

/* One row of the parameter table (evict_table.h): what a parameter is,
 * for the parser, validators, CLI, config names and the JSON schema. */
typedef enum {
    KV_PARAM_INT,
    KV_PARAM_NAME,
    KV_PARAM_BOOL,
    KV_PARAM_WINDOW, /* an int or none */
    KV_PARAM_SEED,   /* 0..UINT32_MAX */
    KV_PARAM_NUMBER, /* a finite double */
} kv_evict_param_type;

typedef struct kv_evict_param_def {
    const char *key;
    kv_evict_param_type type;
    size_t offset; /* of the field in kv_evict_params */
    const char *dflt;
    long long min, max;
    const char *const *choices; /* NAME: NULL-terminated; NULL: the scorer registry */
    const char *only_for;       /* the one algorithm it applies to; NULL: all */
    const char *flag, *metavar, *help;
    const char *token, *abbrev; /* config names (evict_table.h) */
} kv_evict_param_def;

/* Is key one of the cache's precision settings (kv_cache_precision,
 * key_quant, ...)? They apply with every algorithm and without eviction. */
bool kv_evict_param_is_cache(const char *key);

/* The cache precision p asks for (kv_cache_set_quant resolves group sizes
 * of 0 against the model's head dimension). */
kv_cache_quant kv_evict_params_cache_quant(const kv_evict_params *p);

/* The i-th row of the table, NULL past the last. */
const kv_evict_param_def *kv_evict_param(int i);
/* The row of a key ("start_size", "start-size", "--start-size"), or NULL. */
const kv_evict_param_def *kv_evict_param_find(const char *key);

/* The i-th key kv_evict_params_set accepts ("algorithm", ...), NULL past
 * the last (for help texts and config matrices). */
const char *kv_evict_param_key(int i);
/* The i-th algorithm of the scorer registry, NULL past the last. */
const char *kv_evict_algorithm(int i);

/* What eviction needs to know about the model. */
typedef struct kv_evict_model {
    int n_layers, n_heads, n_kv_heads, head_dim;
    double rope_theta;              /* RoPE base, for rerotation */
    const float *inv_freq;          /* [head_dim/2] or NULL: rope_theta^(-2f/head_dim);
                                       pass the engine's when it scales them (llama3) */
    int hidden;                     /* model width; only CriticalKV */
    const struct kv_weight *o_proj; /* [n_layers] o_proj.weight [hidden][n_heads*head_dim]
                                       in any dtype of kernels.h (the model's own, not a
                                       copy); only CriticalKV (NULL otherwise) */
    struct kv_pool *pool;           /* threads for CriticalKV's products and ExpectedAttention's
                                       query heads (NULL: the caller's) */
    const double *vnorm_gain;       /* [n_layers][n_kv_heads] or NULL: CriticalKV's weight of a
                                       slot is at most sum_g gain[g] * ||v_g||, which lets it skip
                                       most products (kv_evict_model_vnorm_gains) */
} kv_evict_model;

/* Fills em->vnorm_gain from em->o_proj (allocated; kv_evict_model_release
 * frees it): for every KV head g, the sum over its query heads h of
 * sqrt(hidden * lambda_max(Wo_h^T Wo_h)), bounded from above, since
 * ||Wo_h v||_1 <= sqrt(hidden) ||Wo_h v||_2 <= sqrt(hidden lambda_max) ||v||_2. */
int kv_evict_model_vnorm_gains(kv_evict_model *em, kv_error *err);

typedef struct kv_evictor kv_evictor;

/* One eviction event: after (step, layer) the cache keeps these absolute
 * positions, in slot order: kept_positions[set][n_kept] for n_sets sets --
 * one set shared by all KV heads (n_sets = 1), or one per KV head with
 * strategy per_head (n_sets = n_kv_heads). With head_budget adaptive the
 * heads keep different numbers of tokens: n_kept is the longest, and a
 * shorter set ends in -1s. step 0 = end of prefill, k = the forward pass
 * of generated token k. */
typedef void (*kv_evict_trace_fn)(void *ctx, int step, int layer, const int32_t *kept_positions,
                                  int n_kept, int n_sets);

/* A policy for one config (validated here) over a model's layers. It keeps
 * m's o_proj and pool (they must outlive it) and copies the rest. */
kv_evictor *kv_evictor_new(const kv_evict_params *p, const kv_evict_model *m, kv_error *err);
void kv_evictor_free(kv_evictor *ev);

/* Forgets every score: the next prompt starts afresh (a prefill observed on
 * layer 0 does the same). */
void kv_evictor_reset(kv_evictor *ev);

/* The statistics this policy reads from a prefill (prefill = true) or a
 * decode step. */
void kv_evictor_stats_request(const kv_evictor *ev, bool prefill, kv_attn_stats_request *req);

/* The union request of n configs, for one prefill shared by all of them. */
int kv_evict_stats_request(const kv_evict_params *ps, int n, bool prefill,
                           kv_attn_stats_request *req, kv_error *err);

/* Folds one layer's statistics of one forward into its scores. `req` is the
 * request the forward served (it tells which win_sums holds which window);
 * it must include what kv_evictor_stats_request asked for. st->n_keys is
 * the layer's cache length during that attention. A prefill restarts the
 * layer's scores (on layer 0: every layer's). */
int kv_evictor_observe(kv_evictor *ev, int layer, const kv_attn_stats_request *req,
                       const kv_attn_stats *st, bool prefill, kv_error *err);

/* Compacts every layer whose cache exceeds the budget (rerotating keys when
 * asked), reports each eviction to trace (may be NULL), and counts a step.
 * Call it once after every forward: prefill, then each decode step. */
int kv_evictor_compress(kv_evictor *ev, kv_cache *cache, kv_evict_trace_fn trace, void *trace_ctx,
                        kv_error *err);

/* The same, leaving src untouched: *out is a new cache holding only the
 * kept slots (the largest M_l + 1 slots allocated per layer, more where an
 * AdaKV layer's fullest head needs them). Prefill once, fork many:
 * each config compresses the shared prefill's cache into its own, copying
 * M rows per layer instead of the whole prompt. */
int kv_evictor_compress_into(kv_evictor *ev, const kv_cache *src, kv_cache **out,
                             kv_evict_trace_fn trace, void *trace_ctx, kv_error *err);

/* How many CriticalKV value weights (one per slot and set) the evictor has
 * computed: the bounds spare the rest (bench_evict reports it). */
long long kv_evictor_vnorm_count(const kv_evictor *ev);

/* The precision this policy's caches store keys and values at, its group
 * sizes resolved (kv_cache_quant_check). */
kv_cache_quant kv_evictor_cache_quant(const kv_evictor *ev);

/* The absolute positions the refiner (KVCrush, CriticalKV) picked for kept
 * set `set` at the latest eviction, ascending; inside a trace callback they
 * belong to the (step, layer) being reported. NULL and *n = 0 without a
 * refiner. */
const int32_t *kv_evictor_refined_positions(const kv_evictor *ev, int set, int *n);

/* The current scores of a layer's slots [0, len) (0 for start slots): the
 * raw sums, and the norm_sum counters (per_head: KV head 0's). For tests
 * and traces. */
const double *kv_evictor_scores(const kv_evictor *ev, int layer, int *len);
const double *kv_evictor_counters(const kv_evictor *ev, int layer, int *len);

/* Merges the statistics src asks for into dst; -1 when the windows do not
 * fit (KV_MAX_WINDOWS). */
int kv_attn_stats_request_merge(kv_attn_stats_request *dst, const kv_attn_stats_request *src);

/* ---- with the engine (evict_model.c) ---- */

struct kv_model;

/* The eviction view of a loaded model: shapes and the engine's RoPE
 * frequencies; with o_proj (CriticalKV) the model's own o_proj weights (m
 * must outlive em). Release with kv_evict_model_release. */
int kv_evict_model_load(kv_evict_model *em, const struct kv_model *m, bool o_proj, kv_error *err);
void kv_evict_model_release(kv_evict_model *em);

/* What a generation with this policy must ask every forward for (the
 * prefill's and the decode's statistics together). */
void kv_evictor_generation_request(const kv_evictor *ev, kv_attn_stats_request *req);

/* One forward's eviction: observes the statistics of every layer (stats is
 * [n_layers], NULL for an attention-free policy), then compresses. step 0
 * is the prompt's forward (it starts the policy afresh). Fits kv_generate's
 * on_step hook. */
int kv_evictor_step(kv_evictor *ev, kv_cache *c, const kv_attn_stats_request *req,
                    const kv_attn_stats *stats, int step, kv_evict_trace_fn trace, void *trace_ctx,
                    kv_error *err);

/* Starts this policy from a shared prefill: observes its statistics (the
 * union request req, stats [n_layers]) as step 0 and compresses the shared
 * cache base into a new *out holding only what this policy keeps, stored
 * at the policy's cache precision (kv_cache_precision); base is
 * untouched. A base already at that precision (kv_fork_base_at) gives its
 * stored rows as they are; an F32 one is stored first, whole (a copy for
 * this fork alone). Then decode from *out (kv_generate_from) with
 * kv_evictor_step as the hook. */
int kv_evictor_fork(kv_evictor *ev, const kv_cache *base, const kv_attn_stats_request *req,
                    const kv_attn_stats *stats, kv_cache **out, kv_evict_trace_fn trace,
                    void *trace_ctx, kv_error *err);

/* One fork of kv_evictor_forks: ev's (kv_evictor_fork, no trace), or
 * where ev is NULL a copy of base with room for cap slots (kv_cache_fork). */
typedef struct kv_fork {
    kv_evictor *ev;
    const kv_cache *base;
    int cap;
    kv_cache *out; /* the fork; NULL where it failed (err says why) */
    kv_error err;
} kv_fork;

/* The n forks, as tasks of pool (NULL: the caller's thread): each writes a
 * cache of its own from read-only inputs, and between a sweep's prefill and
 * its decode they are most of the time (fresh memory: first touch is the
 * dearest part on a VM). Distinct forks need distinct evictors. Returns
 * the index of the first fork that failed, or -1. */
struct kv_pool;
int kv_evictor_forks(struct kv_pool *pool, kv_fork *forks, int n, const kv_attn_stats_request *req,
                     const kv_attn_stats *stats);

/* A sample's prompt as its forks need it: the F32 prefill and, made on
 * first use, one copy of it at each other cache precision a config stores
 * at (kv_cache_fork_at), so that the configs of one precision share one
 * conversion of the prompt instead of each storing the whole prompt for
 * itself (a copy per distinct precision, freed with the prefill). */
#define KV_FORK_PRECISIONS 8
typedef struct kv_fork_base {
    const kv_cache *prompt;
    kv_cache *at[KV_FORK_PRECISIONS];
    int n;
} kv_fork_base;

/* The prompt at precision q (resolved): the prefill itself when it stores
 * alike, else its copy at q, made now if new (past KV_FORK_PRECISIONS
 * precisions: the prefill, which kv_evictor_fork then converts per fork). */
const kv_cache *kv_fork_base_at(kv_fork_base *b, const kv_cache_quant *q, kv_error *err);
/* Frees the copies (not the prompt). */
void kv_fork_base_release(kv_fork_base *b);

/* RoPE, half-split (HF rotate_half): the frequencies rope_theta^(-2f/D). */
void kv_evict_rope_freqs(double rope_theta, int head_dim, double *inv_freq);
/* Rotates one head vector x[head_dim] by `delta` positions: applied to a
 * key rotated for position p it gives the key for position p + delta. */
void kv_evict_rope_rotate(float *x, int head_dim, const double *inv_freq, double delta);

#endif
