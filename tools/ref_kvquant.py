#!/usr/bin/env python3
"""Float64 reference of the KV-cache quantiser (kvcore/model/kvquant.h), written from its text,
not from the C code, and the generator of tests/data/kvquant/vectors.json.

    tools/ref_kvquant.py > tests/data/kvquant/vectors.json

Plain Python (no numpy). F32 values travel as their bit patterns ("0x3f800000"), so a test can
require them bit for bit. The rules:
- u8/u4 (b = 8/4), one group of F32 values x: scale = f32((max - min) / (2^b - 1)) computed in
  float64; q = clamp(round_half_even((x - min) / scale), 0, 2^b - 1), the quotient in float64;
  a group with scale 0 (all values equal) stores q = 0. The value read back is min + q * scale
  rounded once to F32 (computed exactly here with fractions).
- u4 packing: code i goes into byte i // 2, the even code in the low nibble.
- bf16 and f16: round to nearest, ties to even; f16 from 65520 up is infinity.
"""
import json
import random
import struct
from fractions import Fraction


def f32(x):
    """x (a Python float) rounded to F32."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def bits(x):
    return "0x%08x" % struct.unpack("<I", struct.pack("<f", x))[0]


def round_f32_exact(v):
    """The F32 nearest the exact rational v, ties to even (a zero is +0)."""
    if v == 0:
        return 0.0
    sign, a = (-1 if v < 0 else 1), abs(v)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    while Fraction(2) ** e > a:
        e -= 1
    while Fraction(2) ** (e + 1) <= a:
        e += 1
    quantum = Fraction(2) ** (max(e, -126) - 23)
    m = a / quantum
    n = m.numerator // m.denominator
    rest = m - n
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and n % 2 == 1):
        n += 1
    r = n * quantum
    return sign * (float("inf") if r >= Fraction(2) ** 128 else float(r))


def quant_group(x, b):
    top = 2 ** b - 1
    lo, hi = min(x), max(x)
    scale = f32((hi - lo) / top)
    if scale == 0.0:
        q = [0] * len(x)
    else:
        q = [min(max(round((v - lo) / scale), 0), top) for v in x]
    back = [round_f32_exact(Fraction(lo) + c * Fraction(scale)) for c in q]
    return scale, lo, q, back


def u4_pack(q):
    out = []
    for i in range(0, len(q), 2):
        out.append(q[i] | (q[i + 1] << 4 if i + 1 < len(q) else 0))
    return out


def to_bf16(x):
    u = struct.unpack("<I", struct.pack("<f", x))[0]
    if (u & 0x7FFFFFFF) > 0x7F800000:
        return (u >> 16) | 0x40
    low, keep = u & 0xFFFF, u >> 16
    if low > 0x8000 or (low == 0x8000 and keep & 1):
        keep += 1
    return keep & 0xFFFF


def to_f16(x):
    if x != x:
        return 0x7E00 | (0x8000 if struct.pack("<f", x)[3] & 0x80 else 0)
    sign = 0x8000 if (x < 0 or (x == 0 and str(x).startswith("-"))) else 0
    if abs(x) >= 65520.0:
        return sign | 0x7C00
    return struct.unpack("<H", struct.pack("<e", x))[0]  # CPython packs half ties-to-even


def group_case(name, x, b, stride_cols=1):
    x = [f32(v) for v in x]
    case = {"name": name, "bits": b, "stride": stride_cols}
    cols = []
    for c in range(stride_cols):
        scale, lo, q, back = quant_group(x[c::stride_cols], b)
        cols.append({"scale": bits(scale), "min": bits(lo), "q": q,
                     "back": [bits(v) for v in back]})
        if b == 4:
            cols[-1]["packed"] = u4_pack(q)
    case["x"] = [bits(v) for v in x]
    case["groups"] = cols
    return case


def main():
    rng = random.Random(20261202)
    head = [rng.gauss(0.0, 1.5) for _ in range(128)]
    outlier = head[:64] + [37.25] + head[65:]
    cases = [
        group_case("u8_head_dim_128", head, 8),
        group_case("u4_head_dim_128", head, 4),
        group_case("u8_one_outlier", outlier, 8),
        group_case("u4_one_outlier", outlier, 4),
        # scale 1: every x.5 is a tie, decided to the even code
        group_case("u8_ties_to_even", [0.0, 255.0, 2.5, 3.5, 127.5, 128.5, 254.5, 0.5], 8),
        group_case("u4_ties_to_even", [0.0, 15.0, 0.5, 1.5, 6.5, 7.5, 14.5], 4),
        group_case("u8_all_equal", [3.25] * 8, 8),
        group_case("u4_all_equal_negative", [-1.5] * 5, 4),
        group_case("u8_single_value", [-0.71875], 8),
        group_case("u4_odd_length_packing", [0.1, -0.3, 0.7, 0.2, -0.9, 0.4, 0.05], 4),
        group_case("u8_group_edges_min_max_exact", [-2.0, 2.0, -2.0, 2.0, 0.0, 1.0], 8),
        group_case("u8_tiny_spread", [1.0, 1.0000001, 1.0000002, 1.0], 8),
        group_case("u8_wide_range", [-3e4, 1e-3, 2.5e4, -7.0], 8),
        # by-channel: a 6-token x 4-channel block, one group per channel (stride 4)
        group_case("u8_by_channel_6x4", [rng.uniform(-4, 4) for _ in range(24)], 8, 4),
        group_case("u4_by_channel_6x4", [rng.uniform(-4, 4) for _ in range(24)], 4, 4),
    ]
    floats = [0.0, -0.0, 1.0, -1.0, 1.00390625, 1.01171875, 1.0 + 2 ** -9, 1.0 + 3 * 2 ** -9,
              3.14159265, -2.71828182, 65504.0, 65519.99, 65520.0, 1e6, -1e6, 6.1035156e-05,
              6.0e-05, 2 ** -24, 2 ** -25, 3 * 2 ** -26, 1e-10, 3.3895314e38, 1e-40,
              float("inf"), -float("inf"), float("nan")]
    floats += [rng.gauss(0, 3) for _ in range(16)]
    conv = [{"x": bits(f32(v)), "bf16": "0x%04x" % to_bf16(f32(v)),
             "f16": "0x%04x" % to_f16(f32(v))} for v in floats]
    print(json.dumps({"origin": "tools/ref_kvquant.py (float64 reference, this repository)",
                      "groups": cases, "convert": conv}, indent=1))


if __name__ == "__main__":
    main()
