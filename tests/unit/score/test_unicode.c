/* Python's Unicode behaviour (isspace, \w, \d, lower with Final_Sigma) over
 * every code point, against a fingerprint computed by CPython 3.11
 * (tests/tools/unicode_ref.py). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "score/unicode.h"

/* The fingerprint printed by `python3 tests/tools/unicode_ref.py`. */
#define CPYTHON_311_FINGERPRINT 0x3bcfcd3c849e1d41ull

static uint64_t fnv(uint64_t h, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    return h;
}

static bool lower_has(const char *s, size_t n, const char *needle)
{
    kb_text t = {0};
    cr_assert_eq(kb_py_lower(s, n, &t), 0);
    bool found = strstr(t.data, needle) != NULL;
    kb_text_free(&t);
    return found;
}

Test(unicode, every_code_point_matches_cpython)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint32_t cp = 0; cp < 0x110000; cp++) {
        if (cp >= 0xD800 && cp <= 0xDFFF)
            continue;
        char c[4], s1[16], s2[16], line[96];
        size_t n = kv_utf8_encode(cp, c), k1 = 0, k2 = 0;
        s1[k1++] = 'A';
        memcpy(s1 + k1, c, n), k1 += n;
        k1 += kv_utf8_encode(0x3A3, s1 + k1);
        s2[k2++] = 'A';
        k2 += kv_utf8_encode(0x3A3, s2 + k2);
        memcpy(s2 + k2, c, n), k2 += n;
        /* ("A"+c+"Σ") ends in ς; ("AΣ"+c) keeps σ (compares the σ right after "A") */
        kb_text t2 = {0};
        kb_py_lower(s2, k2, &t2);
        int y = memcmp(t2.data + 1, "\xcf\x83", 2) == 0;
        kb_text_free(&t2);
        kb_text low = {0};
        kb_py_lower(c, n, &low);
        int len = snprintf(line, sizeof line, "%X %d%d%d %d%d ", cp, kv_utf8_py_isspace(cp),
                           kb_py_isword(cp), kb_py_isdigit(cp), lower_has(s1, k1, "\xcf\x82"), y);
        for (size_t i = 0; i < low.len; i++)
            len +=
                snprintf(line + len, sizeof line - (size_t)len, "%02x", (unsigned char)low.data[i]);
        line[len++] = '\n';
        h = fnv(h, line, (size_t)len);
        kb_text_free(&low);
    }
    cr_assert_eq(h, CPYTHON_311_FINGERPRINT, "fingerprint %#llx differs from CPython 3.11's",
                 (unsigned long long)h);
}

Test(unicode, utf8_decoding_replaces_bad_bytes)
{
    const char bad[] = "a\xff\xc3(";
    size_t i = 0;
    cr_assert_eq(kv_utf8_next(bad, 4, &i), 'a');
    cr_assert_eq(kv_utf8_next(bad, 4, &i), 0xFFFD);
    cr_assert_eq(kv_utf8_next(bad, 4, &i), 0xFFFD);
    cr_assert_eq(kv_utf8_next(bad, 4, &i), '(');
    cr_assert_eq(i, 4);
    /* A truncated sequence is one U+FFFD (its maximal subpart), as in
     * kv_utf8_lossy; an encoded surrogate is three, one per byte (ED is never
     * followed by A0..BF in well-formed UTF-8). */
    i = 0;
    cr_assert_eq(kv_utf8_next("\xe4\xb8", 2, &i), 0xFFFD);
    cr_assert_eq(i, 2);
    i = 0;
    cr_assert_eq(kv_utf8_next("\xed\xa0\x80", 3, &i), 0xFFFD);
    cr_assert_eq(i, 1);
    cr_assert_eq(kb_utf8_length("\xe4\xb8\xad\xe6\x96\x87", 6), 2);
    kb_text t = {0};
    cr_assert_eq(kb_utf8_sanitize("a\xe4\xb8!\xef\xbf\xbd", 7, &t), 0);
    cr_assert_str_eq(t.data, "a\xef\xbf\xbd!\xef\xbf\xbd"); /* a real U+FFFD stays */
    kb_text_free(&t);
}
