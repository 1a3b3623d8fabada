#include "tokenizer/bytelevel.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "util/utf8.h"

/* cp_to_byte[cp]: the byte that code point cp stands for, or -1. */
static int16_t cp_to_byte[0x144];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static bool printable_byte(int b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

/* Filled once per process (tokenizers may load on several threads); the rule
 * reads better than a constant table. */
static void init(void)
{
    int extra = 0;
    for (int cp = 0; cp < 0x144; cp++)
        cp_to_byte[cp] = -1;
    for (int b = 0; b < 256; b++)
        cp_to_byte[printable_byte(b) ? b : 0x100 + extra++] = (int16_t)b;
}

long kv_bytelevel_to_bytes(const char *s, size_t n, char *out)
{
    pthread_once(&once, init);
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, o = 0;
    while (i < n) {
        size_t bad, k = kv_utf8_seq(u + i, n - i, &bad);
        if (k == 0)
            return -1;
        uint32_t cp = kv_utf8_decode(u + i, k);
        if (cp >= 0x144 || cp_to_byte[cp] < 0)
            return -1;
        out[o++] = (char)cp_to_byte[cp];
        i += k;
    }
    return (long)o;
}
