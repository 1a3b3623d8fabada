/* Fuzz target: reading prediction files (what resume and merge rely on).
 * Arbitrary bytes either fail with a message or give complete, valid lines;
 * writing those lines back and reading again gives the same lines with
 * nothing dropped (what recovery rewrites is stable). No fsync here, so it
 * runs thousands of inputs a second; recovery on disk is unit-tested. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rundir/predfile.h"

/* A temporary file in memory (/dev/shm) when there is one: on a disk, creating
 * and deleting thousands of small files costs seconds. */
static int temp_file(char *path, size_t n)
{
    snprintf(path, n, "/dev/shm/kvbfuzz-preds-XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0) {
        snprintf(path, n, "/tmp/kvbfuzz-preds-XXXXXX");
        fd = mkstemp(path);
    }
    return fd;
}

static int write_file(const char *path, const void *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = fwrite(data, 1, size, f);
    fclose(f);
    return w == size ? 0 : -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    int fd = temp_file(path, sizeof path);
    if (fd < 0)
        return 0;
    close(fd);
    kv_error err = {{0}};
    kb_pred_lines a, b;
    if (write_file(path, data, size) == 0) {
        if (kb_pred_lines_read(path, &a, &err) == 0) {
            char again[64];
            int fd2 = temp_file(again, sizeof again);
            FILE *f = fd2 >= 0 ? fdopen(fd2, "wb") : NULL;
            for (size_t i = 0; f && i < a.n; i++)
                fprintf(f, "%s\n", a.text[i]);
            if (f)
                fclose(f);
            if (kb_pred_lines_read(again, &b, &err) < 0 || b.n != a.n || b.n_dropped)
                abort();
            unlink(again);
            for (size_t i = 0; i < a.n; i++)
                if (strcmp(a.text[i], b.text[i]) != 0)
                    abort();
            kb_pred_lines_free(&b);
            kb_pred_lines_free(&a);
        } else if (!err.msg[0]) {
            abort(); /* every failure explains itself */
        }
    }
    unlink(path);
    return 0;
}
