/* kvcore/model/kvquant: the u8/u4 quantiser, u4 packing and the bf16/f16
 * conversions against the float64 reference's vectors
 * (tests/data/kvquant/vectors.json, written by tools/ref_kvquant.py), bit
 * for bit, plus the invariants the vectors cannot show on their own. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "model/kernels.h"
#include "model/kvcache.h"
#include "model/kvquant.h"
#include "support/testutil.h"

static uint32_t hex(const cJSON *s) { return (uint32_t)strtoul(s->valuestring, NULL, 16); }

static cJSON *vectors(void)
{
    char *path = tu_data("kvquant/vectors.json");
    char *text = tu_slurp(path, NULL);
    cJSON *doc = cJSON_Parse(text);
    cr_assert(doc, "%s: not JSON", path);
    free(text);
    free(path);
    return doc;
}

/* Checks one group (column `col` of a case) against the reference. */
static void check_group(const char *name, const float *x, size_t n, size_t stride, int b,
                        const cJSON *want)
{
    uint8_t q[256];
    kv_qgroup g = kv_quant_group(x, n, stride, b, q);
    cr_expect_eq(tu_f32_bits(g.scale), hex(cJSON_GetObjectItem(want, "scale")), "%s: scale", name);
    cr_expect_eq(tu_f32_bits(g.min), hex(cJSON_GetObjectItem(want, "min")), "%s: min", name);
    const cJSON *wq = cJSON_GetObjectItem(want, "q"), *wb = cJSON_GetObjectItem(want, "back");
    cr_assert_eq((size_t)cJSON_GetArraySize(wq), n, "%s: codes", name);
    for (size_t i = 0; i < n; i++) {
        cr_expect_eq(q[i], cJSON_GetArrayItem(wq, (int)i)->valueint, "%s: q[%zu]", name, i);
        cr_expect_eq(tu_f32_bits(kv_dequant(q[i], g)), hex(cJSON_GetArrayItem(wb, (int)i)),
                     "%s: value read back [%zu]", name, i);
    }
    const cJSON *packed = cJSON_GetObjectItem(want, "packed");
    if (packed) {
        uint8_t p[128];
        kv_u4_pack(q, n, p);
        cr_assert_eq((size_t)cJSON_GetArraySize(packed), (n + 1) / 2, "%s: packed bytes", name);
        for (size_t i = 0; i < (n + 1) / 2; i++)
            cr_expect_eq(p[i], cJSON_GetArrayItem(packed, (int)i)->valueint, "%s: byte %zu", name, i);
        for (size_t i = 0; i < n; i++)
            cr_expect_eq(kv_u4_get(p, i), q[i], "%s: nibble %zu", name, i);
    }
}

Test(kvquant, groups_match_the_float64_reference_bit_for_bit)
{
    cJSON *doc = vectors(), *c;
    int seen = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(doc, "groups")) {
        const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
        const cJSON *xs = cJSON_GetObjectItem(c, "x"), *groups = cJSON_GetObjectItem(c, "groups");
        size_t stride = (size_t)cJSON_GetObjectItem(c, "stride")->valueint;
        size_t total = (size_t)cJSON_GetArraySize(xs);
        float *x = malloc(total * sizeof *x);
        for (size_t i = 0; i < total; i++)
            x[i] = tu_f32_from_bits(hex(cJSON_GetArrayItem(xs, (int)i)));
        for (size_t col = 0; col < stride; col++)
            check_group(name, x + col, total / stride, stride,
                        cJSON_GetObjectItem(c, "bits")->valueint, cJSON_GetArrayItem(groups, (int)col));
        free(x);
        seen++;
    }
    cr_expect_geq(seen, 15, "the vectors hold %d groups", seen);
    cJSON_Delete(doc);
}

Test(kvquant, bf16_and_f16_round_to_nearest_even_as_the_reference)
{
    cJSON *doc = vectors(), *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(doc, "convert")) {
        float x = tu_f32_from_bits(hex(cJSON_GetObjectItem(c, "x")));
        cr_expect_eq(kv_f32_to_bf16(x), hex(cJSON_GetObjectItem(c, "bf16")), "bf16 of %a", (double)x);
        cr_expect_eq(kv_f32_to_f16(x), hex(cJSON_GetObjectItem(c, "f16")), "f16 of %a", (double)x);
    }
    cJSON_Delete(doc);
}

Test(kvquant, f16_round_trip_is_exact_on_every_half_value)
{
    /* Every finite half value converts to F32 and back to itself. */
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff))
            continue; /* NaN payloads are not kept */
        cr_assert_eq(kv_f32_to_f16(kv_f16_to_f32((uint16_t)h)), h, "half 0x%04x", h);
    }
}

Test(kvquant, codes_stay_in_range_and_error_within_half_a_step)
{
    /* |x - x^| <= scale / 2 (plus F32 rounding) for every value of random groups. */
    srand(7);
    for (int b = 4; b <= 8; b += 4)
        for (int trial = 0; trial < 200; trial++) {
            float x[64];
            uint8_t q[64];
            for (int i = 0; i < 64; i++)
                x[i] = ((float)rand() / RAND_MAX - 0.5f) * (float)(1 + trial);
            kv_qgroup g = kv_quant_group(x, 64, 1, b, q);
            for (int i = 0; i < 64; i++) {
                cr_assert_leq(q[i], (1 << b) - 1);
                float err = fabsf(x[i] - kv_dequant(q[i], g));
                cr_assert_leq(err, g.scale * 0.5f + 4e-7f * (1 + trial), "b=%d trial %d i %d", b,
                              trial, i);
            }
        }
}

Test(kvquant, precision_names_round_trip)
{
    for (int p = KV_PREC_F32; p <= KV_PREC_U4; p++)
        cr_expect_eq(kv_precision_parse(kv_precision_name((kv_precision)p)), p);
    cr_expect_eq(kv_precision_parse("i8"), -1);
    cr_expect_eq(kv_precision_bits(KV_PREC_U4), 4);
}

/* ---- the cache: when rows are stored, and what compaction does ---- */

enum { T_HEADS = 2, T_D = 8, T_ROW = T_HEADS * T_D };

/* A one-layer cache of n slots of random keys and values, at precision q;
 * the values written are also copied to k0 and v0. */
static kv_cache *filled(int n, const kv_cache_quant *q, float *k0, float *v0)
{
    kv_error err;
    kv_cache *c = kv_cache_new(1, T_HEADS, T_D, n, &err);
    cr_assert(c && kv_cache_set_quant(c, q, &err) == 0 && kv_cache_reserve(c, n, &err) == 0, "%s",
              err.msg); /* as a forward of n tokens */
    for (int i = 0; i < n * T_ROW; i++) {
        c->layers[0].k[i] = k0[i] = (float)rand() / RAND_MAX * 4.0f - 2.0f;
        c->layers[0].v[i] = v0[i] = (float)rand() / RAND_MAX * 2.0f - 1.0f;
    }
    for (int t = 0; t < n; t++)
        kv_cache_set_pos(c, 0, t, t);
    c->layers[0].len = n;
    return c;
}

/* Slots [0, n) of a part as the cache holds them, dequantised, into out. */
static void read_part(const kv_cache *c, kv_cache_part part, int n, float *out)
{
    for (int t = 0; t < n; t++) {
        float *o = out + t * T_ROW;
        const float *x = kv_cache_heads(c, 0, part, t, 0, T_HEADS, o);
        memmove(o, x, T_ROW * sizeof *o);
    }
}

static void expect_rows(const kv_cache *c, kv_cache_part part, const float *want, int from, int to,
                        const char *what)
{
    float got[16 * T_ROW];
    read_part(c, part, to, got);
    for (int i = from * T_ROW; i < to * T_ROW; i++)
        cr_expect_eq(tu_f32_bits(got[i]), tu_f32_bits(want[i]), "%s: slot %d channel %d", what,
                     i / T_ROW, i % T_ROW);
}

Test(kvcache_quant, a_forward_stores_its_rows_once_in_groups_of_each_head)
{
    srand(11);
    kv_cache_quant q = {.precision = KV_PREC_U8, .key_group = 8, .value_group = 4};
    float k0[4 * T_ROW], v0[4 * T_ROW];
    kv_cache *c = filled(4, &q, k0, v0);
    kv_cache_commit(c, 0);
    for (int g = 0; g < 4 * T_ROW; g += 8)
        kv_round_group(k0 + g, 8, 1, KV_PREC_U8);
    for (int g = 0; g < 4 * T_ROW; g += 4)
        kv_round_group(v0 + g, 4, 1, KV_PREC_U8);
    expect_rows(c, KV_KEYS, k0, 0, 4, "keys");
    expect_rows(c, KV_VALUES, v0, 0, 4, "values");
    kv_cache_commit(c, 0); /* stored rows are never rounded again */
    expect_rows(c, KV_KEYS, k0, 0, 4, "keys after a second commit");
    kv_cache_free(c);
}

Test(kvcache_quant, f32_and_held_commits_change_nothing)
{
    srand(12);
    float k0[3 * T_ROW], v0[3 * T_ROW];
    kv_cache_quant f32 = {0}, u4 = {.precision = KV_PREC_U4};
    kv_cache *c = filled(3, &f32, k0, v0);
    kv_cache_commit(c, 0);
    expect_rows(c, KV_KEYS, k0, 0, 3, "f32 keys");
    kv_cache_free(c);
    c = filled(3, &u4, k0, v0);
    c->commit_held = true;
    kv_cache_commit(c, 0);
    expect_rows(c, KV_VALUES, v0, 0, 3, "held values");
    kv_cache_free(c);
}

Test(kvcache_quant, by_channel_keys_keep_the_newest_block_at_full_precision)
{
    srand(13);
    kv_cache_quant q = {.precision = KV_PREC_U8, .key_by_channel = true, .key_group = 4};
    float k0[8 * T_ROW], v0[8 * T_ROW];
    kv_cache *c = filled(8, &q, k0, v0);
    c->layers[0].len = 6; /* one block and a residual of two */
    kv_cache_commit(c, 0);
    float want[8 * T_ROW];
    memcpy(want, k0, sizeof want);
    for (int ch = 0; ch < T_ROW; ch++)
        kv_round_group(want + ch, 4, T_ROW, KV_PREC_U8);
    expect_rows(c, KV_KEYS, want, 0, 6, "first block stored, residual as computed");
    for (int t = 6; t < 8; t++) { /* the residual block fills: two slots appended */
        memcpy(kv_cache_full_row(c, &c->layers[0], KV_KEYS, t), k0 + t * T_ROW,
               T_ROW * sizeof(float));
        memcpy(kv_cache_full_row(c, &c->layers[0], KV_VALUES, t), v0 + t * T_ROW,
               T_ROW * sizeof(float));
    }
    c->layers[0].len = 8;
    kv_cache_commit(c, 0);
    for (int ch = 0; ch < T_ROW; ch++)
        kv_round_group(want + 4 * T_ROW + ch, 4, T_ROW, KV_PREC_U8);
    expect_rows(c, KV_KEYS, want, 0, 8, "second block stored from its own values");
    kv_cache_free(c);
}

Test(kvcache_quant, compaction_regroups_by_channel_keys_from_their_stored_values)
{
    srand(14);
    kv_cache_quant q = {.precision = KV_PREC_U8, .key_by_channel = true, .key_group = 4};
    float k0[8 * T_ROW], v0[8 * T_ROW], stored[8 * T_ROW];
    kv_cache *c = filled(8, &q, k0, v0);
    kv_cache_commit(c, 0);
    read_part(c, KV_KEYS, 8, stored);
    const int keep[] = {0, 2, 5, 6, 7};
    kv_error err;
    cr_assert_eq(kv_cache_compact(c, 0, keep, 5, &err), 0, "%s", err.msg);
    float want[5 * T_ROW];
    for (int j = 0; j < 5; j++)
        memcpy(want + j * T_ROW, stored + keep[j] * T_ROW, T_ROW * sizeof(float));
    for (int ch = 0; ch < T_ROW; ch++) /* one more rounding: the new block of four */
        kv_round_group(want + ch, 4, T_ROW, KV_PREC_U8);
    expect_rows(c, KV_KEYS, want, 0, 5, "regrouped keys");
    cr_expect_eq(c->layers[0].k_stored, 4, "the fifth key is the new residual");
    kv_cache_free(c);
}

Test(kvcache_quant, a_rerotated_key_is_dequantised_turned_and_stored_again)
{
    srand(15);
    kv_cache_quant q = {.precision = KV_PREC_U8};
    float k0[3 * T_ROW], v0[3 * T_ROW];
    kv_cache *c = filled(3, &q, k0, v0);
    kv_cache_commit(c, 0);
    float stored[3 * T_ROW];
    read_part(c, KV_KEYS, 3, stored);
    double inv_freq[T_D / 2];
    for (int f = 0; f < T_D / 2; f++)
        inv_freq[f] = pow(100.0, -2.0 * f / T_D);
    const int keep[] = {1, 2}, n_keep = 2;
    kv_cache_keep k = {.sets = 1, .keep = keep, .stride = 2, .n_keep = &n_keep, .inv_freq = inv_freq};
    kv_error err;
    cr_assert_eq(kv_cache_gather(c, c, 0, &k, &err), 0, "%s", err.msg);
    float want[T_ROW];
    for (int h = 0; h < T_HEADS; h++) { /* slot 1 -> 0: turned by -1 */
        const float *x = stored + T_ROW + h * T_D;
        for (int f = 0; f < T_D / 2; f++) {
            double cs = cos(-inv_freq[f]), sn = sin(-inv_freq[f]);
            want[h * T_D + f] = (float)(x[f] * cs - x[f + T_D / 2] * sn);
            want[h * T_D + f + T_D / 2] = (float)(x[f + T_D / 2] * cs + x[f] * sn);
        }
        kv_round_group(want + h * T_D, T_D, 1, KV_PREC_U8);
    }
    expect_rows(c, KV_KEYS, want, 0, 1, "rerotated key");
    kv_cache_free(c);
}

Test(kvcache_quant, group_sizes_are_checked_against_the_head)
{
    kv_error err;
    kv_cache_quant q = {.precision = KV_PREC_U8, .key_group = 3};
    cr_expect_neq(kv_cache_quant_check(&q, 8, &err), 0);
    cr_expect(strstr(err.msg, "key_group_size 3"), "%s", err.msg);
    kv_cache_quant d = {.precision = KV_PREC_U4, .key_by_channel = true};
    cr_assert_eq(kv_cache_quant_check(&d, 8, &err), 0, "%s", err.msg);
    cr_expect_eq(d.key_group, 32, "by channel: 32 tokens by default");
    cr_expect_eq(d.value_group, 8, "values: the head dimension by default");
}

/* ---- what the stored form costs ---- */

Test(kvcache_quant, a_token_costs_its_codes_and_group_parameters)
{
    /* Qwen3-0.6B: 28 layers, 8 KV heads of 128 channels */
    enum { L = 28, ROW = 8 * 128 };
    kv_cache_quant f32 = {0}, u8 = {.precision = KV_PREC_U8}, u4c = {.precision = KV_PREC_U4,
                                                                      .key_by_channel = true};
    kv_error err;
    cr_assert(kv_cache_quant_check(&u8, 128, &err) == 0 && kv_cache_quant_check(&u4c, 128, &err) == 0);
    cr_expect_eq(kv_cache_bytes_per_token(&f32, L, 8, 128), L * 2 * ROW * 4.0);
    /* a byte a value, a scale and a min (8 bytes) per head and part */
    cr_expect_eq(kv_cache_bytes_per_token(&u8, L, 8, 128), L * 2 * (ROW + 8 * 8.0));
    /* keys: a block of 32 tokens shares a scale and min per channel */
    cr_expect_eq(kv_cache_bytes_per_token(&u4c, L, 8, 128),
                 L * (2 * ROW / 2.0 + ROW * 8.0 / 32 + 8 * 8.0));
}

Test(kvcache_quant, a_committed_prefill_gives_its_full_precision_rows_back)
{
    srand(16);
    kv_cache_quant q = {.precision = KV_PREC_U4};
    float k0[200 * T_ROW], v0[200 * T_ROW];
    kv_cache *c = filled(200, &q, k0, v0);
    cr_assert_geq(c->layers[0].k_rows, 200, "the forward's rows at full precision");
    kv_cache_commit(c, 0);
    const kv_cache_layer *l = &c->layers[0];
    cr_expect(l->k_stored == 200 && l->v_stored == 200);
    cr_expect_leq(l->k_rows, 1, "full-precision keys given back");
    cr_expect_leq(l->v_rows, 1, "full-precision values given back");
    cr_expect_eq(kv_cache_code_bytes(c), T_ROW / 2, "u4: two codes a byte");
    kv_cache_free(c);
}

Test(kvcache_quant, a_fork_of_an_f32_prompt_stores_it_as_a_cache_of_its_own_precision)
{
    srand(17);
    kv_cache_quant f32 = {0}, u8 = {.precision = KV_PREC_U8, .value_group = 4};
    float k0[6 * T_ROW], v0[6 * T_ROW], k1[6 * T_ROW], v1[6 * T_ROW];
    kv_cache *base = filled(6, &f32, k0, v0);
    kv_cache *direct = filled(6, &u8, k1, v1);
    memcpy(direct->layers[0].k, k0, sizeof k0);
    memcpy(direct->layers[0].v, v0, sizeof v0);
    kv_error err;
    kv_cache *f = kv_cache_fork(base, 0, &err);
    cr_assert(f && kv_cache_set_quant(f, &u8, &err) == 0, "%s", err.msg);
    kv_cache_commit(f, 0);
    kv_cache_commit(direct, 0);
    read_part(direct, KV_KEYS, 6, k1);
    read_part(direct, KV_VALUES, 6, v1);
    expect_rows(f, KV_KEYS, k1, 0, 6, "forked keys");
    expect_rows(f, KV_VALUES, v1, 0, 6, "forked values");
    expect_rows(base, KV_KEYS, k0, 0, 6, "the base stays F32");
    cr_expect_neq(kv_cache_set_quant(f, &f32, &err), 0, "a storing cache keeps its precision");
    kv_cache *g = kv_cache_fork(f, 8, &err); /* a fork of the stored form */
    cr_assert_not_null(g, "%s", err.msg);
    expect_rows(g, KV_KEYS, k1, 0, 6, "keys of a fork of a stored cache");
    kv_cache_free(g);
    kv_cache_free(f);
    kv_cache_free(direct);
    kv_cache_free(base);
}

/* kv_cache_fork_at stores each slot as it reads it from the F32 prompt: the
 * fork holds what a forward at that precision would have stored (codes,
 * groups, value norms, by-channel keys' residual block at full precision)
 * and no other full-precision rows. */
Test(kvcache_quant, a_fork_at_a_precision_stores_the_prompt_as_its_forward_would)
{
    srand(19);
    const kv_cache_quant qs[] = {
        {.precision = KV_PREC_BF16},
        {.precision = KV_PREC_U8, .key_group = 4, .value_group = 8},
        {.precision = KV_PREC_U4},
        {.precision = KV_PREC_U8, .key_by_channel = true, .key_group = 4},
    };
    enum { N = 6 };
    for (size_t i = 0; i < sizeof qs / sizeof qs[0]; i++) {
        kv_cache_quant f32 = {0};
        float k0[N * T_ROW], v0[N * T_ROW], k1[N * T_ROW], v1[N * T_ROW];
        kv_cache *base = filled(N, &f32, k0, v0);
        kv_cache_measure_values(base, &base->layers[0], 0, N);
        kv_cache *direct = filled(N, &qs[i], k1, v1);
        memcpy(direct->layers[0].k, k0, sizeof k0);
        memcpy(direct->layers[0].v, v0, sizeof v0);
        kv_cache_commit(direct, 0);
        kv_error err;
        kv_cache *f = kv_cache_fork_at(base, &qs[i], N + 3, &err);
        cr_assert_not_null(f, "%s", err.msg);
        const kv_cache_layer *fl = &f->layers[0], *dl = &direct->layers[0];
        cr_expect(fl->len == N && fl->cap >= N + 3, "precision %zu: length and room", i);
        cr_expect(fl->k_stored == dl->k_stored && fl->v_stored == dl->v_stored,
                  "precision %zu: stored %d/%d, a forward stores %d/%d", i, fl->k_stored,
                  fl->v_stored, dl->k_stored, dl->v_stored);
        cr_expect_eq(fl->k_rows, N - fl->k_stored, "precision %zu: F32 keys only of the residual", i);
        cr_expect_eq(fl->v_rows, 0, "precision %zu: no F32 values", i);
        read_part(direct, KV_KEYS, N, k1);
        read_part(direct, KV_VALUES, N, v1);
        expect_rows(f, KV_KEYS, k1, 0, N, "forked keys");
        expect_rows(f, KV_VALUES, v1, 0, N, "forked values");
        cr_expect_eq(fl->vlen_n, N);
        for (int j = 0; j < N * T_HEADS; j++)
            cr_expect_eq(tu_f32_bits(fl->vlen[j]), tu_f32_bits(dl->vlen[j]),
                         "precision %zu: value norm %d", i, j);
        for (int t = 0; t < N; t++)
            cr_expect_eq(kv_cache_pos(f, 0, t, 1), kv_cache_pos(base, 0, t, 1));
        cr_expect_null(kv_cache_fork_at(f, &(kv_cache_quant){.precision = KV_PREC_F16}, 0, &err),
                       "a cache storing tokens keeps its precision");
        kv_cache_free(f);
        kv_cache_free(direct);
        kv_cache_free(base);
    }
}

/* Per-head gathers (one set per KV head) move codes and groups as they are:
 * each head's kept rows read back as they were stored. */
Test(kvcache_quant, per_head_gathers_move_each_heads_codes_unchanged)
{
    srand(18);
    kv_cache_quant q = {.precision = KV_PREC_U4, .value_group = 4};
    float k0[8 * T_ROW], v0[8 * T_ROW], ks[8 * T_ROW], vs[8 * T_ROW];
    kv_cache *c = filled(8, &q, k0, v0);
    kv_cache_commit(c, 0);
    read_part(c, KV_KEYS, 8, ks);
    read_part(c, KV_VALUES, 8, vs);
    const int keep[2][8] = {{0, 3, 4, 7}, {1, 2, 5}}, n_keep[2] = {4, 3};
    kv_cache_keep k = {.sets = 2, .keep = &keep[0][0], .stride = 8, .n_keep = n_keep};
    kv_error err;
    cr_assert_eq(kv_cache_gather(c, c, 0, &k, &err), 0, "%s", err.msg);
    float kg[4 * T_ROW], vg[4 * T_ROW];
    read_part(c, KV_KEYS, 4, kg);
    read_part(c, KV_VALUES, 4, vg);
    for (int h = 0; h < T_HEADS; h++)
        for (int j = 0; j < 4; j++)
            for (int d = 0; d < T_D; d++) {
                int at = j * T_ROW + h * T_D + d;
                float wk = j < n_keep[h] ? ks[keep[h][j] * T_ROW + h * T_D + d] : 0.0f;
                float wv = j < n_keep[h] ? vs[keep[h][j] * T_ROW + h * T_D + d] : 0.0f;
                cr_expect_eq(tu_f32_bits(kg[at]), tu_f32_bits(wk), "head %d slot %d key", h, j);
                cr_expect_eq(tu_f32_bits(vg[at]), tu_f32_bits(wv), "head %d slot %d value", h, j);
            }
    cr_expect_eq(c->layers[0].k_stored, 4, "a gap is stored zeros");
    kv_cache_free(c);
}
