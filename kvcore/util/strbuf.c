#include "util/strbuf.h"
#include "util/vec.h"

#include <stdlib.h>
#include <string.h>

int kv_strbuf_add(kv_strbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return -1;
    if (KV_VEC_RESERVE(b->s, b->cap, b->len + n + 1, 64) < 0) {
        b->oom = true;
        return -1;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
    return 0;
}

int kv_strbuf_puts(kv_strbuf *b, const char *s)
{
    return kv_strbuf_add(b, s, strlen(s));
}

void kv_strbuf_free(kv_strbuf *b)
{
    free(b->s);
    *b = (kv_strbuf){0};
}
