#include "model/attn_dnnl.h"

#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/attn_dnnl_avx512.h"
#include "model/cpu.h"
#include "model/gemm_dnnl.h"
#include "model/kernels.h"
#include "util/mem.h"

/* Query rows per block and keys per tile: a tile's scores (128 x 512
 * floats, 256 KB) and probabilities (128 KB) stay in L2 between Q K^T, the
 * softmax step and P V, and each product is large enough (8 MFLOP) that
 * oneDNN's per-call cost is a few per cent of it. */
#define BLOCK_ROWS 128
#define TILE_KEYS  512

struct kv_attn_dnnl {
    int n_heads, n_kv_heads, hd, threads;
    int q_rows, k_rows; /* rows of each head's block in q16, of each KV head's in k16/v16 */
    int packed;         /* keys of the current layer in k16/v16 */
    uint16_t *q16, *k16, *v16;
    float *scratch; /* per worker: worker_floats */
    size_t worker_floats;
    /* With probabilities (kv_attn_dnnl_run's probs): per worker, a block's
     * scores over all its keys (BLOCK_ROWS x k_rows floats) and their BF16
     * probabilities (as many uint16_t), made at the first such call. */
    void *wide;
};

static int round_up(int x, int to)
{
    return (x + to - 1) / to * to;
}

bool kv_attn_dnnl_usable(void)
{
    return kv_dnnl_usable(KV_DTYPE_BF16);
}

void kv_attn_dnnl_free(kv_attn_dnnl *a)
{
    if (!a)
        return;
    free(a->q16);
    free(a->k16);
    free(a->v16);
    free(a->scratch);
    free(a->wide);
    free(a);
}

kv_attn_dnnl *kv_attn_dnnl_new(int n_heads, int n_kv_heads, int head_dim, int chunk, int max_keys,
                               int threads)
{
    kv_attn_dnnl *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    *a = (kv_attn_dnnl){.n_heads = n_heads,
                        .n_kv_heads = n_kv_heads,
                        .hd = head_dim,
                        .threads = threads,
                        .q_rows = round_up(chunk, KV_ATTN_DNNL_ROW_PAD),
                        .k_rows = round_up(max_keys, KV_ATTN_DNNL_KEY_PAD)};
    size_t hd = (size_t)head_dim;
    /* scores and probabilities of a tile; P V's result and the running
     * output of a block; its rows' running max, sum and rescale factor */
    a->worker_floats = (size_t)BLOCK_ROWS * TILE_KEYS * 3 / 2 + 2 * (size_t)BLOCK_ROWS * hd +
                       3 * (size_t)BLOCK_ROWS;
    a->q16 = kv_mem_alloc_huge((size_t)n_heads * (size_t)a->q_rows * hd * sizeof *a->q16);
    a->k16 = kv_mem_alloc_huge((size_t)n_kv_heads * (size_t)a->k_rows * hd * sizeof *a->k16);
    a->v16 = kv_mem_alloc_huge((size_t)n_kv_heads * (size_t)a->k_rows * hd * sizeof *a->v16);
    a->scratch = kv_mem_alloc_huge((size_t)threads * a->worker_floats * sizeof *a->scratch);
    if (!a->q16 || !a->k16 || !a->v16 || !a->scratch) {
        kv_attn_dnnl_free(a);
        return NULL;
    }
    return a;
}

/* One call's work, shared by its tasks. */
typedef struct job {
    kv_attn_dnnl *a;
    const float *q, *k, *v;
    float *out;
    kv_attn_dnnl_probs_fn probs; /* NULL: flash tiles */
    void *probs_ctx;
    int cn, base, keys; /* keys: base + cn */
    int q_tasks, k_from, k_tasks;
    float scale;
    atomic_bool failed;
} job;

/* Rows per packing task. */
#define PACK_ROWS 64

/* Packs rows [r0, r1) of the [rows][heads * hd] matrix src into each
 * head's dense block of dst (block_rows rows apart). */
static void pack_heads(const float *src, int heads, int hd, int r0, int r1, uint16_t *dst,
                       int block_rows)
{
    size_t width = (size_t)heads * (size_t)hd;
    for (int r = r0; r < r1; r++)
        for (int h = 0; h < heads; h++)
            kv_pack_bf16(src + (size_t)r * width + (size_t)h * (size_t)hd, (size_t)hd,
                         dst + ((size_t)h * (size_t)block_rows + (size_t)r) * (size_t)hd);
}

static void pack_task(void *ctx, int t, int worker)
{
    (void)worker;
    job *j = ctx;
    kv_attn_dnnl *a = j->a;
    if (t < j->q_tasks) {
        int r0 = t * PACK_ROWS, r1 = r0 + PACK_ROWS < j->cn ? r0 + PACK_ROWS : j->cn;
        pack_heads(j->q, a->n_heads, a->hd, r0, r1, a->q16, a->q_rows);
        return;
    }
    int r0 = j->k_from + (t - j->q_tasks) * PACK_ROWS;
    int r1 = r0 + PACK_ROWS < j->keys ? r0 + PACK_ROWS : j->keys;
    pack_heads(j->k, a->n_kv_heads, a->hd, r0, r1, a->k16, a->k_rows);
    pack_heads(j->v, a->n_kv_heads, a->hd, r0, r1, a->v16, a->k_rows);
}

/* Zeroes rows [r0, r1) of each head's block: the padding of the last
 * block of queries and of the last tile of keys. */
static void zero_rows(uint16_t *dst, int heads, int hd, int block_rows, int r0, int r1)
{
    for (int h = 0; h < heads; h++)
        memset(dst + ((size_t)h * (size_t)block_rows + (size_t)r0) * (size_t)hd, 0,
               (size_t)(r1 - r0) * (size_t)hd * sizeof *dst);
}

/* A worker's scratch, carved. */
typedef struct scratch {
    float *sc, *pv, *acc, *mx, *l, *r;
    uint16_t *p16;
} scratch;

static scratch carve(const kv_attn_dnnl *a, int worker)
{
    float *s = a->scratch + (size_t)worker * a->worker_floats;
    size_t hd = (size_t)a->hd, tile = (size_t)BLOCK_ROWS * TILE_KEYS;
    scratch w = {.sc = s, .p16 = (uint16_t *)(s + tile)};
    w.pv = s + tile + tile / 2;
    w.acc = w.pv + BLOCK_ROWS * hd;
    w.mx = w.acc + BLOCK_ROWS * hd;
    w.l = w.mx + BLOCK_ROWS;
    w.r = w.l + BLOCK_ROWS;
    return w;
}

/* The online softmax step of one tile's scores for `rows` query rows (row
 * i sees keys below lim + i): probabilities e^(s - max) packed to BF16 in
 * p16 (0 for keys a row cannot see and for padded rows up to rp), running
 * max and sum updated, w->r[i] the factor that rescales what came before. */
static void softmax_step(scratch *w, int rows, int rp, int t0, int tw, int twp, int lim)
{
    for (int i = 0; i < rows; i++) {
        float *s = w->sc + (size_t)i * (size_t)twp;
        uint16_t *p = w->p16 + (size_t)i * (size_t)twp;
        int vis = lim + i - t0 < tw ? lim + i - t0 : tw;
        if (vis <= 0) { /* the whole tile is in this row's future */
            memset(p, 0, (size_t)twp * sizeof *p);
            w->r[i] = 1.0f;
            continue;
        }
        float m,
            sum = kv_attn_softmax_row_avx512bf16(s, vis, twp, t0 > 0 ? w->mx[i] : -INFINITY, &m, p);
        /* e^(old max - new max) <= 1 rescales what came before */
        w->r[i] = t0 > 0 ? expf(w->mx[i] - m) : 0.0f;
        w->l[i] = (t0 > 0 ? w->l[i] * w->r[i] : 0.0f) + sum;
        w->mx[i] = m;
    }
    memset(w->p16 + (size_t)rows * (size_t)twp, 0, (size_t)(rp - rows) * (size_t)twp * 2);
}

/* acc = acc r + pv for each row (acc = pv on the first tile). */
static void accumulate(scratch *w, int rows, int hd, bool first)
{
    for (int i = 0; i < rows; i++) {
        float *acc = w->acc + (size_t)i * (size_t)hd;
        const float *pv = w->pv + (size_t)i * (size_t)hd;
        if (first) {
            memcpy(acc, pv, (size_t)hd * sizeof *acc);
            continue;
        }
        float r = w->r[i];
        for (int d = 0; d < hd; d++)
            acc[d] = acc[d] * r + pv[d];
    }
}

/* A block of query rows [r0, r0 + rows) of head h: its packed operands
 * and shape. */
typedef struct operands {
    const uint16_t *q, *k, *v;
    int hd, rp; /* rp: rows padded */
    int lim, keys; /* row i sees keys below lim + i; keys: the last row's */
    float scale;
} operands;

static operands operands_of(const job *j, int h, int r0, int rows)
{
    const kv_attn_dnnl *a = j->a;
    size_t hd = (size_t)a->hd, kvh = (size_t)(h / (a->n_heads / a->n_kv_heads));
    return (operands){.q = a->q16 + ((size_t)h * (size_t)a->q_rows + (size_t)r0) * hd,
                      .k = a->k16 + kvh * (size_t)a->k_rows * hd,
                      .v = a->v16 + kvh * (size_t)a->k_rows * hd,
                      .hd = a->hd,
                      .rp = round_up(rows, KV_ATTN_DNNL_ROW_PAD),
                      .lim = j->base + r0 + 1,
                      .keys = j->base + r0 + rows,
                      .scale = j->scale};
}

/* Keys of the tile at t0, padded (the last tile may be narrower). */
static int tile_width(const operands *o, int t0)
{
    return round_up(o->keys - t0 < TILE_KEYS ? o->keys - t0 : TILE_KEYS, KV_ATTN_DNNL_KEY_PAD);
}

/* The scores of the tile at t0, y [rp][twp] = scale Q K^T. */
static kv_dnnl_product qk_product(const operands *o, int t0, float *y)
{
    return (kv_dnnl_product){.dt = KV_DTYPE_BF16,
                             .m = o->rp,
                             .n = tile_width(o, t0),
                             .k = o->hd,
                             .a = o->q,
                             .lda = (size_t)o->hd,
                             .b = o->k + (size_t)t0 * (size_t)o->hd,
                             .ldb = (size_t)o->hd,
                             .y = y,
                             .ldy = (size_t)tile_width(o, t0),
                             .scale = o->scale};
}

/* The tile at t0's share of the output, y [rp][hd] = P V, p [rp][twp]. */
static kv_dnnl_product pv_product(const operands *o, int t0, const uint16_t *p, float *y)
{
    return (kv_dnnl_product){.dt = KV_DTYPE_BF16,
                             .m = o->rp,
                             .n = o->hd,
                             .k = tile_width(o, t0),
                             .a = p,
                             .lda = (size_t)tile_width(o, t0),
                             .b = o->v + (size_t)t0 * (size_t)o->hd,
                             .ldb = (size_t)o->hd,
                             .b_kn = true,
                             .y = y,
                             .ldy = (size_t)o->hd};
}

/* One block of query rows [r0, r0 + rows) of head h over its keys. */
static bool block(job *j, scratch *w, int h, int r0, int rows)
{
    operands o = operands_of(j, h, r0, rows);
    int hd = o.hd, qd = j->a->n_heads * hd;
    for (int t0 = 0; t0 < o.keys; t0 += TILE_KEYS) {
        int tw = o.keys - t0 < TILE_KEYS ? o.keys - t0 : TILE_KEYS;
        kv_dnnl_product qk = qk_product(&o, t0, w->sc);
        if (!kv_dnnl_matmul(1, &qk))
            return false;
        softmax_step(w, rows, o.rp, t0, tw, qk.n, o.lim);
        kv_dnnl_product pv = pv_product(&o, t0, w->p16, w->pv);
        if (!kv_dnnl_matmul(1, &pv))
            return false;
        accumulate(w, rows, hd, t0 == 0);
    }
    for (int i = 0; i < rows; i++) {
        float inv = 1.0f / w->l[i],
              *o = j->out + (size_t)(r0 + i) * (size_t)qd + (size_t)h * (size_t)hd;
        const float *acc = w->acc + (size_t)i * (size_t)hd;
        for (int d = 0; d < hd; d++)
            o[d] = acc[d] * inv;
    }
    return true;
}

/* p through oneDNN, or, where it declines (it took the same shapes for
 * the flash tiles: only when out of memory), in a plain loop: a call with
 * statistics must finish once it has handed probabilities on. */
static void product(const kv_dnnl_product *p)
{
    if (kv_dnnl_matmul(1, p))
        return;
    const uint16_t *a = p->a, *b = p->b;
    float scale = p->scale != 0.0f ? p->scale : 1.0f;
    for (int i = 0; i < p->m; i++)
        for (int c = 0; c < p->n; c++) {
            float sum = 0;
            for (int e = 0; e < p->k; e++)
                sum += kv_bf16_to_f32(a[(size_t)i * p->lda + (size_t)e]) *
                       kv_bf16_to_f32(p->b_kn ? b[(size_t)e * p->ldb + (size_t)c]
                                              : b[(size_t)c * p->ldb + (size_t)e]);
            p->y[(size_t)i * p->ldy + (size_t)c] = scale * sum;
        }
}

/* One block of query rows [r0, r0 + rows) of head h with every row's
 * normalised probabilities, for the statistics: the scores of all the
 * block's tiles first (in sc, tile after tile, each dense [rp][twp] as the
 * products want it), then each row's exact softmax across them (its max,
 * the sum of e^(s - max), the probabilities; in F32, and rounded to BF16
 * in p16 for P V), then the probabilities to j->probs tile by tile, then
 * out = the sum over tiles of P V. Same products, same shapes as block's. */
static void block_exact(job *j, scratch *w, float *sc, uint16_t *p16, int h, int r0, int rows)
{
    operands o = operands_of(j, h, r0, rows);
    size_t rp = (size_t)o.rp;
    /* tile t0's scores start at t0 * rp: every tile before it is TILE_KEYS wide */
    for (int t0 = 0; t0 < o.keys; t0 += TILE_KEYS) {
        kv_dnnl_product qk = qk_product(&o, t0, sc + (size_t)t0 * rp);
        product(&qk);
    }
    for (int i = 0; i < o.rp; i++) { /* padded rows: probabilities 0 */
        int vis = i < rows ? o.lim + i : 0;
        float m = -INFINITY, sum = 0;
        for (int t0 = 0; t0 < vis; t0 += TILE_KEYS)
            m = kv_attn_row_max_avx512bf16(sc + (size_t)t0 * rp + (size_t)i * tile_width(&o, t0),
                                           vis - t0 < TILE_KEYS ? vis - t0 : TILE_KEYS, m);
        for (int t0 = 0; t0 < vis; t0 += TILE_KEYS)
            sum += kv_attn_exp_row_avx512bf16(sc + (size_t)t0 * rp +
                                                  (size_t)i * tile_width(&o, t0),
                                              vis - t0 < TILE_KEYS ? vis - t0 : TILE_KEYS, m);
        for (int t0 = 0; t0 < o.keys; t0 += TILE_KEYS) {
            int twp = tile_width(&o, t0), tv = vis - t0 < 0 ? 0 : vis - t0 < twp ? vis - t0 : twp;
            size_t at = (size_t)t0 * rp + (size_t)i * (size_t)twp;
            kv_attn_scale_row_avx512bf16(sc + at, tv, twp, vis > 0 ? 1.0f / sum : 0.0f, p16 + at);
        }
    }
    size_t hd = (size_t)o.hd, qd = (size_t)j->a->n_heads * hd;
    for (int t0 = 0; t0 < o.keys; t0 += TILE_KEYS) {
        int tw = o.keys - t0 < TILE_KEYS ? o.keys - t0 : TILE_KEYS;
        j->probs(j->probs_ctx, h, sc + (size_t)t0 * rp, tile_width(&o, t0), r0, rows, t0, tw);
        kv_dnnl_product pv = pv_product(&o, t0, p16 + (size_t)t0 * rp, t0 == 0 ? w->acc : w->pv);
        product(&pv);
        for (size_t e = 0; t0 > 0 && e < (size_t)rows * hd; e++)
            w->acc[e] += w->pv[e];
    }
    for (int i = 0; i < rows; i++)
        memcpy(j->out + (size_t)(r0 + i) * qd + (size_t)h * hd, w->acc + (size_t)i * hd,
               hd * sizeof *j->out);
}

/* A worker's room for block_exact: its share of a->wide. */
static size_t wide_bytes(const kv_attn_dnnl *a)
{
    return (size_t)BLOCK_ROWS * (size_t)a->k_rows * (sizeof(float) + sizeof(uint16_t));
}

static void head_task(void *ctx, int h, int worker)
{
    job *j = ctx;
    scratch w = carve(j->a, worker);
    char *wide = j->probs ? (char *)j->a->wide + (size_t)worker * wide_bytes(j->a) : NULL;
    float *sc = (float *)wide;
    uint16_t *p16 = wide ? (uint16_t *)(wide + (size_t)BLOCK_ROWS * (size_t)j->a->k_rows *
                                                   sizeof(float))
                         : NULL;
    for (int r0 = 0; r0 < j->cn && !atomic_load(&j->failed); r0 += BLOCK_ROWS) {
        int rows = j->cn - r0 < BLOCK_ROWS ? j->cn - r0 : BLOCK_ROWS;
        if (j->probs)
            block_exact(j, &w, sc, p16, h, r0, rows);
        else if (!block(j, &w, h, r0, rows))
            atomic_store(&j->failed, true);
    }
}

bool kv_attn_dnnl_run(kv_attn_dnnl *a, kv_pool *p, const float *q, const float *k, const float *v,
                      int cn, int base, bool continues, float scale, float *out,
                      kv_attn_dnnl_probs_fn probs, void *probs_ctx)
{
    int keys = base + cn;
    if (cn > a->q_rows || keys > a->k_rows)
        return false;
    if (probs && !a->wide && !(a->wide = kv_mem_alloc_huge((size_t)a->threads * wide_bytes(a))))
        return false;
    job j = {.a = a,
             .q = q,
             .k = k,
             .v = v,
             .out = out,
             .probs = probs,
             .probs_ctx = probs_ctx,
             .cn = cn,
             .base = base,
             .keys = keys,
             .scale = scale};
    j.k_from = continues && a->packed <= keys ? a->packed : 0;
    j.q_tasks = (cn + PACK_ROWS - 1) / PACK_ROWS;
    j.k_tasks = (keys - j.k_from + PACK_ROWS - 1) / PACK_ROWS;
    atomic_init(&j.failed, false);
    zero_rows(a->q16, a->n_heads, a->hd, a->q_rows, cn, round_up(cn, KV_ATTN_DNNL_ROW_PAD));
    int kp = round_up(keys, KV_ATTN_DNNL_KEY_PAD);
    zero_rows(a->k16, a->n_kv_heads, a->hd, a->k_rows, keys, kp);
    zero_rows(a->v16, a->n_kv_heads, a->hd, a->k_rows, keys, kp);
    kv_pool_phase phases[] = {{j.q_tasks + j.k_tasks, pack_task, &j}, {a->n_heads, head_task, &j}};
    kv_pool_run_phases(p, 2, phases);
    a->packed = atomic_load(&j.failed) ? 0 : keys;
    return !atomic_load(&j.failed);
}
