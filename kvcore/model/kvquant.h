/* KV-cache precision: the number formats a cached key or value can be
 * stored in, and the asymmetric min-max quantiser behind u8 and u4 — the
 * settings of OpenVINO's CPU plugin (KV_CACHE_PRECISION f32/bf16/f16/u8/u4),
 * where NNCF's eviction is deployed.
 *
 * Quantisation of one group of n values x (u8: b = 8, u4: b = 4):
 *   scale = (max - min) / (2^b - 1)                 rounded once to F32
 *   q     = clamp(round_half_even((x - min) / scale), 0, 2^b - 1)
 *   x^    = min + q * scale                         one rounding (fmaf)
 * with (x - min) / scale computed in double from the F32 operands. A group
 * whose values are all equal has scale 0, stores q = 0 and reads back min
 * exactly. scale and min are kept in F32 beside the codes.
 *
 * tools/ref_kvquant.py is the float64 reference written from this text;
 * tests/data/kvquant/vectors.json holds its outputs, which
 * tests/unit/model/test_kvquant.c requires bit for bit. */
#ifndef KV_KVQUANT_H
#define KV_KVQUANT_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

typedef enum kv_precision {
    KV_PREC_F32, /* default: the cache as it always was */
    KV_PREC_BF16,
    KV_PREC_F16,
    KV_PREC_U8,
    KV_PREC_U4,
} kv_precision;

/* "f32", "bf16", "f16", "u8", "u4", and back (-1 for another name). */
const char *kv_precision_name(kv_precision p);
int kv_precision_parse(const char *name);

/* Bits one stored value takes (group parameters not counted). */
int kv_precision_bits(kv_precision p);

/* f rounded to IEEE half precision, round to nearest even: values from
 * 65520 up become infinity, NaN stays NaN (kv_f16_to_f32 reads it back). */
uint16_t kv_f32_to_f16(float f);

/* The largest group: a head's channels (by token) or a block of tokens
 * (by channel); the parameter table refuses larger ones. */
#define KV_QUANT_GROUP_MAX 512

/* The parameters one quantisation group stores. */
typedef struct kv_qgroup {
    float scale;
    float min;
} kv_qgroup;

/* Quantises the n finite values x[0], x[stride], ..., x[(n-1)*stride] to
 * `bits` (4 or 8) bits: one code per byte in q[0..n). A stride other than
 * 1 quantises a channel across tokens (by-channel keys). */
kv_qgroup kv_quant_group(const float *x, size_t n, size_t stride, int bits, uint8_t *q);

/* The value code q of group g stands for. */
static inline float kv_dequant(uint8_t q, kv_qgroup g) { return fmaf((float)q, g.scale, g.min); }

/* In place: the n values x[0], x[stride], ... become what precision p
 * stores of them, one group for u8/u4 (kv_quant_group then kv_dequant),
 * each value rounded for bf16/f16; unchanged for f32. */
void kv_round_group(float *x, size_t n, size_t stride, kv_precision p); /* n <= KV_QUANT_GROUP_MAX */

/* u4 storage: code i in byte i / 2, the even one in the low nibble. */
void kv_u4_pack(const uint8_t *q, size_t n, uint8_t *dst);
static inline uint8_t kv_u4_get(const uint8_t *packed, size_t i)
{
    return (uint8_t)(packed[i / 2] >> (i % 2 * 4) & 0xf);
}

#endif
