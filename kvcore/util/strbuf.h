/* kv_strbuf: a growable, always NUL-terminated byte string.
 *
 * After a failed allocation the buffer is marked oom and later appends do
 * nothing, so a run of appends needs one check at the end.
 */
#ifndef KV_STRBUF_H
#define KV_STRBUF_H

#include <stdbool.h>
#include <stddef.h>

typedef struct kv_strbuf {
    char *s;    /* NULL until the first append */
    size_t len; /* bytes, excluding the NUL */
    size_t cap;
    bool oom;
} kv_strbuf;

/* Appends n bytes of s. Returns 0, or -1 when out of memory (now or before). */
int kv_strbuf_add(kv_strbuf *b, const char *s, size_t n);
/* Appends a C string. */
int kv_strbuf_puts(kv_strbuf *b, const char *s);
void kv_strbuf_free(kv_strbuf *b);

#endif
