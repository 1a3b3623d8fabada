#include "model/kvcache.h"

#include <math.h>
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

int kv_cache_compact(kv_cache *c, int layer, const int *keep, int n_keep, kv_error *err)
{
    if (layer < 0 || layer >= c->n_layers)
        return kv_fail(err, "KV cache: no layer %d", layer);
    kv_cache_layer *l = &c->layers[layer];
    if (l->gap)
        return kv_fail(err, "KV cache: layer %d has per-head gaps; slots cannot move as rows",
                       layer);
    size_t row = (size_t)kv_cache_row(c), heads = (size_t)c->n_kv_heads;
    for (int i = 0; i < n_keep; i++) {
        int s = keep[i];
        if (s < 0 || s >= l->len || (i > 0 && s <= keep[i - 1]))
            return kv_fail(err, "KV cache: kept slots must be ascending and < %d (got %d at %d)",
                           l->len, s, i);
        if (s == i)
            continue;
        memcpy(l->k + (size_t)i * row, l->k + (size_t)s * row, row * sizeof(float));
        memcpy(l->v + (size_t)i * row, l->v + (size_t)s * row, row * sizeof(float));
        memcpy(l->pos + (size_t)i * heads, l->pos + (size_t)s * heads, heads * sizeof(int32_t));
        memcpy(l->vlen + (size_t)i * heads, l->vlen + (size_t)s * heads, heads * sizeof(float));
    }
    int measured = 0; /* keep is ascending: the measured survivors are a prefix */
    while (measured < n_keep && keep[measured] < l->vlen_n)
        measured++;
    l->vlen_n = measured;
    l->len = n_keep;
    return 0;
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
