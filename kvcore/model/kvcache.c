#include "model/kvcache.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* row = floats per slot; heads = positions per slot */
static int layer_resize(kv_cache_layer *l, int row, int heads, int cap, kv_error *err)
{
    float *k = realloc(l->k, (size_t)cap * (size_t)row * sizeof *k);
    if (!k && cap > 0)
        return kv_fail(err, "KV cache: out of memory for %d slots", cap);
    l->k = k;
    float *v = realloc(l->v, (size_t)cap * (size_t)row * sizeof *v);
    if (!v && cap > 0)
        return kv_fail(err, "KV cache: out of memory for %d slots", cap);
    l->v = v;
    int32_t *pos = realloc(l->pos, (size_t)cap * (size_t)heads * sizeof *pos);
    if (!pos && cap > 0)
        return kv_fail(err, "KV cache: out of memory for %d slots", cap);
    l->pos = pos;
    float *vlen = realloc(l->vlen, (size_t)cap * (size_t)heads * sizeof *vlen);
    if (!vlen && cap > 0)
        return kv_fail(err, "KV cache: out of memory for %d slots", cap);
    l->vlen = vlen;
    l->cap = cap;
    if (l->vlen_n > cap)
        l->vlen_n = cap;
    return 0;
}

kv_cache *kv_cache_new(int n_layers, int n_kv_heads, int head_dim, int cap, kv_error *err)
{
    kv_cache *c = calloc(1, sizeof *c);
    if (!c || n_layers <= 0 || n_kv_heads <= 0 || head_dim <= 0) {
        free(c);
        kv_fail(err, "KV cache: bad shape (%d layers, %d kv heads, head_dim %d)", n_layers,
                n_kv_heads, head_dim);
        return NULL;
    }
    c->n_layers = n_layers;
    c->n_kv_heads = n_kv_heads;
    c->head_dim = head_dim;
    c->layers = calloc((size_t)n_layers, sizeof *c->layers);
    if (!c->layers) {
        free(c);
        kv_fail(err, "KV cache: out of memory");
        return NULL;
    }
    for (int i = 0; i < n_layers; i++)
        if (layer_resize(&c->layers[i], kv_cache_row(c), n_kv_heads, cap > 0 ? cap : 16, err) !=
            0) {
            kv_cache_free(c);
            return NULL;
        }
    return c;
}

void kv_cache_free(kv_cache *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->n_layers; i++) {
        free(c->layers[i].k);
        free(c->layers[i].v);
        free(c->layers[i].pos);
        free(c->layers[i].vlen);
        free(c->layers[i].gap);
    }
    free(c->layers);
    free(c);
}

kv_cache *kv_cache_fork(const kv_cache *c, int cap_hint, kv_error *err)
{
    kv_cache *f = kv_cache_new(c->n_layers, c->n_kv_heads, c->head_dim, 1, err);
    if (!f)
        return NULL;
    f->next_pos = c->next_pos;
    f->token_offset = c->token_offset;
    f->quant = c->quant;
    size_t row = (size_t)kv_cache_row(c);
    for (int i = 0; i < c->n_layers; i++) {
        const kv_cache_layer *src = &c->layers[i];
        kv_cache_layer *dst = &f->layers[i];
        int cap = src->len > cap_hint ? src->len : cap_hint;
        if (layer_resize(dst, (int)row, c->n_kv_heads, cap > 0 ? cap : 1, err) != 0) {
            kv_cache_free(f);
            return NULL;
        }
        memcpy(dst->k, src->k, (size_t)src->len * row * sizeof(float));
        memcpy(dst->v, src->v, (size_t)src->len * row * sizeof(float));
        memcpy(dst->pos, src->pos, (size_t)src->len * (size_t)c->n_kv_heads * sizeof(int32_t));
        memcpy(dst->vlen, src->vlen, (size_t)src->vlen_n * (size_t)c->n_kv_heads * sizeof(float));
        dst->vlen_n = src->vlen_n;
        dst->len = src->len;
        dst->k_stored = src->k_stored;
        dst->v_stored = src->v_stored;
        if (src->gap) {
            size_t bytes = 2 * (size_t)c->n_kv_heads * sizeof *src->gap;
            if (!(dst->gap = malloc(bytes))) {
                kv_cache_free(f);
                kv_fail(err, "KV cache: out of memory");
                return NULL;
            }
            memcpy(dst->gap, src->gap, bytes);
        }
    }
    return f;
}

/* Slots added when a full layer takes one more token: an eighth (amortized
 * growth, as doubling), at least 64, but not a doubling -- a decode grows
 * its cache one slot a step, and a fork that keeps its whole prompt (budget
 * above the prompt) would otherwise hold twice its tokens for the rest of
 * the answer (measured: 6.29 GB peak for a 31-config sweep at 512 tokens
 * where its slots add up to 4.9 GB). */
static int grow_step(int cap)
{
    return cap / 8 > 64 ? cap / 8 : 64;
}

/* ---- precision: when keys and values are stored at it ---- */

static bool quantised(const kv_cache_quant *q)
{
    return q->precision == KV_PREC_U8 || q->precision == KV_PREC_U4;
}

int kv_cache_quant_check(kv_cache_quant *q, int head_dim, kv_error *err)
{
    kv_cache_quant r = *q;
    int D = head_dim;
    if ((int)r.precision < KV_PREC_F32 || r.precision > KV_PREC_U4)
        return kv_fail(err, "KV cache: unknown precision %d", (int)r.precision);
    if (!quantised(&r))
        r.key_by_channel = false; /* bf16/f16 round each value: no groups */
    if (r.key_group == 0)
        r.key_group = r.key_by_channel ? 32 : D;
    if (r.value_group == 0)
        r.value_group = D;
    if (r.key_by_channel ? r.key_group < 1 || r.key_group > KV_QUANT_GROUP_MAX
                         : r.key_group < 1 || D % r.key_group != 0 || r.key_group > KV_QUANT_GROUP_MAX)
        return kv_fail(err,
                       "KV cache: key_group_size %d must %s %d", r.key_group,
                       r.key_by_channel ? "be 1 .. tokens, at most" : "divide the head dimension",
                       r.key_by_channel ? KV_QUANT_GROUP_MAX : D);
    if (r.value_group < 1 || D % r.value_group != 0 || r.value_group > KV_QUANT_GROUP_MAX)
        return kv_fail(err, "KV cache: value_group_size %d must divide the head dimension %d",
                       r.value_group, D);
    *q = r;
    return 0;
}

int kv_cache_set_quant(kv_cache *c, const kv_cache_quant *q, kv_error *err)
{
    kv_cache_quant r = *q;
    if (kv_cache_quant_check(&r, c->head_dim, err) != 0)
        return -1;
    c->quant = r;
    return 0;
}

kv_cache *kv_cache_fork_at(const kv_cache *c, const kv_cache_quant *q, int cap_hint,
                           kv_error *err)
{
    kv_cache *f = kv_cache_fork(c, cap_hint, err);
    if (!f || q->precision == c->quant.precision)
        return f;
    if (kv_cache_set_quant(f, q, err) != 0) {
        kv_cache_free(f);
        return NULL;
    }
    for (int l = 0; l < f->n_layers; l++)
        kv_cache_commit(f, l);
    return f;
}

/* Stores rows [from, to) of x (keys or values of one layer) at the cache's
 * precision, in groups of `group` channels within each KV head. */
static void store_rows(const kv_cache *c, float *x, int from, int to, int group)
{
    size_t row = (size_t)kv_cache_row(c);
    for (int t = from; t < to; t++)
        for (int g = 0; g < kv_cache_row(c); g += group)
            kv_round_group(x + (size_t)t * row + (size_t)g, (size_t)group, 1, c->quant.precision);
}

/* Stores the complete blocks of keys by channel from slot l->k_stored on:
 * every channel of a block of key_group tokens is one group. */
static void store_key_blocks(const kv_cache *c, kv_cache_layer *l)
{
    size_t row = (size_t)kv_cache_row(c);
    int G = c->quant.key_group;
    for (; l->k_stored + G <= l->len; l->k_stored += G)
        for (size_t ch = 0; ch < row; ch++)
            kv_round_group(l->k + (size_t)l->k_stored * row + ch, (size_t)G, row,
                           c->quant.precision);
}

void kv_cache_commit(kv_cache *c, int layer)
{
    kv_cache_layer *l = &c->layers[layer];
    if (c->quant.precision == KV_PREC_F32 || c->commit_held)
        return;
    int from = l->v_stored;
    store_rows(c, l->v, l->v_stored, l->len, c->quant.value_group);
    l->v_stored = l->len;
    if (c->quant.key_by_channel)
        store_key_blocks(c, l);
    else {
        store_rows(c, l->k, l->k_stored, l->len, c->quant.key_group);
        l->k_stored = l->len;
    }
    if (from < l->len) /* CriticalKV bounds weights by the norms of what is stored */
        kv_cache_measure_values(c, l, from, l->len - from);
}

int kv_cache_reserve(kv_cache *c, int n, kv_error *err)
{
    for (int i = 0; i < c->n_layers; i++) {
        kv_cache_layer *l = &c->layers[i];
        if (l->len + n <= l->cap)
            continue;
        int cap = l->cap + grow_step(l->cap);
        if (cap < l->len + n)
            cap = l->len + n;
        if (layer_resize(l, kv_cache_row(c), c->n_kv_heads, cap, err) != 0)
            return -1;
    }
    return 0;
}

int kv_cache_reserve_layer(kv_cache *c, int layer, int slots, kv_error *err)
{
    kv_cache_layer *l = &c->layers[layer];
    if (slots <= l->cap)
        return 0;
    return layer_resize(l, kv_cache_row(c), c->n_kv_heads, slots, err);
}

void kv_cache_measure_values(const kv_cache *c, kv_cache_layer *l, int from, int n)
{
    int D = c->head_dim, H = c->n_kv_heads;
    for (int t = from; t < from + n; t++)
        for (int h = 0; h < H; h++) {
            const float *v = l->v + ((size_t)t * (size_t)H + (size_t)h) * (size_t)D;
            double ss = 0.0;
            for (int i = 0; i < D; i++)
                ss += (double)v[i] * (double)v[i];
            l->vlen[(size_t)t * (size_t)H + (size_t)h] = (float)sqrt(ss);
        }
    if (from <= l->vlen_n && from + n > l->vlen_n)
        l->vlen_n = from + n;
}

/* dst = x*cos + rotate_half(x)*sin for one head's key, the angles'
 * cosines and sines given; dst may be x. */
static void rotate_by(float *dst, const float *x, int half, const double *c, const double *s)
{
    for (int f = 0; f < half; f++) {
        double x1 = x[f], x2 = x[f + half];
        dst[f] = (float)(x1 * c[f] - x2 * s[f]);
        dst[f + half] = (float)(x2 * c[f] + x1 * s[f]);
    }
}

/* The rank of slot t among the tokens KV head h holds in a layer: its slot
 * less the head's gap below it. Rerotation turns a key by the change of
 * its rank, the index it has in its own head's list, so a head's keys
 * rotate as in per-head (ragged) storage whatever the padding. */
static int held_rank(const kv_cache_layer *l, int h, int t)
{
    return l->gap && t >= l->gap[2 * h + 1] ? t - (l->gap[2 * h + 1] - l->gap[2 * h]) : t;
}

/* d's gaps after a gather whose sets keep n_keep[g] slots, len the
 * longest: none when all sets are as long. */
static int set_gaps(kv_cache_layer *d, int sets, const int *n_keep, int len, kv_error *err)
{
    bool ragged = false;
    for (int g = 0; g < sets; g++)
        ragged = ragged || n_keep[g] != len;
    if (!ragged) {
        free(d->gap);
        d->gap = NULL;
        return 0;
    }
    if (!d->gap && !(d->gap = malloc(2 * (size_t)sets * sizeof *d->gap)))
        return kv_fail(err, "KV cache: out of memory");
    for (int g = 0; g < sets; g++) {
        d->gap[2 * g] = n_keep[g];
        d->gap[2 * g + 1] = len;
    }
    return 0;
}

/* How many of the kept slots 0, 1, ... in a row come from slots below
 * `measured` in every set: the kept slots with their value norms. */
static int measured_prefix(const kv_cache_keep *k, int n_keep, int measured)
{
    int j = 0;
    for (; j < n_keep; j++)
        for (int g = 0; g < k->sets; g++)
            if (k->keep[(size_t)g * (size_t)k->stride + (size_t)j] >= measured)
                return j;
    return j;
}

/* The slots of a gathered layer of len slots that hold stored rows: the
 * kept ones from below `stored` in every set, and past the shortest set
 * its gap, whose zeros every precision stores exactly. */
static int stored_prefix(const kv_cache_keep *k, int shortest, int len, int stored)
{
    int j = measured_prefix(k, shortest, stored);
    return j == shortest ? len : j;
}

/* Checks every set's list; returns the longest (the layer's new length)
 * and the shortest through *shortest, or -1. */
static int check_keep(const kv_cache_layer *s, const kv_cache_keep *k, int *shortest,
                      kv_error *err)
{
    int len = 0;
    *shortest = s->len;
    for (int g = 0; g < k->sets; g++) {
        const int *kg = k->keep + (size_t)g * (size_t)k->stride;
        for (int j = 0; j < k->n_keep[g]; j++)
            if (kg[j] < j || kg[j] >= s->len || (j > 0 && kg[j] <= kg[j - 1]))
                return kv_fail(err, "KV cache: kept slots must be ascending and < %d (got %d at %d)",
                               s->len, kg[j], j);
        len = k->n_keep[g] > len ? k->n_keep[g] : len;
        *shortest = k->n_keep[g] < *shortest ? k->n_keep[g] : *shortest;
    }
    return len;
}

/* Empties slot j of the KV heads [h0, h0 + heads): a set's gap. Attention
 * weighs it 0, and 0 times a NaN left in fresh memory would still be NaN. */
static void clear_slot(const kv_cache *c, kv_cache_layer *d, int j, int h0, int heads)
{
    size_t at = (size_t)j * (size_t)kv_cache_row(c) + (size_t)h0 * (size_t)c->head_dim;
    memset(d->k + at, 0, (size_t)heads * (size_t)c->head_dim * sizeof(float));
    memset(d->v + at, 0, (size_t)heads * (size_t)c->head_dim * sizeof(float));
    for (int h = h0; h < h0 + heads; h++) {
        d->pos[(size_t)j * (size_t)c->n_kv_heads + (size_t)h] = -1;
        d->vlen[(size_t)j * (size_t)c->n_kv_heads + (size_t)h] = 0.0f;
    }
}

/* Deltas only decrease along the slots and come in long runs (per_token
 * decode: one run of -1), so each set's angles are computed once per run,
 * not once per key: cs holds a set's cosines then sines for delta. */
static void angles(const double *inv_freq, int half, int delta, double *cs)
{
    for (int f = 0; f < half; f++)
        sincos(delta * inv_freq[f], &cs[half + f], &cs[f]);
}

int kv_cache_gather(const kv_cache *src, kv_cache *dst, int layer, const kv_cache_keep *k,
                    kv_error *err)
{
    const kv_cache_layer *s = &src->layers[layer];
    kv_cache_layer *d = &dst->layers[layer];
    int D = src->head_dim, half = D / 2, sets = k->sets, nkv = src->n_kv_heads;
    int heads = sets > 1 ? 1 : nkv; /* KV heads moved per set */
    size_t row = (size_t)kv_cache_row(src), span = (size_t)heads * (size_t)D;
    bool in_place = src == dst;
    int shortest, len = check_keep(s, k, &shortest, err);
    if (len < 0 || kv_cache_reserve_layer(dst, layer, len + 1, err) != 0)
        return -1;
    double *cs = malloc((size_t)sets * (size_t)D * sizeof *cs); /* per set: cos | sin */
    int *delta = calloc((size_t)sets, sizeof *delta);
    if (!cs || !delta) {
        free(cs);
        free(delta);
        return kv_fail(err, "KV cache: out of memory");
    }
    for (int j = 0; j < len; j++)
        for (int g = 0; g < sets; g++) {
            int h0 = sets > 1 ? g : 0;
            if (j >= k->n_keep[g]) {
                clear_slot(src, d, j, h0, heads);
                continue;
            }
            int from = k->keep[(size_t)g * (size_t)k->stride + (size_t)j];
            if (in_place && from == j)
                continue;
            double *c = cs + (size_t)g * (size_t)D;
            int shift = j - held_rank(s, h0, from);
            if (k->inv_freq && shift != delta[g])
                angles(k->inv_freq, half, delta[g] = shift, c);
            /* in place, keep[j] >= j and ascending: row j is free once read */
            size_t to_off = (size_t)j * row + (size_t)h0 * D,
                   from_off = (size_t)from * row + (size_t)h0 * D;
            if (k->inv_freq && shift != 0) {
                for (int h = 0; h < heads; h++)
                    rotate_by(d->k + to_off + (size_t)h * D, s->k + from_off + (size_t)h * D, half,
                              c, c + half);
                /* a stored key is read dequantised, turned, and stored again */
                if (from < s->k_stored && !src->quant.key_by_channel)
                    for (size_t at = 0; at < span; at += (size_t)src->quant.key_group)
                        kv_round_group(d->k + to_off + at, (size_t)src->quant.key_group, 1,
                                       src->quant.precision);
            } else
                memcpy(d->k + to_off, s->k + from_off, span * sizeof(float));
            memcpy(d->v + to_off, s->v + from_off, span * sizeof(float));
            for (int h = h0; h < h0 + heads; h++) { /* a few numbers: no memcpy call */
                d->pos[(size_t)j * nkv + h] = s->pos[(size_t)from * nkv + h];
                d->vlen[(size_t)j * nkv + h] = s->vlen[(size_t)from * nkv + h];
            }
        }
    d->vlen_n = measured_prefix(k, shortest, s->vlen_n);
    int k_stored = stored_prefix(k, shortest, len, s->k_stored);
    d->v_stored = stored_prefix(k, shortest, len, s->v_stored);
    d->len = len;
    if (src->quant.key_by_channel) { /* the kept keys form new blocks */
        d->k_stored = 0;
        store_key_blocks(dst, d);
    } else
        d->k_stored = k_stored;
    free(cs);
    free(delta);
    return set_gaps(d, sets, k->n_keep, len, err);
}

int kv_cache_compact(kv_cache *c, int layer, const int *keep, int n_keep, kv_error *err)
{
    if (layer < 0 || layer >= c->n_layers)
        return kv_fail(err, "KV cache: no layer %d", layer);
    if (c->layers[layer].gap)
        return kv_fail(err, "KV cache: layer %d has per-head gaps; slots cannot move as rows",
                       layer);
    kv_cache_keep k = {.sets = 1, .keep = keep, .stride = n_keep, .n_keep = &n_keep};
    return kv_cache_gather(c, c, layer, &k, err);
}

long kv_cache_entries(const kv_cache *c, int layer)
{
    const kv_cache_layer *l = &c->layers[layer];
    long n = (long)l->len * c->n_kv_heads;
    for (int h = 0; l->gap && h < c->n_kv_heads; h++)
        n -= l->gap[2 * h + 1] - l->gap[2 * h];
    return n;
}

long kv_cache_mean_kept(const kv_cache *c)
{
    double sum = 0;
    for (int l = 0; l < c->n_layers; l++)
        sum += (double)kv_cache_entries(c, l);
    return lround(sum / ((double)c->n_layers * c->n_kv_heads));
}

long kv_cache_mean_kept_before(const kv_cache *c, int32_t pos)
{
    double sum = 0;
    for (int l = 0; l < c->n_layers; l++)
        for (int s = 0; s < c->layers[l].len; s++)
            for (int h = 0; h < c->n_kv_heads; h++)
                sum += kv_cache_holds(c, l, s, h) && kv_cache_pos(c, l, s, h) < pos;
    return lround(sum / ((double)c->n_layers * c->n_kv_heads));
}

int kv_cache_shrink(kv_cache *c, int cap, kv_error *err)
{
    for (int i = 0; i < c->n_layers; i++) {
        kv_cache_layer *l = &c->layers[i];
        int want = l->len > cap ? l->len : cap;
        if (want < 1)
            want = 1;
        if (want < l->cap && layer_resize(l, kv_cache_row(c), c->n_kv_heads, want, err) != 0)
            return -1;
    }
    return 0;
}
