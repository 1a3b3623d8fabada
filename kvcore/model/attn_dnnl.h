/* attn_dnnl: prefill attention in bf16 mode through oneDNN's matmul.
 *
 * Why: at 8k tokens attention is half of a prefill's arithmetic, and
 * sgemm ran it in FP32 at half the BF16 peak. In bf16 mode queries, keys
 * and values already hold BF16 values (model.c rounds them, as PyTorch's
 * bfloat16 attention reads them), so Q K^T can be a BF16 x BF16 -> F32
 * product with the same products and sums in F32; the probabilities P are
 * rounded to BF16 for P V, as PyTorch's bfloat16 attention rounds them.
 *
 * The layout: oneDNN 2.6's brgemm kernels take dense operands only
 * (gemm_dnnl.h), so each head's queries, keys and values are packed to a
 * dense [rows][head_dim] BF16 block first. Keys are packed once per layer
 * and call (a chunk packs only its own new keys: earlier chunks' keys stay
 * packed), queries once per chunk.
 *
 * The loop is flash attention's, as attn_prefill.c's attention_flash_task: each
 * head's blocks of query rows walk the keys in tiles with an online
 * softmax, so a tile's scores stay in L2 and tiles wholly above the causal
 * diagonal are never computed. Tiles are padded to a multiple of
 * KV_ATTN_DNNL_KEY_PAD keys (zero keys and values, probability 0) and
 * blocks to a multiple of KV_ATTN_DNNL_ROW_PAD rows, so that a handful of
 * product shapes (oneDNN primitives, created once) serve every prompt. */
#ifndef KV_ATTN_DNNL_H
#define KV_ATTN_DNNL_H

#include <stdbool.h>

#include "util/error.h"
#include "util/pool.h"

#define KV_ATTN_DNNL_KEY_PAD 64
#define KV_ATTN_DNNL_ROW_PAD 32

typedef struct kv_attn_dnnl kv_attn_dnnl;

/* Whether the attention runs here at the active level (oneDNN's BF16
 * products: avx512bf16); else the caller runs its own. */
bool kv_attn_dnnl_usable(void);

/* Room for chunks of up to `chunk` query rows over up to max_keys keys of
 * a model's shape, on `threads` workers; NULL when out of memory. */
kv_attn_dnnl *kv_attn_dnnl_new(int n_heads, int n_kv_heads, int head_dim, int chunk, int max_keys,
                               int threads);
void kv_attn_dnnl_free(kv_attn_dnnl *a);

/* Receives head h's normalised attention probabilities of query rows
 * [r0, r0 + n) of the chunk for keys [k0, k0 + keys): p[i][k] at p + i *
 * ldp + k (0 for keys a row cannot see). Called from the pool's workers,
 * each head's calls from one worker. */
typedef void (*kv_attn_dnnl_probs_fn)(void *ctx, int h, const float *p, int ldp, int r0, int n,
                                      int k0, int keys);

/* One chunk's causal attention: query row i (of cn) sees keys [0, base +
 * i]. q [cn][n_heads * head_dim], k and v [base + cn][n_kv_heads *
 * head_dim] F32 rows holding BF16 values; out [cn][n_heads * head_dim]
 * (query heads grouped over KV heads as GQA). continues: the call is the
 * next chunk of the last call's layer, whose keys and values are unchanged
 * (they stay packed). probs (may be NULL) gets every row's probabilities,
 * for eviction's statistics: each block of query rows then holds its
 * scores over all its keys (tile by tile, the same products), takes each
 * row's exact softmax across them, and multiplies the normalised
 * probabilities, rounded to BF16, by the values; without, the online
 * softmax of flash attention. false (out untouched, probs not called) when
 * oneDNN declined a product of the flash tiles or, with probs, memory for
 * the blocks' scores ran out: the caller runs its own attention. (With
 * probs a product oneDNN declines once the call has begun runs in a plain
 * loop: probabilities handed on cannot be taken back.) */
bool kv_attn_dnnl_run(kv_attn_dnnl *a, kv_pool *p, const float *q, const float *k, const float *v,
                      int cn, int base, bool continues, float scale, float *out,
                      kv_attn_dnnl_probs_fn probs, void *probs_ctx);

#endif
