/* forward: what the forward pass (model.c) and its attention share,
 * internal to the model: one call's buffers (fwd), the decode attention of
 * one query row (attn_decode.c) and the attention of a chunk of query rows
 * (attn_prefill.c). */
#ifndef KV_FORWARD_H
#define KV_FORWARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/attn_dnnl.h"
#include "model/attn_stats.h"
#include "model/kernels.h"
#include "model/kvcache.h"
#include "model/model_config.h"

/* Query rows per attention block in prefill: a block only multiplies the
 * keys its last row can see, so a chunk skips most of the masked upper
 * triangle (a 512-row chunk computed 37 % more QK^T and PV than needed). */
#define ATTN_BLOCK_ROWS 128

/* Buffers of one forward call: the hidden states of all its tokens, and
 * per-chunk work space sized for the longest layer. */
typedef struct fwd {
    float *x; /* [n][hidden] */
    float *h, *q, *att, *tmp, *g, *u;
    float *scores;    /* [max(threads * min(chunk, ATTN_BLOCK_ROWS), heads)][max_keys] */
    float *partial;   /* decode: [key blocks][n_heads * head_dim] partial outputs */
    int key_block;    /* decode: cache slots per attention task */
    float *wide;      /* per-worker room to widen the output embedding for sgemm */
    float *layer_f32; /* one layer's 16-bit matrices widened for sgemm, or NULL */
    size_t layer_floats;
    int max_keys;
    const kv_attn_stats_request *req; /* NULL when no statistics are wanted */
    kv_attn_stats *stats;
    int n; /* tokens in the call */
    int chunk;
    kv_compute mode;
    kv_pool *pool;
    /* A batched decode step (kv_model_forward_batch): row b is the next
     * token of its own cache; projections always take the batched GEMV. */
    bool batched;
    float *k_new, *v_new; /* [n][n_kv_heads * head_dim] before they enter their caches */
    int *order;           /* [n]: the rows in the order their attention tasks run */
    double *qpre;         /* [chunk][n_heads * head_dim] pre-RoPE queries, for query moments */
    float *xprep;         /* GEMV-sized chunks: [chunk][widest input] prepared GEMV input */
    /* Set by the caller: a cache of the call holds slots in its stored form
     * (kvcache.h), which a multi-row attention reads as F32 rows from dense
     * ([2][max_keys][n_kv_heads * head_dim]: keys, then values). */
    bool stored;
    float *dense;
    kv_attn_dnnl *attn_dnnl; /* bf16 mode's prefill attention through oneDNN, or NULL */
    /* Prefill in bf16 mode at a level with a BF16 GEMM: each product's
     * input rows packed to BF16 ([chunk][widest input]) by the row step
     * that computes them, or NULL (inputs rounded in place). */
    uint16_t *x16;
} fwd;

/* Whether a call of n rows writes its column and window sums whole: a
 * call of one row (a decode step) that carries no earlier rows' sums gives
 * every key its one probability, so stats_add_row stores it (0 + p is p)
 * and nothing need zero the sums first (a 16-config sweep at 2,048 tokens:
 * ~55 MB a step per kind of sum). */
static inline bool sums_written(const kv_attn_stats_request *req, int n)
{
    return n == 1 && req->rows_before == 0;
}

/* Sets the scores of the slots of a score row p[keys] that hold no token of
 * KV head kvh (kvcache.h: its gap) to x: -inf before the softmax, then 0,
 * since the vector exp turns -inf into a tiny number, not into 0. */
static inline void mask_gap(const kv_cache_layer *cl, int kvh, float *p, int keys, float x)
{
    if (!cl->gap)
        return;
    int to = cl->gap[2 * kvh + 1] < keys ? cl->gap[2 * kvh + 1] : keys;
    for (int k = cl->gap[2 * kvh]; k < to; k++)
        p[k] = x;
}

/* Decode attention of one query row, in three passes over blocks of cache
 * slots (split-K, as in flash-decoding): scores of every head for a block,
 * then each head's softmax, then each block's share of P V, summed in block
 * order (deterministic whichever thread ran which block). A cache slot holds
 * all KV heads in one contiguous row, so every pass streams the cache
 * front to back and reads each key/value row once for all the query heads
 * that share it (GQA). Splitting by head instead read 512-byte pieces 4 KB
 * apart, a TLB miss per slot: 3x slower than the memory allows at 8k. */
typedef struct decode_job {
    const kv_model_config *cfg;
    const kv_cache *c;
    const kv_cache_layer *cl;
    fwd *f;
    kv_attn_stats *st; /* NULL: no statistics */
    const kv_attn_stats_request *req; /* what st collects */
    const float *q;    /* [n_heads][head_dim] of the row */
    int keys, row, n;  /* keys visible to the row; its index in the call of n rows */
    float scale;
    float *scores;     /* [n_heads][f->max_keys] */
    float *partial;    /* [key blocks][n_heads * head_dim] */
    int block;         /* slots per task (kv_decode_phases sets it) */
} decode_job;

/* Cache slots per decode attention task (fwd.key_block). */
int kv_decode_key_block(const kv_model_config *c);

/* The three passes of kv_decode_attention as phases of a pool job (sets
 * j->block); kv_decode_combine then sums their partial outputs into out. */
void kv_decode_phases(decode_job *j, kv_pool_phase *passes);
void kv_decode_combine(const decode_job *j, float *out);

/* out[n_heads * head_dim] = the attention of j's query row, on pool p (or
 * NULL: this thread). */
void kv_decode_attention(decode_job *j, kv_pool *p, float *out);

/* The attention of the chunk of cn query rows (f->q, rows row0.. of the
 * call) over layer cl of cache, whose first base slots precede the chunk:
 * f->att receives its output, st (or NULL) its statistics. */
void kv_attn_chunk(const kv_model_config *c, const kv_cache *cache, const kv_cache_layer *cl,
                   fwd *f, kv_attn_stats *st, int cn, int base, int row0);

#endif
