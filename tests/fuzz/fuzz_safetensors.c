/* Fuzz target: a safetensors file of arbitrary bytes. Opening validates the
 * header; whatever it accepts must be readable within the file. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/safetensors.h"

static char dir[] = "/tmp/kvbfuzz-st-XXXXXX";
static char path[64];

static void cleanup(void)
{
    unlink(path);
    rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!path[0]) {
        if (!mkdtemp(dir))
            return 0;
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        atexit(cleanup);
    }
    /* A fresh file each time: truncating one that has data makes ext4
     * flush it to disk on close (auto_da_alloc), which is slow. */
    unlink(path);
    FILE *f = fopen(path, "wb");
    if (!f)
        return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    kv_safetensors *st;
    kv_error err;
    if (kv_safetensors_open(dir, &st, &err) != 0) {
        if (!err.msg[0] || strchr(err.msg, '\n'))
            abort(); /* errors are one non-empty line */
        return 0;
    }
    for (int i = 0; i < st->n_tensors; i++) {
        const kv_st_tensor *t = &st->tensors[i];
        if (t->offset + t->nbytes > size || kv_safetensors_find(st, t->name) != t)
            abort();
        void *buf = malloc(t->nbytes ? t->nbytes : 1);
        if (buf && kv_safetensors_read(st, t, buf, &err) != 0)
            abort(); /* an accepted tensor lies within the file */
        free(buf);
    }
    kv_safetensors_free(st);
    return 0;
}
