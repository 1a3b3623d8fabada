/* kvcore/model/kvquant: the u8/u4 quantiser, u4 packing and the bf16/f16
 * conversions against the float64 reference's vectors
 * (tests/data/kvquant/vectors.json, written by tools/ref_kvquant.py), bit
 * for bit, plus the invariants the vectors cannot show on their own. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "model/kernels.h"
#include "model/kvquant.h"
#include "support/testutil.h"

static uint32_t hex(const cJSON *s) { return (uint32_t)strtoul(s->valuestring, NULL, 16); }

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

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
    cr_expect_eq(bits(g.scale), hex(cJSON_GetObjectItem(want, "scale")), "%s: scale", name);
    cr_expect_eq(bits(g.min), hex(cJSON_GetObjectItem(want, "min")), "%s: min", name);
    const cJSON *wq = cJSON_GetObjectItem(want, "q"), *wb = cJSON_GetObjectItem(want, "back");
    cr_assert_eq((size_t)cJSON_GetArraySize(wq), n, "%s: codes", name);
    for (size_t i = 0; i < n; i++) {
        cr_expect_eq(q[i], cJSON_GetArrayItem(wq, (int)i)->valueint, "%s: q[%zu]", name, i);
        cr_expect_eq(bits(kv_dequant(q[i], g)), hex(cJSON_GetArrayItem(wb, (int)i)),
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
            x[i] = from_bits(hex(cJSON_GetArrayItem(xs, (int)i)));
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
        float x = from_bits(hex(cJSON_GetObjectItem(c, "x")));
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
