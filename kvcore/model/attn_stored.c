#include "model/attn_stored.h"

#include <string.h>

#include "model/kernels.h"

/* Query heads go to the kernels eight at a time, slots RUN at a time. Each
 * call of a kernel, and each KV head's pass over a run's scale and min,
 * costs the same however many slots it takes: 32 rather than 16 slots a run
 * did a decode step's attention over a u8 cache a sixth faster where its
 * bytes sit in cache (one thread, 512 slots, 28 layers' worth, runs of 16,
 * 32, 64 in turn, five rounds: 46.4-47.8, 38.1-40.5, 35.6-37.8 ms per step
 * of CPU time; loaded AVX512_BF16 machine, 2026-12-02); 64 would leave a
 * quarter of a task's runs cold (kv_attn_stored_block). */
enum { HEADS_MAX = 8, CHANNELS = 64, RUN = 32, QSUMS_MAX = 4096 };

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

/* A part's KV head 0 and the steps from one KV head to the next, once a
 * call: formed per run and head, kvcache.h's divisions by the group size
 * took 2.5% of a u8 decode step's attention (perf, one thread). */
typedef struct stored_part {
    stored_head h0;
    size_t code_head, group_head;
} stored_part;

static stored_part part_of(const kv_cache *c, const kv_cache_layer *l, kv_cache_part part)
{
    stored_part s = {.h0 = {.codes = kv_cache_codes(c, l, part, 0, 0),
                            .code_step = kv_cache_code_bytes(c)},
                     .code_head = code_offset(c, c->head_dim)};
    if (by_group(c)) {
        int G = part == KV_VALUES ? c->quant.value_group : c->quant.key_group;
        s.h0.groups = kv_cache_groups(c, l, part, 0, 0);
        s.h0.group_step = (size_t)(kv_cache_groups(c, l, part, 1, 0) - s.h0.groups);
        s.group_head = part == KV_KEYS && c->quant.key_by_channel ? (size_t)c->head_dim
                                                                  : (size_t)(c->head_dim / G);
    }
    return s;
}

static stored_head head_of(const stored_part *s, int g)
{
    stored_head h = s->h0;
    h.codes += (size_t)g * s->code_head;
    if (h.groups)
        h.groups += (size_t)g * s->group_head;
    return h;
}

/* Channels [0, n) of a query head summed (q . x^ = min sum(q) + ...), in
 * the vector kernel: a dot product with n codes of 1. */
static float group_sum(const float *q, int n)
{
    uint8_t ones[KV_QUANT_GROUP_MAX];
    memset(ones, 1, (size_t)n);
    float s;
    kv_dot_stored(q, 0, 1, ones, 0, 1, KV_PREC_U8, n, &s, 1);
    return s;
}

/* Keys by token: per KV head, per group of G channels, the nq query heads
 * from h0 against the slots [t0, t1) (at most RUN), their scores written
 * by the kernel times scale: u8/u4 with each slot's scale and min applied
 * (kv_dot_stored_groups, which multiplies by scale as it stores the last
 * group's sums), bf16/f16 as they are (x^ = x), multiplied while the run's
 * scores are in L1. */
static void token_scores(const kv_cache *c, const kv_cache_layer *l, const stored_part *sp,
                         const float *q, const float *qsums, int g, int h0, int nq, int t0, int t1,
                         float scale, float *scores, size_t ld)
{
    (void)l; /* channel_scores' blocks need it */
    int D = c->head_dim, G = by_group(c) ? c->quant.key_group : D, n = t1 - t0;
    stored_head k = head_of(sp, g);
    float *rows = scores + (size_t)h0 * ld + (size_t)t0;
    for (int a = 0; a < D; a += G) {
        const uint8_t *codes = k.codes + (size_t)t0 * k.code_step + code_offset(c, a);
        if (!k.groups) {
            kv_dot_stored(q + (size_t)h0 * D, (size_t)D, nq, codes, k.code_step, n,
                          c->quant.precision, D, rows, ld);
            for (int i = 0; i < nq; i++)
                for (int t = 0; t < n; t++)
                    rows[(size_t)i * ld + (size_t)t] *= scale;
            continue;
        }
        float qsum[HEADS_MAX];
        for (int i = 0; i < nq; i++)
            qsum[i] = qsums ? qsums[(size_t)(h0 + i) * (size_t)(D / G) + (size_t)(a / G)]
                            : group_sum(q + (size_t)(h0 + i) * D + a, G);
        kv_stored_groups e = {.g = k.groups + (size_t)t0 * k.group_step + a / G,
                              .stride = k.group_step,
                              .qsum = qsum,
                              .add = a > 0,
                              .scaled = a + G >= D,
                              .out_scale = scale};
        kv_dot_stored_groups(q + (size_t)h0 * D + a, (size_t)D, nq, codes, k.code_step, n,
                             c->quant.precision, G, &e, rows, ld);
    }
}

/* Keys by channel: per block of key_group slots (one scale and min per
 * channel), q * scale and q . min once, then the block's slots; the sums
 * of the last channels multiplied by scale as they are stored. */
static void channel_scores(const kv_cache *c, const kv_cache_layer *l, const stored_part *sp,
                           const float *q, const float *qsums, int g, int h0, int nq, int t0,
                           int t1, float scale, float *scores, size_t ld)
{
    (void)qsums; /* by channel q . min takes the place of min sum(q) */
    int D = c->head_dim, G = c->quant.key_group;
    stored_head k = head_of(sp, g);
    float qs[HEADS_MAX * CHANNELS], cst[HEADS_MAX], dot[HEADS_MAX * RUN];
    for (int b = t0 - t0 % G; b < t1; b += G) {
        int b0 = b > t0 ? b : t0, b1 = b + G < t1 ? b + G : t1;
        const kv_qgroup *gr = kv_cache_groups(c, l, KV_KEYS, b0, g); /* once a block */
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
            for (int s0 = b0; s0 < b1; s0 += RUN) {
                int n = b1 - s0 < RUN ? b1 - s0 : RUN;
                kv_dot_stored(qs, CHANNELS, nq,
                              k.codes + (size_t)s0 * k.code_step + code_offset(c, a), k.code_step,
                              n, c->quant.precision, m, dot, RUN);
                for (int i = 0; i < nq; i++) {
                    float *row = scores + (size_t)(h0 + i) * ld + (size_t)s0;
                    for (int t = 0; t < n; t++) {
                        float v = (a == 0 ? 0 : row[t]) + dot[i * RUN + t] + cst[i];
                        row[t] = a + m >= D ? v * scale : v;
                    }
                }
            }
        }
    }
}

/* Asks for what a run of slots [t0, t1) reads beside its codes, ahead of
 * its use: the group parameters of a part (a line a slot, gathered per
 * KV head) and the heads' entries of the score rows rows[h * ld + t]
 * (written by the scores, read by the values: a line or two a head). The
 * kernels ask for the next run's codes a line at a time as they read this
 * run's (kv_stored_ask): asked for here at once, a run's 256 lines stalled
 * on the miss buffers. */
static void prefetch_run(const kv_cache *c, const kv_cache_layer *l, kv_cache_part part, int t0,
                         int t1, const float *rows, size_t ld, int n_heads)
{
    if (t0 >= t1)
        return;
    if (by_group(c)) {
        const char *g0 = (const char *)kv_cache_groups(c, l, part, t0, 0),
                   *g1 = (const char *)kv_cache_groups(c, l, part, t1 - 1, 0);
        for (const char *at = g0; at <= g1; at += 64)
            __builtin_prefetch(at);
    }
    for (int h = 0; h < n_heads; h++) {
        const float *r = rows + (size_t)h * ld;
        if (part == KV_KEYS) { /* rows to be written */
            __builtin_prefetch(r + t0, 1);
            __builtin_prefetch(r + t1 - 1, 1);
        } else {
            __builtin_prefetch(r + t0);
            __builtin_prefetch(r + t1 - 1);
        }
    }
}

/* The slots go RUN at a time through every KV head (the rows of a run are
 * contiguous memory, streamed once): by KV head, each head's runs would
 * stride through the whole cache, a cache miss per slot. Each score is
 * multiplied by scale as it is stored: a pass over the task's scores after
 * them (the same multiplications) was 2 % of a u8 decode step's samples
 * after 8,192 tokens, stalled on loads that had left L1 (perf, AVX512_BF16
 * machine, 2026-12-03). */
void kv_attn_stored_scores(const kv_cache *c, const kv_cache_layer *l, const float *q, int n_heads,
                           int t0, int t1, float scale, float *scores, size_t ld)
{
    int per = n_heads / c->n_kv_heads, D = c->head_dim, G = c->quant.key_group;
    bool channels = c->quant.key_by_channel && by_group(c);
    /* by-token groups' sums of q, once a call when they fit (else per run) */
    float qsums[QSUMS_MAX];
    bool summed = by_group(c) && !channels && (size_t)n_heads * (size_t)(D / G) <= QSUMS_MAX;
    for (int h = 0; summed && h < n_heads; h++)
        for (int a = 0; a < D; a += G)
            qsums[h * (D / G) + a / G] = group_sum(q + (size_t)h * D + a, G);
    stored_part sp = part_of(c, l, KV_KEYS);
    for (int s0 = t0; s0 < t1; s0 += RUN) {
        int s1 = t1 - s0 < RUN ? t1 : s0 + RUN;
        prefetch_run(c, l, KV_KEYS, s1, t1 - s1 < RUN ? t1 : s1 + RUN, scores, ld, n_heads);
        for (int g = 0; g < c->n_kv_heads; g++)
            for (int h0 = g * per; h0 < (g + 1) * per; h0 += HEADS_MAX) {
                int nq = (g + 1) * per - h0 < HEADS_MAX ? (g + 1) * per - h0 : HEADS_MAX;
                (channels ? channel_scores : token_scores)(c, l, &sp, q, summed ? qsums : NULL, g,
                                                           h0, nq, s0, s1, scale, scores, ld);
            }
    }
}

int kv_attn_stored_block(const kv_cache *c)
{
    /* a slot's share of group parameters: row / key_group of them by token
     * (key_group channels a group) and by channel (a row shared by
     * key_group slots) */
    size_t groups = by_group(c) ? (size_t)kv_cache_row(c) / (size_t)c->quant.key_group : 0;
    size_t slot = kv_cache_code_bytes(c) + groups * sizeof(kv_qgroup);
    size_t b = (256 * 1024) / slot;
    return b < RUN ? RUN : (int)((b + RUN / 2) / RUN * RUN); /* the nearest whole runs */
}

/* Values of the slots [t0, t1) (at most RUN) for the nq query heads from
 * h0 on KV head g: u8/u4 per group o += (p scale) codes, then p min
 * (kv_axpy_stored_groups, which forms p scale as each slot passes),
 * bf16/f16 o += p x (x^ = x). */
static void head_values(const kv_cache *c, const stored_part *sp, const float *p, size_t ld,
                        int g, int h0, int nq, int t0, int t1, float *o)
{
    int D = c->head_dim, G = by_group(c) ? c->quant.value_group : D, n = t1 - t0;
    stored_head v = head_of(sp, g);
    const float *rows = p + (size_t)h0 * ld + (size_t)t0;
    for (int a = 0; a < D; a += G) {
        const uint8_t *codes = v.codes + (size_t)t0 * v.code_step + code_offset(c, a);
        float *out = o + (size_t)h0 * D + a;
        if (!v.groups) {
            kv_axpy_stored(out, (size_t)D, nq, rows, ld, codes, v.code_step, n,
                           c->quant.precision, D);
            continue;
        }
        kv_stored_groups e = {.g = v.groups + (size_t)t0 * v.group_step + a / G,
                              .stride = v.group_step};
        kv_axpy_stored_groups(out, (size_t)D, nq, rows, ld, codes, v.code_step, n,
                              c->quant.precision, G, &e);
    }
}

void kv_attn_stored_values(const kv_cache *c, const kv_cache_layer *l, const float *p, size_t ld,
                           int n_heads, int t0, int t1, float *o)
{
    int per = n_heads / c->n_kv_heads;
    stored_part sp = part_of(c, l, KV_VALUES);
    for (int s0 = t0; s0 < t1; s0 += RUN) { /* as the scores: runs through every head */
        int s1 = t1 - s0 < RUN ? t1 : s0 + RUN;
        prefetch_run(c, l, KV_VALUES, s1, t1 - s1 < RUN ? t1 : s1 + RUN, p, ld, n_heads);
        for (int g = 0; g < c->n_kv_heads; g++)
            for (int h0 = g * per; h0 < (g + 1) * per; h0 += HEADS_MAX) {
                int nq = (g + 1) * per - h0 < HEADS_MAX ? (g + 1) * per - h0 : HEADS_MAX;
                head_values(c, &sp, p, ld, g, h0, nq, s0, s1, o);
            }
    }
}
