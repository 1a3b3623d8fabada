#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int kv_fail(kv_error *err, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
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
