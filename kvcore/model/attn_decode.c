/* attn_decode: the attention of one query row over a layer's cache
 * (decode, and the last rows of a prefill chunk), in blocks of cache slots
 * spread over the pool (forward.h). */
#include <math.h>
#include <string.h>

#include "model/attn_stored.h"
#include "model/forward.h"

/* Cache slots per decode attention task: about 256 KB of keys (all KV
 * heads of a slot are one contiguous row), so each task streams one long
 * run of memory. */
int kv_decode_key_block(const kv_model_config *c)
{
    size_t row_bytes = (size_t)c->n_kv_heads * (size_t)c->head_dim * sizeof(float);
    size_t b = (256 * 1024) / row_bytes;
    return b < 16 ? 16 : (int)b;
}

/* Adds probability row p[0..keys) of query row r (of n in the call) to
 * head h's sums. */
static void stats_add_row(const kv_attn_stats_request *req, kv_attn_stats *s, int h, const float *p,
                          int keys, int r, int n)
{
    size_t off = (size_t)h * (size_t)s->n_keys;
    bool store = sums_written(req, n); /* the only row: its keys are all the keys */
    if (req->col_sums)
        for (int j = 0; j < keys; j++)
            s->col_sums[off + (size_t)j] = (store ? 0.0 : s->col_sums[off + (size_t)j]) + p[j];
    for (int w = 0; w < req->n_windows; w++)
        if (r >= n - req->windows[w])
            for (int j = 0; j < keys; j++)
                s->win_sums[w][off + (size_t)j] =
                    (store ? 0.0 : s->win_sums[w][off + (size_t)j]) + p[j];
}

/* The F32 row of slot s of a part (kvcache.h: "Borrowed rows"); not for a
 * stored slot. */
static const float *slot_row(const decode_job *j, kv_cache_part part, int s)
{
    return kv_cache_f32_row(j->c, j->cl, part, s);
}

/* Widest row (floats) whose eight borrowed copies rows_at gathers on the
 * stack: 128 KB, 8 KV heads of 512. Wider rows go one slot at a time. */
enum { GATHER_ROW_MAX = 4096 };

/* The F32 rows of slots [k, k + n) of a part, n <= 8, as consecutive rows
 * for the kernels: in place where they are so (the cache's own rows, or a
 * lender's that follow each other), else copied into buf, the same values
 * in the same order (so the same bits); NULL when too wide for buf. */
static const float *rows_at(const decode_job *j, kv_cache_part part, int k, int n, float *buf)
{
    int stored = kv_cache_stored(j->cl, part);
    if (k >= stored)
        return kv_cache_full_row(j->c, j->cl, part, k);
    const int32_t *r = j->cl->srow + k; /* ascending: consecutive when the ends are n - 1 apart */
    if (k + n <= stored && r[n - 1] - r[0] == n - 1)
        return kv_cache_borrowed_row(j->c, j->cl, part, k);
    size_t row = (size_t)kv_cache_row(j->c);
    if (row > GATHER_ROW_MAX)
        return NULL;
    for (int i = 0; i < n; i++)
        memcpy(buf + (size_t)i * row, slot_row(j, part, k + i), row * sizeof *buf);
    return buf;
}

/* Prefetches slice i of n of the F32 rows of part's slots [from, to)
 * (clipped to the row's keys) into L1. The passes call it for the next
 * eight slots while they read the current eight, a slice before each
 * kernel call, so the rows stream in behind the arithmetic: the hardware
 * prefetcher alone left each pass waiting on memory, as a group's reads
 * hop between eight 4 KB rows (a one-thread loop of kv_decode_attention
 * over 100 F32 caches of 1,024 slots, with and without in turn, best of
 * 11: 11.0-12.1 -> 12.8-13.9 GB of keys and values per CPU-second on the
 * loaded AVX512_BF16 machine, 2026-12-02). */
static void prefetch_rows(const decode_job *j, kv_cache_part part, int from, int to, int i, int n)
{
    to = to < j->keys ? to : j->keys;
    if (from >= to)
        return;
    size_t row = (size_t)j->cfg->n_kv_heads * (size_t)j->cfg->head_dim * sizeof(float);
    size_t bytes = (size_t)(to - from) * row, o = bytes * (size_t)i / (size_t)n / 64 * 64,
           end = bytes * (size_t)(i + 1) / (size_t)n;
    if (from >= kv_cache_stored(j->cl, part)) { /* the cache's own rows: one run */
        const char *p = (const char *)kv_cache_full_row(j->c, j->cl, part, from);
        for (; o < end; o += 64)
            __builtin_prefetch(p + o, 0, 3);
        return;
    }
    while (o < end) { /* borrowed rows: the slice's part of each slot's row */
        size_t in = o % row, stop = row < in + (end - o) ? row : in + (end - o);
        const char *p = (const char *)slot_row(j, part, from + (int)(o / row));
        for (size_t x = in; x < stop; x += 64)
            __builtin_prefetch(p + x, 0, 3);
        o += stop - in;
    }
}

/* The scores of slots [k, k + 8) for every head, their keys' rows at kr
 * (consecutive): the rows (32 KB at Qwen3-0.6B) stay in L1 while every
 * head reads them, and the next eight slots' come in behind. */
static void scores8(const decode_job *j, const float *kr, int k)
{
    const kv_model_config *c = j->cfg;
    int hd = c->head_dim, group = c->n_heads / c->n_kv_heads;
    size_t kvd = (size_t)c->n_kv_heads * (size_t)hd, mk = (size_t)j->f->max_keys;
    for (int h = 0; h < c->n_heads; h++) {
        prefetch_rows(j, KV_KEYS, k + 8, k + 16, h, c->n_heads);
        kv_dot8(j->q + (size_t)h * (size_t)hd, kr + (size_t)(h / group) * (size_t)hd, kvd, hd,
                j->scale, j->scores + (size_t)h * mk + (size_t)k);
    }
}

/* The scores of slot k alone, every head. */
static void score_one(const decode_job *j, int k)
{
    const kv_model_config *c = j->cfg;
    int hd = c->head_dim, group = c->n_heads / c->n_kv_heads;
    const float *kr = slot_row(j, KV_KEYS, k);
    for (int h = 0; h < c->n_heads; h++)
        j->scores[(size_t)h * (size_t)j->f->max_keys + (size_t)k] =
            kv_dot(j->q + (size_t)h * (size_t)hd, kr + (size_t)(h / group) * (size_t)hd, hd) *
            j->scale;
}

/* scores8 over the groups of eight in [k, k1) of a cache that borrows
 * rows; returns where they end. Apart, and not inlined, so that its
 * buffer is no part of the other caches' frames (a 128 KB frame is probed
 * page by page at every call). */
__attribute__((noinline)) static int borrowed_scores(const decode_job *j, int k, int k1)
{
    float buf[8 * GATHER_ROW_MAX];
    for (; k + 8 <= k1; k += 8) {
        const float *kr = rows_at(j, KV_KEYS, k, 8, buf);
        if (kr)
            scores8(j, kr, k);
        else
            for (int i = 0; i < 8; i++)
                score_one(j, k + i);
    }
    return k;
}

static void decode_scores_task(void *ctx, int t, int worker)
{
    (void)worker;
    const decode_job *j = ctx;
    const kv_model_config *c = j->cfg;
    int bs = j->block;
    size_t mk = (size_t)j->f->max_keys;
    int k = t * bs, k1 = (t + 1) * bs < j->keys ? (t + 1) * bs : j->keys;
    int stored = k1 < j->cl->k_stored ? k1 : j->cl->k_stored;
    if (k < stored && !kv_cache_borrows(j->c)) { /* slots the cache holds in its stored form */
        kv_attn_stored_scores(j->c, j->cl, j->q, c->n_heads, k, stored, j->scale, j->scores, mk);
        k = stored;
    }
    /* eight slots at a time (scores8). Measured as for the values pass below,
     * the other ways were slower: both query heads of a KV head from one
     * load of each key vector (16 accumulators) 0.89-0.97x with the
     * prefetch in any of three places, the prefetch in 2 KB bursts 0.87x
     * against slices, prefetcht1/t2 0.8-0.9x, every second line 0.8x,
     * 16 or 32 slots ahead 0.95-1.01x. */
    if (kv_cache_borrows(j->c))
        k = borrowed_scores(j, k, k1);
    for (; k + 8 <= k1; k += 8)
        scores8(j, kv_cache_full_row(j->c, j->cl, KV_KEYS, k), k);
    for (; k < k1; k++)
        score_one(j, k);
}

static void decode_softmax_task(void *ctx, int h, int worker)
{
    (void)worker;
    const decode_job *j = ctx;
    float *p = j->scores + (size_t)h * (size_t)j->f->max_keys;
    int kvh = h / (j->cfg->n_heads / j->cfg->n_kv_heads);
    mask_gap(j->cl, kvh, p, j->keys, -INFINITY);
    kv_softmax(p, j->keys);
    mask_gap(j->cl, kvh, p, j->keys, 0.0f);
    if (j->st)
        stats_add_row(j->req, j->st, h, p, j->keys, j->row, j->n);
}

/* o += P V over slots [k, k + nk), nk <= 8, their values' rows at vr
 * (consecutive): each KV head's rows once for the query heads that share
 * it, in halves of the head (decode_values_task says why), prefetching the
 * next eight slots' rows behind them. */
static void values8(const decode_job *j, const float *vr, int k, int nk, float *o)
{
    const kv_model_config *c = j->cfg;
    int hd = c->head_dim, group = c->n_heads / c->n_kv_heads;
    size_t kvd = (size_t)c->n_kv_heads * (size_t)hd, mk = (size_t)j->f->max_keys;
    int parts = hd % 128 == 0 ? 2 : 1, w = hd / parts;
    for (int g = 0; g < c->n_kv_heads; g++) {
        float *og = o + (size_t)g * (size_t)group * (size_t)hd; /* its query heads' */
        const float *pg = j->scores + (size_t)g * (size_t)group * mk + (size_t)k;
        const float *vg = vr + (size_t)g * (size_t)hd;
        for (int s = 0; s < parts; s++) {
            prefetch_rows(j, KV_VALUES, k + 8, k + 16, g * parts + s, c->n_kv_heads * parts);
            kv_axpy_rows(og + (size_t)(s * w), (size_t)hd, group, pg, mk, vg + (size_t)(s * w), kvd,
                         nk, w);
        }
    }
}

/* values8 over [k, k1) of a cache that borrows rows; apart and not
 * inlined as borrowed_scores is. */
__attribute__((noinline)) static void borrowed_values(const decode_job *j, int k, int k1, float *o)
{
    float buf[8 * GATHER_ROW_MAX];
    for (int nk; k < k1; k += nk) {
        nk = k1 - k < 8 ? k1 - k : 8;
        const float *vr = rows_at(j, KV_VALUES, k, nk, buf);
        if (!vr) { /* too wide to gather: one slot */
            vr = slot_row(j, KV_VALUES, k);
            nk = 1;
        }
        values8(j, vr, k, nk, o);
    }
}

static void decode_values_task(void *ctx, int t, int worker)
{
    (void)worker;
    const decode_job *j = ctx;
    const kv_model_config *c = j->cfg;
    int bs = j->block;
    size_t qd = (size_t)c->n_heads * (size_t)c->head_dim, mk = (size_t)j->f->max_keys;
    float *o = j->partial + (size_t)t * qd;
    memset(o, 0, qd * sizeof *o);
    int k = t * bs, k1 = (t + 1) * bs < j->keys ? (t + 1) * bs : j->keys;
    int stored = k1 < j->cl->v_stored ? k1 : j->cl->v_stored;
    if (k < stored && !kv_cache_borrows(j->c)) {
        kv_attn_stored_values(j->c, j->cl, j->scores, mk, c->n_heads, k, stored, o);
        k = stored;
    }
    /* eight slots at a time, each KV head's rows once for the query heads
     * that share it, in halves of the head where each half is whole 64-lane
     * blocks (the same FMAs per lane), so the next slots' prefetch comes in
     * sixteen slices (2 KB at Qwen3-0.6B) as in the scores pass, not eight of
     * 4 KB: bursts of 64 prefetches hold the kernels up. Measured with a
     * one-thread loop of kv_decode_attention over eight F32 caches of 8,192
     * slots, the layers alternating between the two ways in one process, on
     * the AVX512_BF16 machine, 2026-12-02: the whole attention 1.00-1.06x
     * (median 1.03x, 10 runs) with AVX-512, 0.94-1.10x (median 1.02x, 7) with
     * AVX2; quarters of 32 lanes, 0.93-0.98x. */
    if (kv_cache_borrows(j->c)) {
        borrowed_values(j, k, k1, o);
        return;
    }
    for (int nk; k < k1; k += nk) {
        nk = k1 - k < 8 ? k1 - k : 8;
        values8(j, kv_cache_full_row(j->c, j->cl, KV_VALUES, k), k, nk, o);
    }
}

/* The three passes of kv_decode_attention as phases of a pool job. */
void kv_decode_phases(decode_job *j, kv_pool_phase *passes)
{
    /* A stored cache's slots take fewer bytes: more of them a task
     * (kv_attn_stored_block), never fewer than F32's, so the partial
     * outputs fit the room made for F32's blocks. */
    j->block = j->f->key_block;
    if (kv_cache_stores(j->c) && kv_attn_stored_block(j->c) > j->block)
        j->block = kv_attn_stored_block(j->c);
    int blocks = (j->keys + j->block - 1) / j->block;
    passes[0] = (kv_pool_phase){blocks, decode_scores_task, j};
    passes[1] = (kv_pool_phase){j->cfg->n_heads, decode_softmax_task, j};
    passes[2] = (kv_pool_phase){blocks, decode_values_task, j};
}

/* out = the sum of the blocks' partial outputs, in block order (after
 * kv_decode_phases has set the block). */
void kv_decode_combine(const decode_job *j, float *out)
{
    int blocks = (j->keys + j->block - 1) / j->block;
    size_t qd = (size_t)j->cfg->n_heads * (size_t)j->cfg->head_dim;
    memcpy(out, j->partial, qd * sizeof *out);
    for (int t = 1; t < blocks; t++)
        kv_axpy(out, 1.0f, j->partial + (size_t)t * qd, (int)qd);
}

void kv_decode_attention(decode_job *j, kv_pool *p, float *out)
{
    kv_pool_phase passes[3];
    kv_decode_phases(j, passes);
    kv_pool_run_phases(p, 3, passes);
    kv_decode_combine(j, out);
}
