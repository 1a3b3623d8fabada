/* attn_prefill: the attention of a chunk of query rows over a layer's
 * cache (forward.h): blocks of query rows by sgemm, flash-tiled without
 * statistics, with every row's probabilities when statistics are asked;
 * bf16 mode's through oneDNN (attn_dnnl.h); chunks of GEMV size row by row
 * through the decode attention (attn_decode.c). */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "model/attn_dnnl.h"
#include "model/forward.h"

/* Keys per tile of the blocked (flash) prefill attention: a block's scores
 * for one tile (128 x 256 floats, 128 KB) stay in L2 between QK^T, the
 * softmax step and PV, where a block's whole score rows (4 MB at 8k keys)
 * went out to L3 and back three times. */
#define ATTN_TILE_KEYS 256

/* One attention call: a chunk of query rows against a layer's cache. */
typedef struct attn_job {
    const kv_model_config *cfg;
    const kv_cache_layer *cl;
    const float *k, *v; /* every key's and value's row, F32 */
    fwd *f;
    kv_attn_stats *st; /* NULL: no statistics */
    int cn, base, row0;
    float scale;
} attn_job;

/* Adds head h's probabilities of query rows r0 .. r0 + n - 1 of the chunk
 * for keys k0 .. k0 + keys - 1 (p[i][k] at p + i * ldp + k) to the
 * statistics. */
static void stats_add_matrix(const attn_job *j, int h, const float *p, int ldp, int r0, int n,
                             int k0, int keys)
{
    const kv_attn_stats_request *req = j->f->req;
    kv_attn_stats *st = j->st;
    size_t off = (size_t)h * (size_t)st->n_keys + (size_t)k0;
    for (int i = 0; i < n; i++) {
        const float *row = p + (size_t)i * (size_t)ldp;
        if (req->col_sums)
            for (int k = 0; k < keys; k++)
                st->col_sums[off + (size_t)k] += row[k];
        for (int w = 0; w < req->n_windows; w++)
            if (j->row0 + r0 + i >= j->f->n - req->windows[w])
                for (int k = 0; k < keys; k++)
                    st->win_sums[w][off + (size_t)k] += row[k];
    }
}

/* A chunk of query rows, one head per task, in blocks of rows: scores =
 * Q K^T with sgemm, causal softmax by slot order, then P V with sgemm. */
static void attention_gemm_task(void *ctx, int h, int worker)
{
    const attn_job *j = ctx;
    const kv_model_config *c = j->cfg;
    fwd *f = j->f;
    int hd = c->head_dim, group = c->n_heads / c->n_kv_heads;
    int qd = c->n_heads * hd, kvd = c->n_kv_heads * hd, kvo = (h / group) * hd;
    /* fwd_alloc gave each worker min(chunk, ATTN_BLOCK_ROWS) rows. */
    size_t block = f->chunk < ATTN_BLOCK_ROWS ? (size_t)f->chunk : ATTN_BLOCK_ROWS;
    float *sc = f->scores + (size_t)worker * block * (size_t)f->max_keys;
    for (int r0 = 0; r0 < j->cn; r0 += ATTN_BLOCK_ROWS) {
        int rows = j->cn - r0 < ATTN_BLOCK_ROWS ? j->cn - r0 : ATTN_BLOCK_ROWS;
        int keys = j->base + r0 + rows;
        const float *q = f->q + (size_t)r0 * (size_t)qd + (size_t)h * (size_t)hd;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, keys, hd, j->scale, q, qd,
                    j->k + kvo, kvd, 0.0f, sc, keys);
        for (int i = 0; i < rows; i++) {
            float *row = sc + (size_t)i * (size_t)keys;
            int visible = j->base + r0 + i + 1;
            mask_gap(j->cl, h / group, row, visible, -INFINITY);
            kv_softmax(row, visible);
            mask_gap(j->cl, h / group, row, visible, 0.0f);
            memset(row + visible, 0, (size_t)(keys - visible) * sizeof *row);
        }
        if (j->st)
            stats_add_matrix(j, h, sc, keys, r0, rows, 0, keys);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hd, keys, 1.0f, sc, keys,
                    j->v + kvo, kvd, 0.0f,
                    f->att + (size_t)r0 * (size_t)qd + (size_t)h * (size_t)hd, qd);
    }
}

/* One tile of keys [t0, t1) for a block of query rows (row i sees keys
 * below lim + i): scores with sgemm, the online softmax step (running max
 * mx and sum l per row; out rows rescaled when the max rises), then out +=
 * P V_tile with sgemm. Keys a row cannot see get probability 0. */
static void flash_tile(const attn_job *j, const float *q, const float *k, const float *v, int rows,
                       int t0, int t1, int lim, float *sc, float *mx, float *l, float *out)
{
    const kv_model_config *c = j->cfg;
    int hd = c->head_dim, qd = c->n_heads * hd, kvd = c->n_kv_heads * hd, tw = t1 - t0;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, tw, hd, j->scale, q, qd,
                k + (size_t)t0 * (size_t)kvd, kvd, 0.0f, sc, tw);
    for (int i = 0; i < rows; i++) {
        float *s = sc + (size_t)i * (size_t)tw;
        int vis = lim + i - t0 < tw ? lim + i - t0 : tw;
        if (vis <= 0) { /* the whole tile is in this row's future */
            memset(s, 0, (size_t)tw * sizeof *s);
            continue;
        }
        float m_new = kv_max(s, vis);
        m_new = m_new > mx[i] ? m_new : mx[i];
        float sum = kv_exp_shift(s, vis, m_new);
        memset(s + vis, 0, (size_t)(tw - vis) * sizeof *s);
        if (m_new > mx[i]) { /* e^(old max - new max) <= 1 rescales what came before */
            float r = expf(mx[i] - m_new);
            l[i] *= r;
            for (int d = 0; d < hd; d++)
                out[(size_t)i * (size_t)qd + (size_t)d] *= r;
        }
        mx[i] = m_new;
        l[i] += sum;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hd, tw, 1.0f, sc, tw,
                v + (size_t)t0 * (size_t)kvd, kvd, 1.0f, out, qd);
}

/* Prefill attention without statistics, one head per task, blocked as
 * flash attention: each block of query rows walks the keys in tiles with
 * an online softmax, so its scores never leave L2; tiles wholly above the
 * causal diagonal are never computed. (Statistics need every row's
 * normalised probabilities: attention_gemm_task.) */
static void attention_flash_task(void *ctx, int h, int worker)
{
    const attn_job *j = ctx;
    const kv_model_config *c = j->cfg;
    fwd *f = j->f;
    int hd = c->head_dim, group = c->n_heads / c->n_kv_heads;
    int qd = c->n_heads * hd, kvo = (h / group) * hd;
    /* fwd_alloc gave each worker min(chunk, ATTN_BLOCK_ROWS) x max_keys floats. */
    size_t block = f->chunk < ATTN_BLOCK_ROWS ? (size_t)f->chunk : ATTN_BLOCK_ROWS;
    float *sc = f->scores + (size_t)worker * block * (size_t)f->max_keys;
    float mx[ATTN_BLOCK_ROWS], l[ATTN_BLOCK_ROWS];
    for (int r0 = 0; r0 < j->cn; r0 += ATTN_BLOCK_ROWS) {
        int rows = j->cn - r0 < ATTN_BLOCK_ROWS ? j->cn - r0 : ATTN_BLOCK_ROWS;
        int lim = j->base + r0 + 1, keys = j->base + r0 + rows;
        const float *q = f->q + (size_t)r0 * (size_t)qd + (size_t)h * (size_t)hd;
        float *out = f->att + (size_t)r0 * (size_t)qd + (size_t)h * (size_t)hd;
        for (int i = 0; i < rows; i++) {
            mx[i] = -INFINITY;
            l[i] = 0;
            memset(out + (size_t)i * (size_t)qd, 0, (size_t)hd * sizeof *out);
        }
        for (int t0 = 0; t0 < keys; t0 += ATTN_TILE_KEYS)
            flash_tile(j, q, j->k + kvo, j->v + kvo, rows, t0,
                       keys - t0 < ATTN_TILE_KEYS ? keys : t0 + ATTN_TILE_KEYS, lim, sc, mx, l,
                       out);
        for (int i = 0; i < rows; i++) {
            float inv = 1.0f / l[i];
            for (int d = 0; d < hd; d++)
                out[(size_t)i * (size_t)qd + (size_t)d] *= inv;
        }
    }
}

/* kv_attn_dnnl_probs_fn over an attn_job: into its statistics. */
static void stats_add_probs(void *ctx, int h, const float *p, int ldp, int r0, int n, int k0,
                            int keys)
{
    stats_add_matrix(ctx, h, p, ldp, r0, n, k0, keys);
}

void kv_attn_chunk(const kv_model_config *c, const kv_cache *cache, const kv_cache_layer *cl,
                   fwd *f, kv_attn_stats *st, int cn, int base, int row0)
{
    attn_job j = {.cfg = c,
                  .cl = cl,
                  .k = cl->k,
                  .v = cl->v,
                  .f = f,
                  .st = st,
                  .cn = cn,
                  .base = base,
                  .row0 = row0,
                  .scale = 1.0f / sqrtf((float)c->head_dim)};
    size_t work = (size_t)c->n_heads * (size_t)(base + cn) * (size_t)cn * (size_t)c->head_dim;
    kv_pool *p = work > KV_PARALLEL_MIN_WORK ? f->pool : NULL;
    if (cn <= KV_GEMV_MAX_ROWS) {
        size_t qd = (size_t)c->n_heads * (size_t)c->head_dim;
        for (int i = 0; i < cn; i++) {
            decode_job d = {.cfg = c,
                            .c = cache,
                            .cl = cl,
                            .f = f,
                            .st = st,
                            .req = f->req,
                            .q = f->q + (size_t)i * qd,
                            .keys = base + i + 1,
                            .row = row0 + i,
                            .n = f->n,
                            .scale = j.scale,
                            .scores = f->scores,
                            .partial = f->partial};
            kv_decode_attention(&d, p, f->att + (size_t)i * qd);
        }
        return;
    }
    if (cl->k_stored > 0 || cl->v_stored > 0) { /* sgemm reads F32 rows: once per call */
        size_t at = (size_t)f->max_keys * (size_t)c->n_kv_heads * (size_t)c->head_dim;
        kv_cache_dense(cache, (int)(cl - cache->layers), base + cn, f->dense, f->dense + at);
        j.k = f->dense;
        j.v = f->dense + at;
    }
    /* oneDNN's tiles in bf16 mode (with statistics, each row's exact
     * probabilities); a later chunk of the layer finds the keys of the
     * earlier ones packed */
    if (f->attn_dnnl && !cl->gap &&
        kv_attn_dnnl_run(f->attn_dnnl, p, f->q, j.k, j.v, cn, base, row0 > 0, j.scale, f->att,
                         st ? stats_add_probs : NULL, &j))
        return;
    /* the flash tiles know no gaps: the rare multi-row forward over a
     * layer with gaps (AdaKV) takes the plain path */
    kv_pool_run(p, c->n_heads, st || cl->gap ? attention_gemm_task : attention_flash_task, &j);
}
