#include "model/model.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/attn_dnnl.h"
#include "model/cpu.h"
#include "model/forward.h"
#include "model/kernels.h"
#include "model/safetensors.h"
#include "util/mem.h"

#define DEFAULT_CHUNK 1024

typedef struct layer {
    kv_weight wq, wk, wv, wo, gate, up, down;
    float *attn_norm, *ffn_norm, *q_norm, *k_norm;     /* q/k norms: Qwen3 only */
    float *bq, *bk, *bv, *bo, *b_gate, *b_up, *b_down; /* NULL when absent */
} layer;

struct kv_model {
    kv_model_config cfg;
    kv_rope rope;
    kv_weight embed, lm_head;
    float *norm;
    layer *layers;
    void **blobs; /* every weight allocation, freed with the model */
    int n_blobs;
    size_t weight_bytes;
    int chunk;
    kv_compute compute;
    bool rounded; /* F32/F16 weights were rounded to BF16 for BF16 mode */
    kv_pool *pool;
};

/* ---------------------------------------------------------------- loading */

/* A matrix whose memory is allocated and whose bytes are still to be read
 * (read_matrices). */
typedef struct pending_read {
    const kv_st_tensor *t;
    void *dst;
} pending_read;

typedef struct loader {
    kv_model *m;
    kv_safetensors *st;
    const char *dir;
    kv_error *err;
    pending_read *reads;
    int n_reads, cap_reads;
} loader;

static void *alloc_blob(loader *ld, size_t bytes)
{
    void **blobs = realloc(ld->m->blobs, (size_t)(ld->m->n_blobs + 1) * sizeof *blobs);
    if (!blobs)
        return NULL;
    ld->m->blobs = blobs;
    /* 2 MiB-aligned on huge pages (util/mem.h): read from the file next,
     * every page fresh, and decode streams the weights through fewer TLB
     * entries */
    void *p = kv_mem_alloc_huge(bytes);
    if (p)
        blobs[ld->m->n_blobs++] = p;
    return p;
}

/* The tensor `name`, checked to be a float tensor of the shape config.json
 * implies ([d0] when d1 == 0, else [d0, d1]). */
static const kv_st_tensor *find_tensor(loader *ld, const char *name, int d0, int d1)
{
    const kv_st_tensor *t = kv_safetensors_find(ld->st, name);
    if (!t) {
        kv_fail(ld->err, "%s: tensor '%s' is missing from the safetensors", ld->dir, name);
        return NULL;
    }
    if (t->dtype == KV_DTYPE_OTHER) {
        kv_fail(ld->err, "%s: tensor '%s' has dtype %s (supported: F32, F16, BF16)", ld->dir, name,
                t->dtype_name);
        return NULL;
    }
    int want_dims = d1 ? 2 : 1;
    if (t->n_dims != want_dims || t->shape[0] != d0 || (d1 && t->shape[1] != d1)) {
        char got[128] = "";
        for (int i = 0, o = 0; i < t->n_dims && o < 100; i++)
            o += snprintf(got + o, sizeof got - (size_t)o, "%s%lld", i ? ", " : "",
                          (long long)t->shape[i]);
        if (d1)
            kv_fail(ld->err, "%s: tensor '%s' has shape [%s], config.json implies [%d, %d]",
                    ld->dir, name, got, d0, d1);
        else
            kv_fail(ld->err, "%s: tensor '%s' has shape [%s], config.json implies [%d]", ld->dir,
                    name, got, d0);
        return NULL;
    }
    return t;
}

/* Notes that t's bytes go to dst once every weight has its memory. */
static int defer_read(loader *ld, const kv_st_tensor *t, void *dst)
{
    if (ld->n_reads == ld->cap_reads) {
        int cap = ld->cap_reads ? 2 * ld->cap_reads : 64;
        pending_read *r = realloc(ld->reads, (size_t)cap * sizeof *r);
        if (!r)
            return kv_fail(ld->err, "out of memory");
        ld->reads = r;
        ld->cap_reads = cap;
    }
    ld->reads[ld->n_reads++] = (pending_read){t, dst};
    return 0;
}

/* A weight's memory (NULL after an error) and its tensor *t, its bytes
 * not read yet. */
static void *alloc_weight(loader *ld, const char *name, int rows, int cols,
                          const kv_st_tensor **tp, kv_weight *w)
{
    const kv_st_tensor *t = *tp = find_tensor(ld, name, rows, cols);
    if (!t)
        return NULL;
    void *p = alloc_blob(ld, t->nbytes);
    if (!p) {
        kv_fail(ld->err, "%s: out of memory for tensor '%s' (%zu bytes)", ld->dir, name,
                t->nbytes);
        return NULL;
    }
    *w = (kv_weight){.dtype = t->dtype, .data = p, .rows = rows, .cols = cols};
    ld->m->weight_bytes += t->nbytes;
    return p;
}

/* A weight matrix, its bytes read later, with all the others
 * (read_matrices). */
static int load_matrix(loader *ld, const char *name, int rows, int cols, kv_weight *w)
{
    const kv_st_tensor *t;
    void *p = alloc_weight(ld, name, rows, cols, &t, w);
    return p ? defer_read(ld, t, p) : -1;
}

/* Norm weights and biases: small, so widened to F32 once. Absent optional
 * vectors leave *out NULL. */
static int load_vector(loader *ld, const char *name, int n, bool required, float **out)
{
    *out = NULL;
    if (!required && !kv_safetensors_find(ld->st, name))
        return 0;
    kv_weight w;
    const kv_st_tensor *t;
    void *p = alloc_weight(ld, name, n, 0, &t, &w);
    if (!p || kv_safetensors_read(ld->st, t, p, ld->err) != 0) /* widened next: read now */
        return -1;
    w.rows = 1;
    w.cols = n;
    float *f = alloc_blob(ld, (size_t)n * sizeof *f);
    if (!f)
        return kv_fail(ld->err, "%s: out of memory", ld->dir);
    kv_widen_rows(NULL, &w, 0, 1, f);
    *out = f;
    return 0;
}

static int load_layer(loader *ld, int i, layer *L)
{
    const kv_model_config *c = &ld->m->cfg;
    int H = c->hidden, qd = c->n_heads * c->head_dim, kvd = c->n_kv_heads * c->head_dim;
    char name[256];
#define NAME(s) (snprintf(name, sizeof name, "model.layers.%d.%s", i, s), name)
    if (load_vector(ld, NAME("input_layernorm.weight"), H, true, &L->attn_norm) ||
        load_vector(ld, NAME("post_attention_layernorm.weight"), H, true, &L->ffn_norm) ||
        load_matrix(ld, NAME("self_attn.q_proj.weight"), qd, H, &L->wq) ||
        load_matrix(ld, NAME("self_attn.k_proj.weight"), kvd, H, &L->wk) ||
        load_matrix(ld, NAME("self_attn.v_proj.weight"), kvd, H, &L->wv) ||
        load_matrix(ld, NAME("self_attn.o_proj.weight"), H, qd, &L->wo) ||
        load_matrix(ld, NAME("mlp.gate_proj.weight"), c->ffn, H, &L->gate) ||
        load_matrix(ld, NAME("mlp.up_proj.weight"), c->ffn, H, &L->up) ||
        load_matrix(ld, NAME("mlp.down_proj.weight"), H, c->ffn, &L->down))
        return -1;
    if (c->qkv_bias && (load_vector(ld, NAME("self_attn.q_proj.bias"), qd, true, &L->bq) ||
                        load_vector(ld, NAME("self_attn.k_proj.bias"), kvd, true, &L->bk) ||
                        load_vector(ld, NAME("self_attn.v_proj.bias"), kvd, true, &L->bv)))
        return -1;
    if (c->o_bias && load_vector(ld, NAME("self_attn.o_proj.bias"), H, true, &L->bo))
        return -1;
    if (c->mlp_bias && (load_vector(ld, NAME("mlp.gate_proj.bias"), c->ffn, true, &L->b_gate) ||
                        load_vector(ld, NAME("mlp.up_proj.bias"), c->ffn, true, &L->b_up) ||
                        load_vector(ld, NAME("mlp.down_proj.bias"), H, true, &L->b_down)))
        return -1;
    if (c->qk_norm &&
        (load_vector(ld, NAME("self_attn.q_norm.weight"), c->head_dim, true, &L->q_norm) ||
         load_vector(ld, NAME("self_attn.k_norm.weight"), c->head_dim, true, &L->k_norm)))
        return -1;
#undef NAME
    return 0;
}

static int load_weights(loader *ld)
{
    kv_model *m = ld->m;
    const kv_model_config *c = &m->cfg;
    if (load_matrix(ld, "model.embed_tokens.weight", c->vocab, c->hidden, &m->embed) ||
        load_vector(ld, "model.norm.weight", c->hidden, true, &m->norm))
        return -1;
    if (c->tied_embeddings)
        m->lm_head = m->embed;
    else if (load_matrix(ld, "lm_head.weight", c->vocab, c->hidden, &m->lm_head))
        return -1;
    m->layers = calloc((size_t)c->n_layers, sizeof *m->layers);
    if (!m->layers)
        return kv_fail(ld->err, "out of memory");
    for (int i = 0; i < c->n_layers; i++)
        if (load_layer(ld, i, &m->layers[i]) != 0)
            return -1;
    return 0;
}

/* Bytes a read task takes: the embedding alone is a quarter of
 * Qwen3-0.6B's weights, so tensors go in pieces that the threads share
 * evenly. */
#define READ_PIECE ((size_t)16 << 20)

typedef struct read_piece {
    const pending_read *r;
    size_t from, n;
    int rc;
    kv_error err;
} read_piece;

typedef struct read_job {
    const kv_safetensors *st;
    read_piece *pieces;
} read_job;

static void read_task(void *ctx, int t, int worker)
{
    (void)worker;
    read_job *j = ctx;
    read_piece *p = &j->pieces[t];
    p->rc = kv_safetensors_read_part(j->st, p->r->t, p->from, p->n, (char *)p->r->dst + p->from,
                                     &p->err);
}

/* Reads the deferred matrices in pieces on the model's pool. Reading into
 * fresh memory is mostly the kernel faulting in and zeroing its pages,
 * which on a VM whose host takes freed memory back runs at ~0.5 GB/s a
 * thread: Qwen3-0.6B's 1.11 GiB loaded in 2.6-3.0 s on one thread, 1.8-2.0 s
 * on two (`bench model`'s "loaded in", 3 cold loads each, alternated 20 s
 * apart, AVX512_BF16 VM, 2026-12-03). The first failing piece in the order
 * of the weights names the error. */
static int read_matrices(loader *ld)
{
    size_t n = 0;
    for (int i = 0; i < ld->n_reads; i++)
        n += (ld->reads[i].t->nbytes + READ_PIECE - 1) / READ_PIECE;
    read_piece *pieces = calloc(n > 0 ? n : 1, sizeof *pieces);
    if (!pieces)
        return kv_fail(ld->err, "out of memory");
    size_t k = 0;
    for (int i = 0; i < ld->n_reads; i++)
        for (size_t from = 0; from < ld->reads[i].t->nbytes; from += READ_PIECE) {
            size_t left = ld->reads[i].t->nbytes - from;
            pieces[k++] = (read_piece){.r = &ld->reads[i], .from = from,
                                       .n = left < READ_PIECE ? left : READ_PIECE};
        }
    if (n > 0)
        kv_pool_run(ld->m->pool, (int)n, read_task, &(read_job){ld->st, pieces});
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++)
        if (pieces[i].rc != 0) {
            *ld->err = pieces[i].err;
            rc = -1;
        }
    free(pieces);
    return rc;
}

int kv_model_load(const char *dir, kv_model **out, kv_error *err)
{
    *out = NULL;
    kv_model *m = calloc(1, sizeof *m);
    if (!m)
        return kv_fail(err, "out of memory");
    m->chunk = DEFAULT_CHUNK;
    loader ld = {.m = m, .dir = dir, .err = err};
    /* The kernels' level, from KVBENCH_ISA: a bad value fails here, before
     * any work, rather than in the middle of a run. */
    int rc = kv_isa_init(err);
    if (rc == 0)
        rc = kv_model_config_load(dir, &m->cfg, err);
    if (rc == 0)
        rc = kv_rope_init(&m->rope, &m->cfg.rope, m->cfg.head_dim, err);
    if (rc == 0)
        rc = kv_safetensors_open(dir, &ld.st, err);
    /* sgemm runs on the pool's threads, one block each: OpenBLAS's own
     * threads would only compete with them. */
    openblas_set_num_threads(1);
    if (rc == 0 && !(m->pool = kv_pool_new(kv_get_threads(), err)))
        rc = -1;
    if (rc == 0)
        rc = load_weights(&ld);
    if (rc == 0)
        rc = read_matrices(&ld);
    free(ld.reads);
    kv_safetensors_free(ld.st);
    if (rc != 0) {
        kv_model_free(m);
        return -1;
    }
    *out = m;
    return 0;
}

void kv_model_free(kv_model *m)
{
    if (!m)
        return;
    for (int i = 0; i < m->n_blobs; i++)
        free(m->blobs[i]);
    free(m->blobs);
    free(m->layers);
    kv_pool_free(m->pool);
    kv_rope_free(&m->rope);
    kv_model_config_free(&m->cfg);
    free(m);
}

const kv_model_config *kv_model_get_config(const kv_model *m)
{
    return &m->cfg;
}

const kv_rope *kv_model_get_rope(const kv_model *m)
{
    return &m->rope;
}

const kv_weight *kv_model_o_proj(const kv_model *m, int layer)
{
    return &m->layers[layer].wo;
}

size_t kv_model_weight_bytes(const kv_model *m)
{
    return m->weight_bytes;
}

int kv_model_set_threads(kv_model *m, int threads, kv_error *err)
{
    kv_pool *p = kv_pool_new(threads, err);
    if (!p)
        return -1;
    kv_pool_free(m->pool);
    m->pool = p;
    return 0;
}

int kv_model_threads(const kv_model *m)
{
    return kv_pool_threads(m->pool);
}

kv_pool *kv_model_pool(kv_model *m)
{
    return m->pool;
}

/* w rounded to BF16 in a new blob that replaces its old one. */
static int round_matrix(kv_model *m, kv_weight *w, kv_error *err)
{
    if (w->dtype == KV_DTYPE_BF16)
        return 0;
    size_t n = (size_t)w->rows * (size_t)w->cols,
           old_bytes = n * (w->dtype == KV_DTYPE_F32 ? 4 : 2);
    uint16_t *dst = kv_mem_alloc_huge(n * sizeof *dst);
    float *row = malloc((size_t)w->cols * sizeof *row);
    if (!dst || !row) {
        free(dst);
        free(row);
        return kv_fail(err, "out of memory rounding the weights to BF16");
    }
    for (int r = 0; r < w->rows; r++) {
        kv_widen_rows(NULL, w, r, 1, row);
        kv_pack_bf16(row, (size_t)w->cols, dst + (size_t)r * (size_t)w->cols);
    }
    free(row);
    for (int i = 0; i < m->n_blobs; i++)
        if (m->blobs[i] == w->data) {
            free(m->blobs[i]);
            m->blobs[i] = dst;
        }
    m->weight_bytes = m->weight_bytes - old_bytes + n * sizeof *dst;
    *w = (kv_weight){.dtype = KV_DTYPE_BF16, .data = dst, .rows = w->rows, .cols = w->cols};
    return 0;
}

int kv_model_set_compute(kv_model *m, kv_compute mode, kv_error *err)
{
    if (mode == KV_COMPUTE_F32 && m->rounded)
        return kv_fail(err, "this model's F32/F16 weights were rounded to BF16 for bf16 compute: "
                            "load it again for f32");
    if (mode == KV_COMPUTE_BF16 && !m->rounded) {
        /* BF16 mode multiplies BF16 weights only (kernels.h). */
        m->rounded = true;
        if (round_matrix(m, &m->embed, err) != 0)
            return -1;
        if (m->cfg.tied_embeddings)
            m->lm_head = m->embed;
        else if (round_matrix(m, &m->lm_head, err) != 0)
            return -1;
        for (int l = 0; l < m->cfg.n_layers; l++) {
            layer *L = &m->layers[l];
            kv_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->gate, &L->up, &L->down};
            for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
                if (round_matrix(m, ws[i], err) != 0)
                    return -1;
        }
    }
    m->compute = mode;
    return 0;
}

kv_compute kv_model_compute(const kv_model *m)
{
    return m->compute;
}

void kv_model_set_chunk(kv_model *m, int chunk)
{
    m->chunk = chunk > 0 ? chunk : 1;
}

kv_cache *kv_model_cache_new(const kv_model *m, int cap, kv_error *err)
{
    return kv_cache_new(m->cfg.n_layers, m->cfg.n_kv_heads, m->cfg.head_dim, cap, err);
}

/* ------------------------------------------------------------- statistics */

kv_attn_stats *kv_model_stats_new(const kv_model *m, const kv_cache *c, int n,
                                  const kv_attn_stats_request *req, kv_error *err)
{
    int L = m->cfg.n_layers;
    kv_attn_stats *s = calloc((size_t)L, sizeof *s);
    if (!s) {
        kv_fail(err, "out of memory for attention statistics");
        return NULL;
    }
    for (int l = 0; l < L; l++) {
        s[l].n_heads = m->cfg.n_heads;
        s[l].n_keys = c->layers[l].len + n;
        size_t cells = (size_t)s[l].n_heads * (size_t)s[l].n_keys;
        bool ok = true;
        if (req->col_sums)
            ok = (s[l].col_sums = calloc(cells, sizeof(double))) != NULL;
        for (int w = 0; w < req->n_windows && ok; w++)
            ok = (s[l].win_sums[w] = calloc(cells, sizeof(double))) != NULL;
        s[l].head_dim = m->cfg.head_dim;
        if (ok && req->q_moments) {
            size_t hd = (size_t)m->cfg.n_heads * (size_t)m->cfg.head_dim;
            ok = (s[l].q_sum = calloc(hd, sizeof(double))) &&
                 (s[l].q_outer = calloc(hd * (size_t)m->cfg.head_dim, sizeof(double))) &&
                 (s[l].q_first = calloc(hd * (size_t)(req->q_rows > 0 ? req->q_rows : 1),
                                        sizeof(float)));
        }
        if (!ok) {
            kv_model_stats_free(s, L);
            kv_fail(err, "out of memory for attention statistics");
            return NULL;
        }
    }
    return s;
}

void kv_model_stats_free(kv_attn_stats *stats, int n_layers)
{
    if (!stats)
        return;
    for (int l = 0; l < n_layers; l++) {
        free(stats[l].col_sums);
        for (int w = 0; w < KV_MAX_WINDOWS; w++)
            free(stats[l].win_sums[w]);
        free(stats[l].q_sum);
        free(stats[l].q_outer);
        free(stats[l].q_first);
    }
    free(stats);
}

/* Room for a few more slots than asked, as a growing cache takes them. */
static int stats_room(int keys)
{
    return keys + (keys / 8 > 64 ? keys / 8 : 64);
}

int kv_model_stats_renew(const kv_model *m, const kv_cache *c, int n,
                         const kv_attn_stats_request *req, kv_attn_stats **stats, kv_error *err)
{
    int L = m->cfg.n_layers;
    if (req->q_moments || req->rows_before != 0) {
        kv_model_stats_free(*stats, L);
        *stats = NULL;
        return kv_fail(err, "attention statistics: a decode step's request carries no query "
                            "moments and no earlier rows");
    }
    kv_attn_stats *s = *stats ? *stats : calloc((size_t)L, sizeof *s);
    bool ok = s != NULL;
    for (int l = 0; ok && l < L; l++) {
        int keys = c->layers[l].len + n;
        if (keys > s[l].cap_keys) { /* every buffer of the layer anew, larger */
            free(s[l].col_sums);
            s[l].col_sums = NULL;
            for (int w = 0; w < KV_MAX_WINDOWS; w++) {
                free(s[l].win_sums[w]);
                s[l].win_sums[w] = NULL;
            }
            s[l].cap_keys = stats_room(keys);
        }
        s[l].n_heads = m->cfg.n_heads;
        s[l].n_keys = keys;
        s[l].head_dim = m->cfg.head_dim;
        size_t bytes = (size_t)s[l].n_heads * (size_t)s[l].cap_keys * sizeof(double);
        if (req->col_sums && !s[l].col_sums)
            ok = (s[l].col_sums = malloc(bytes)) != NULL;
        for (int w = 0; ok && w < req->n_windows; w++)
            if (!s[l].win_sums[w])
                ok = (s[l].win_sums[w] = malloc(bytes)) != NULL;
    }
    if (!ok) {
        kv_model_stats_free(s, L);
        *stats = NULL;
        return kv_fail(err, "out of memory for attention statistics");
    }
    *stats = s;
    return 0;
}

static int check_stats(const kv_model *m, const kv_cache *c, int n,
                       const kv_attn_stats_request *req, kv_attn_stats *stats, kv_error *err)
{
    if (!kv_attn_stats_wanted(req))
        return 0;
    if (!stats)
        return kv_fail(err, "attention statistics requested without buffers");
    if (req->n_windows < 0 || req->n_windows > KV_MAX_WINDOWS)
        return kv_fail(err, "attention statistics: %d windows (at most %d)", req->n_windows,
                       KV_MAX_WINDOWS);
    for (int w = 0; w < req->n_windows; w++)
        if (req->windows[w] <= 0)
            return kv_fail(err, "attention statistics: window %d is not positive", req->windows[w]);
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const kv_attn_stats *s = &stats[l];
        if (s->n_heads != m->cfg.n_heads || s->n_keys != c->layers[l].len + n)
            return kv_fail(err,
                           "attention statistics of layer %d are shaped [%d][%d], the forward "
                           "needs [%d][%d]",
                           l, s->n_heads, s->n_keys, m->cfg.n_heads, c->layers[l].len + n);
        if (req->col_sums && !s->col_sums)
            return kv_fail(err, "attention statistics: layer %d has no col_sums buffer", l);
        for (int w = 0; w < req->n_windows; w++)
            if (!s->win_sums[w])
                return kv_fail(err, "attention statistics: layer %d has no buffer for window %d", l,
                               req->windows[w]);
        if (req->q_moments &&
            (!s->q_sum || !s->q_outer || (req->q_rows > 0 && !s->q_first) ||
             s->head_dim != m->cfg.head_dim || req->q_from < 0 || req->q_rows < 0))
            return kv_fail(err, "attention statistics: layer %d has no buffers for the query "
                                "moments",
                           l);
    }
    return 0;
}

static void zero_stats(const kv_attn_stats_request *req, kv_attn_stats *stats, int n_layers, int n)
{
    for (int l = 0; l < n_layers; l++) {
        size_t bytes = (size_t)stats[l].n_heads * (size_t)stats[l].n_keys * sizeof(double);
        if (req->col_sums && !sums_written(req, n))
            memset(stats[l].col_sums, 0, bytes);
        for (int w = 0; w < req->n_windows && !sums_written(req, n); w++)
            memset(stats[l].win_sums[w], 0, bytes);
        if (req->q_moments) {
            size_t hd = (size_t)stats[l].n_heads * (size_t)stats[l].head_dim;
            memset(stats[l].q_sum, 0, hd * sizeof(double));
            memset(stats[l].q_outer, 0, hd * (size_t)stats[l].head_dim * sizeof(double));
            memset(stats[l].q_first, 0, hd * (size_t)req->q_rows * sizeof(float));
            stats[l].q_count = 0;
        }
    }
}

/* Adds the pre-RoPE queries of the chunk's rows row0 .. row0 + n - 1 of the
 * call (qpre [n][n_heads * head_dim], in double) to the query moments: the
 * sums, the upper triangle of the outer products (one dsyrk per head), and
 * the rows req->q_from .. + q_rows one by one. */
static void stats_add_queries(const kv_attn_stats_request *req, kv_attn_stats *s,
                              const double *qpre, int row0, int n)
{
    row0 += req->rows_before; /* the row's index in the whole prompt */
    int D = s->head_dim, first = req->q_from > row0 ? req->q_from - row0 : 0;
    if (first >= n)
        return;
    size_t hd = (size_t)s->n_heads * (size_t)D;
    for (int i = first; i < n; i++) {
        const double *q = qpre + (size_t)i * hd;
        for (size_t j = 0; j < hd; j++)
            s->q_sum[j] += q[j];
        int r = row0 + i - req->q_from;
        if (r < req->q_rows)
            for (size_t j = 0; j < hd; j++)
                s->q_first[(size_t)r * hd + j] = (float)q[j];
    }
    for (int h = 0; h < s->n_heads; h++)
        cblas_dsyrk(CblasRowMajor, CblasUpper, CblasTrans, D, n - first, 1.0,
                    qpre + (size_t)first * hd + (size_t)h * (size_t)D, (int)hd, 1.0,
                    s->q_outer + (size_t)h * (size_t)D * (size_t)D, D);
    s->q_count += n - first;
}

/* ---------------------------------------------------------------- forward */

static void fwd_free(fwd *f)
{
    free(f->x);
    free(f->h);
    free(f->q);
    free(f->att);
    free(f->tmp);
    free(f->g);
    free(f->u);
    free(f->scores);
    free(f->partial);
    free(f->wide);
    free(f->layer_f32);
    free(f->k_new);
    free(f->order);
    free(f->v_new);
    free(f->qpre);
    free(f->xprep);
    free(f->dense);
    kv_attn_dnnl_free(f->attn_dnnl);
    free(f->x16);
}

static size_t max_size(size_t a, size_t b)
{
    return a > b ? a : b;
}

/* The most keys any layer of c will hold after n more tokens. */
static int keys_after(const kv_cache *c, int n)
{
    int mk = 0;
    for (int l = 0; l < c->n_layers; l++)
        if (c->layers[l].len + n > mk)
            mk = c->layers[l].len + n;
    return mk;
}

/* Buffers for a call of n rows processed chunk rows at a time, attending to
 * at most max_keys keys; f->batched set by the caller. */
static int fwd_alloc(const kv_model *m, int max_keys, int n, int chunk, fwd *f, kv_error *err)
{
    const kv_model_config *cfg = &m->cfg;
    size_t C = (size_t)chunk, qd = (size_t)cfg->n_heads * (size_t)cfg->head_dim;
    f->max_keys = max_keys;
    size_t threads = (size_t)kv_pool_threads(m->pool);
    size_t block = C < ATTN_BLOCK_ROWS ? C : ATTN_BLOCK_ROWS;
    size_t rows = max_size(block * threads, (size_t)cfg->n_heads);
    if (f->batched) /* each worker may run a whole row's attention */
        rows = max_size(rows, threads * (size_t)cfg->n_heads);
    /* on huge pages where large (util/mem.h): a prefill touches these
     * fresh each call */
    f->x = kv_mem_alloc_huge((size_t)n * (size_t)cfg->hidden * sizeof(float));
    f->h = kv_mem_alloc_huge(C * (size_t)cfg->hidden * sizeof(float));
    f->tmp = kv_mem_alloc_huge(C * (size_t)cfg->hidden * sizeof(float));
    f->q = kv_mem_alloc_huge(C * qd * sizeof(float));
    f->att = kv_mem_alloc_huge(C * qd * sizeof(float));
    f->g = kv_mem_alloc_huge(C * (size_t)cfg->ffn * sizeof(float));
    f->u = kv_mem_alloc_huge(C * (size_t)cfg->ffn * sizeof(float));
    f->scores = kv_mem_alloc_huge(rows * (size_t)f->max_keys * sizeof(float));
    bool ok = f->x && f->h && f->tmp && f->q && f->att && f->g && f->u && f->scores;
    /* Any chunk can end in a remainder of at most KV_GEMV_MAX_ROWS rows
     * (a 1,026-token prompt in 1,024-row chunks ends with 2), and those
     * rows take the decode attention path: it needs its blocks always. */
    if (ok) {
        f->key_block = kv_decode_key_block(cfg);
        size_t blocks = ((size_t)f->max_keys + (size_t)f->key_block - 1) / (size_t)f->key_block;
        if (f->batched)
            blocks *= threads;
        ok = (f->partial = malloc(blocks * qd * sizeof(float))) != NULL;
    }
    if (ok && (f->batched || chunk <= KV_GEMV_MAX_ROWS)) {
        /* GEMV-sized chunks run the output projection and MLP as one job
         * (output_and_mlp_gemv), their inputs prepared in this buffer. */
        size_t widest = max_size(max_size((size_t)cfg->hidden, qd), (size_t)cfg->ffn);
        /* aligned as kv_gemv_batch's own (kernels.c: a 512-bit load across
         * two cache lines costs two) */
        ok = (f->xprep = aligned_alloc(64, (C * widest * sizeof(float) + 63) / 64 * 64)) != NULL;
    }
    if (ok && f->batched) {
        size_t kvd = (size_t)cfg->n_kv_heads * (size_t)cfg->head_dim;
        ok = (f->order = malloc(C * sizeof *f->order)) &&
             (f->k_new = malloc(C * kvd * sizeof(float))) &&
             (f->v_new = malloc(C * kvd * sizeof(float)));
    }
    if (ok && f->stored && chunk > KV_GEMV_MAX_ROWS) {
        size_t kvd = (size_t)cfg->n_kv_heads * (size_t)cfg->head_dim;
        ok = (f->dense = kv_mem_alloc_huge(2 * (size_t)f->max_keys * kvd * sizeof(float))) != NULL;
    }
    if (ok && !f->batched && chunk > KV_GEMV_MAX_ROWS && f->mode == KV_COMPUTE_BF16 &&
        kv_attn_dnnl_usable())
        ok = (f->attn_dnnl = kv_attn_dnnl_new(cfg->n_heads, cfg->n_kv_heads, cfg->head_dim, chunk,
                                              f->max_keys, (int)threads)) != NULL;
    if (ok && !f->batched && chunk > KV_GEMV_MAX_ROWS &&
        kv_matmul_takes_bf16(&m->layers[0].wq, f->mode)) {
        size_t widest = max_size(max_size((size_t)cfg->hidden, qd), (size_t)cfg->ffn);
        ok = (f->x16 = kv_mem_alloc_huge(C * widest * sizeof *f->x16)) != NULL;
    }
    if (ok && !f->batched && chunk > KV_GEMV_MAX_ROWS) {
        /* sgemm wants F32: a layer's 16-bit matrices are widened once per
         * call (not per chunk), the embedding in blocks of rows. */
        size_t wide = threads * kv_matmul_scratch(m->pool, &m->lm_head);
        /* Layers may mix dtypes: room for the largest 16-bit share. */
        f->layer_floats = 0;
        for (int l = 0; l < cfg->n_layers; l++) {
            const layer *L = &m->layers[l];
            const kv_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->gate, &L->up, &L->down};
            size_t floats = 0;
            for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
                if (kv_matmul_widens(ws[i], f->mode))
                    floats += (size_t)ws[i]->rows * (size_t)ws[i]->cols;
            f->layer_floats = max_size(f->layer_floats, floats);
        }
        if (wide > 0)
            ok = (f->wide = malloc(wide * sizeof(float))) != NULL;
        if (ok && f->layer_floats > 0)
            ok = (f->layer_f32 = kv_mem_alloc_huge(f->layer_floats * sizeof(float))) != NULL;
    }
    if (!ok) {
        fwd_free(f);
        return kv_fail(err, "out of memory for a forward of %d tokens over %d keys", n,
                       f->max_keys);
    }
    return 0;
}

/* In BF16 mode a matmul's input is rounded to BF16 first (in place: each
 * input buffer of the forward is read by its matmuls only). */
static void round_input(const fwd *f, float *x, size_t n)
{
    if (f->mode == KV_COMPUTE_BF16)
        kv_round_bf16(x, n);
}

/* y[i][r] += bias[r] for n rows of `cols` (bias may be NULL). */
static void add_bias(float *y, const float *bias, int n, int cols)
{
    if (bias)
        for (int i = 0; i < n; i++)
            for (int r = 0; r < cols; r++)
                y[(size_t)i * (size_t)cols + (size_t)r] += bias[r];
}

static void matmul(const fwd *f, const kv_weight *w, float *x, int n, float *y, const float *bias)
{
    round_input(f, x, (size_t)n * (size_t)w->cols);
    if (f->batched)
        kv_gemv_batch(f->pool, 1, &w, x, n, f->mode, &y);
    else
        kv_matmul(f->pool, w, x, n, f->mode, y, f->wide);
    add_bias(y, bias, n, w->rows);
}

/* ys[i] = ws[i] x for several weights over the same prepared input (in
 * bf16 mode: BF16 values, and packed in f->x16 when it is there); one
 * parallel loop for all of them in decode. */
static void multiply(const fwd *f, int n, const kv_weight *const *ws, const float *x, int rows,
                     float *const *ys)
{
    if (f->x16)
        kv_matmul_bf16(f->pool, n, ws, f->x16, rows, ys);
    else if (rows == 1 || f->batched)
        kv_gemv_batch(f->pool, n, ws, x, rows, f->mode, ys);
    else
        for (int i = 0; i < n; i++)
            kv_matmul(f->pool, ws[i], x, rows, f->mode, ys[i], f->wide);
}

/* matmul of several weights over the same input, biases added. */
static void matmul_many(const fwd *f, int n, const kv_weight *const *ws, float *x, int rows,
                        float *const *ys, const float *const *bias)
{
    round_input(f, x, (size_t)rows * (size_t)ws[0]->cols);
    multiply(f, n, ws, x, rows, ys);
    for (int i = 0; i < n; i++)
        add_bias(ys[i], bias[i], rows, ws[i]->rows);
}

static void add_rows(float *x, const float *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] += y[i];
}

static void rmsnorm_rows(float *out, const float *x, const float *w, int n, int dim, double eps)
{
    for (int i = 0; i < n; i++)
        kv_rmsnorm(out + (size_t)i * (size_t)dim, x + (size_t)i * (size_t)dim, w, dim, (float)eps);
}

/* Whether a layer of c holds slots in the stored form. */
static bool holds_stored(const kv_cache *c)
{
    for (int l = 0; l < c->n_layers; l++)
        if (c->layers[l].k_stored > 0 || c->layers[l].v_stored > 0)
            return true;
    return false;
}

/* Qwen3's per-head q/k norms, then RoPE at pos, of one row's query and key
 * (rounded to BF16 in BF16 mode: attention's matmuls read BF16 values).
 * qpre (or NULL) receives the query between the two, for the query
 * moments of the statistics. */
static void rotate_row(const fwd *f, const kv_model *m, const layer *L, float *q, float *k,
                       int32_t pos, double *qpre)
{
    const kv_model_config *cfg = &m->cfg;
    if (cfg->qk_norm) {
        rmsnorm_rows(q, q, L->q_norm, cfg->n_heads, cfg->head_dim, cfg->rms_eps);
        rmsnorm_rows(k, k, L->k_norm, cfg->n_kv_heads, cfg->head_dim, cfg->rms_eps);
    }
    for (int j = 0; qpre && j < cfg->n_heads * cfg->head_dim; j++)
        qpre[j] = q[j];
    kv_rope_apply(&m->rope, q, cfg->n_heads, pos);
    kv_rope_apply(&m->rope, k, cfg->n_kv_heads, pos);
    round_input(f, q, (size_t)cfg->n_heads * (size_t)cfg->head_dim);
    round_input(f, k, (size_t)cfg->n_kv_heads * (size_t)cfg->head_dim);
}

/* ----------------------------------------------- prefill's row steps */

/* The steps of a prefill chunk between its products (norms, RoPE, biases,
 * the activation, residual adds, the next product's input) treat each row
 * alone: they run on the pool in blocks of rows, each row's operations in
 * the same order as on one thread, so the same bits. (They ran on the
 * calling thread while the others waited.) */
#define ROW_STEP_ROWS 16

typedef struct row_step row_step;
struct row_step {
    const kv_model *m;
    const layer *L;
    fwd *f;
    kv_cache *c;
    kv_cache_layer *cl;
    float *x; /* the chunk's rows of the residual stream */
    int cn, row0, base;
    void (*fn)(const row_step *s, int r0, int r1);
};

static void row_step_task(void *ctx, int t, int worker)
{
    (void)worker;
    const row_step *s = ctx;
    int r0 = t * ROW_STEP_ROWS, r1 = r0 + ROW_STEP_ROWS < s->cn ? r0 + ROW_STEP_ROWS : s->cn;
    s->fn(s, r0, r1);
}

/* fn over every row of the chunk. */
static void run_rows(row_step *s, void (*fn)(const row_step *, int, int))
{
    s->fn = fn;
    size_t work = (size_t)s->cn * (size_t)s->m->cfg.hidden;
    kv_pool_run(work > KV_PARALLEL_MIN_WORK ? s->f->pool : NULL,
                (s->cn + ROW_STEP_ROWS - 1) / ROW_STEP_ROWS, row_step_task, s);
}

/* Rows [r0, r1) of x ([rows][cols]) made a product's input: in bf16 mode
 * rounded to BF16 in place, or packed to BF16 into f->x16 when the
 * products read that. */
static void prepare_rows(const fwd *f, float *x, int cols, int r0, int r1)
{
    size_t off = (size_t)r0 * (size_t)cols, n = (size_t)(r1 - r0) * (size_t)cols;
    if (f->x16)
        kv_pack_bf16(x + off, n, f->x16 + off);
    else
        round_input(f, x + off, n);
}

/* rows of x, each offset by `rows` floats of `cols` */
static float *at_row(float *x, int r, int cols)
{
    return x + (size_t)r * (size_t)cols;
}

static void attn_norm_rows(const row_step *s, int r0, int r1)
{
    const kv_model_config *cfg = &s->m->cfg;
    int H = cfg->hidden;
    rmsnorm_rows(at_row(s->f->h, r0, H), at_row(s->x, r0, H), s->L->attn_norm, r1 - r0, H,
                 cfg->rms_eps);
    prepare_rows(s->f, s->f->h, H, r0, r1);
}

/* After the q/k/v products: biases; values rounded (BF16 mode: attention's
 * matmuls read BF16 values, as PyTorch's do in a bfloat16 model); queries
 * and keys normed, rotated to their positions and rounded; positions. */
static void rotate_rows(const row_step *s, int r0, int r1)
{
    const kv_model_config *cfg = &s->m->cfg;
    const layer *L = s->L;
    fwd *f = s->f;
    int qd = cfg->n_heads * cfg->head_dim, kvd = cfg->n_kv_heads * cfg->head_dim, n = r1 - r0;
    float *k = kv_cache_full_row(s->c, s->cl, KV_KEYS, s->base);
    float *v = kv_cache_full_row(s->c, s->cl, KV_VALUES, s->base);
    add_bias(at_row(f->q, r0, qd), L->bq, n, qd);
    add_bias(at_row(k, r0, kvd), L->bk, n, kvd);
    add_bias(at_row(v, r0, kvd), L->bv, n, kvd);
    round_input(f, at_row(v, r0, kvd), (size_t)n * (size_t)kvd);
    for (int i = r0; i < r1; i++) {
        int32_t pos = s->c->next_pos + s->row0 + i;
        rotate_row(f, s->m, L, at_row(f->q, i, qd), at_row(k, i, kvd), pos,
                   f->qpre ? f->qpre + (size_t)i * (size_t)qd : NULL);
        for (int h = 0; h < cfg->n_kv_heads; h++) /* every head holds the new token */
            s->cl->pos[(size_t)(s->base + i) * (size_t)cfg->n_kv_heads + (size_t)h] =
                pos + s->c->token_offset;
    }
}

static void attn_out_rows(const row_step *s, int r0, int r1)
{
    prepare_rows(s->f, s->f->att, s->m->cfg.n_heads * s->m->cfg.head_dim, r0, r1);
}

/* After the output projection: its bias, the residual add, the FFN norm. */
static void ffn_norm_rows(const row_step *s, int r0, int r1)
{
    const kv_model_config *cfg = &s->m->cfg;
    fwd *f = s->f;
    int H = cfg->hidden;
    add_bias(at_row(f->tmp, r0, H), s->L->bo, r1 - r0, H);
    add_rows(at_row(s->x, r0, H), at_row(f->tmp, r0, H), (size_t)(r1 - r0) * (size_t)H);
    rmsnorm_rows(at_row(f->h, r0, H), at_row(s->x, r0, H), s->L->ffn_norm, r1 - r0, H,
                 cfg->rms_eps);
    prepare_rows(f, f->h, H, r0, r1);
}

/* After gate/up: their biases and the gated activation. */
static void act_rows(const row_step *s, int r0, int r1)
{
    fwd *f = s->f;
    int F = s->m->cfg.ffn;
    add_bias(at_row(f->g, r0, F), s->L->b_gate, r1 - r0, F);
    add_bias(at_row(f->u, r0, F), s->L->b_up, r1 - r0, F);
    kv_silu_mul(at_row(f->g, r0, F), at_row(f->u, r0, F), (size_t)(r1 - r0) * (size_t)F);
    prepare_rows(f, f->g, F, r0, r1);
}

/* After down: its bias and the residual add. */
static void residual_rows(const row_step *s, int r0, int r1)
{
    fwd *f = s->f;
    int H = s->m->cfg.hidden;
    add_bias(at_row(f->tmp, r0, H), s->L->b_down, r1 - r0, H);
    add_rows(at_row(s->x, r0, H), at_row(f->tmp, r0, H), (size_t)(r1 - r0) * (size_t)H);
}

/* Once the rows are rotated: the values' norms, the layer's length, the
 * query moments. */
static void qkv_commit(const row_step *rs, kv_attn_stats *st)
{
    fwd *f = rs->f;
    kv_cache_measure_values(rs->c, rs->cl, rs->base, rs->cn);
    rs->cl->len = rs->base + rs->cn;
    if (f->qpre && st)
        stats_add_queries(f->req, st, f->qpre, rs->row0, rs->cn);
}

/* Projects the chunk's queries, keys and values (its rows' attention
 * norm prepared in f->h); keys and values go straight into their cache
 * slots, rotated to their positions; the query moments into st when
 * asked. */
static void qkv(row_step *rs, kv_attn_stats *st)
{
    fwd *f = rs->f;
    const layer *L = rs->L;
    kv_cache_layer *cl = rs->cl;
    float *k = kv_cache_full_row(rs->c, cl, KV_KEYS, rs->base);
    float *v = kv_cache_full_row(rs->c, cl, KV_VALUES, rs->base);
    const kv_weight *ws[] = {&L->wq, &L->wk, &L->wv};
    float *ys[] = {f->q, k, v};
    multiply(f, 3, ws, f->h, rs->cn, ys);
    run_rows(rs, rotate_rows);
    qkv_commit(rs, st);
}

/* output_and_mlp of GEMV-sized rows as one pool job: the three GEMVs are
 * its phases, and the steps between them (residual add and norm; the gated
 * activation) are phases of one task that also prepare the next GEMV's
 * input. The same operations in the same order as the unfused path, so the
 * same bits. */
typedef struct mlp_job {
    const kv_model *m;
    const layer *L;
    fwd *f;
    float *x;
    int n;
    const kv_weight *wo[1], *gate_up[2], *down[1];
    float *o_y[1], *gate_up_y[2], *down_y[1];
    kv_gemv_step o, gu, dn;
} mlp_job;

/* After the output projection: the residual add, the FFN norm, and the
 * input of gate/up. */
static void mlp_norm_task(void *ctx, int task, int worker)
{
    (void)task;
    (void)worker;
    mlp_job *j = ctx;
    const kv_model_config *cfg = &j->m->cfg;
    fwd *f = j->f;
    add_bias(f->tmp, j->L->bo, j->n, cfg->hidden);
    add_rows(j->x, f->tmp, (size_t)j->n * (size_t)cfg->hidden);
    rmsnorm_rows(f->h, j->x, j->L->ffn_norm, j->n, cfg->hidden, cfg->rms_eps);
    round_input(f, f->h, (size_t)j->n * (size_t)cfg->hidden);
    kv_gemv_step_prepare(&j->gu);
}

/* After gate/up: their biases, the gated activation, the input of down. */
static void mlp_act_task(void *ctx, int task, int worker)
{
    (void)task;
    (void)worker;
    mlp_job *j = ctx;
    const kv_model_config *cfg = &j->m->cfg;
    fwd *f = j->f;
    add_bias(f->g, j->L->b_gate, j->n, cfg->ffn);
    add_bias(f->u, j->L->b_up, j->n, cfg->ffn);
    kv_silu_mul(f->g, f->u, (size_t)j->n * (size_t)cfg->ffn);
    round_input(f, f->g, (size_t)j->n * (size_t)cfg->ffn);
    kv_gemv_step_prepare(&j->dn);
}

/* Sets up j for n rows whose attention output will be in f->att. */
static void mlp_init(mlp_job *j, const kv_model *m, const layer *L, fwd *f, float *x, int n)
{
    *j = (mlp_job){.m = m,
                   .L = L,
                   .f = f,
                   .x = x,
                   .n = n,
                   .wo = {&L->wo},
                   .gate_up = {&L->gate, &L->up},
                   .down = {&L->down},
                   .o_y = {f->tmp},
                   .gate_up_y = {f->g, f->u},
                   .down_y = {f->tmp}};
    kv_gemv_step_init(&j->o, 1, j->wo, f->att, n, f->mode, j->o_y, f->xprep);
    kv_gemv_step_init(&j->gu, 2, j->gate_up, f->h, n, f->mode, j->gate_up_y, f->xprep);
    kv_gemv_step_init(&j->dn, 1, j->down, f->g, n, f->mode, j->down_y, f->xprep);
}

/* Once f->att holds attention's output: the output projection's input. */
static void mlp_prepare(mlp_job *j)
{
    round_input(j->f, j->f->att, (size_t)j->n * (size_t)j->L->wo.cols);
    kv_gemv_step_prepare(&j->o);
}

/* The five phases: o, residual and norm, gate/up, activation, down. */
static void mlp_phases(mlp_job *j, kv_pool_phase *phases)
{
    phases[0] = kv_gemv_step_phase(&j->o);
    phases[1] = (kv_pool_phase){1, mlp_norm_task, j};
    phases[2] = kv_gemv_step_phase(&j->gu);
    phases[3] = (kv_pool_phase){1, mlp_act_task, j};
    phases[4] = kv_gemv_step_phase(&j->dn);
}

static size_t mlp_work(const mlp_job *j)
{
    return kv_gemv_step_work(&j->o) + kv_gemv_step_work(&j->gu) + kv_gemv_step_work(&j->dn);
}

/* After the phases: down's bias and the residual add. */
static void mlp_finish(const mlp_job *j)
{
    size_t H = (size_t)j->m->cfg.hidden;
    add_bias(j->f->tmp, j->L->b_down, j->n, (int)H);
    add_rows(j->x, j->f->tmp, (size_t)j->n * H);
}

static void output_and_mlp_gemv(const kv_model *m, const layer *L, fwd *f, float *x, int n)
{
    mlp_job j;
    mlp_init(&j, m, L, f, x, n);
    mlp_prepare(&j);
    kv_pool_phase phases[5];
    mlp_phases(&j, phases);
    kv_pool_run_phases(mlp_work(&j) > KV_PARALLEL_MIN_WORK ? f->pool : NULL, 5, phases);
    mlp_finish(&j);
}

/* The rest of a layer once attention has filled f->att for n rows: the
 * output projection and the MLP, each added to the residual stream x, as
 * GEMVs. The single and the batched forward share it, so their rows stay
 * bit-identical. */
static void output_and_mlp(const kv_model *m, const layer *L, fwd *f, float *x, int n)
{
    output_and_mlp_gemv(m, L, f, x, n);
}

/* output_and_mlp of a prefill chunk's rows: products and row steps. */
static void output_and_mlp_rows(row_step *rs)
{
    fwd *f = rs->f;
    const layer *L = rs->L;
    const kv_weight *o[] = {&L->wo}, *gate_up[] = {&L->gate, &L->up}, *down[] = {&L->down};
    float *o_y[] = {f->tmp}, *gate_up_y[] = {f->g, f->u}, *down_y[] = {f->tmp};
    run_rows(rs, attn_out_rows);
    multiply(f, 1, o, f->att, rs->cn, o_y);
    run_rows(rs, ffn_norm_rows);
    multiply(f, 2, gate_up, f->h, rs->cn, gate_up_y);
    run_rows(rs, act_rows);
    multiply(f, 1, down, f->g, rs->cn, down_y);
    run_rows(rs, residual_rows);
}

/* ---- a decode token's layer as one pool job ----
 *
 * A chunk of one row (decode) runs its layer as the phases of one job: the
 * q/k/v GEMV, the rest of qkv (one task), attention's three passes, their
 * sum and the output projection's input (one task), then output_and_mlp's
 * five phases: one wake-up and join of the workers per layer instead of
 * three, and no serial gap between them in which a worker falls asleep.
 * The same operations in the same order as qkv, attention and
 * output_and_mlp, so the same bits. */
typedef struct layer_job {
    row_step rs; /* the one row */
    kv_attn_stats *st;
    const kv_weight *qkv_w[3];
    float *qkv_y[3];
    kv_gemv_step qkv;
    decode_job d;
    mlp_job mlp;
} layer_job;

/* qkv's steps after its products (rotate_rows on the one row, directly:
 * run_rows would start a pool job inside this one). */
static void layer_qkv_task(void *ctx, int task, int worker)
{
    (void)task;
    (void)worker;
    layer_job *j = ctx;
    rotate_rows(&j->rs, 0, 1);
    qkv_commit(&j->rs, j->st);
}

static void layer_att_task(void *ctx, int task, int worker)
{
    (void)task;
    (void)worker;
    layer_job *j = ctx;
    kv_decode_combine(&j->d, j->rs.f->att);
    mlp_prepare(&j->mlp);
}

/* The layer of rs's one row, its attention norm prepared in f->h. */
static void layer_decode(const row_step *rs, kv_attn_stats *st)
{
    const kv_model_config *cfg = &rs->m->cfg;
    fwd *f = rs->f;
    const layer *L = rs->L;
    layer_job j = {.rs = *rs,
                   .st = st,
                   .qkv_w = {&L->wq, &L->wk, &L->wv},
                   .qkv_y = {f->q, kv_cache_full_row(rs->c, rs->cl, KV_KEYS, rs->base),
                             kv_cache_full_row(rs->c, rs->cl, KV_VALUES, rs->base)}};
    kv_gemv_step_init(&j.qkv, 3, j.qkv_w, f->h, 1, f->mode, j.qkv_y, f->xprep);
    kv_gemv_step_prepare(&j.qkv);
    j.d = (decode_job){.cfg = cfg,
                       .c = rs->c,
                       .cl = rs->cl,
                       .f = f,
                       .st = st,
                       .req = f->req,
                       .q = f->q,
                       .keys = rs->base + 1,
                       .row = rs->row0,
                       .n = f->n,
                       .scale = 1.0f / sqrtf((float)cfg->head_dim),
                       .scores = f->scores,
                       .partial = f->partial};
    mlp_init(&j.mlp, rs->m, L, f, rs->x, 1);
    kv_pool_phase phases[11];
    phases[0] = kv_gemv_step_phase(&j.qkv);
    phases[1] = (kv_pool_phase){1, layer_qkv_task, &j};
    kv_decode_phases(&j.d, phases + 2);
    phases[5] = (kv_pool_phase){1, layer_att_task, &j};
    mlp_phases(&j.mlp, phases + 6);
    size_t work = kv_gemv_step_work(&j.qkv) + mlp_work(&j.mlp);
    kv_pool_run_phases(work > KV_PARALLEL_MIN_WORK ? f->pool : NULL, 11, phases);
    mlp_finish(&j.mlp);
}

/* One layer over the chunk of rows [row0, row0 + cn) of the call. */
static void layer_forward(const kv_model *m, const layer *L, int li, kv_cache *c, fwd *f, int cn,
                          int row0)
{
    kv_cache_layer *cl = &c->layers[li];
    kv_attn_stats *st = f->req ? &f->stats[li] : NULL;
    row_step rs = {.m = m,
                   .L = L,
                   .f = f,
                   .c = c,
                   .cl = cl,
                   .x = f->x + (size_t)row0 * (size_t)m->cfg.hidden,
                   .cn = cn,
                   .row0 = row0,
                   .base = cl->len};
    run_rows(&rs, attn_norm_rows);
    if (cn == 1 && f->xprep && !f->batched) {
        layer_decode(&rs, st);
        return;
    }
    qkv(&rs, st);
    kv_attn_chunk(&m->cfg, c, cl, f, st, cn, rs.base, row0);
    if (f->xprep)
        output_and_mlp(m, L, f, rs.x, cn);
    else
        output_and_mlp_rows(&rs);
}

/* The layer with its 16-bit matrices widened into f->layer_f32 (when the
 * call uses sgemm), so every chunk's sgemm reads F32 without widening again. */
static layer widened_layer(const layer *L, fwd *f)
{
    layer w = *L;
    if (!f->layer_f32)
        return w;
    kv_weight *ws[] = {&w.wq, &w.wk, &w.wv, &w.wo, &w.gate, &w.up, &w.down};
    float *dst = f->layer_f32;
    for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) {
        if (!kv_matmul_widens(ws[i], f->mode))
            continue;
        kv_widen_rows(f->pool, ws[i], 0, ws[i]->rows, dst);
        ws[i]->dtype = KV_DTYPE_F32;
        ws[i]->data = dst;
        dst += (size_t)ws[i]->rows * (size_t)ws[i]->cols;
    }
    return w;
}

static int check_call(const kv_model *m, const kv_cache *c, const int32_t *tokens, int n,
                      kv_error *err)
{
    const kv_model_config *cfg = &m->cfg;
    if (n <= 0)
        return kv_fail(err, "forward: no tokens");
    if (c->n_layers != cfg->n_layers || c->n_kv_heads != cfg->n_kv_heads ||
        c->head_dim != cfg->head_dim)
        return kv_fail(err, "forward: the KV cache is shaped for another model");
    if (c->next_pos > INT32_MAX - n || c->next_pos + c->token_offset > INT32_MAX - n)
        return kv_fail(err, "forward: positions would pass %d", INT32_MAX);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= cfg->vocab)
            return kv_fail(err,
                           "forward: token id %d at index %d is outside the vocabulary (0..%d)",
                           tokens[i], i, cfg->vocab - 1);
    return 0;
}

int kv_model_forward(kv_model *m, kv_cache *c, const int32_t *tokens, int n,
                     const kv_attn_stats_request *req, kv_attn_stats *stats, float *logits,
                     bool all_logits, kv_error *err)
{
    const kv_model_config *cfg = &m->cfg;
    if (check_call(m, c, tokens, n, err) != 0 || check_stats(m, c, n, req, stats, err) != 0 ||
        kv_cache_reserve_slots(c, n, err) != 0)
        return -1;
    int chunk = n < m->chunk ? n : m->chunk;
    fwd f = {.n = n,
             .chunk = chunk,
             .mode = m->compute,
             .pool = m->pool,
             .stored = holds_stored(c)};
    if (fwd_alloc(m, keys_after(c, n), n, chunk, &f, err) != 0)
        return -1;
    if (kv_attn_stats_wanted(req)) {
        f.req = req;
        f.stats = stats;
        if (req->rows_before == 0) /* else the sums of the prompt's earlier rows go on */
            zero_stats(req, stats, cfg->n_layers, n);
    }
    if (f.req && req->q_moments &&
        !(f.qpre = malloc((size_t)chunk * (size_t)cfg->n_heads * (size_t)cfg->head_dim *
                          sizeof(double)))) {
        fwd_free(&f);
        return kv_fail(err, "out of memory for the query moments of %d rows", chunk);
    }
    size_t H = (size_t)cfg->hidden, V = (size_t)cfg->vocab;
    for (int i = 0; i < n; i++)
        kv_widen_rows(NULL, &m->embed, tokens[i], 1, f.x + (size_t)i * H);
    /* Layer by layer, chunk by chunk: a layer's keys and values of earlier
     * chunks are in the cache when a later chunk attends to them. */
    for (int l = 0; l < cfg->n_layers; l++) {
        if (kv_cache_reserve_rows(c, l, n, err) != 0) { /* the layer's new rows, until its commit */
            fwd_free(&f);
            return -1;
        }
        layer L = widened_layer(&m->layers[l], &f);
        for (int s = 0; s < n; s += chunk)
            layer_forward(m, &L, l, c, &f, n - s < chunk ? n - s : chunk, s);
        kv_cache_commit(c, l); /* the whole call is one forward, however chunked */
    }
    if (logits && all_logits)
        for (int s = 0; s < n; s += chunk) {
            int cn = n - s < chunk ? n - s : chunk;
            rmsnorm_rows(f.h, f.x + (size_t)s * H, m->norm, cn, cfg->hidden, cfg->rms_eps);
            matmul(&f, &m->lm_head, f.h, cn, logits + (size_t)s * V, NULL);
        }
    else if (logits) {
        rmsnorm_rows(f.h, f.x + (size_t)(n - 1) * H, m->norm, 1, cfg->hidden, cfg->rms_eps);
        round_input(&f, f.h, H);
        kv_gemv(f.pool, &m->lm_head, f.h, f.mode, logits);
    }
    c->next_pos += n;
    fwd_free(&f);
    return 0;
}

/* --------------------------------------------------------- batched decode */

typedef struct batch_attn {
    const kv_model *m;
    int li;
    kv_cache *const *caches;
    const kv_attn_stats_request *const *reqs;
    kv_attn_stats *const *stats;
    fwd *f;
    kv_pool *pool;    /* for one row's blocks; NULL when rows are the tasks */
    const int *order; /* the rows as tasks, or NULL: task t is row t */
} batch_attn;

/* Row b's decode attention, on worker's share of the scratch; as a task,
 * the t-th longest row (rows_longest_first). */
static void batch_attn_task(void *ctx, int t, int worker)
{
    const batch_attn *a = ctx;
    const kv_model_config *cfg = &a->m->cfg;
    fwd *f = a->f;
    size_t qd = (size_t)cfg->n_heads * (size_t)cfg->head_dim;
    size_t blocks = ((size_t)f->max_keys + (size_t)f->key_block - 1) / (size_t)f->key_block;
    int b = a->order ? a->order[t] : t;
    const kv_cache_layer *cl = &a->caches[b]->layers[a->li];
    const kv_attn_stats_request *req = a->reqs[b];
    decode_job d = {.cfg = cfg,
                    .c = a->caches[b],
                    .cl = cl,
                    .f = f,
                    .st = req ? &a->stats[b][a->li] : NULL,
                    .req = req,
                    .q = f->q + (size_t)b * qd,
                    .keys = cl->len,
                    .row = 0,
                    .n = 1,
                    .scale = 1.0f / sqrtf((float)cfg->head_dim),
                    .scores = f->scores + (size_t)worker * (size_t)cfg->n_heads * (size_t)f->max_keys,
                    .partial = f->partial + (size_t)worker * blocks * qd};
    kv_decode_attention(&d, a->pool, f->att + (size_t)b * qd);
}

/* order[0..n) = the rows by their layer's length, longest first (ties in
 * row order): the threads claim the rows as tasks in that order, so the
 * last ones claimed are short and no thread waits long for the other at
 * the layer's end. In a 16-config sweep the rows run from 257 slots to
 * 2,112, and in config order a 1,025-slot row came last. */
static void rows_longest_first(kv_cache *const *caches, int li, int n, int *order)
{
    for (int i = 0; i < n; i++) {
        int j = i, len = caches[i]->layers[li].len;
        for (; j > 0 && caches[order[j - 1]]->layers[li].len < len; j--)
            order[j] = order[j - 1];
        order[j] = i;
    }
}

/* Every row's attention over its own cache. A row's result does not depend
 * on the threads (kv_decode_attention sums its blocks in order), so the rows
 * themselves are the parallel tasks when there are enough of them, and a
 * lone row splits its keys over the threads as kv_model_forward does. */
static void batch_attention(const kv_model *m, int li, kv_cache *const *caches,
                            const kv_attn_stats_request *const *reqs,
                            kv_attn_stats *const *stats, fwd *f)
{
    const kv_model_config *cfg = &m->cfg;
    batch_attn a = {.m = m, .li = li, .caches = caches, .reqs = reqs, .stats = stats, .f = f};
    size_t work = 0;
    for (int b = 0; b < f->n; b++)
        work += (size_t)cfg->n_heads * (size_t)caches[b]->layers[li].len * (size_t)cfg->head_dim;
    kv_pool *p = work > KV_PARALLEL_MIN_WORK ? f->pool : NULL;
    if (f->n >= kv_pool_threads(f->pool)) {
        rows_longest_first(caches, li, f->n, f->order);
        a.order = f->order;
        kv_pool_run(p, f->n, batch_attn_task, &a);
        return;
    }
    a.pool = p;
    for (int b = 0; b < f->n; b++)
        batch_attn_task(&a, b, 0);
}

/* One layer of a batched decode step: row b is the next token of caches[b].
 * The projections are one batched GEMV over all rows; norms, RoPE, the
 * cache append and attention run per row, each on its own cache, exactly
 * as kv_model_forward runs them for one token. */
static void layer_forward_batch(const kv_model *m, const layer *L, int li, kv_cache *const *caches,
                                const kv_attn_stats_request *const *reqs,
                                kv_attn_stats *const *stats, fwd *f)
{
    const kv_model_config *cfg = &m->cfg;
    int B = f->n;
    size_t qd = (size_t)cfg->n_heads * (size_t)cfg->head_dim;
    size_t kvd = (size_t)cfg->n_kv_heads * (size_t)cfg->head_dim;

    rmsnorm_rows(f->h, f->x, L->attn_norm, B, cfg->hidden, cfg->rms_eps);
    const kv_weight *qkv_w[] = {&L->wq, &L->wk, &L->wv};
    float *qkv_y[] = {f->q, f->k_new, f->v_new};
    const float *qkv_b[] = {L->bq, L->bk, L->bv};
    matmul_many(f, 3, qkv_w, f->h, B, qkv_y, qkv_b);
    round_input(f, f->v_new, (size_t)B * kvd); /* as qkv does: BF16 values in BF16 mode */
    for (int b = 0; b < B; b++) {
        kv_cache *c = caches[b];
        kv_cache_layer *cl = &c->layers[li];
        int slot = cl->len;
        float *q = f->q + (size_t)b * qd, *k = f->k_new + (size_t)b * kvd;
        rotate_row(f, m, L, q, k, c->next_pos, NULL);
        memcpy(kv_cache_full_row(c, cl, KV_KEYS, slot), k, kvd * sizeof *k);
        memcpy(kv_cache_full_row(c, cl, KV_VALUES, slot), f->v_new + (size_t)b * kvd,
               kvd * sizeof *k);
        kv_cache_measure_values(c, cl, slot, 1);
        kv_cache_set_pos(c, li, slot, c->next_pos + c->token_offset);
        cl->len = slot + 1;
    }
    batch_attention(m, li, caches, reqs, stats, f);
    for (int b = 0; b < B; b++)
        kv_cache_commit(caches[b], li);
    output_and_mlp(m, L, f, f->x, B);
}

/* Checks every row of a batched call; *req_of[b] is set to reqs[b] when it
 * asks for statistics, else NULL. */
static int check_batch(const kv_model *m, kv_cache *const *caches, const int32_t *tokens, int n,
                       const kv_attn_stats_request *const *reqs, kv_attn_stats *const *stats,
                       const kv_attn_stats_request **req_of, kv_error *err)
{
    if (n <= 0)
        return kv_fail(err, "forward: empty batch");
    for (int b = 0; b < n; b++) {
        for (int o = 0; o < b; o++)
            if (caches[o] == caches[b])
                return kv_fail(err, "forward: batch rows %d and %d share one cache", o, b);
        req_of[b] = reqs && kv_attn_stats_wanted(reqs[b]) ? reqs[b] : NULL;
        if (check_call(m, caches[b], tokens + b, 1, err) != 0 ||
            check_stats(m, caches[b], 1, req_of[b], req_of[b] ? stats[b] : NULL, err) != 0 ||
            kv_cache_reserve(caches[b], 1, err) != 0)
            return kv_fail_prefix(err, "batch row"), -1;
    }
    return 0;
}

int kv_model_forward_batch(kv_model *m, kv_cache *const *caches, const int32_t *tokens, int n,
                           const kv_attn_stats_request *const *reqs, kv_attn_stats *const *stats,
                           float *logits, kv_error *err)
{
    const kv_model_config *cfg = &m->cfg;
    const kv_attn_stats_request **req_of = calloc((size_t)(n > 0 ? n : 1), sizeof *req_of);
    if (!req_of)
        return kv_fail(err, "out of memory");
    int rc = check_batch(m, caches, tokens, n, reqs, stats, req_of, err);
    int max_keys = 0;
    for (int b = 0; rc == 0 && b < n; b++) {
        int k = keys_after(caches[b], 1);
        max_keys = k > max_keys ? k : max_keys;
        if (req_of[b])
            zero_stats(req_of[b], stats[b], cfg->n_layers, 1);
    }
    fwd f = {.n = n, .chunk = n, .mode = m->compute, .pool = m->pool, .batched = true};
    if (rc == 0)
        rc = fwd_alloc(m, max_keys, n, n, &f, err);
    if (rc != 0) {
        free(req_of);
        return -1;
    }
    size_t H = (size_t)cfg->hidden;
    for (int b = 0; b < n; b++)
        kv_widen_rows(NULL, &m->embed, tokens[b], 1, f.x + (size_t)b * H);
    for (int l = 0; l < cfg->n_layers; l++)
        layer_forward_batch(m, &m->layers[l], l, caches, req_of, stats, &f);
    if (logits) {
        rmsnorm_rows(f.h, f.x, m->norm, n, cfg->hidden, cfg->rms_eps);
        matmul(&f, &m->lm_head, f.h, n, logits, NULL);
    }
    for (int b = 0; b < n; b++)
        caches[b]->next_pos++;
    fwd_free(&f);
    free(req_of);
    return 0;
}

/* ------------------------------------------------ one text on many caches */

/* One layer of kv_model_forward_many: rows [b n, (b + 1) n) of f are the
 * tokens on caches[b]. Projections, output and MLP are batched GEMVs over
 * all rows (one pass over the weights, each row's bits those of a batch of
 * one); RoPE, the cache append and attention are each cache's own. */
static void layer_forward_many(const kv_model *m, const layer *L, int li, kv_cache *const *caches,
                               int n_caches, int n, fwd *f)
{
    const kv_model_config *cfg = &m->cfg;
    int rows = n_caches * n;
    size_t qd = (size_t)cfg->n_heads * (size_t)cfg->head_dim;
    size_t kvd = (size_t)cfg->n_kv_heads * (size_t)cfg->head_dim;

    rmsnorm_rows(f->h, f->x, L->attn_norm, rows, cfg->hidden, cfg->rms_eps);
    const kv_weight *qkv_w[] = {&L->wq, &L->wk, &L->wv};
    float *qkv_y[] = {f->q, f->k_new, f->v_new};
    const float *qkv_b[] = {L->bq, L->bk, L->bv};
    matmul_many(f, 3, qkv_w, f->h, rows, qkv_y, qkv_b);
    round_input(f, f->v_new, (size_t)rows * kvd); /* as qkv does: BF16 values in BF16 mode */
    for (int b = 0; b < n_caches; b++) {
        kv_cache *c = caches[b];
        kv_cache_layer *cl = &c->layers[li];
        int base = cl->len;
        size_t r0 = (size_t)b * (size_t)n;
        float *k = kv_cache_full_row(c, cl, KV_KEYS, base);
        memcpy(k, f->k_new + r0 * kvd, (size_t)n * kvd * sizeof(float));
        memcpy(kv_cache_full_row(c, cl, KV_VALUES, base), f->v_new + r0 * kvd,
               (size_t)n * kvd * sizeof(float));
        kv_cache_measure_values(c, cl, base, n);
        for (int i = 0; i < n; i++) {
            rotate_row(f, m, L, f->q + (r0 + (size_t)i) * qd, k + (size_t)i * kvd, c->next_pos + i,
                       NULL);
            kv_cache_set_pos(c, li, base + i, c->next_pos + i + c->token_offset);
        }
        cl->len = base + n;
        fwd one = *f; /* this cache's rows */
        one.q = f->q + r0 * qd;
        one.att = f->att + r0 * qd;
        one.n = n;
        kv_attn_chunk(cfg, c, cl, &one, NULL, n, base, 0);
        kv_cache_commit(c, li); /* stored at the cache's precision, as kv_model_forward does */
    }
    output_and_mlp(m, L, f, f->x, rows);
}

int kv_model_forward_many(kv_model *m, kv_cache *const *caches, int n_caches, const int32_t *tokens,
                          int n, float *logits, bool all_logits, kv_error *err)
{
    const kv_model_config *cfg = &m->cfg;
    if (n_caches <= 0 || n <= 0 || n > INT32_MAX / n_caches)
        return kv_fail(err, "forward: %d caches of %d tokens", n_caches, n);
    int max_keys = 0;
    for (int b = 0; b < n_caches; b++) {
        for (int o = 0; o < b; o++)
            if (caches[o] == caches[b])
                return kv_fail(err, "forward: caches %d and %d are one cache", o, b);
        if (check_call(m, caches[b], tokens, n, err) != 0 || kv_cache_reserve(caches[b], n, err) != 0)
            return -1;
        int k = keys_after(caches[b], n);
        max_keys = k > max_keys ? k : max_keys;
    }
    int rows = n_caches * n;
    fwd f = {.n = rows, .chunk = rows, .mode = m->compute, .pool = m->pool, .batched = true};
    for (int b = 0; b < n_caches; b++)
        f.stored = f.stored || holds_stored(caches[b]);
    if (fwd_alloc(m, max_keys, rows, rows, &f, err) != 0)
        return -1;
    size_t H = (size_t)cfg->hidden;
    for (int r = 0; r < rows; r++)
        kv_widen_rows(NULL, &m->embed, tokens[r % n], 1, f.x + (size_t)r * H);
    for (int l = 0; l < cfg->n_layers; l++)
        layer_forward_many(m, &m->layers[l], l, caches, n_caches, n, &f);
    if (logits && all_logits) { /* rows of the batched GEMV: the last ones as below */
        rmsnorm_rows(f.h, f.x, m->norm, rows, cfg->hidden, cfg->rms_eps);
        matmul(&f, &m->lm_head, f.h, rows, logits, NULL);
    } else if (logits) {
        for (int b = 0; b < n_caches; b++)
            rmsnorm_rows(f.h + (size_t)b * H, f.x + ((size_t)b * (size_t)n + (size_t)n - 1) * H,
                         m->norm, 1, cfg->hidden, cfg->rms_eps);
        matmul(&f, &m->lm_head, f.h, n_caches, logits, NULL);
    }
    for (int b = 0; b < n_caches; b++)
        caches[b]->next_pos += n;
    fwd_free(&f);
    return 0;
}
