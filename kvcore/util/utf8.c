#include "util/utf8.h"

#include <stdlib.h>
#include <string.h>

/* The ranges the second byte may take after each lead byte (Unicode table 3-7);
 * later continuation bytes are always 0x80..0xBF. */
static bool second_ok(unsigned char lead, unsigned char b)
{
    switch (lead) {
    case 0xE0:
        return b >= 0xA0 && b <= 0xBF;
    case 0xED:
        return b >= 0x80 && b <= 0x9F; /* no surrogates */
    case 0xF0:
        return b >= 0x90 && b <= 0xBF;
    case 0xF4:
        return b >= 0x80 && b <= 0x8F; /* nothing above U+10FFFF */
    default:
        return b >= 0x80 && b <= 0xBF;
    }
}

static size_t seq_len(unsigned char lead)
{
    if (lead < 0x80)
        return 1;
    if (lead >= 0xC2 && lead <= 0xDF)
        return 2;
    if (lead >= 0xE0 && lead <= 0xEF)
        return 3;
    if (lead >= 0xF0 && lead <= 0xF4)
        return 4;
    return 0;
}

size_t kv_utf8_seq(const unsigned char *s, size_t n, size_t *bad)
{
    size_t want = seq_len(s[0]);
    if (want == 0) {
        *bad = 1;
        return 0;
    }
    size_t i = 1;
    for (; i < want; i++) {
        if (i >= n)
            break;
        bool ok = i == 1 ? second_ok(s[0], s[1]) : (s[i] & 0xC0) == 0x80;
        if (!ok)
            break;
    }
    if (i == want)
        return want;
    *bad = i;
    return 0;
}

size_t kv_utf8_valid_prefix(const char *str, size_t n)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n) {
        /* ASCII fast path: eight bytes at a time */
        while (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (w & 0x8080808080808080ull)
                break;
            i += 8;
        }
        if (i >= n)
            break;
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        /* CJK text: three-byte sequences whose second byte has the full range */
        if (s[i] >= 0xE1 && s[i] != 0xED && s[i] <= 0xEF && n - i >= 3 &&
            (s[i + 1] & 0xC0) == 0x80 && (s[i + 2] & 0xC0) == 0x80) {
            i += 3;
            continue;
        }
        size_t bad, k = kv_utf8_seq(s + i, n - i, &bad);
        if (k == 0)
            return i;
        i += k;
    }
    return n;
}

char *kv_utf8_lossy(const char *str, size_t n, size_t *out_len)
{
    /* Worst case: every byte is ill-formed and becomes three bytes. */
    if (n > (SIZE_MAX - 1) / 3)
        return NULL;
    char *out = malloc(n * 3 + 1);
    if (!out)
        return NULL;
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0, o = 0;
    while (i < n) {
        size_t ok = kv_utf8_valid_prefix(str + i, n - i);
        memcpy(out + o, s + i, ok);
        o += ok;
        i += ok;
        if (i >= n)
            break;
        size_t bad;
        kv_utf8_seq(s + i, n - i, &bad);
        memcpy(out + o, "\xEF\xBF\xBD", 3);
        o += 3;
        i += bad;
    }
    out[o] = '\0';
    *out_len = o;
    return out;
}

uint32_t kv_utf8_decode(const unsigned char *s, size_t len)
{
    switch (len) {
    case 1:
        return s[0];
    case 2:
        return (uint32_t)(s[0] & 0x1F) << 6 | (s[1] & 0x3F);
    case 3:
        return (uint32_t)(s[0] & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 | (s[2] & 0x3F);
    default:
        return (uint32_t)(s[0] & 0x07) << 18 | (uint32_t)(s[1] & 0x3F) << 12 |
               (uint32_t)(s[2] & 0x3F) << 6 | (s[3] & 0x3F);
    }
}

uint32_t kv_utf8_next(const char *str, size_t n, size_t *i)
{
    const unsigned char *s = (const unsigned char *)str + *i;
    if (s[0] < 0x80) {
        *i += 1;
        return s[0];
    }
    size_t bad, k = kv_utf8_seq(s, n - *i, &bad);
    *i += k ? k : bad;
    return k ? kv_utf8_decode(s, k) : 0xFFFD;
}

bool kv_utf8_py_isspace(uint32_t cp)
{
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

void kv_utf8_py_strip(const char *s, size_t n, size_t *a, size_t *b)
{
    size_t start = 0, next = 0, end = 0;
    while (start < n && kv_utf8_py_isspace(kv_utf8_next(s, n, &next)))
        start = next;
    for (size_t i = start; i < n;)
        if (!kv_utf8_py_isspace(kv_utf8_next(s, n, &i)))
            end = i;
    *a = start;
    *b = end > start ? end : start;
}

size_t kv_utf8_encode(uint32_t c, char *out)
{
    unsigned char *o = (unsigned char *)out;
    if (c < 0x80) {
        o[0] = (unsigned char)c;
        return 1;
    }
    if (c < 0x800) {
        o[0] = (unsigned char)(0xC0 | c >> 6);
        o[1] = (unsigned char)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        o[0] = (unsigned char)(0xE0 | c >> 12);
        o[1] = (unsigned char)(0x80 | (c >> 6 & 0x3F));
        o[2] = (unsigned char)(0x80 | (c & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | c >> 18);
    o[1] = (unsigned char)(0x80 | (c >> 12 & 0x3F));
    o[2] = (unsigned char)(0x80 | (c >> 6 & 0x3F));
    o[3] = (unsigned char)(0x80 | (c & 0x3F));
    return 4;
}

bool kv_utf8_has_bom(const char *s, size_t n)
{
    return n >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0;
}

int kv_hex_value(const char *s, size_t n, uint32_t *out)
{
    uint32_t v = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0)
            return -1;
        v = v * 16 + (uint32_t)d;
    }
    *out = v;
    return 0;
}
