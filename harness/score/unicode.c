#include "score/unicode.h"
#include "util/vec.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>


size_t kb_utf8_length(const char *s, size_t n)
{
    size_t count = 0;
    for (size_t i = 0; i < n; count++)
        kv_utf8_next(s, n, &i);
    return count;
}

/* Characters that utf8proc (Unicode 15) assigns but CPython 3.11 (Unicode 14,
 * what LongBench's numbers were computed with) does not; Python treats them as
 * unassigned, so they are neither word characters, digits nor cased. These are
 * exactly the code points where the predicates below disagreed with CPython. */
static bool unknown_to_python(uint32_t cp)
{
    static const uint32_t newer[][2] = {
        {0xECE, 0xECE},     {0x10EFD, 0x10EFF}, {0x1123F, 0x11241}, {0x11F00, 0x11F02},
        {0x11F04, 0x11F10}, {0x11F12, 0x11F33}, {0x11F36, 0x11F3A}, {0x11F40, 0x11F40},
        {0x11F42, 0x11F42}, {0x11F50, 0x11F59}, {0x1342F, 0x1342F}, {0x13439, 0x13455},
        {0x1B132, 0x1B132}, {0x1B155, 0x1B155}, {0x1D2C0, 0x1D2D3}, {0x1DF25, 0x1DF2A},
        {0x1E030, 0x1E06D}, {0x1E08F, 0x1E08F}, {0x1E4D0, 0x1E4F9}, {0x2B739, 0x2B739},
        {0x31350, 0x323AF},
    };
    if (cp < 0xECE)
        return false;
    size_t lo = 0, hi = sizeof newer / sizeof newer[0];
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < newer[mid][0])
            hi = mid;
        else if (cp > newer[mid][1])
            lo = mid + 1;
        else
            return true;
    }
    return false;
}

/* CPython's _PyUnicode_IsWhitespace: bidirectional WS/B/S or category Zs. */
bool kb_py_isword(uint32_t cp)
{
    if (cp < 0x80)
        return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') ||
               cp == '_';
    if (unknown_to_python(cp))
        return false;
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
        return true;
    default:
        return false;
    }
}

bool kb_py_isdigit(uint32_t cp)
{
    if (cp < 0x80)
        return cp >= '0' && cp <= '9';
    if (unknown_to_python(cp))
        return false;
    return utf8proc_category((utf8proc_int32_t)cp) == UTF8PROC_CATEGORY_ND;
}

/* Unicode's Cased property: Lu, Ll, Lt, plus Other_Lowercase/Other_Uppercase. */
static bool is_cased(uint32_t cp)
{
    if (unknown_to_python(cp))
        return false;
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    if (c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT)
        return true;
    static const uint32_t other[][2] = {
        {0x00AA, 0x00AA},   {0x00BA, 0x00BA},   {0x02B0, 0x02B8},   {0x02C0, 0x02C1},
        {0x02E0, 0x02E4},   {0x0345, 0x0345},   {0x037A, 0x037A},   {0x10FC, 0x10FC},
        {0x1D2C, 0x1D6A},   {0x1D78, 0x1D78},   {0x1D9B, 0x1DBF},   {0x2071, 0x2071},
        {0x207F, 0x207F},   {0x2090, 0x209C},   {0x2160, 0x217F},   {0x24B6, 0x24E9},
        {0x2C7C, 0x2C7D},   {0xA69C, 0xA69D},   {0xA770, 0xA770},   {0xA7F2, 0xA7F4},
        {0xA7F8, 0xA7F9},   {0xAB5C, 0xAB5F},   {0xAB69, 0xAB69},   {0x10780, 0x10780},
        {0x10783, 0x10785}, {0x10787, 0x107B0}, {0x107B2, 0x107BA}, {0x1F130, 0x1F149},
        {0x1F150, 0x1F169}, {0x1F170, 0x1F189},
    };
    for (size_t k = 0; k < sizeof other / sizeof other[0]; k++)
        if (cp >= other[k][0] && cp <= other[k][1])
            return true;
    return false;
}

/* Unicode's Case_Ignorable: Mn Me Cf Lm Sk, and Word_Break MidLetter,
 * MidNumLet, Single_Quote. */
static bool is_case_ignorable(uint32_t cp)
{
    if (unknown_to_python(cp))
        return false;
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_SK:
        return true;
    default:
        break;
    }
    static const uint32_t mid[] = {0x0027, 0x002E, 0x003A, 0x00B7, 0x0387, 0x055F,
                                   0x05F4, 0x2018, 0x2019, 0x2024, 0x2027, 0xFE13,
                                   0xFE52, 0xFE55, 0xFF07, 0xFF0E, 0xFF1A};
    for (size_t k = 0; k < sizeof mid / sizeof mid[0]; k++)
        if (cp == mid[k])
            return true;
    return false;
}

int kb_text_reserve(kb_text *t, size_t more)
{
    if (more > SIZE_MAX - t->len - 1)
        return -1;
    return KV_VEC_RESERVE(t->data, t->cap, t->len + more + 1, 64);
}

int kb_text_append(kb_text *t, const char *s, size_t n)
{
    if (kb_text_reserve(t, n) < 0)
        return -1;
    memcpy(t->data + t->len, s, n);
    t->len += n;
    t->data[t->len] = '\0';
    return 0;
}

void kb_text_free(kb_text *t)
{
    free(t->data);
    *t = (kb_text){0};
}

/* CPython's handle_capital_sigma: U+03A3 lowers to final sigma when a cased
 * letter precedes it (case-ignorables skipped) and none follows. */
static bool final_sigma(const char *s, size_t n, size_t at, size_t after)
{
    size_t j = at;
    bool cased_before = false;
    while (j > 0) {
        size_t k = j - 1;
        while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80)
            k--;
        size_t p = k;
        uint32_t c = kv_utf8_next(s, n, &p);
        if (!is_case_ignorable(c)) {
            cased_before = is_cased(c);
            break;
        }
        j = k;
    }
    if (!cased_before)
        return false;
    for (size_t i = after; i < n;) {
        uint32_t c = kv_utf8_next(s, n, &i);
        if (!is_case_ignorable(c))
            return !is_cased(c);
    }
    return true;
}

int kb_py_lower(const char *s, size_t n, kb_text *out)
{
    if (kb_text_reserve(out, n + 8) < 0)
        return -1;
    for (size_t i = 0; i < n;) {
        if ((unsigned char)s[i] < 0x80) { /* ASCII, the common case */
            if (out->len + 2 > out->cap && kb_text_reserve(out, 1) < 0)
                return -1;
            char c = s[i++];
            out->data[out->len++] = (char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
            continue;
        }
        size_t at = i;
        uint32_t cp = kv_utf8_next(s, n, &i);
        if (kb_text_reserve(out, 8) < 0)
            return -1;
        char *o = out->data + out->len;
        if (cp < 0x80) {
            *o = (char)(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp);
            out->len += 1;
        } else if (cp == 0x130) { /* the one unconditional multi-code-point lowercase */
            out->len += kv_utf8_encode('i', o);
            out->len += kv_utf8_encode(0x307, out->data + out->len);
        } else if (cp == 0x3A3) {
            out->len += kv_utf8_encode(final_sigma(s, n, at, i) ? 0x3C2 : 0x3C3, o);
        } else {
            out->len += kv_utf8_encode((uint32_t)utf8proc_tolower((utf8proc_int32_t)cp), o);
        }
    }
    out->data[out->len] = '\0';
    return 0;
}

int kb_utf8_sanitize(const char *s, size_t n, kb_text *out)
{
    out->len = 0;
    if (kb_text_reserve(out, n + 4) < 0)
        return -1;
    if (kv_utf8_valid_prefix(s, n) == n) { /* the usual case: a plain copy */
        memcpy(out->data, s, n);
        out->len = n;
        out->data[n] = '\0';
        return 0;
    }
    for (size_t i = 0; i < n;) {
        uint32_t cp = kv_utf8_next(s, n, &i);
        if (kb_text_reserve(out, 4) < 0)
            return -1;
        out->len += kv_utf8_encode(cp, out->data + out->len);
    }
    out->data[out->len] = '\0';
    return 0;
}
