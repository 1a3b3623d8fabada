"""Fingerprint of CPython's Unicode behaviour that LongBench's metrics rely on.

For every code point outside the surrogates, one line
    "<hex cp> <isspace><\\w><\\d> <final-sigma bits> <utf8 hex of c.lower()>\\n"
where the final-sigma bits tell whether ("A" + c + "Σ").lower() ends in "ς" and
whether ("AΣ" + c).lower() keeps "σ" (i.e. Cased / Case_Ignorable). Prints the
FNV-1a 64-bit hash of all lines; tests/unit/score/test_unicode.c computes the same over
harness/score/unicode.c and compares. Run with /usr/bin/python3 (3.11, Unicode 14).
"""
import re

W, D = re.compile(r"\w"), re.compile(r"\d")
h = 0xCBF29CE484222325
for cp in range(0x110000):
    if 0xD800 <= cp <= 0xDFFF:
        continue
    c = chr(cp)
    x = int(("A" + c + "Σ").lower()[-1] == "ς")
    y = int(("AΣ" + c).lower()[1] == "σ")
    line = "%X %d%d%d %d%d %s\n" % (cp, c.isspace(), bool(W.match(c)), bool(D.match(c)), x, y,
                                    c.lower().encode().hex())
    for b in line.encode():
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
print("0x%016x" % h)
