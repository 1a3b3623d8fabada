/* kvcore/utf8: lossy repair as the Unicode standard recommends (one U+FFFD
 * per maximal subpart), which is what Hugging Face's decode does. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "util/utf8.h"

static void expect_lossy(const char *in, size_t n, const char *want)
{
    size_t len;
    char *out = kv_utf8_lossy(in, n, &len);
    cr_assert(out);
    cr_expect_eq(len, strlen(want));
    cr_expect_str_eq(out, want);
    free(out);
}

#define R "\xEF\xBF\xBD"

Test(utf8, unicode_standard_example_of_maximal_subparts)
{
    /* The Unicode Standard, chapter 3, "U+FFFD Substitution of Maximal Subparts" */
    const char in[] = "\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64";
    expect_lossy(in, sizeof in - 1, "a" R R R "b" R "c" R R "d");
}

Test(utf8, surrogates_overlongs_and_out_of_range)
{
    const char surrogate[] = "\xED\xA0\x80"; /* U+D800: ED then A0 is not allowed */
    expect_lossy(surrogate, 3, R R R);
    const char overlong[] = "\xC0\xAF\xE0\x80\xAF";
    expect_lossy(overlong, 5, R R R R R);
    const char too_big[] = "\xF4\x90\x80\x80";
    expect_lossy(too_big, 4, R R R R);
    const char cut[] = "x\xF0\x9F\x98"; /* a 4-byte emoji cut after 3 bytes */
    expect_lossy(cut, 4, "x" R);
    const char nul[] = "a\0b";
    size_t len;
    char *out = kv_utf8_lossy(nul, 3, &len);
    cr_expect_eq(len, 3, "NUL is valid UTF-8 and kept");
    free(out);
}

Test(utf8, valid_text_is_unchanged)
{
    const char *s = "plain ASCII, caf\xC3\xA9, \xE4\xBD\xA0\xE5\xA5\xBD, \xF0\x9F\x98\x80, "
                    "\xF4\x8F\xBF\xBF";
    cr_expect_eq(kv_utf8_valid_prefix(s, strlen(s)), strlen(s));
    expect_lossy(s, strlen(s), s);
    cr_expect_eq(kv_utf8_valid_prefix("ab\xFF", 3), 2);
}

Test(utf8, encode_decode_round_trip)
{
    uint32_t cps[] = {0x41, 0x7FF, 0x800, 0xFFFD, 0x10000, 0x10FFFF};
    for (size_t i = 0; i < sizeof cps / sizeof *cps; i++) {
        char buf[4];
        size_t n = kv_utf8_encode(cps[i], buf), bad;
        cr_expect_eq(kv_utf8_seq((const unsigned char *)buf, n, &bad), n);
        cr_expect_eq(kv_utf8_decode((const unsigned char *)buf, n), cps[i]);
    }
}

/* kv_utf8_next walks any bytes: one U+FFFD per maximal ill-formed subpart,
 * the same units kv_utf8_lossy replaces. */
Test(utf8, next_walks_like_lossy)
{
    const char s[] = "a\xE4\xB8\xAD\xE4\xB8!\xFF\xF0\x9F\x98\x80";
    const uint32_t want[] = {'a', 0x4E2D, 0xFFFD, '!', 0xFFFD, 0x1F600};
    size_t i = 0, k = 0, n = sizeof s - 1;
    while (i < n) {
        cr_assert_lt(k, 6);
        cr_expect_eq(kv_utf8_next(s, n, &i), want[k], "code point %zu", k);
        k++;
    }
    cr_expect_eq(k, 6);
    cr_expect_eq(i, n);
}

static void expect_strip(const char *s, const char *want)
{
    size_t a, b;
    kv_utf8_py_strip(s, strlen(s), &a, &b);
    cr_expect(b - a == strlen(want) && memcmp(s + a, want, b - a) == 0, "strip(%s) = %.*s", s,
              (int)(b - a), s + a);
}

/* Python's str.strip(): Unicode whitespace on both ends, inner spaces kept. */
Test(utf8, py_strip_is_pythons)
{
    expect_strip(" \t\n a b \r\x0B\x0C", "a b");
    expect_strip("\xE3\x80\x80x\xC2\x85\xE2\x80\x8A", "x");   /* U+3000, U+0085, U+200A */
    expect_strip("\xE2\x80\x8Bx\xE2\x80\x8B", "\xE2\x80\x8Bx\xE2\x80\x8B"); /* U+200B is not */
    expect_strip("\x1C\x1F", "");                                    /* file/unit separators */
    expect_strip("   ", "");
    expect_strip(" \xFF ", "\xFF");
    cr_expect(kv_utf8_py_isspace(0x2028) && !kv_utf8_py_isspace(0x180E));
}
