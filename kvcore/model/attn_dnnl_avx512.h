/* attn_dnnl_avx512: the softmax step of attn_dnnl.c's tiles at the
 * avx512bf16 level, where attn_dnnl runs (compiled with the level's flags,
 * kvcore/model/meson.build; only called on a CPU that has it). At 8k
 * tokens the exponentials are a third of attention's time with 8-lane
 * AVX2; 16 lanes and the BF16 conversion in one instruction halve it. */
#ifndef KV_ATTN_DNNL_AVX512_H
#define KV_ATTN_DNNL_AVX512_H

#include <stdint.h>

/* One query row of a tile: m = the larger of prev and max(s[0..vis)),
 * p[j] = e^(s[j] - m) rounded to BF16 (to nearest even) for j < vis and 0
 * for vis <= j < twp; returns the sum of the unrounded e^(s[j] - m) and
 * sets *max to m. vis >= 1; prev = -INFINITY before a row's first tile. */
float kv_attn_softmax_row_avx512bf16(const float *s, int vis, int twp, float prev, float *max,
                                     uint16_t *p);

/* The exact softmax of a row whose scores lie in segments (attn_dnnl.c's
 * tiles, when the statistics need every row's normalised probabilities):
 * the row's max is the largest kv_attn_row_max_avx512bf16 over its
 * segments (prev: the earlier segments'; -INFINITY first); then
 * kv_attn_exp_row_avx512bf16 turns each segment's s[0..vis) into e^(s - m)
 * and returns their sum; then kv_attn_scale_row_avx512bf16 multiplies them
 * by inv (1 / the row's sum), writes the probabilities to s and rounded to
 * BF16 (to nearest even) to p, and zeroes both for vis <= j < twp. */
float kv_attn_row_max_avx512bf16(const float *s, int vis, float prev);
float kv_attn_exp_row_avx512bf16(float *s, int vis, float m);
void kv_attn_scale_row_avx512bf16(float *s, int vis, int twp, float inv, uint16_t *p);

#endif
