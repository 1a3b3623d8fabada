/* Decode attention over a KV cache's stored form (kernels_stored.c and
 * kernels_stored_avx512.c, attn_stored.c) against the same sums in double
 * over the rows the cache dequantises (kv_cache_heads): every precision,
 * keys by token and by channel, group sizes below the head, tails that are
 * no multiple of either vector width, slot ranges that cut by-channel
 * blocks; at every instruction-set level the CPU has. Only the order of the
 * F32 sums differs, so each result lies within a few F32 roundings of the
 * sum of absolute products. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/attn_stored.h"
#include "model/kernels.h"
#include "model/kvcache.h"
#include "support/levels.h"
#include "support/stored_kernels.h"

/* kernels.h's entry points, with groups or without, as the test's one
 * signature. */
static void dot_entry(const float *q, size_t qs, int nq, const uint8_t *x, size_t xs, int nx,
                      kv_precision p, int n, const kv_stored_groups *e, float *out, size_t os)
{
    if (e)
        kv_dot_stored_groups(q, qs, nq, x, xs, nx, p, n, e, out, os);
    else
        kv_dot_stored(q, qs, nq, x, xs, nx, p, n, out, os);
}

static void axpy_entry(float *y, size_t ys, int ny, const float *a, size_t as, const uint8_t *x,
                       size_t xs, int nx, kv_precision p, int n, const kv_stored_groups *e)
{
    if (e)
        kv_axpy_stored_groups(y, ys, ny, a, as, x, xs, nx, p, n, e);
    else
        kv_axpy_stored(y, ys, ny, a, as, x, xs, nx, p, n);
}

static void check_kernels(kv_isa isa)
{
    tu_check_stored_kernels(dot_entry, axpy_entry, kv_isa_name(isa));
}

Test(kernels_stored, dot_and_axpy_read_every_format_as_its_values)
{
    tu_each_level(check_kernels);
}

/* ---- attention over a cache's stored slots ---- */

/* SLOTS: more than two of attn_stored.c's runs of slots, the last one partial */
enum { KV = 2, D = 16, HEADS = 6, SLOTS = 150 };

/* A one-layer cache of SLOTS random tokens stored at q. */
static kv_cache *stored_cache(const kv_cache_quant *q)
{
    kv_error err;
    kv_cache *c = kv_cache_new(1, KV, D, SLOTS + 1, &err);
    cr_assert(c && kv_cache_set_quant(c, q, &err) == 0 && kv_cache_reserve(c, SLOTS, &err) == 0,
              "%s", err.msg);
    kv_cache_layer *l = &c->layers[0];
    for (int t = 0; t < SLOTS; t++) {
        for (int i = 0; i < KV * D; i++) {
            kv_cache_full_row(c, l, KV_KEYS, t)[i] = frand() * 2.0f + (float)(i % 3);
            kv_cache_full_row(c, l, KV_VALUES, t)[i] = frand();
        }
        kv_cache_set_pos(c, 0, t, t);
        l->len = t + 1;
    }
    kv_cache_commit(c, 0);
    return c;
}

static void check_attention(const kv_cache_quant *q, const char *what)
{
    kv_cache *c = stored_cache(q);
    const kv_cache_layer *l = &c->layers[0];
    int t0 = 3, t1 = l->k_stored < SLOTS - 2 ? l->k_stored : SLOTS - 2; /* cuts blocks */
    cr_assert_gt(t1, t0 + 16, "%s: slots stored", what);
    float query[HEADS * D], p[HEADS * SLOTS], scores[HEADS * SLOTS], o[HEADS * D] = {0};
    float k[KV * D], v[KV * D];
    for (int i = 0; i < HEADS * D; i++)
        query[i] = frand();
    for (int i = 0; i < HEADS * SLOTS; i++)
        p[i] = (float)rand() / RAND_MAX;
    float scale = 0.25f;
    kv_attn_stored_scores(c, l, query, HEADS, t0, t1, scale, scores, SLOTS);
    kv_attn_stored_values(c, l, p, SLOTS, HEADS, t0, t1, o);
    double want_o[HEADS * D] = {0}, abs_o[HEADS * D] = {0};
    for (int t = t0; t < t1; t++) {
        memcpy(k, kv_cache_heads(c, 0, KV_KEYS, t, 0, KV, k), sizeof k);
        memcpy(v, kv_cache_heads(c, 0, KV_VALUES, t, 0, KV, v), sizeof v);
        for (int h = 0; h < HEADS; h++) {
            const float *kh = k + h / (HEADS / KV) * D, *vh = v + h / (HEADS / KV) * D;
            double s = 0, abs_sum = 0;
            for (int d = 0; d < D; d++) {
                s += (double)query[h * D + d] * kh[d];
                abs_sum += fabs((double)query[h * D + d] * kh[d]);
                want_o[h * D + d] += (double)p[h * SLOTS + t] * vh[d];
                abs_o[h * D + d] += fabs((double)p[h * SLOTS + t] * vh[d]);
            }
            /* by-token groups add min * sum(q): its own rounding */
            expect_close(scores[h * SLOTS + t], s * scale, 4 * abs_sum * scale, what, h, t);
        }
    }
    for (int i = 0; i < HEADS * D; i++)
        expect_close(o[i], want_o[i], 4 * abs_o[i], what, i / D, i % D);
    kv_cache_free(c);
}

static void check_cases(kv_isa isa)
{
    srand(22);
    const kv_cache_quant cases[] = {
        {.precision = KV_PREC_U8},
        {.precision = KV_PREC_U8, .key_group = 4, .value_group = 8},
        {.precision = KV_PREC_U4, .key_group = 8, .value_group = 2},
        {.precision = KV_PREC_BF16},
        {.precision = KV_PREC_F16},
        {.precision = KV_PREC_U8, .key_by_channel = true, .key_group = 8},
        {.precision = KV_PREC_U4, .key_by_channel = true, .key_group = 5},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char what[64];
        snprintf(what, sizeof what, "%s %s%s kg %d", kv_isa_name(isa),
                 kv_precision_name(cases[i].precision),
                 cases[i].key_by_channel ? " by channel" : "", cases[i].key_group);
        check_attention(&cases[i], what);
    }
}

Test(attn_stored, scores_and_values_equal_those_of_the_dequantised_rows)
{
    tu_each_level(check_cases);
}
