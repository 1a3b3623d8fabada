/* kvcore/utf8: lossy repair as the Unicode standard recommends (one U+FFFD
 * per maximal subpart), which is what Hugging Face's decode does. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "utf8.h"

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
