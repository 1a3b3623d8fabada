/* kv_str: a byte string with its length, for text that may hold NUL bytes.
 *
 * JSON's "\u0000" is ordinary data (LongBench contexts contain it), so text
 * read from JSON travels as pointer + length, never as a C string. The bytes
 * are followed by a NUL as well, so that code which only prints or compares
 * short names may still read p as a C string.
 */
#ifndef KV_STR_H
#define KV_STR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef struct kv_str {
    const char *p;
    size_t n;
} kv_str;

/* A view of a C string. */
static inline kv_str kv_str_c(const char *s)
{
    return (kv_str){s, s ? strlen(s) : 0};
}

static inline bool kv_str_eq(kv_str a, kv_str b)
{
    return a.n == b.n && (a.n == 0 || memcmp(a.p, b.p, a.n) == 0);
}

/* Byte order, a shorter string first when it is a prefix (strcmp's order
 * for strings without NULs). */
static inline int kv_str_cmp(kv_str a, kv_str b)
{
    size_t n = a.n < b.n ? a.n : b.n;
    int c = n ? memcmp(a.p, b.p, n) : 0;
    return c ? c : (a.n > b.n) - (a.n < b.n);
}

/* Frees the bytes of a kv_str that owns them. */
static inline void kv_str_free(kv_str *s)
{
    free((char *)s->p);
    *s = (kv_str){0};
}

#endif
