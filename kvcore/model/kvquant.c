#include "model/kvquant.h"

#include <assert.h>

#include <string.h>

#include "model/kernels.h"

static const char *const precision_names[] = {
    [KV_PREC_F32] = "f32", [KV_PREC_BF16] = "bf16", [KV_PREC_F16] = "f16",
    [KV_PREC_U8] = "u8",   [KV_PREC_U4] = "u4",
};

const char *kv_precision_name(kv_precision p) { return precision_names[p]; }

int kv_precision_parse(const char *name)
{
    for (int p = 0; p < (int)(sizeof precision_names / sizeof *precision_names); p++)
        if (strcmp(name, precision_names[p]) == 0)
            return p;
    return -1;
}

int kv_precision_bits(kv_precision p)
{
    static const int bits[] = {[KV_PREC_F32] = 32, [KV_PREC_BF16] = 16, [KV_PREC_F16] = 16,
                               [KV_PREC_U8] = 8,   [KV_PREC_U4] = 4};
    return bits[p];
}

uint16_t kv_f32_to_f16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint16_t sign = (uint16_t)(u >> 16 & 0x8000);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return sign | 0x7e00; /* quiet NaN */
    if (a >= 0x477ff000u)     /* 65520: halfway between 65504 and 65536, ties to even = inf */
        return sign | 0x7c00;
    if (a < 0x38800000u) /* below 2^-14: a multiple of 2^-24; scaling by 2^24 is exact */
        return sign | (uint16_t)nearbyintf(fabsf(f) * 16777216.0f);
    uint32_t r = a - (112u << 23); /* exponent bias 127 -> 15 */
    r += 0xfffu + (r >> 13 & 1u);  /* round the 13 dropped bits, ties to even */
    return sign | (uint16_t)(r >> 13);
}

kv_qgroup kv_quant_group(const float *x, size_t n, size_t stride, int bits, uint8_t *q)
{
    float lo = x[0], hi = x[0];
    for (size_t i = 1; i < n; i++) {
        float v = x[i * stride];
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
    }
    const int top = (1 << bits) - 1;
    kv_qgroup g = {(float)(((double)hi - lo) / top), lo};
    if (g.scale == 0.0f) { /* all equal (or a spread below F32's reach): q = 0 reads back min */
        memset(q, 0, n);
        return g;
    }
    for (size_t i = 0; i < n; i++) {
        double t = nearbyint(((double)x[i * stride] - lo) / g.scale); /* ties to even */
        q[i] = (uint8_t)(t < 0 ? 0 : t > top ? top : t);
    }
    return g;
}

void kv_u4_pack(const uint8_t *q, size_t n, uint8_t *dst)
{
    for (size_t i = 0; i + 1 < n; i += 2)
        dst[i / 2] = (uint8_t)(q[i] | q[i + 1] << 4);
    if (n % 2)
        dst[n / 2] = q[n - 1];
}

void kv_round_group(float *x, size_t n, size_t stride, kv_precision p)
{
    switch (p) {
    case KV_PREC_F32:
        return;
    case KV_PREC_BF16:
        for (size_t i = 0; i < n; i++)
            x[i * stride] = kv_bf16_to_f32(kv_f32_to_bf16(x[i * stride]));
        return;
    case KV_PREC_F16:
        for (size_t i = 0; i < n; i++)
            x[i * stride] = kv_f16_to_f32(kv_f32_to_f16(x[i * stride]));
        return;
    case KV_PREC_U8:
    case KV_PREC_U4: {
        uint8_t q[KV_QUANT_GROUP_MAX];
        assert(n <= KV_QUANT_GROUP_MAX);
        kv_qgroup g = kv_quant_group(x, n, stride, kv_precision_bits(p), q);
        for (size_t i = 0; i < n; i++)
            x[i * stride] = kv_dequant(q[i], g);
        return;
    }
    }
}
