#include "util/npy.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/file.h"

/* The header is always HEADER_BYTES long (any shape's digits fit), so the
 * final one can overwrite the placeholder in place. */
#define HEADER_BYTES 128

static int write_header(kv_npy_writer *w, kv_error *err)
{
    char hdr[HEADER_BYTES];
    int n = snprintf(hdr + 10, sizeof hdr - 10,
                     "{'descr': '<f4', 'fortran_order': False, 'shape': (%zu, %zu), }", w->rows,
                     w->cols);
    memcpy(hdr, "\x93NUMPY\x01\x00", 8);
    hdr[8] = (char)(HEADER_BYTES - 10);
    hdr[9] = 0;
    memset(hdr + 10 + n, ' ', (size_t)(HEADER_BYTES - 10 - n));
    hdr[HEADER_BYTES - 1] = '\n';
    if (fseek(w->f, 0, SEEK_SET) != 0 || fwrite(hdr, 1, HEADER_BYTES, w->f) != HEADER_BYTES)
        return kv_fail(err, "%s: write failed: %s", w->path, strerror(errno));
    return 0;
}

int kv_npy_open(kv_npy_writer *w, const char *path, size_t cols, kv_error *err)
{
    memset(w, 0, sizeof *w);
    w->cols = cols;
    w->f = fopen(path, "wb");
    if (!w->f)
        return kv_fail(err, "%s: cannot create: %s", path, strerror(errno));
    w->path = strdup(path);
    if (!w->path || write_header(w, err) != 0) {
        fclose(w->f);
        free(w->path);
        w->f = NULL;
        return kv_fail(err, "%s: cannot write", path);
    }
    return 0;
}

int kv_npy_append(kv_npy_writer *w, const float *data, size_t n_rows, kv_error *err)
{
    if (fwrite(data, sizeof(float), n_rows * w->cols, w->f) != n_rows * w->cols)
        return kv_fail(err, "%s: write failed: %s", w->path, strerror(errno));
    w->rows += n_rows;
    return 0;
}

int kv_npy_close(kv_npy_writer *w, kv_error *err)
{
    if (!w->f)
        return 0;
    int rc = write_header(w, err);
    if (fclose(w->f) != 0 && rc == 0)
        rc = kv_fail(err, "%s: write failed: %s", w->path, strerror(errno));
    free(w->path);
    w->f = NULL;
    w->path = NULL;
    return rc;
}

/* The shape tuple "(R, C)" of a header dict. */
static int parse_shape(const char *dict, size_t *rows, size_t *cols)
{
    const char *s = strstr(dict, "'shape':");
    unsigned long long r, c;
    if (!s || sscanf(s, "'shape': (%llu, %llu)", &r, &c) != 2)
        return -1;
    *rows = (size_t)r;
    *cols = (size_t)c;
    return 0;
}

int kv_npy_read(const char *path, float **data, size_t *rows, size_t *cols, kv_error *err)
{
    *data = NULL;
    char *buf;
    size_t len;
    if (kv_file_read(path, &buf, &len, err) != 0)
        return -1;
    int rc = -1;
    if (len < 12 || memcmp(buf, "\x93NUMPY", 6) != 0 || (buf[6] != 1 && buf[6] != 2)) {
        kv_fail(err, "%s: not a .npy file", path);
        goto done;
    }
    size_t hlen = (uint8_t)buf[8] | (size_t)(uint8_t)buf[9] << 8, start = 10;
    if (buf[6] == 2) {
        hlen |= (size_t)(uint8_t)buf[10] << 16 | (size_t)(uint8_t)buf[11] << 24;
        start = 12;
    }
    if (start + hlen > len) {
        kv_fail(err, "%s: truncated header", path);
        goto done;
    }
    char *dict = strndup(buf + start, hlen);
    int ok = dict && strstr(dict, "'descr': '<f4'") && strstr(dict, "'fortran_order': False") &&
             parse_shape(dict, rows, cols) == 0;
    free(dict);
    if (!ok) {
        kv_fail(err, "%s: only 2-D little-endian float32 C-order arrays are supported", path);
        goto done;
    }
    size_t want = *rows * *cols * sizeof(float);
    if (*cols != 0 && *rows > SIZE_MAX / sizeof(float) / *cols) {
        kv_fail(err, "%s: shape too large", path);
        goto done;
    }
    if (len - start - hlen != want) {
        kv_fail(err, "%s: %zu data bytes for shape (%zu, %zu)", path, len - start - hlen, *rows,
                *cols);
        goto done;
    }
    *data = malloc(want ? want : 1);
    if (!*data) {
        kv_fail(err, "%s: out of memory", path);
        goto done;
    }
    memcpy(*data, buf + start + hlen, want);
    rc = 0;
done:
    free(buf);
    return rc;
}
