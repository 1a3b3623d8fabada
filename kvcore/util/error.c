#include "util/error.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* An error is one line: names and values quoted from a file (a tensor
 * name, an architecture) may hold newlines or other control bytes, which
 * would split the line or move the terminal's cursor; they become '?'. So
 * does the NUL of an id (C0 80, kvcore/util/jsonstr.h), which is not UTF-8. */
static void one_line(char *msg)
{
    for (unsigned char *c = (unsigned char *)msg; *c; c++) {
        bool id_nul = c[0] == 0xC0 && c[1] == 0x80;
        if (id_nul)
            *c++ = '?';
        if (id_nul || *c < 0x20 || *c == 0x7f)
            *c = '?';
    }
}

int kv_fail(kv_error *err, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        one_line(err->msg);
    }
    return -1;
}

int kv_fail_prefix(kv_error *err, const char *prefix)
{
    if (err) {
        /* Shift the old message right and write "prefix: " in front; the
         * tail is cut when the whole does not fit. */
        size_t cap = sizeof err->msg, p = strlen(prefix), m = strnlen(err->msg, cap - 1);
        if (p + 2 >= cap)
            p = cap - 3;
        size_t keep = m + p + 2 < cap ? m : cap - 1 - p - 2;
        memmove(err->msg + p + 2, err->msg, keep);
        memcpy(err->msg, prefix, p);
        err->msg[p] = ':';
        err->msg[p + 1] = ' ';
        err->msg[p + 2 + keep] = '\0';
    }
    return -1;
}
