#include "model/attn_stored.h"

#include "model/kernels.h"

/* Query heads go to the kernels eight at a time. */
enum { HEADS_MAX = 8, CHANNELS = 64 };

static bool by_group(const kv_cache *c)
{
    return c->quant.precision == KV_PREC_U8 || c->quant.precision == KV_PREC_U4;
}

/* Where channel a of a slot's KV head starts in its codes. */
static size_t code_offset(const kv_cache *c, int a)
{
    return (size_t)a * (size_t)kv_precision_bits(c->quant.precision) / 8;
}

/* A part's stored form of KV head g from slot 0 on, and the steps from one
 * slot to the next (kvcache.h's layout, read once per call rather than
 * once per slot). */
typedef struct stored_head {
    const uint8_t *codes;
    size_t code_step;
    const kv_qgroup *groups; /* NULL for bf16/f16 */
    size_t group_step;
} stored_head;

static stored_head head_of(const kv_cache *c, const kv_cache_layer *l, kv_cache_part part, int g)
{
    stored_head h = {.codes = kv_cache_codes(c, l, part, 0, g),
                     .code_step = kv_cache_code_bytes(c)};
    if (by_group(c)) {
        h.groups = kv_cache_groups(c, l, part, 0, g);
        h.group_step = (size_t)(kv_cache_groups(c, l, part, 1, g) - h.groups);
    }
    return h;
}

/* Keys by token: per KV head, per group of G channels, the nq query heads
 * from h0 against every slot. */
static void token_scores(const kv_cache *c, const kv_cache_layer *l, const float *q, int g, int h0,
                         int nq, int t0, int t1, float *scores, size_t ld)
{
    int D = c->head_dim, G = by_group(c) ? c->quant.key_group : D;
    stored_head k = head_of(c, l, KV_KEYS, g);
    for (int a = 0; a < D; a += G) {
        float qsum[HEADS_MAX] = {0}, dot[HEADS_MAX];
        for (int i = 0; k.groups && i < nq; i++)
            for (int d = 0; d < G; d++)
                qsum[i] += q[(size_t)(h0 + i) * D + (size_t)(a + d)];
        for (int t = t0; t < t1; t++) {
            kv_dot_stored(q + (size_t)h0 * D + a, (size_t)D, nq,
                          k.codes + (size_t)t * k.code_step + code_offset(c, a), c->quant.precision,
                          G, dot);
            const kv_qgroup *gr = k.groups ? k.groups + (size_t)t * k.group_step + a / G : NULL;
            for (int i = 0; i < nq; i++) {
                float s = gr ? gr->scale * dot[i] + gr->min * qsum[i] : dot[i];
                float *at = scores + (size_t)(h0 + i) * ld + (size_t)t;
                *at = a == 0 ? s : *at + s;
            }
        }
    }
}

/* Keys by channel: per block of key_group slots (one scale and min per
 * channel), q * scale and q . min once, then every slot of the block. */
static void channel_scores(const kv_cache *c, const kv_cache_layer *l, const float *q, int g,
                           int h0, int nq, int t0, int t1, float *scores, size_t ld)
{
    int D = c->head_dim, G = c->quant.key_group;
    stored_head k = head_of(c, l, KV_KEYS, g);
    float qs[HEADS_MAX * CHANNELS], cst[HEADS_MAX], dot[HEADS_MAX];
    for (int b = t0 - t0 % G; b < t1; b += G) {
        int s0 = b > t0 ? b : t0, s1 = b + G < t1 ? b + G : t1;
        const kv_qgroup *gr = kv_cache_groups(c, l, KV_KEYS, s0, g); /* once a block */
        for (int a = 0; a < D; a += CHANNELS) {
            int m = D - a < CHANNELS ? D - a : CHANNELS;
            for (int i = 0; i < nq; i++) {
                const float *qi = q + (size_t)(h0 + i) * D + a;
                cst[i] = 0;
                for (int d = 0; d < m; d++) {
                    qs[i * CHANNELS + d] = qi[d] * gr[a + d].scale;
                    cst[i] += qi[d] * gr[a + d].min;
                }
            }
            for (int t = s0; t < s1; t++) {
                kv_dot_stored(qs, CHANNELS, nq,
                              k.codes + (size_t)t * k.code_step + code_offset(c, a),
                              c->quant.precision, m, dot);
                for (int i = 0; i < nq; i++) {
                    float *at = scores + (size_t)(h0 + i) * ld + (size_t)t;
                    *at = (a == 0 ? 0 : *at) + dot[i] + cst[i];
                }
            }
        }
    }
}

void kv_attn_stored_scores(const kv_cache *c, const kv_cache_layer *l, const float *q, int n_heads,
                           int t0, int t1, float scale, float *scores, size_t ld)
{
    int per = n_heads / c->n_kv_heads;
    bool channels = c->quant.key_by_channel && by_group(c);
    for (int g = 0; g < c->n_kv_heads; g++)
        for (int h0 = g * per; h0 < (g + 1) * per; h0 += HEADS_MAX) {
            int nq = (g + 1) * per - h0 < HEADS_MAX ? (g + 1) * per - h0 : HEADS_MAX;
            (channels ? channel_scores : token_scores)(c, l, q, g, h0, nq, t0, t1, scores, ld);
        }
    for (int h = 0; h < n_heads; h++)
        for (int t = t0; t < t1; t++)
            scores[(size_t)h * ld + (size_t)t] *= scale;
}

void kv_attn_stored_values(const kv_cache *c, const kv_cache_layer *l, const float *p, size_t ld,
                           int n_heads, int t0, int t1, float *o)
{
    int D = c->head_dim, G = by_group(c) ? c->quant.value_group : D;
    int per = n_heads / c->n_kv_heads;
    for (int g = 0; g < c->n_kv_heads; g++) {
        stored_head v = head_of(c, l, KV_VALUES, g);
        for (int h0 = g * per; h0 < (g + 1) * per; h0 += HEADS_MAX) {
            int nq = (g + 1) * per - h0 < HEADS_MAX ? (g + 1) * per - h0 : HEADS_MAX;
            for (int a = 0; a < D; a += G) {
                float bias[HEADS_MAX] = {0}, coef[HEADS_MAX * 8];
                for (int t = t0; t < t1; t += 8) {
                    int nx = t1 - t < 8 ? t1 - t : 8;
                    for (int s = 0; s < nx; s++) {
                        const kv_qgroup *gr =
                            v.groups ? v.groups + (size_t)(t + s) * v.group_step + a / G : NULL;
                        for (int i = 0; i < nq; i++) {
                            float pr = p[(size_t)(h0 + i) * ld + (size_t)(t + s)];
                            coef[i * 8 + s] = gr ? pr * gr->scale : pr;
                            bias[i] += gr ? pr * gr->min : 0.0f;
                        }
                    }
                    kv_axpy_stored(o + (size_t)h0 * D + a, (size_t)D, nq, coef, 8,
                                   v.codes + (size_t)t * v.code_step + code_offset(c, a),
                                   v.code_step, nx, c->quant.precision, G);
                }
                for (int i = 0; v.groups && i < nq; i++)
                    for (int d = 0; d < G; d++)
                        o[(size_t)(h0 + i) * D + (size_t)(a + d)] += bias[i];
            }
        }
    }
}
