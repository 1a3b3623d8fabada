#include "model/kvcache.h"

#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "model/kernels.h"
#include "util/mem.h"

static bool quantised(const kv_cache_quant *q)
{
    return q->precision == KV_PREC_U8 || q->precision == KV_PREC_U4;
}

/* realloc of *p to `bytes`; 0 frees. A cache's arrays are written whole
 * soon after (a prefill, a fork, a compression), so they ask for huge
 * pages (kv_mem_advise_huge): a sweep's forks are most of its fresh memory. */
static int resize(void *p, size_t bytes, kv_error *err)
{
    void **at = p;
    if (bytes == 0) {
        free(*at);
        *at = NULL;
        return 0;
    }
    void *q = realloc(*at, bytes);
    if (!q)
        return kv_fail(err, "KV cache: out of memory for %zu bytes", bytes);
    kv_mem_advise_huge(q, bytes);
    *at = q;
    return 0;
}

/* Key group parameters of `slots` slots (kvcache.h: kg). */
static size_t key_groups(const kv_cache *c, int slots)
{
    size_t row = (size_t)kv_cache_row(c), G = (size_t)c->quant.key_group;
    if (!quantised(&c->quant))
        return 0;
    return c->quant.key_by_channel ? ((size_t)slots + G - 1) / G * row : (size_t)slots * (row / G);
}

static size_t value_groups(const kv_cache *c, int slots)
{
    if (!quantised(&c->quant))
        return 0;
    return (size_t)slots * ((size_t)kv_cache_row(c) / (size_t)c->quant.value_group);
}

/* A part's full rows and the rows before them in their block. */
static float **rows_of(kv_cache_layer *l, kv_cache_part part)
{
    return part == KV_KEYS ? &l->k : &l->v;
}

static int *front_of(kv_cache_layer *l, kv_cache_part part)
{
    return part == KV_KEYS ? &l->k_front : &l->v_front;
}

/* The number of rows a part's block holds from its full rows on. */
static int *row_count_of(kv_cache_layer *l, kv_cache_part part)
{
    return part == KV_KEYS ? &l->k_rows : &l->v_rows;
}

/* A part's stored (or, in a borrower, borrowed) slots: kv_cache_stored's
 * count, to be set. */
static int *stored_of(kv_cache_layer *l, kv_cache_part part)
{
    return part == KV_KEYS ? &l->k_stored : &l->v_stored;
}

/* The start of the block holding a part's full rows (what malloc gave). */
static float *block_of(const kv_cache *c, const kv_cache_layer *l, kv_cache_part part)
{
    float *rows = part == KV_KEYS ? l->k : l->v;
    int front = part == KV_KEYS ? l->k_front : l->v_front;
    return rows ? rows - (size_t)front * (size_t)kv_cache_row(c) : NULL;
}

/* ---- lent rows (kvcache.h: "Borrowed rows") ---- */

/* The F32 blocks of a cache as it lent them, [n_layers][keys, values],
 * freed when the lender and every borrower have let go. */
struct kv_shared {
    atomic_int holders;
    int n_blocks;
    float *blocks[];
};

static kv_shared *shared_hold(kv_shared *s)
{
    atomic_fetch_add(&s->holders, 1);
    return s;
}

static void shared_release(kv_shared *s)
{
    if (!s || atomic_fetch_sub(&s->holders, 1) != 1)
        return;
    for (int i = 0; i < s->n_blocks; i++)
        free(s->blocks[i]);
    free(s);
}

/* The rows c has lent, or NULL. Lending changes no row, so a const cache
 * may have lent: only `lent` changes, atomically. */
static kv_shared *lent_of(const kv_cache *c)
{
    return atomic_load(&((kv_cache *)c)->lent);
}

/* c's rows as lent, one more holder of them; the first call lends them
 * (the lender is a holder too). Lending changes no row, so a const cache
 * lends: the forks of one prompt are made at once on the pool's threads,
 * and the first of them to get here publishes the blocks. NULL: out of
 * memory. */
static kv_shared *lend(const kv_cache *c)
{
    kv_shared *s = lent_of(c);
    if (!s) {
        size_t n = 2 * (size_t)c->n_layers;
        if (!(s = malloc(sizeof *s + n * sizeof *s->blocks)))
            return NULL;
        atomic_init(&s->holders, 1);
        s->n_blocks = (int)n;
        for (int l = 0; l < c->n_layers; l++) {
            s->blocks[2 * l] = block_of(c, &c->layers[l], KV_KEYS);
            s->blocks[2 * l + 1] = block_of(c, &c->layers[l], KV_VALUES);
        }
        kv_shared *first = NULL;
        if (!atomic_compare_exchange_strong(&((kv_cache *)c)->lent, &first, s)) {
            free(s);
            s = first;
        }
    }
    return shared_hold(s);
}

/* Whether a part's block in layer l of c is one it lent. */
static bool lent_block(const kv_cache *c, const kv_cache_layer *l, kv_cache_part part)
{
    kv_shared *s = lent_of(c);
    return s && block_of(c, l, part) == s->blocks[2 * (l - c->layers) + (int)part];
}

/* A lender about to move or change a part's rows (growing, compacting,
 * storing) takes a copy of its own first: its borrowers go on reading the
 * lent block, which the last of them frees. */
static int keep_own(const kv_cache *c, kv_cache_layer *l, kv_cache_part part, kv_error *err)
{
    if (!lent_block(c, l, part))
        return 0;
    int rows = *row_count_of(l, part);
    size_t row = (size_t)kv_cache_row(c) * sizeof(float);
    float *own = malloc((size_t)rows * row);
    if (!own)
        return kv_fail(err, "KV cache: out of memory for %zu bytes", (size_t)rows * row);
    memcpy(own, *rows_of(l, part), (size_t)(l->len - kv_cache_stored(l, part)) * row);
    *rows_of(l, part) = own;
    *front_of(l, part) = 0;
    return 0;
}

static int keep_own_rows(const kv_cache *c, kv_cache_layer *l, kv_error *err)
{
    return keep_own(c, l, KV_KEYS, err) != 0 || keep_own(c, l, KV_VALUES, err) != 0 ? -1 : 0;
}

/* Moves a part's rows in use back to the start of their block. */
static void unshift(const kv_cache *c, kv_cache_layer *l, kv_cache_part part)
{
    int *front = front_of(l, part);
    if (*front == 0)
        return;
    float *block = block_of(c, l, part);
    size_t used = (size_t)(l->len - kv_cache_stored(l, part));
    memmove(block, *rows_of(l, part), used * (size_t)kv_cache_row(c) * sizeof(float));
    *rows_of(l, part) = block;
    *front = 0;
}

/* Makes k and v hold krows and vrows full-precision rows. */
static int full_resize(const kv_cache *c, kv_cache_layer *l, int krows, int vrows, kv_error *err)
{
    size_t row = (size_t)kv_cache_row(c) * sizeof(float);
    if (krows != l->k_rows || vrows != l->v_rows) { /* realloc moves blocks, not fronts */
        if (keep_own_rows(c, l, err) != 0)
            return -1;
        unshift(c, l, KV_KEYS);
        unshift(c, l, KV_VALUES);
    }
    if (krows != l->k_rows) {
        if (resize(&l->k, (size_t)krows * row, err) != 0)
            return -1;
        l->k_rows = krows;
    }
    if (vrows != l->v_rows) {
        if (resize(&l->v, (size_t)vrows * row, err) != 0)
            return -1;
        l->v_rows = vrows;
    }
    return 0;
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

static int grown(int have, int need)
{
    int cap = have + grow_step(have);
    return cap < need ? need : cap;
}

/* Whether a cache's full-precision rows are only those of slots past the
 * stored (or borrowed) ones, made room for as needed (full_reserve); a
 * plain F32 cache's rows are its slots. A borrower's own rows are the few
 * tokens it appends: room for all its slots would cost a fresh 2 MiB page
 * per layer and part on a heap of huge pages (harness/cli/memory.c). */
static bool rows_apart(const kv_cache *c)
{
    return kv_cache_stores(c) || kv_cache_borrows(c);
}

/* A stored cache's room for n more full-precision rows of keys and of
 * values beyond those in use (an F32 cache's rows are its slots). */
static int full_reserve(const kv_cache *c, kv_cache_layer *l, int n, kv_error *err)
{
    int kneed = l->len - l->k_stored + n, vneed = l->len - l->v_stored + n;
    return full_resize(c, l, kneed > l->k_rows ? grown(l->k_rows, kneed) : l->k_rows,
                       vneed > l->v_rows ? grown(l->v_rows, vneed) : l->v_rows, err);
}

/* Gives back the full-precision rows a commit emptied when they are many
 * (a prefill's): all of them, so the whole block returns to the allocator
 * and the next layer's rows reuse it (a prompt's rows cost memory one
 * layer at a time). A few (a decode step's, by-channel keys' residual
 * block) stay for the next step. */
static void full_release(const kv_cache *c, kv_cache_layer *l)
{
    int kused = l->len - l->k_stored, vused = l->len - l->v_stored;
    kv_error ignored; /* shrinking: realloc keeps the old block if it cannot move */
    full_resize(c, l, l->k_rows > kused + 64 ? kused : l->k_rows,
                l->v_rows > vused + 64 ? vused : l->v_rows, &ignored);
}

/* Rows an F32 layer of cap slots allocates: cap, and room for its front
 * to move up (shift_front) a few times before its rows go back to the
 * block's start. */
static int f32_rows(int cap)
{
    return cap + (cap / 32 > 16 ? cap / 32 : 16);
}

/* Sets a layer's capacity to cap slots: positions, norms, the stored form,
 * and in an F32 cache its rows. */
static int layer_resize(const kv_cache *c, kv_cache_layer *l, int cap, kv_error *err)
{
    size_t n = (size_t)cap, heads = (size_t)c->n_kv_heads, bytes = kv_cache_code_bytes(c);
    bool stores = kv_cache_stores(c);
    if (resize(&l->pos, n * heads * sizeof *l->pos, err) != 0 ||
        resize(&l->srow, kv_cache_borrows(c) ? n * sizeof *l->srow : 0, err) != 0 ||
        resize(&l->vlen, n * heads * sizeof *l->vlen, err) != 0 ||
        resize(&l->kq, stores ? n * bytes : 0, err) != 0 ||
        resize(&l->vq, stores ? n * bytes : 0, err) != 0 ||
        resize(&l->kg, key_groups(c, cap) * sizeof *l->kg, err) != 0 ||
        resize(&l->vg, value_groups(c, cap) * sizeof *l->vg, err) != 0 ||
        (!stores && !kv_cache_borrows(c) &&
         full_resize(c, l, f32_rows(cap), f32_rows(cap), err) != 0))
        return -1;
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
        if (layer_resize(c, &c->layers[i], cap > 0 ? cap : 16, err) != 0) {
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
        kv_cache_layer *l = &c->layers[i];
        for (int part = KV_KEYS; part <= KV_VALUES; part++)
            if (!lent_block(c, l, (kv_cache_part)part))
                free(block_of(c, l, (kv_cache_part)part));
        free(l->srow);
        free(l->kq);
        free(l->vq);
        free(l->kg);
        free(l->vg);
        free(l->pos);
        free(l->vlen);
        free(l->gap);
    }
    shared_release(lent_of(c));
    shared_release(c->borrowed);
    free(c->layers);
    free(c);
}

/* memcpy of n bytes that may be none: a part a cache does not hold (all
 * its rows stored, no F32 rows) has a NULL buffer, which memcpy may not
 * be given even for 0 bytes. */
static void copy_bytes(void *dst, const void *src, size_t n)
{
    if (n)
        memcpy(dst, src, n);
}

/* A fork's layer d takes src's length, positions and gaps. */
static int copy_layout(const kv_cache *c, const kv_cache_layer *src, kv_cache_layer *d,
                       kv_error *err)
{
    d->len = src->len;
    copy_bytes(d->pos, src->pos, (size_t)src->len * (size_t)c->n_kv_heads * sizeof *src->pos);
    if (!src->gap)
        return 0;
    size_t gap_bytes = 2 * (size_t)c->n_kv_heads * sizeof *src->gap;
    if (!(d->gap = malloc(gap_bytes)))
        return kv_fail(err, "KV cache: out of memory");
    memcpy(d->gap, src->gap, gap_bytes);
    return 0;
}

kv_cache *kv_cache_fork(const kv_cache *c, int cap_hint, kv_error *err)
{
    kv_cache *f = kv_cache_new(c->n_layers, c->n_kv_heads, c->head_dim, 1, err);
    if (!f)
        return NULL;
    f->next_pos = c->next_pos;
    f->token_offset = c->token_offset;
    f->quant = c->quant;
    if (kv_cache_borrows(c)) /* its borrowed slots stay borrowed: the copy reads them too */
        f->borrowed = shared_hold(c->borrowed);
    size_t row = (size_t)kv_cache_row(c) * sizeof(float), bytes = kv_cache_code_bytes(c);
    for (int i = 0; i < c->n_layers; i++) {
        const kv_cache_layer *src = &c->layers[i];
        kv_cache_layer *dst = &f->layers[i];
        int cap = src->len > cap_hint ? src->len : cap_hint;
        dst->len = src->len;
        dst->k_stored = src->k_stored;
        dst->v_stored = src->v_stored;
        if (layer_resize(f, dst, cap > 0 ? cap : 1, err) != 0 ||
            (rows_apart(c) && full_reserve(f, dst, 1, err) != 0) ||
            copy_layout(c, src, dst, err) != 0) {
            kv_cache_free(f);
            return NULL;
        }
        copy_bytes(dst->k, src->k, (size_t)(src->len - src->k_stored) * row);
        copy_bytes(dst->v, src->v, (size_t)(src->len - src->v_stored) * row);
        if (kv_cache_borrows(c)) {
            dst->bk = src->bk;
            dst->bv = src->bv;
            int n = src->k_stored > src->v_stored ? src->k_stored : src->v_stored;
            copy_bytes(dst->srow, src->srow, (size_t)n * sizeof *src->srow);
        }
        if (kv_cache_stores(c)) {
            copy_bytes(dst->kq, src->kq, (size_t)src->k_stored * bytes);
            copy_bytes(dst->vq, src->vq, (size_t)src->v_stored * bytes);
            copy_bytes(dst->kg, src->kg, key_groups(c, src->k_stored) * sizeof *src->kg);
            copy_bytes(dst->vg, src->vg, value_groups(c, src->v_stored) * sizeof *src->vg);
        }
        copy_bytes(dst->vlen, src->vlen, (size_t)src->vlen_n * (size_t)c->n_kv_heads * sizeof(float));
        dst->vlen_n = src->vlen_n;
    }
    return f;
}

/* ---- precision: when keys and values are stored at it ---- */

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
    /* u4 codes go two a byte: a group by token starts on a byte */
    if (r.precision == KV_PREC_U4 && ((!r.key_by_channel && r.key_group % 2) || r.value_group % 2))
        return kv_fail(err, "KV cache: u4 group sizes by token must be even (key %d, value %d)",
                       r.key_group, r.value_group);
    *q = r;
    return 0;
}

bool kv_cache_quant_same(const kv_cache_quant *a, const kv_cache_quant *b)
{
    return a->precision == b->precision &&
           (!quantised(a) || (a->key_by_channel == b->key_by_channel &&
                              a->key_group == b->key_group && a->value_group == b->value_group));
}

int kv_cache_set_quant(kv_cache *c, const kv_cache_quant *q, kv_error *err)
{
    kv_cache_quant r = *q;
    if (kv_cache_quant_check(&r, c->head_dim, err) != 0)
        return -1;
    /* rows not yet stored are at full precision at any precision (an F32
     * cache's all are): a fork of the prompt's cache takes a config's own */
    for (int i = 0; i < c->n_layers; i++)
        if (c->layers[i].k_stored > 0 || c->layers[i].v_stored > 0)
            return kv_fail(err, "KV cache: a cache storing tokens at %s keeps that precision",
                           kv_precision_name(c->quant.precision));
    c->quant = r;
    for (int i = 0; i < c->n_layers; i++) { /* the stored form's room */
        kv_cache_layer *l = &c->layers[i];
        /* a commit will move the rows it stores: not lent ones */
        if ((kv_cache_stores(c) && keep_own_rows(c, l, err) != 0) ||
            layer_resize(c, l, l->cap, err) != 0)
            return -1;
        /* full-precision rows only for the slots in use: a forward asks
         * for its own, a layer at a time (kv_cache_reserve_rows) */
        if (kv_cache_stores(c) && full_resize(c, l, l->len, l->len, err) != 0)
            return -1;
    }
    return 0;
}

/* ---- the stored form, value by value ---- */

/* Code i of a stored row (u8: a byte; u4: a nibble). */
static unsigned code_at(kv_precision p, const uint8_t *codes, size_t i)
{
    return p == KV_PREC_U4 ? kv_u4_get(codes, i) : codes[i];
}

static void set_code(kv_precision p, uint8_t *codes, size_t i, unsigned q)
{
    if (p == KV_PREC_U4) {
        unsigned sh = (unsigned)(i % 2) * 4;
        codes[i / 2] = (uint8_t)((codes[i / 2] & ~(0xfu << sh)) | q << sh);
    } else
        codes[i] = (uint8_t)q;
}

/* The group parameters of channel ch (of the whole row) of slot s. */
static kv_qgroup *group_of(const kv_cache *c, const kv_cache_layer *l, kv_cache_part part, int s,
                           size_t ch)
{
    size_t row = (size_t)kv_cache_row(c);
    if (part == KV_VALUES)
        return l->vg + (size_t)s * (row / (size_t)c->quant.value_group) +
               ch / (size_t)c->quant.value_group;
    size_t G = (size_t)c->quant.key_group;
    if (c->quant.key_by_channel)
        return l->kg + (size_t)s / G * row + ch;
    return l->kg + (size_t)s * (row / G) + ch / G;
}

static uint8_t *codes_of(const kv_cache *c, const kv_cache_layer *l, kv_cache_part part, int s)
{
    return (part == KV_KEYS ? l->kq : l->vq) + (size_t)s * kv_cache_code_bytes(c);
}

/* Channels [at, at + n) of stored slot s, dequantised into out. */
static void load(const kv_cache *c, const kv_cache_layer *l, kv_cache_part part, int s, size_t at,
                 size_t n, float *out)
{
    if (kv_cache_borrows(c)) {
        memcpy(out, kv_cache_borrowed_row(c, l, part, s) + at, n * sizeof *out);
        return;
    }
    const uint8_t *codes = codes_of(c, l, part, s);
    const uint16_t *bits = (const uint16_t *)(const void *)codes;
    kv_precision p = c->quant.precision;
    for (size_t i = 0; i < n; i++)
        switch (p) {
        case KV_PREC_BF16:
            out[i] = kv_bf16_to_f32(bits[at + i]);
            break;
        case KV_PREC_F16:
            out[i] = kv_f16_to_f32(bits[at + i]);
            break;
        default:
            out[i] = kv_dequant((uint8_t)code_at(p, codes, at + i), *group_of(c, l, part, s, at + i));
        }
}

/* Stores channels [at, at + n) of slot s from x, by token: u8/u4 in groups
 * of the part's group size (at and n whole groups). */
static void store(const kv_cache *c, kv_cache_layer *l, kv_cache_part part, int s, size_t at,
                  size_t n, const float *x)
{
    uint8_t *codes = codes_of(c, l, part, s);
    uint16_t *bits = (uint16_t *)(void *)codes;
    kv_precision p = c->quant.precision;
    if (p == KV_PREC_BF16 || p == KV_PREC_F16) {
        for (size_t i = 0; i < n; i++)
            bits[at + i] = p == KV_PREC_BF16 ? kv_f32_to_bf16(x[i]) : kv_f32_to_f16(x[i]);
        return;
    }
    size_t G = (size_t)(part == KV_KEYS ? c->quant.key_group : c->quant.value_group);
    uint8_t q[KV_QUANT_GROUP_MAX];
    for (size_t g = 0; g < n; g += G) {
        *group_of(c, l, part, s, at + g) = kv_quant_group(x + g, G, 1, kv_precision_bits(p), q);
        for (size_t i = 0; i < G; i++)
            set_code(p, codes, at + g + i, q[i]);
    }
}

/* Slot s's channels [at, at + n) stored as zeros (a gap's), by token. */
static void store_zeros(const kv_cache *c, kv_cache_layer *l, kv_cache_part part, int s, size_t at,
                        size_t n)
{
    size_t bits = (size_t)kv_precision_bits(c->quant.precision);
    memset(codes_of(c, l, part, s) + at * bits / 8, 0, n * bits / 8);
    for (size_t i = 0; quantised(&c->quant) && i < n; i++)
        *group_of(c, l, part, s, at + i) = (kv_qgroup){0.0f, 0.0f};
}

/* KV heads [h0, h0 + heads) of a slot's part: its full row, or dequantised
 * into buf. */
static const float *heads_of(const kv_cache *c, const kv_cache_layer *l, kv_cache_part part,
                             int slot, int h0, int heads, float *buf)
{
    size_t at = (size_t)h0 * (size_t)c->head_dim;
    if (slot >= kv_cache_stored(l, part) || kv_cache_borrows(c))
        return kv_cache_f32_row(c, l, part, slot) + at;
    load(c, l, part, slot, at, (size_t)heads * (size_t)c->head_dim, buf);
    return buf;
}

const float *kv_cache_heads(const kv_cache *c, int layer, kv_cache_part part, int slot, int h0,
                            int heads, float *buf)
{
    return heads_of(c, &c->layers[layer], part, slot, h0, heads, buf);
}

void kv_cache_dense(const kv_cache *c, int layer, int n, float *k, float *v)
{
    size_t row = (size_t)kv_cache_row(c);
    for (int s = 0; s < n; s++)
        for (int part = KV_KEYS; part <= KV_VALUES; part++) {
            float *out = (part == KV_KEYS ? k : v) + (size_t)s * row;
            const float *x = kv_cache_heads(c, layer, (kv_cache_part)part, s, 0, c->n_kv_heads, out);
            if (x != out)
                memcpy(out, x, row * sizeof *out);
        }
}

double kv_cache_bytes_per_token(const kv_cache_quant *q, int n_layers, int n_kv_heads,
                                int head_dim)
{
    double row = (double)n_kv_heads * head_dim, bits = kv_precision_bits(q->precision);
    double per_part = row * bits / 8, key_params = 0, value_params = 0;
    if (quantised(q)) { /* a kv_qgroup per group; by channel a block's row of
                           them is shared by its key_group tokens */
        key_params = row / q->key_group;
        value_params = row / q->value_group;
    }
    return n_layers * (2 * per_part + (key_params + value_params) * sizeof(kv_qgroup));
}

/* Drops the first n full-precision rows of a part (just stored): the rest
 * move to the front. */
static void drop_full(const kv_cache *c, kv_cache_layer *l, kv_cache_part part, int n)
{
    size_t row = (size_t)kv_cache_row(c);
    size_t rest = (size_t)(l->len - kv_cache_stored(l, part) - n);
    if (n > 0 && rest > 0) /* else there may be no rows at all (NULL) */
        memmove(part == KV_KEYS ? l->k : l->v,
                kv_cache_full_row(c, l, part, kv_cache_stored(l, part) + n), rest * row * sizeof(float));
}

/* Stores a part's slots from its stored ones up to `to`, by token. */
static void store_slots(const kv_cache *c, kv_cache_layer *l, kv_cache_part part, int to)
{
    size_t row = (size_t)kv_cache_row(c);
    int from = kv_cache_stored(l, part);
    for (int s = from; s < to; s++)
        store(c, l, part, s, 0, row, kv_cache_full_row(c, l, part, s));
    drop_full(c, l, part, to - from);
    *stored_of(l, part) = to;
}

/* Stores keys by channel of block [s, s + key_group) from x, its rows
 * ([key_group][row] floats): every channel of the block is one group. */
static void store_key_block(const kv_cache *c, kv_cache_layer *l, int s, const float *x)
{
    size_t row = (size_t)kv_cache_row(c);
    int G = c->quant.key_group;
    kv_precision p = c->quant.precision;
    uint8_t q[KV_QUANT_GROUP_MAX];
    for (size_t ch = 0; ch < row; ch++) {
        *group_of(c, l, KV_KEYS, s, ch) =
            kv_quant_group(x + ch, (size_t)G, row, kv_precision_bits(p), q);
        for (int t = 0; t < G; t++)
            set_code(p, codes_of(c, l, KV_KEYS, s + t), ch, q[t]);
    }
}

/* Stores the complete blocks of keys by channel from slot l->k_stored on. */
static void store_key_blocks(const kv_cache *c, kv_cache_layer *l)
{
    int G = c->quant.key_group, from = l->k_stored, s = from;
    for (; s + G <= l->len; s += G)
        store_key_block(c, l, s, kv_cache_full_row(c, l, KV_KEYS, s));
    drop_full(c, l, KV_KEYS, s - from);
    l->k_stored = s;
}

void kv_cache_commit(kv_cache *c, int layer)
{
    kv_cache_layer *l = &c->layers[layer];
    if (!kv_cache_stores(c) || c->commit_held)
        return;
    int from = l->v_stored;
    store_slots(c, l, KV_VALUES, l->len);
    if (c->quant.key_by_channel)
        store_key_blocks(c, l);
    else
        store_slots(c, l, KV_KEYS, l->len);
    full_release(c, l);
    if (from < l->len) /* CriticalKV bounds weights by the norms of what is stored */
        kv_cache_measure_values(c, l, from, l->len - from);
}

/* The fork of an unstored layer src into d at d's precision: each slot's
 * keys and values are stored as they are read from src's rows (no F32
 * copy first), as kv_cache_commit would store them; keys by channel leave
 * their incomplete last block at full precision. */
static int store_layer_from(kv_cache *f, kv_cache_layer *d, const kv_cache *c,
                            const kv_cache_layer *src, kv_error *err)
{
    size_t row = (size_t)kv_cache_row(c);
    int len = src->len, keys = len;
    for (int s = 0; s < len; s++)
        store(f, d, KV_VALUES, s, 0, row, kv_cache_f32_row(c, src, KV_VALUES, s));
    if (f->quant.key_by_channel) { /* a block's rows are consecutive where none is borrowed */
        int G = f->quant.key_group;
        float *block = kv_cache_borrows(c) ? malloc((size_t)G * row * sizeof *block) : NULL;
        if (kv_cache_borrows(c) && !block)
            return kv_fail(err, "KV cache: out of memory");
        keys = len / G * G;
        for (int s = 0; s < keys; s += G) {
            const float *x = block;
            if (s >= src->k_stored)
                x = kv_cache_full_row(c, src, KV_KEYS, s);
            else
                for (int t = 0; t < G; t++)
                    memcpy(block + (size_t)t * row, kv_cache_f32_row(c, src, KV_KEYS, s + t),
                           row * sizeof *block);
            store_key_block(f, d, s, x);
        }
        free(block);
    } else
        for (int s = 0; s < len; s++)
            store(f, d, KV_KEYS, s, 0, row, kv_cache_f32_row(c, src, KV_KEYS, s));
    if (full_resize(f, d, len - keys, 0, err) != 0)
        return -1;
    for (int s = keys; s < len; s++)
        memcpy(d->k + (size_t)(s - keys) * row, kv_cache_f32_row(c, src, KV_KEYS, s),
               row * sizeof(float));
    d->k_stored = keys;
    d->v_stored = len;
    if (len > 0) /* the norms of the values as stored, as a commit measures them */
        kv_cache_measure_values(f, d, 0, len);
    return 0;
}

kv_cache *kv_cache_fork_at(const kv_cache *c, const kv_cache_quant *q, int cap_hint,
                           kv_error *err)
{
    if (q->precision == c->quant.precision)
        return kv_cache_fork(c, cap_hint, err);
    for (int i = 0; i < c->n_layers && !kv_cache_borrows(c); i++)
        if (c->layers[i].k_stored > 0 || c->layers[i].v_stored > 0) {
            kv_fail(err, "KV cache: a cache storing tokens at %s keeps that precision",
                    kv_precision_name(c->quant.precision));
            return NULL;
        }
    kv_cache *f = kv_cache_new(c->n_layers, c->n_kv_heads, c->head_dim, 1, err);
    if (!f || kv_cache_set_quant(f, q, err) != 0) {
        kv_cache_free(f);
        return NULL;
    }
    f->next_pos = c->next_pos;
    f->token_offset = c->token_offset;
    for (int i = 0; i < c->n_layers; i++) {
        const kv_cache_layer *src = &c->layers[i];
        kv_cache_layer *dst = &f->layers[i];
        int cap = src->len > cap_hint ? src->len : cap_hint;
        if (layer_resize(f, dst, cap > 0 ? cap : 1, err) != 0 ||
            copy_layout(c, src, dst, err) != 0 || store_layer_from(f, dst, c, src, err) != 0) {
            kv_cache_free(f);
            return NULL;
        }
    }
    return f;
}

/* Room for n more slots in every layer, and their full-precision rows when
 * `rows` (else kv_cache_reserve_rows gives them layer by layer). */
static int reserve(kv_cache *c, int n, bool rows, kv_error *err)
{
    for (int i = 0; i < c->n_layers; i++) {
        kv_cache_layer *l = &c->layers[i];
        if (l->len + n > l->cap && layer_resize(c, l, grown(l->cap, l->len + n), err) != 0)
            return -1;
        if (rows && rows_apart(c) && full_reserve(c, l, n, err) != 0)
            return -1;
    }
    return 0;
}

int kv_cache_reserve(kv_cache *c, int n, kv_error *err)
{
    return reserve(c, n, true, err);
}

int kv_cache_reserve_slots(kv_cache *c, int n, kv_error *err)
{
    return reserve(c, n, false, err);
}

int kv_cache_reserve_rows(kv_cache *c, int layer, int n, kv_error *err)
{
    return rows_apart(c) ? full_reserve(c, &c->layers[layer], n, err) : 0;
}

int kv_cache_reserve_layer(kv_cache *c, int layer, int slots, kv_error *err)
{
    kv_cache_layer *l = &c->layers[layer];
    if (slots <= l->cap)
        return 0;
    return layer_resize(c, l, slots, err);
}

void kv_cache_measure_values(const kv_cache *c, kv_cache_layer *l, int from, int n)
{
    enum { CHUNK = 256 }; /* channels dequantised at a time */
    int D = c->head_dim, H = c->n_kv_heads;
    float buf[CHUNK];
    for (int t = from; t < from + n; t++)
        for (int h = 0; h < H; h++) {
            double ss = 0.0;
            for (int at = 0; at < D; at += CHUNK) {
                int m = D - at < CHUNK ? D - at : CHUNK;
                const float *v = t >= l->v_stored
                                     ? kv_cache_full_row(c, l, KV_VALUES, t) + (size_t)h * D + at
                                     : buf;
                if (t < l->v_stored)
                    load(c, l, KV_VALUES, t, (size_t)h * D + (size_t)at, (size_t)m, buf);
                for (int i = 0; i < m; i++)
                    ss += (double)v[i] * (double)v[i];
            }
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

/* The slots of a gathered layer of len slots that hold a part in the stored
 * form: the kept ones from below `stored` in every set, and after a set's
 * last kept slot its gap, whose zeros every precision stores exactly. */
static int stored_after(const kv_cache_keep *k, int len, int stored)
{
    int p = len;
    for (int g = 0; stored > 0 && g < k->sets; g++) {
        const int *kg = k->keep + (size_t)g * (size_t)k->stride;
        int j = 0;
        while (j < k->n_keep[g] && kg[j] < stored)
            j++;
        int pg = j == k->n_keep[g] ? len : j;
        p = pg < p ? pg : p;
    }
    return stored > 0 ? p : 0;
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

/* Deltas only decrease along the slots and come in long runs (per_token
 * decode: one run of -1), so each set's angles are computed once per run,
 * not once per key: cs holds a set's cosines then sines for delta. */
static void angles(const double *inv_freq, int half, int delta, double *cs)
{
    for (int f = 0; f < half; f++)
        sincos(delta * inv_freq[f], &cs[half + f], &cs[f]);
}

/* One gather's moves of a part (keys or values) by token: slot keep[j] of
 * each set to slot j, stored form to stored form (codes and groups as
 * they are), or to full precision (dequantised) past the new stored
 * prefix, full precision to full precision. Keys turn by their change of
 * rank when rerotation is asked; a stored key is dequantised, turned, and
 * stored again. */
typedef struct part_move {
    const kv_cache *src;
    kv_cache *dst;
    const kv_cache_layer *s;
    kv_cache_layer *d;
    const kv_cache_keep *k;
    kv_cache_part part;
    int len, d_stored;
    const float *s_full; /* the source's full rows (a copy when they would be overwritten) */
    float *buf;          /* heads * head_dim floats */
    double *cs;          /* per set: cos | sin of its current delta */
    int *delta;
} part_move;

/* The destination's full-precision row of slot j (not stored after the
 * move). */
static float *dst_full(const part_move *m, int j)
{
    return (m->part == KV_KEYS ? m->d->k : m->d->v) +
           kv_cache_row_offset(m->d_stored, j, kv_cache_row(m->src));
}

/* Moves set g's heads of slot j (keep[j] = from). */
static void move_one(part_move *m, int j, int g, int from)
{
    const kv_cache *src = m->src;
    int D = src->head_dim, half = D / 2, sets = m->k->sets, nkv = src->n_kv_heads;
    int heads = sets > 1 ? 1 : nkv, h0 = sets > 1 ? g : 0;
    size_t row = (size_t)kv_cache_row(src), at = (size_t)h0 * (size_t)D,
           span = (size_t)heads * (size_t)D;
    int s_stored = kv_cache_stored(m->s, m->part);
    bool from_stored = from < s_stored, to_stored = j < m->d_stored;
    double *c = m->cs + (size_t)g * (size_t)D;
    int shift = m->part == KV_KEYS && m->k->inv_freq ? j - held_rank(m->s, h0, from) : 0;
    if (shift != 0 && shift != m->delta[g])
        angles(m->k->inv_freq, half, m->delta[g] = shift, c);
    if (to_stored && shift == 0 && kv_cache_borrows(src)) {
        /* its lender's row, by index: one map for both parts, moved once */
        if (m->part == KV_VALUES)
            m->d->srow[j] = m->s->srow[from];
        return;
    }
    if (to_stored && shift == 0) { /* codes and groups move as they are */
        size_t bits = (size_t)kv_precision_bits(src->quant.precision);
        memcpy(codes_of(m->dst, m->d, m->part, j) + at * bits / 8,
               codes_of(src, m->s, m->part, from) + at * bits / 8, span * bits / 8);
        if (quantised(&src->quant)) {
            size_t G = (size_t)(m->part == KV_KEYS ? src->quant.key_group
                                                    : src->quant.value_group);
            memcpy(group_of(m->dst, m->d, m->part, j, at), group_of(src, m->s, m->part, from, at),
                   span / G * sizeof(kv_qgroup));
        }
        return;
    }
    const float *x = m->buf; /* a stored slot is read into buf; a full one in place */
    if (from_stored)
        load(src, m->s, m->part, from, at, span, m->buf);
    else
        x = m->s_full + kv_cache_row_offset(s_stored, from, (int)row) + at;
    float *y = to_stored ? m->buf : dst_full(m, j) + at;
    if (shift != 0)
        for (int h = 0; h < heads; h++)
            rotate_by(y + (size_t)h * D, x + (size_t)h * D, half, c, c + half);
    else if (y != x)
        memmove(y, x, span * sizeof *y);
    if (to_stored)
        store(m->dst, m->d, m->part, j, at, span, y);
    else if (from_stored && shift != 0 && kv_cache_stores(src))
        /* as stored again, and a commit leaves it so */
        for (size_t a = 0; a < span; a += (size_t)src->quant.key_group)
            kv_round_group(y + a, (size_t)src->quant.key_group, 1, src->quant.precision);
}

/* Set g's heads of slot j, a gap: zeros (attention weighs it 0, and 0
 * times a NaN left in fresh memory would still be NaN). */
static void clear_one(part_move *m, int j, int g)
{
    int D = m->src->head_dim, sets = m->k->sets;
    size_t at = (size_t)(sets > 1 ? g : 0) * (size_t)D,
           span = (size_t)(sets > 1 ? 1 : m->src->n_kv_heads) * (size_t)D;
    if (j < m->d_stored)
        store_zeros(m->dst, m->d, m->part, j, at, span);
    else
        memset(dst_full(m, j) + at, 0, span * sizeof(float));
}

static int move_part(part_move *m, kv_error *err)
{
    const kv_cache_keep *k = m->k;
    const kv_cache_layer *s = m->s;
    size_t row = (size_t)kv_cache_row(m->src);
    bool in_place = m->src == m->dst;
    int s_stored = kv_cache_stored(s, m->part), s_full = s->len - s_stored;
    float *copy = NULL;
    m->s_full = m->part == KV_KEYS ? s->k : s->v;
    /* in place, full rows move down unless some go to the stored form
     * ahead of them (a set's gap, stored as zeros, of per-head sets): then
     * they are read from a copy. One set keeps its stored slots stored and
     * its full ones full, each row at or below where it was. */
    if (in_place && s_stored > 0 && s_full > 0 && k->sets > 1) {
        if (!(copy = malloc((size_t)s_full * row * sizeof *copy)))
            return kv_fail(err, "KV cache: out of memory");
        memcpy(copy, m->s_full, (size_t)s_full * row * sizeof *copy);
        m->s_full = copy;
    }
    int need = m->len - m->d_stored + 1, rows = *row_count_of(m->d, m->part);
    if (rows_apart(m->dst) && need > rows &&
        full_resize(m->dst, m->d, m->part == KV_KEYS ? need : m->d->k_rows,
                    m->part == KV_KEYS ? m->d->v_rows : need, err) != 0) {
        free(copy);
        return -1;
    }
    for (int j = 0; j < m->len; j++)
        for (int g = 0; g < k->sets; g++) {
            if (j >= k->n_keep[g]) {
                clear_one(m, j, g);
                continue;
            }
            int from = k->keep[(size_t)g * (size_t)k->stride + (size_t)j];
            /* in place, a slot kept where it is keeps its rank too */
            bool unmoved = from < s_stored ? j < m->d_stored
                                           : j >= m->d_stored && s_stored == m->d_stored && !copy;
            if (in_place && from == j && unmoved)
                continue;
            move_one(m, j, g, from);
        }
    *stored_of(m->d, m->part) = m->d_stored;
    free(copy);
    return 0;
}

/* By-channel keys: the kept keys, dequantised (and turned), form new
 * blocks from slot 0 (one more rounding), the last incomplete one the
 * residual at full precision. */
static int regroup_keys(part_move *m, kv_error *err)
{
    const kv_cache_keep *k = m->k;
    int D = m->src->head_dim, half = D / 2, sets = k->sets;
    int heads = sets > 1 ? 1 : m->src->n_kv_heads;
    size_t row = (size_t)kv_cache_row(m->src), span = (size_t)heads * (size_t)D;
    float *keys = calloc((size_t)(m->len + 1) * row, sizeof *keys);
    if (!keys)
        return kv_fail(err, "KV cache: out of memory");
    for (int j = 0; j < m->len; j++)
        for (int g = 0; g < sets && j < m->len; g++) {
            if (j >= k->n_keep[g])
                continue; /* a gap: zeros */
            int h0 = sets > 1 ? g : 0, from = k->keep[(size_t)g * (size_t)k->stride + (size_t)j];
            float *y = keys + (size_t)j * row + (size_t)h0 * (size_t)D;
            const float *x = heads_of(m->src, m->s, KV_KEYS, from, h0, heads, y);
            int shift = k->inv_freq ? j - held_rank(m->s, h0, from) : 0;
            double *c = m->cs + (size_t)g * (size_t)D;
            if (shift != 0 && shift != m->delta[g])
                angles(k->inv_freq, half, m->delta[g] = shift, c);
            if (shift != 0)
                for (int h = 0; h < heads; h++)
                    rotate_by(y + (size_t)h * D, x + (size_t)h * D, half, c, c + half);
            else if (x != y)
                memcpy(y, x, span * sizeof *y);
        }
    free(block_of(m->dst, m->d, KV_KEYS));
    m->d->k = keys;
    m->d->k_front = 0;
    m->d->k_rows = m->len + 1;
    m->d->k_stored = 0;
    m->d->len = m->len;
    store_key_blocks(m->dst, m->d);
    return 0;
}

/* Positions and value norms of the kept slots; a gap's are -1 and 0. */
/* Rows of a one-set gather in place that move when the layer's first
 * slot moves up by `up` rows (0: the tail's way): those not where they
 * go already. */
static int rows_moving(const kv_cache_keep *k, int up)
{
    int n = 0;
    for (int j = 0; j < k->n_keep[0]; j++)
        n += k->keep[j] != j + up;
    return n;
}

/* Whether a gather in place of layer l moves fewer rows by shifting its
 * front up (shift_front) than its tail down. Decode-time eviction drops
 * one slot a step, most often near the end, but a deep one moves the
 * whole tail: in the 16-config H2O/SnapKV sweep (tests/bench/run_sweep.sh)
 * the tails came to 7.9 M rows of 4 KB, a twentieth of the CPU time (perf,
 * 2026-12-02), the shorter side to 4.8 M. Only an F32 layer of one set
 * whose keys do not turn qualifies (stored rows, per-head sets and
 * rerotation move by the tail's way); moving the rows back to the block's
 * start when its room runs out is charged to the shifts it allows. */
static bool front_is_shorter(const kv_cache *c, const kv_cache_layer *l, const kv_cache_keep *k)
{
    int up = l->len - k->n_keep[0], room = l->k_rows - l->cap;
    if (kv_cache_stores(c) || kv_cache_borrows(c) || k->sets != 1 || k->inv_freq || l->gap ||
        up <= 0 || room < up || l->v_rows - l->cap != room)
        return false;
    return rows_moving(k, up) + l->len / room < rows_moving(k, 0);
}

/* A part's kept rows below the last dropped slot move up by the `up`
 * dropped, from the top down, and its rows start `up` rows later. */
static void shift_front(part_move *m)
{
    kv_cache_layer *l = m->d;
    int up = l->len - m->k->n_keep[0], *front = front_of(l, m->part);
    int rows = *row_count_of(l, m->part);
    if (rows - l->cap - *front < up)
        unshift(m->dst, l, m->part);
    float **at = rows_of(l, m->part);
    size_t row = (size_t)kv_cache_row(m->dst);
    for (int j = m->k->n_keep[0] - 1; j >= 0; j--) {
        int from = m->k->keep[j];
        if (from != j + up) /* distinct rows: from < j + up */
            memcpy(*at + (size_t)(j + up) * row, *at + (size_t)from * row, row * sizeof(float));
    }
    *at += (size_t)up * row;
    *front += up;
}

static void move_positions(const kv_cache_layer *s, kv_cache_layer *d, const kv_cache_keep *k,
                           int nkv, int len)
{
    int sets = k->sets, heads = sets > 1 ? 1 : nkv;
    for (int j = 0; j < len; j++)
        for (int g = 0; g < sets; g++) {
            int h0 = sets > 1 ? g : 0;
            int from = j < k->n_keep[g] ? k->keep[(size_t)g * (size_t)k->stride + (size_t)j] : -1;
            for (int h = h0; h < h0 + heads; h++) { /* a few numbers: no memcpy call */
                d->pos[(size_t)j * nkv + h] = from < 0 ? -1 : s->pos[(size_t)from * nkv + h];
                d->vlen[(size_t)j * nkv + h] = from < 0 ? 0.0f : s->vlen[(size_t)from * nkv + h];
            }
        }
}

/* A borrower's layer copies a part's borrowed rows into rows of its own,
 * for a gather in place that writes every kept row of the part (keys that
 * turn, per-head sets). */
static int unborrow(const kv_cache *c, kv_cache_layer *l, kv_cache_part part, kv_error *err)
{
    int n = kv_cache_stored(l, part);
    if (!kv_cache_borrows(c) || n == 0)
        return 0;
    size_t row = (size_t)kv_cache_row(c), rows = (size_t)f32_rows(l->cap);
    float *own = malloc(rows * row * sizeof *own);
    if (!own)
        return kv_fail(err, "KV cache: out of memory");
    for (int s = 0; s < n; s++)
        memcpy(own + (size_t)s * row, kv_cache_borrowed_row(c, l, part, s), row * sizeof *own);
    copy_bytes(own + (size_t)n * row, *rows_of(l, part), (size_t)(l->len - n) * row * sizeof *own);
    free(block_of(c, l, part));
    *rows_of(l, part) = own;
    *front_of(l, part) = 0;
    *row_count_of(l, part) = (int)rows;
    *stored_of(l, part) = 0;
    return 0;
}

/* The rows src lends to a fork of it: its own (an F32 cache that borrows
 * none, lending then as it is: every layer's rows in the block it lent),
 * or those it borrows itself. NULL where it cannot lend. */
static kv_shared *lender_of(const kv_cache *src, const kv_cache_layer *s)
{
    if (kv_cache_borrows(src))
        return src->borrowed;
    kv_shared *lent = lent_of(src);
    if (lent && !(lent_block(src, s, KV_KEYS) && lent_block(src, s, KV_VALUES)))
        return NULL; /* it took rows of this layer back since */
    return lent;
}

/* Whether dst's empty layer can borrow what a gather from src keeps: F32
 * to F32, one set (with rerotation the values only: the keys turn), all of
 * dst's layers from one lender. */
static bool can_borrow(const kv_cache *src, const kv_cache *dst, int layer, const kv_cache_keep *k)
{
    const kv_cache_layer *s = &src->layers[layer];
    if (kv_cache_stores(src) || kv_cache_stores(dst) || k->sets != 1 || s->gap ||
        dst->layers[layer].len != 0)
        return false;
    kv_shared *from = lender_of(src, s);
    bool lends = from || !lent_of(src);
    return lends && (!dst->borrowed || dst->borrowed == from);
}

/* The slots of a part src lends: all of an F32 cache's own, the borrowed
 * ones of a borrower (its own rows are not the lender's); none of the keys
 * when they turn (rerotation). */
static int lends(const kv_cache *src, const kv_cache_layer *s, kv_cache_part part,
                 const kv_cache_keep *k)
{
    if (part == KV_KEYS && k->inv_freq)
        return 0;
    return kv_cache_borrows(src) ? kv_cache_stored(s, part) : s->len;
}

/* Kept slots j from d_stored on get rows of their own, copied from src's
 * (its own or those it borrows) and, for keys with rerotation, turned by
 * their change of rank. */
static void copy_kept(const kv_cache *src, const kv_cache_layer *s, kv_cache *dst,
                      kv_cache_layer *d, kv_cache_part part, const kv_cache_keep *k, int d_stored,
                      double *cs)
{
    int D = src->head_dim, half = D / 2, delta = 0;
    size_t row = (size_t)kv_cache_row(src);
    for (int j = d_stored; j < k->n_keep[0]; j++) {
        int from = k->keep[j], shift = part == KV_KEYS && k->inv_freq ? j - from : 0;
        const float *x = kv_cache_f32_row(src, s, part, from);
        float *y = kv_cache_full_row(dst, d, part, j);
        if (shift != 0 && shift != delta)
            angles(k->inv_freq, half, delta = shift, cs);
        if (shift == 0)
            memcpy(y, x, row * sizeof *y);
        else
            for (int h = 0; h < src->n_kv_heads; h++)
                rotate_by(y + (size_t)h * D, x + (size_t)h * D, half, cs, cs + half);
    }
}

/* A gather from src into dst's empty layer that borrows: each kept slot
 * src holds in a row it lends keeps reading that row, through dst's map;
 * the rest (a borrower's own rows, after its borrowed ones; keys that
 * turn) are copied. */
static int borrow_layer(const kv_cache *src, kv_cache *dst, int layer, const kv_cache_keep *k,
                        kv_error *err)
{
    const kv_cache_layer *s = &src->layers[layer];
    kv_cache_layer *d = &dst->layers[layer];
    if (!dst->borrowed) {
        kv_shared *b = kv_cache_borrows(src) ? shared_hold(src->borrowed) : lend(src);
        if (!b)
            return kv_fail(err, "KV cache: out of memory");
        dst->borrowed = b;
        for (int l = 0; l < dst->n_layers; l++) { /* now every layer has its map */
            size_t bytes = (size_t)dst->layers[l].cap * sizeof(int32_t);
            if (resize(&dst->layers[l].srow, bytes, err) != 0)
                return -1;
        }
    }
    int n = k->n_keep[0];
    if (kv_cache_reserve_layer(dst, layer, n + 1, err) != 0)
        return -1;
    bool own = !kv_cache_borrows(src);
    int lk = lends(src, s, KV_KEYS, k), lv = lends(src, s, KV_VALUES, k);
    d->bk = own ? s->k : s->bk;
    d->bv = own ? s->v : s->bv;
    int nk = 0, nv = 0; /* kept slots borrowed: a prefix of each part */
    for (int j = 0; j < n && k->keep[j] < (lk > lv ? lk : lv); j++) {
        d->srow[j] = own ? k->keep[j] : s->srow[k->keep[j]];
        nk += k->keep[j] < lk;
        nv += k->keep[j] < lv;
    }
    d->k_stored = nk;
    d->v_stored = nv;
    double *cs = malloc((size_t)src->head_dim * sizeof *cs); /* cos | sin of a delta */
    if (!cs)
        return kv_fail(err, "KV cache: out of memory");
    /* its own rows: the rest, and room to append */
    if (full_resize(dst, d, grown(0, n - nk + 1), grown(0, n - nv + 1), err) != 0) {
        free(cs);
        return -1;
    }
    copy_kept(src, s, dst, d, KV_KEYS, k, nk, cs);
    copy_kept(src, s, dst, d, KV_VALUES, k, nv, cs);
    free(cs);
    move_positions(s, d, k, src->n_kv_heads, n);
    d->vlen_n = measured_prefix(k, n, s->vlen_n);
    d->len = n;
    return set_gaps(d, 1, k->n_keep, n, err);
}

int kv_cache_gather(const kv_cache *src, kv_cache *dst, int layer, const kv_cache_keep *k,
                    kv_error *err)
{
    const kv_cache_layer *s = &src->layers[layer];
    kv_cache_layer *d = &dst->layers[layer];
    int D = src->head_dim, sets = k->sets;
    int shortest, len = check_keep(s, k, &shortest, err);
    if (len < 0)
        return -1;
    if (src == dst && (keep_own_rows(dst, d, err) != 0 ||
                       ((sets > 1 || k->inv_freq) && unborrow(dst, d, KV_KEYS, err) != 0) ||
                       (sets > 1 && unborrow(dst, d, KV_VALUES, err) != 0)))
        return -1;
    if (src != dst && can_borrow(src, dst, layer, k))
        return borrow_layer(src, dst, layer, k, err);
    if (kv_cache_reserve_layer(dst, layer, len + 1, err) != 0)
        return -1;
    /* a borrower's gather into another cache that cannot borrow copies
     * every row it keeps (load reads the borrowed ones) */
    bool copies = src != dst && kv_cache_borrows(src);
    part_move m = {.src = src, .dst = dst, .s = s, .d = d, .k = k, .len = len};
    m.cs = malloc((size_t)sets * (size_t)D * sizeof *m.cs); /* per set: cos | sin */
    m.delta = calloc((size_t)sets, sizeof *m.delta);
    m.buf = malloc((size_t)(sets > 1 ? 1 : src->n_kv_heads) * (size_t)D * sizeof *m.buf);
    int rc = m.cs && m.delta && m.buf ? 0 : kv_fail(err, "KV cache: out of memory");
    int vlen_n = measured_prefix(k, shortest, s->vlen_n);
    bool front = src == dst && front_is_shorter(src, s, k);
    /* values, then keys: neither reads the other's rows */
    m.part = KV_VALUES;
    m.d_stored = copies ? 0 : stored_after(k, len, s->v_stored);
    if (rc == 0 && front)
        shift_front(&m);
    else if (rc == 0)
        rc = move_part(&m, err);
    m.part = KV_KEYS;
    for (int g = 0; g < sets; g++)
        m.delta[g] = 0;
    bool by_channel = src->quant.key_by_channel && kv_cache_stores(src);
    m.d_stored = copies ? 0 : stored_after(k, len, s->k_stored);
    if (rc == 0 && front)
        shift_front(&m);
    else if (rc == 0)
        rc = by_channel ? regroup_keys(&m, err) : move_part(&m, err);
    if (rc == 0) {
        move_positions(s, d, k, src->n_kv_heads, len);
        d->vlen_n = vlen_n;
        d->len = len;
    }
    free(m.cs);
    free(m.delta);
    free(m.buf);
    return rc == 0 ? set_gaps(d, sets, k->n_keep, len, err) : -1;
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
        if (want < l->cap && layer_resize(c, l, want, err) != 0)
            return -1;
        if (rows_apart(c))
            full_release(c, l);
    }
    return 0;
}
