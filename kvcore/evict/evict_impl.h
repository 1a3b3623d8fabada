/* Inside eviction: the scorer and refiner interfaces and their registries.
 * Private to kvcore/evict*.c.
 *
 * A scorer turns the attention statistics of one forward into a per-slot
 * contribution that the shared machinery accumulates (h2o, snapkv) or
 * keeps until the next forward replaces it (tova), or ranks slots by
 * itself at selection time (streaming, random, knorm, keydiff,
 * expected_attention).
 * A refiner picks refined_size of the intermediate slots among those the
 * coarse top-k left (KVCrush, CriticalKV).
 * Adding one: a file defining a const kv_scorer / kv_refiner, one line in
 * evict_registry.c and its parameters' rows in evict_table.h.
 */
#ifndef KV_EVICT_IMPL_H
#define KV_EVICT_IMPL_H

#include "evict/evict.h"

/* Mersenne Twister mt19937 (32-bit): docs/eviction.md defines the random
 * scorer and KVCrush's random anchor bits by it, so runs reproduce across machines. */
typedef struct kv_mt19937 {
    uint32_t s[624];
    int i;
} kv_mt19937;
void kv_mt19937_seed(kv_mt19937 *g, uint32_t seed);
uint32_t kv_mt19937_next(kv_mt19937 *g);
/* A double in [0, 1) from two draws (53 bits). */
double kv_mt19937_double(kv_mt19937 *g);

/* The resolved settings every scorer and refiner sees. */
typedef struct kv_evict_cfg {
    const kv_evict_params *p;
    int window; /* effective SnapKV window, 0 for none */
    int group;  /* 1 for per_token and per_head, group_size for per_group */
    int n_sets; /* kept sets per layer: 1, or n_kv_heads for per_head */
    int budget; /* S + I + R: the slots a set keeps (kv_evict_params_budget) */
    bool norm_sum;
    const kv_evict_model *model;
    const double *inv_freq; /* [head_dim / 2] the model's RoPE frequencies (in an evictor) */
} kv_evict_cfg;

/* One forward's statistics for one layer. */
typedef struct kv_scorer_obs {
    const kv_evict_cfg *cfg;
    const kv_attn_stats_request *req;
    const kv_attn_stats *st;
    bool first; /* first forward of the prompt for this layer */
    int n_new;  /* query rows of this forward (slots appended) */
    double *state; /* the layer's own state (kv_scorer.state_size), or NULL */
} kv_scorer_obs;

/* The candidates of one selection, for scorers that rank on their own. */
typedef struct kv_scorer_rank {
    const kv_evict_cfg *cfg;
    const kv_cache *cache;
    int layer;
    int head;  /* the KV head whose set is ranked, -1: all heads share one */
    int first; /* slot of scores[0] (start_size) */
    int n;     /* scored slots: first .. first + n - 1 */
    kv_mt19937 *rng;
    const double *state; /* the layer's own state (kv_scorer.state_size), or NULL */
} kv_scorer_rank;

typedef struct kv_scorer {
    const char *name;
    /* Non-accumulating (tova, keydiff, expected_attention): the scores are
     * recomputed at every eviction, so norm_sum has nothing to divide and
     * is rejected; an observation replaces the scores instead of adding. */
    bool recomputes;
    /* Doubles of state the scorer keeps per layer (observe writes it at the
     * prompt's forward, rank reads it); NULL: none. */
    size_t (*state_size)(const kv_evict_cfg *cfg);
    /* Adds the statistics this scorer reads to req (NULL: none). */
    void (*request)(const kv_evict_cfg *cfg, bool prefill, kv_attn_stats_request *req);
    /* Writes this forward's contribution of every slot of every set,
     * contrib[cfg->n_sets][n_keys] (query head h adds into set
     * h / (n_heads / n_sets): all heads into one set, or each KV head's
     * query heads into its own), and the number of query rows it sums over
     * (the norm_sum counter increment). NULL: attention-free. */
    int (*observe)(const kv_scorer_obs *o, double *contrib, int *rows, kv_error *err);
    /* Writes the selection scores of the n candidates itself, replacing
     * the accumulated ones (NULL: sum / norm_sum of the accumulation). */
    int (*rank)(const kv_scorer_rank *r, double *scores, kv_error *err);
    /* Attention-free alternative to rank: a slot's score once and for all,
     * computed when the slot is first seen and moved with it; of one KV
     * head's token, or (head -1) of the whole slot. */
    double (*slot_score)(const kv_cache *c, int layer, int slot, int head);
} kv_scorer;

/* A refinement: pick n_pick units among the candidate units that the coarse
 * top-k left. scores are token scores of the candidate area (already
 * normalized for norm_sum), -INFINITY at coarse picks; n_tokens is a
 * multiple of unit (1 per_token, G per_group). */
typedef struct kv_refine_call {
    const kv_evict_cfg *cfg;
    const double *scores;
    int n_tokens;
    int unit;
    int n_pick;
    int first_slot; /* cache slot of scores[0] */
    const kv_cache *cache;
    int layer;
    int set;     /* the kept set refined: a KV head with per_head, else 0 */
    kv_mt19937 *rng;
    void *state; /* the refiner's own (kv_refiner.state_new), or NULL */
} kv_refine_call;

/* A refiner, like llama.cpp's samplers, owns its state: the evictor makes
 * it, tells it of new prompts and compactions, and hands it to every call.
 * Every hook but pick may be NULL. */
typedef struct kv_refiner {
    const char *name;
    /* The state one evictor's refiner keeps; checks that the model gives
     * what the refiner reads (NULL with err set: refused). */
    void *(*state_new)(const kv_evict_cfg *cfg, kv_error *err);
    void (*state_free)(void *state);
    /* A new prompt begins in layer `layer` (-1: in every layer). */
    void (*reset)(void *state, int layer);
    /* Before pick, with the same call: gathers what pick reads besides the
     * scores (CriticalKV: the candidates' value weights or their bounds). */
    int (*prepare)(const kv_refine_call *c, kv_error *err);
    /* Writes n_pick distinct unit indices (0 = the unit starting at scores[0]). */
    int (*pick)(const kv_refine_call *c, int *picks, kv_error *err);
    /* Set `set` of layer `layer` kept the slots keep[0..n_keep), which are
     * now slots 0..n_keep-1: state per slot follows its token. */
    void (*compacted)(void *state, int layer, int set, const int *keep, int n_keep);
    /* Units of costly work done so far (CriticalKV: value weights computed). */
    long long (*work)(const void *state);
} kv_refiner;

extern const kv_scorer kv_scorer_h2o, kv_scorer_snapkv, kv_scorer_streaming, kv_scorer_random,
    kv_scorer_knorm, kv_scorer_tova, kv_scorer_keydiff, kv_scorer_expected_attention;

/* The scorer's state of a layer (kv_scorer.state_size), or NULL (tests). */
const double *kv_evictor_scorer_state(const kv_evictor *ev, int layer);

/* ||x||_2 of n floats, in double (knorm, keydiff, expected_attention). */
double kv_evict_l2(const float *x, int n);

/* ||x||_2 of KV heads [h0, h0 + heads) of a slot's keys or values as the
 * cache stores them (dequantised), summed in kv_evict_l2's order. */
double kv_evict_l2_heads(const kv_cache *c, int layer, kv_cache_part part, int slot, int h0,
                         int heads);

/* Adds every query head's row of sums[n_heads][n] into the set holding it,
 * contrib[n_sets][n] (zeroed first): h2o's column sums, tova's last row. */
int kv_scorer_sum_heads(const kv_scorer_obs *o, const double *sums, double *contrib,
                        kv_error *err);
extern const kv_refiner kv_refiner_kvcrush, kv_refiner_criticalkv;

const kv_scorer *kv_scorer_find(const char *name);
const kv_refiner *kv_refiner_find(const char *name);
/* CriticalKV's value weight of n slots: out[t] = sum over query heads h of
 * ||V_{kv(h),t} . Wo_h^T||_1 (decision 5), v = the slots' value rows; over
 * all query heads (kv_head -1) or those of one KV head (per_head). */
int kv_criticalkv_vnorm(const kv_evict_model *m, int layer, int kv_head, const float *v, int n,
                        double *out, kv_error *err);

/* The window sums for window w in st, or NULL when req has no such window. */
const double *kv_attn_stats_window(const kv_attn_stats_request *req, const kv_attn_stats *st,
                                   int w);
/* Adds w to req's windows unless present; -1 when they are full. */
int kv_attn_stats_request_window(kv_attn_stats_request *req, int w);

/* idx[0..n) = a permutation of 0..n-1 whose first k are the k best by
 * (score desc, index desc) -- decision 2's rule: among equal scores the
 * higher index wins -- in no particular order. NaN ranks lowest. */
void kv_evict_top(const double *scores, int n, int k, int *idx);
/* The same over the given indices idx[0..n) of scores: afterwards the
 * first k of idx are the k best of them. */
void kv_evict_top_among(const double *scores, int *idx, int n, int k);

/* kvpress's ChunkKVPress selection (evict_chunkkv.c), for parity tests:
 * scores[h * L + t] of n_heads heads over L slots, chunks of c slots from
 * slot 0, compression ratio r. A chunk scores the mean over its slots of
 * the heads' summed scores; the max(1, int(n_chunks (1 - r))) best chunks
 * are kept, the same slots in every head. With no complete chunk (L < c)
 * each head keeps its own int(L (1 - r)) best slots. Writes head h's kept
 * slots, ascending, to keep[h * L ...] and their number to n_keep[h]. */
int kv_chunkkv_select_kvpress(const double *scores, int n_heads, int L, int c, double r,
                              int *keep, int *n_keep, kv_error *err);

/* kvpress's LagKVPress scores of one KV head (evict_lagkv.c), for parity
 * tests: keys k and values v [L][D], n_sink sinks, partitions of lag
 * tokens; score[L] gets 1 for the sinks and the tail, the rank / lag of
 * each token within its partition (scored against the next one), or below
 * n_sink + 2 lag tokens the ramp (t - n_sink) / (L - n_sink). */
void kv_lagkv_scores_kvpress(const double *k, const double *v, int L, int D, int n_sink, int lag,
                             double *score);

/* AdaKV's choice among the candidate entries of one layer (evict_adakv.c):
 * entry i is a token of KV head head[i] with score score[i]; entries are in
 * (position, head) order, so the later entry is the later token, or the
 * higher head of the same token. Each head first keeps its best
 * min(n_safe, its entries); the best of all other entries then fill the
 * budget up to k in total (all of them when fewer), each ranked by (score
 * desc, entry desc). take[i] = 1 for the kept entries. */
int kv_adaptive_pick(const double *score, const int *head, int n, int n_heads, int n_safe, int k,
                     char *take, kv_error *err);

/* The candidates of AdaKV's choice in a layer whose heads hold n_keep[g]
 * slots: each head's held slots past its first S, before its last R. */
int kv_adaptive_candidates(const int *n_keep, int sets, int S, int R);

/* AdaKV's eviction of one layer of L slots (head_budget "adaptive") whose
 * heads hold more than sets * inter candidates together: they keep sets * inter of
 * them, chosen together by kv_adaptive_pick with a safeguard of
 * int(inter * alpha) each, plus each head's start and recent tokens.
 * score[g * L + t] is head g's selection score of slot t (t >= S);
 * keep[g * L ...] and n_keep[g] hold each head's held slots on entry and its
 * kept slots after. */
int kv_adaptive_select(const kv_cache *c, int layer, int sets, int L, int S, int R, int inter,
                       double alpha, const double *score, int *keep, int *n_keep, kv_error *err);

#endif
