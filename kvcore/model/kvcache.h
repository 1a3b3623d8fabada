/* The KV cache: per layer, keys and values of every kept token plus each
 * one's position: its index in the token sequence. That is also the RoPE
 * position it was written at, except after "compact" eviction, which
 * restarts RoPE at the compacted length (next_pos) while tokens keep
 * counting on (next_pos + token_offset), so that eviction traces name the
 * tokens kept, never two alike.
 *
 * Layout per layer: k and v are [slot][kv_head][head_dim] floats, row-major,
 * so one slot is one contiguous row of n_kv_heads * head_dim floats and
 * compaction moves whole rows: in an F32 layer those on the shorter side
 * of what it drops, the rows then starting further into their block
 * (k_front). Slots stay in the order tokens arrived.
 * Layers are independent: eviction compacts each one on its own, so layers
 * may hold different numbers of slots.
 *
 * Per-head eviction (strategy per_head) lets each KV head keep its own
 * tokens: slot s of head h then holds another token than slot s of head
 * h', so positions are kept per slot AND head. Attention needs nothing more
 * while every head keeps as many tokens: keys carry their RoPE rotation,
 * and every cached slot precedes the tokens of the next forward, so the
 * causal mask by slot order stays right for every head.
 *
 * With head-adaptive budgets (AdaKV) the heads of a layer keep different
 * numbers of tokens. Each head's tokens stay packed from slot 0 in order;
 * the layer is as long as its fullest head, and tokens appended later go
 * after that, for every head. So each head has at most one gap: slots
 * [gap[2h], gap[2h+1]) hold no token of head h (their keys and values
 * are zeros), and attention gives them no weight. That is per-head (ragged) storage padded to the
 * fullest head: never longer than the union of the heads' tokens, and the same layout as
 * equal-count per_head, which it equals when the counts agree.
 *
 * Borrowed rows. A fork compressed from an F32 cache (kv_cache_gather into another cache, one
 * set) copies no row: its slots [0, k_stored) read the rows of the cache it came from, the
 * lender, through a map (srow), as if they were a stored form of their own (kv_cache_borrows);
 * only the tokens it appends later get rows of its own. With rerotation its values are
 * borrowed and its keys, which turn, are its own: each part has its own count of borrowed
 * slots, the keys' never more than the values'. A sweep's forks
 * were most of its fresh memory (16 forks of a 2,048-token prompt: 3.7 GB at Qwen3-0.6B),
 * and fresh memory costs the kernel's page faults. The lender's rows stay where they are
 * while any fork reads them (kv_shared counts the readers): a lender that would move or
 * change them copies them away first, and the last reader frees them.
 */
#ifndef KV_KVCACHE_H
#define KV_KVCACHE_H

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/kvquant.h"
#include "util/error.h"

typedef struct kv_cache_layer {
    float *k;        /* keys at full precision, [k_rows][n_kv_heads * head_dim]: slot s
                        in row s - k_stored (an F32 cache: every slot, in its row) */
    float *v;        /* the same for values, slot s in row s - v_stored */
    int k_rows, v_rows; /* rows allocated in k and v, from their blocks' starts */
    int k_front, v_front; /* rows of the block before k's (v's) first row: an F32
                             layer compacted in place may move its front instead
                             of its tail (kvcache.c, shift_front) */
    uint8_t *kq;     /* slots [0, k_stored) in the stored form (kv_cache_code_bytes
                        a slot; see kv_cache_quant) */
    uint8_t *vq;     /* the same for values, slots [0, v_stored) */
    kv_qgroup *kg;   /* u8/u4 keys' group parameters: by token [cap][row / key_group],
                        by channel [blocks][row] (kv_cache_key_groups) */
    kv_qgroup *vg;   /* values' [cap][row / value_group] */
    int32_t *pos;    /* [cap][n_kv_heads] index in the sequence of the token
                        each KV head holds in each slot (see kv_cache_pos) */
    float *vlen;     /* [cap][n_kv_heads] L2 norm of each value row: with it
                        CriticalKV bounds a slot's weight without reading V */
    int vlen_n;      /* slots [0, vlen_n) have their vlen (kv_cache_measure_values);
                        code that fills v by hand leaves it behind, which only
                        costs CriticalKV its shortcut */
    int len;         /* slots in use */
    int cap;         /* slots allocated */
    int *gap;        /* [n_kv_heads][2] or NULL: slots [gap[2h], gap[2h+1]) hold
                        no token of KV head h (see above); NULL: no gaps */
    int k_stored;    /* slots [0, k_stored) hold their keys at the cache's
                        precision (kv_cache_commit), the rest at full precision;
                        in an F32 cache, the slots whose rows are borrowed */
    int v_stored;    /* the same for values (where borrowed, at least k_stored) */
    const float *bk, *bv; /* borrowed rows (kv_cache_borrows): the lender's keys
                             and values, [row][n_kv_heads * head_dim] */
    int32_t *srow;   /* [cap]: the row of bk and bv that holds slot s < v_stored */
} kv_cache_layer;

/* Rows a cache lends to others (kvcache.c): freed by the last holder. */
typedef struct kv_shared kv_shared;

/* The precision a cache stores keys and values at (OpenVINO's
 * KV_CACHE_PRECISION, KEY_CACHE_QUANT_MODE and group sizes). A token's keys
 * and values enter the cache at full precision and are stored at this one
 * when the forward that computed them ends (kv_cache_commit): tokens of one
 * forward attend each other at full precision, earlier ones as stored.
 *
 * The stored form is what the precision holds: per slot and per keys or
 * values, a row of bf16/f16 bits or of u8 codes (u4: two a byte, kv_u4_pack)
 * with each group's F32 scale and min (kv_qgroup) beside them. By token a
 * group is key_group (value_group) consecutive channels of one KV head; by
 * channel it is one channel of a block of key_group slots: slots
 * [b G, (b + 1) G) share row kg[b] of parameters. Attention reads this form
 * directly (kernels.h, kv_dot_stored); eviction reads rows dequantised
 * (kv_cache_heads), each value x^ = min + q scale, as kvquant.h defines. */
typedef struct kv_cache_quant {
    kv_precision precision; /* KV_PREC_F32 (zero): nothing is rounded */
    bool key_by_channel;    /* u8/u4 keys: a block of key_group tokens shares
                               per-channel parameters (KIVI); the newest,
                               incomplete block stays at full precision */
    int key_group;   /* channels per group by token (divides head_dim), or
                        tokens per block by channel */
    int value_group; /* channels per group (values are always by token) */
} kv_cache_quant;

typedef struct kv_cache {
    int n_layers, n_kv_heads, head_dim;
    int next_pos;     /* RoPE position the next appended token gets */
    int token_offset; /* its index in the sequence is next_pos + token_offset
                         (0 unless "compact" eviction moved next_pos back) */
    kv_cache_layer *layers;
    kv_cache_quant quant;
    bool commit_held; /* the caller feeds one forward in several calls (a
                         prompt in slices): kv_cache_commit waits for the
                         last call, so slices attend each other unrounded */
    kv_shared *_Atomic lent; /* this cache's rows as lent to forks, or NULL */
    kv_shared *borrowed;     /* the lender's rows this cache's slots read, or NULL */
} kv_cache;

/* An empty cache with room for `cap` slots per layer (it grows on demand). */
kv_cache *kv_cache_new(int n_layers, int n_kv_heads, int head_dim, int cap, kv_error *err);
void kv_cache_free(kv_cache *c);

/* A deep copy holding max(len, cap_hint) slots per layer: the fork that
 * lets one prefill serve many eviction configs. */
kv_cache *kv_cache_fork(const kv_cache *c, int cap_hint, kv_error *err);

/* A copy of c whose tokens are stored at precision q, as if the forward
 * that computed them had ended in a cache of that precision: how one F32
 * prefill serves configs of every precision. q's group sizes are resolved
 * and checked (kv_cache_quant_check). */
kv_cache *kv_cache_fork_at(const kv_cache *c, const kv_cache_quant *q, int cap_hint,
                           kv_error *err);

/* Resolves q's group sizes of 0 (by token: the head dimension; by
 * channel: 32 tokens) and checks them against head_dim. */
int kv_cache_quant_check(kv_cache_quant *q, int head_dim, kv_error *err);

/* Whether two resolved precisions (kv_cache_quant_check) store alike:
 * the same precision and, for u8/u4, the same groups. */
bool kv_cache_quant_same(const kv_cache_quant *a, const kv_cache_quant *b);

/* Sets the precision of a cache that stores no slot yet (empty, F32, or
 * its forward not committed: the fork of a prompt's F32 cache for a
 * config at another precision, committed next); checks the group sizes
 * against the head dimension. Forks and compressed copies inherit it. */
int kv_cache_set_quant(kv_cache *c, const kv_cache_quant *q, kv_error *err);

/* The forward that appended a layer's newest slots is done with them:
 * stores them at the cache's precision (keys by channel: each block that
 * is now complete) and measures the stored values again. */
void kv_cache_commit(kv_cache *c, int layer);

/* Makes room for n more slots in every layer. */
int kv_cache_reserve(kv_cache *c, int n, kv_error *err);

/* The same but, in a cache that stores at another precision, without the
 * full-precision rows the new slots are first written to: a long forward
 * then asks for them one layer at a time (kv_cache_reserve_rows) right
 * before the layer writes, so one layer's rows, given back at its commit,
 * serve the next layer, and a prompt never holds all layers in F32. */
int kv_cache_reserve_slots(kv_cache *c, int n, kv_error *err);
int kv_cache_reserve_rows(kv_cache *c, int layer, int n, kv_error *err);
/* Makes room for `slots` slots in all in one layer. */
int kv_cache_reserve_layer(kv_cache *c, int layer, int slots, kv_error *err);

/* Floats in one slot row (n_kv_heads * head_dim). */
static inline int kv_cache_row(const kv_cache *c) { return c->n_kv_heads * c->head_dim; }

/* ---- reading keys and values, stored or not ---- */

typedef enum kv_cache_part { KV_KEYS, KV_VALUES } kv_cache_part;

/* Whether the cache stores at another precision than F32. */
static inline bool kv_cache_stores(const kv_cache *c) { return c->quant.precision != KV_PREC_F32; }

/* Whether an F32 cache reads slots of its own from a lender's rows (below
 * each part's stored count). */
static inline bool kv_cache_borrows(const kv_cache *c) { return c->borrowed != NULL; }

/* The borrowed row of slot `slot` (below the part's stored slots) of a
 * cache that kv_cache_borrows. */
static inline const float *kv_cache_borrowed_row(const kv_cache *c, const kv_cache_layer *l,
                                                 kv_cache_part part, int slot)
{
    return (part == KV_KEYS ? l->bk : l->bv) + (size_t)l->srow[slot] * (size_t)kv_cache_row(c);
}

/* Bytes one slot's keys (or values) take in the stored form, all KV heads. */
static inline size_t kv_cache_code_bytes(const kv_cache *c)
{
    return (size_t)kv_cache_row(c) * (size_t)kv_precision_bits(c->quant.precision) / 8;
}

/* Slots [0, n) of a part held in the stored form. */
static inline int kv_cache_stored(const kv_cache_layer *l, kv_cache_part part)
{
    return part == KV_KEYS ? l->k_stored : l->v_stored;
}

/* Where slot `slot`'s row begins, in floats, in full-precision rows that
 * hold the slots from `stored` on (`floats` a row). Every pointer into F32
 * rows is formed from it, so none is ever formed for a stored slot (whose
 * row would lie before the buffer). */
static inline size_t kv_cache_row_offset(int stored, int slot, int floats)
{
    assert(slot >= stored);
    return (size_t)(slot - stored) * (size_t)floats;
}

/* The full-precision row of slot `slot` (at or after the part's stored
 * slots): where a forward writes its keys and values. */
static inline float *kv_cache_full_row(const kv_cache *c, const kv_cache_layer *l,
                                       kv_cache_part part, int slot)
{
    return (part == KV_KEYS ? l->k : l->v) +
           kv_cache_row_offset(kv_cache_stored(l, part), slot, kv_cache_row(c));
}

/* The F32 row of slot `slot` in a cache that stores none: its own row, or
 * the lender's row it borrows. */
static inline const float *kv_cache_f32_row(const kv_cache *c, const kv_cache_layer *l,
                                            kv_cache_part part, int slot)
{
    if (slot < kv_cache_stored(l, part))
        return kv_cache_borrowed_row(c, l, part, slot);
    return kv_cache_full_row(c, l, part, slot);
}

/* The stored codes of slot `slot` (below the part's stored slots), from KV
 * head `head` on. */
static inline const uint8_t *kv_cache_codes(const kv_cache *c, const kv_cache_layer *l,
                                            kv_cache_part part, int slot, int head)
{
    size_t bits = (size_t)kv_precision_bits(c->quant.precision);
    return (part == KV_KEYS ? l->kq : l->vq) + (size_t)slot * kv_cache_code_bytes(c) +
           (size_t)head * (size_t)c->head_dim * bits / 8;
}

/* The u8/u4 group parameters of slot `slot`, from KV head `head` on: by
 * token its groups in channel order; keys by channel the parameters of
 * each channel of the slot's block. */
static inline const kv_qgroup *kv_cache_groups(const kv_cache *c, const kv_cache_layer *l,
                                               kv_cache_part part, int slot, int head)
{
    size_t row = (size_t)kv_cache_row(c), D = (size_t)c->head_dim;
    if (part == KV_VALUES)
        return l->vg + (size_t)slot * (row / (size_t)c->quant.value_group) +
               (size_t)head * (D / (size_t)c->quant.value_group);
    size_t G = (size_t)c->quant.key_group;
    if (c->quant.key_by_channel)
        return l->kg + (size_t)slot / G * row + (size_t)head * D;
    return l->kg + (size_t)slot * (row / G) + (size_t)head * (D / G);
}

/* KV heads [h0, h0 + heads) of one slot's keys or values as attention sees
 * them: a pointer into the cache where they are at full precision (an F32
 * cache: always, no copy), else dequantised into buf (heads * head_dim
 * floats). Eviction reads keys and values through it. */
const float *kv_cache_heads(const kv_cache *c, int layer, kv_cache_part part, int slot, int h0,
                            int heads, float *buf);

/* Slots [0, n) of one layer's keys and values as F32 rows, dequantised
 * where stored, into k and v ([n][row] each): the input of prefill's
 * matrix products over a cache that stores some of its slots. */
void kv_cache_dense(const kv_cache *c, int layer, int n, float *k, float *v);

/* Bytes one cached token takes over all layers at precision q, its group
 * parameters counted (by-channel keys: a block's parameters shared by its
 * key_group tokens): what `bench model` and run.json report. */
double kv_cache_bytes_per_token(const kv_cache_quant *q, int n_layers, int n_kv_heads,
                                int head_dim);

/* The position of the token in slot `slot` of KV head `head`. */
static inline int32_t kv_cache_pos(const kv_cache *c, int layer, int slot, int head)
{
    return c->layers[layer].pos[(size_t)slot * (size_t)c->n_kv_heads + (size_t)head];
}

/* Whether slot `slot` of KV head `head` holds a token (not in its gap). */
static inline int kv_cache_holds(const kv_cache *c, int layer, int slot, int head)
{
    const int *g = c->layers[layer].gap;
    return !g || slot < g[2 * head] || slot >= g[2 * head + 1];
}

/* The tokens a layer holds, over all its KV heads: len per head, less the
 * gaps. */
long kv_cache_entries(const kv_cache *c, int layer);
/* The tokens a layer holds per KV head, averaged over the layers and heads
 * and rounded: the cache length when all are alike; what reports show as
 * kept tokens when layers (pyramid) or heads (adaptive) differ. */
long kv_cache_mean_kept(const kv_cache *c);
/* The same, of the tokens at positions below pos only (the kept context
 * tokens when pos is the context's length). */
long kv_cache_mean_kept_before(const kv_cache *c, int32_t pos);

/* Sets every KV head's position of one slot (a token just written). */
static inline void kv_cache_set_pos(kv_cache *c, int layer, int slot, int32_t pos)
{
    int32_t *p = c->layers[layer].pos + (size_t)slot * (size_t)c->n_kv_heads;
    for (int h = 0; h < c->n_kv_heads; h++)
        p[h] = pos;
}

/* Records the value norms of slots [from, from + n) of one layer, just
 * written (the model calls it as it appends), of the values as stored. */
void kv_cache_measure_values(const kv_cache *c, kv_cache_layer *l, int from, int n);

/* Which slots of a layer a gather keeps. Set g keeps the slots
 * keep[g * stride + 0 .. n_keep[g]), strictly ascending, and moves the KV
 * heads it holds: all of them when one set is shared (sets 1), head g when
 * every KV head has its own set (sets n_kv_heads). */
typedef struct kv_cache_keep {
    int sets;
    const int *keep;
    int stride;
    const int *n_keep;
    /* NULL: keys move as they are. Else the model's RoPE frequencies
     * [head_dim / 2]: each key turns by the change of its rank in its head
     * (rerotation), as it is copied, so it is read and written once. */
    const double *inv_freq;
} kv_cache_keep;

/* Writes the kept slots of src's layer into dst's, in order (slot keep[j]
 * becomes j). dst may be src: rows then move down in place. The layer
 * becomes as long as its longest set; a shorter set leaves a gap after its
 * tokens (see above). Every compaction of the cache is one. */
int kv_cache_gather(const kv_cache *src, kv_cache *dst, int layer, const kv_cache_keep *k,
                    kv_error *err);

/* Keeps only the slots listed in keep[0..n_keep) of one layer, which must be
 * strictly ascending; survivors move down in order (slot keep[i] becomes i)
 * in every KV head: a gather with one set, in place, without rerotation.
 * Not for a layer with gaps (refused). */
int kv_cache_compact(kv_cache *c, int layer, const int *keep, int n_keep, kv_error *err);

/* Gives memory above `cap` slots per layer back to the allocator, so a
 * compressed cache costs only what it holds. */
int kv_cache_shrink(kv_cache *c, int cap, kv_error *err);

#endif
