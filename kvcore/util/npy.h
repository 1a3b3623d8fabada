/* npy: NumPy .npy files of float32 matrices, the format every ML tool reads
 * (`kvbench generate --dump-logits`, the engine's reference fixtures).
 *
 * Written: version 1.0, '<f4', C order, shape (rows, cols). Read: the same
 * layout with a 1.0/2.0 header; anything else is refused.
 */
#ifndef KV_NPY_H
#define KV_NPY_H

#include <stddef.h>
#include <stdio.h>

#include "util/error.h"

/* Streaming writer: open with the row length, append rows, close. The
 * header (which holds the row count) is rewritten on close. */
typedef struct kv_npy_writer {
    FILE *f;
    char *path;
    size_t cols, rows;
} kv_npy_writer;

int kv_npy_open(kv_npy_writer *w, const char *path, size_t cols, kv_error *err);
int kv_npy_append(kv_npy_writer *w, const float *data, size_t n_rows, kv_error *err);
/* Writes the final header and closes (also after an error: then it only
 * closes and returns -1). */
int kv_npy_close(kv_npy_writer *w, kv_error *err);

/* Reads a 2-D float32 array into a malloc'd buffer. */
int kv_npy_read(const char *path, float **data, size_t *rows, size_t *cols, kv_error *err);

#endif
