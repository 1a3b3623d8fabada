/* kv_error: the one way kvcore reports failure.
 *
 * Library functions never print. They return 0 on success or a negative
 * status, and write a sentence a user can act on into a caller-owned
 * kv_error ("model.safetensors: tensor 'x' ends past the end of the file").
 */
#ifndef KV_ERROR_H
#define KV_ERROR_H

#include <stddef.h>

typedef struct kv_error {
    char msg[1024];
} kv_error;

/* Formats the message into err (when err is non-NULL) and returns -1, so a
 * failing path reads `return kv_fail(err, "...", ...);`. */
int kv_fail(kv_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Prepends "prefix: " to an existing message (e.g. a file name added by the
 * caller that knows it) and returns -1. */
int kv_fail_prefix(kv_error *err, const char *prefix);

#endif
