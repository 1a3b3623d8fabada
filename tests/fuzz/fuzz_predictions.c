/* Fuzz target: reading prediction files (what resume and merge rely on).
 * Arbitrary bytes either fail with a message or give complete, valid lines;
 * writing those lines back and reading again gives the same lines with
 * nothing dropped (what recovery rewrites is stable); and each line as
 * parsed, written again by the one writer (kb_prediction_format), reads
 * back with the same id, index and texts. No fsync here, so it
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

/* Every parsed line of a through the writer and back. */
static void rewrite_and_compare(const kb_pred_lines *a)
{
    char path[64];
    int fd = temp_file(path, sizeof path);
    if (fd < 0)
        return;
    kv_strbuf b = {0};
    for (size_t i = 0; i < a->n; i++) {
        kb_prediction_format(&a->line[i], &b);
        kv_strbuf_puts(&b, "\n");
    }
    if (b.oom || write(fd, b.s, b.len) != (ssize_t)b.len)
        abort();
    close(fd);
    kv_error err = {{0}};
    kb_pred_lines c;
    if (kb_pred_lines_read(path, &c, &err) < 0 || c.n != a->n || c.n_dropped)
        abort();
    for (size_t i = 0; i < a->n; i++) {
        const kb_prediction *x = &a->line[i], *y = &c.line[i];
        if (!kv_str_eq(x->id, y->id) || x->index != y->index ||
            (x->pred.p && !kv_str_eq(x->pred, y->pred)) || x->n_answers != y->n_answers)
            abort();
        for (size_t k = 0; k < x->n_answers; k++)
            if (!kv_str_eq(x->answers[k], y->answers[k]))
                abort();
    }
    kb_pred_lines_free(&c);
    kv_strbuf_free(&b);
    unlink(path);
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
            rewrite_and_compare(&a);
            kb_pred_lines_free(&b);
            kb_pred_lines_free(&a);
        } else if (!err.msg[0]) {
            abort(); /* every failure explains itself */
        }
    }
    unlink(path);
    return 0;
}
