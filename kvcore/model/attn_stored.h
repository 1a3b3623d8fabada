/* attn_stored: decode attention over the slots a KV cache holds in its
 * stored form (kvcache.h), read in place: bf16/f16 values widened, u8/u4
 * codes with each group's scale and min applied once per group and slot,
 *   q . x^ = scale (q . codes) + min sum(q)          (keys by token)
 *   q . x^ = (q * scale) . codes + q . min           (keys by channel)
 *   o += (p scale) codes, + p min once per group     (values)
 * so no dequantised copy of the cache is made. The sums run in another
 * order than over dequantised F32 values: results differ from those by
 * rounding only. */
#ifndef KV_ATTN_STORED_H
#define KV_ATTN_STORED_H

#include <stddef.h>

#include "model/kvcache.h"

/* scores[h * ld + t] = scale * q_h . k^_t for each of the n_heads query
 * heads q_h = q + h * head_dim (grouped over the KV heads) and the stored
 * keys t in [t0, t1). */
void kv_attn_stored_scores(const kv_cache *c, const kv_cache_layer *l, const float *q, int n_heads,
                           int t0, int t1, float scale, float *scores, size_t ld);

/* Slots per decode attention task over a stored cache: as many as fill
 * 256 KB with their keys' stored form (codes and group parameters), the
 * bytes attn_decode.c's F32 blocks hold, to the nearest whole runs. Of a
 * task's runs of slots the first starts cold (attn_stored.c prefetches each
 * next run while one runs), so u8 rows in F32's 64-slot blocks (64 KB) left
 * a quarter of the runs cold. */
int kv_attn_stored_block(const kv_cache *c);

/* o_h += sum_t p[h * ld + t] v^_t, o_h = o + h * head_dim, for the stored
 * values t in [t0, t1), in order of t per group of channels. */
void kv_attn_stored_values(const kv_cache *c, const kv_cache_layer *l, const float *p, size_t ld,
                           int n_heads, int t0, int t1, float *o);

#endif
