/* Fuzz target: loading tokenizer.json (the kv_jscan scanner for vocab and
 * merges, cJSON for the rest, every validation path) from arbitrary bytes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/file.h"
#include "tokenizer/tokenizer.h"

static char dir[] = "/tmp/kvbfuzz-tokjson-XXXXXX";
static char *path;

static void cleanup(void)
{
    unlink(path);
    rmdir(dir);
    free(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!path) {
        if (!mkdtemp(dir))
            abort();
        path = kv_path_join(dir, "tokenizer.json");
        atexit(cleanup);
    }
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, size, f) != size)
        abort();
    fclose(f);
    kv_error err;
    kv_tokenizer *t = kv_tokenizer_load(dir, &err);
    if (t) {
        /* whatever loaded must encode and decode */
        int32_t *ids;
        size_t n;
        if (kv_tokenizer_encode(t, "Hello <|im_end|> w\xC3\xB6rld 42\n", 22, &ids, &n, &err) != 0)
            abort();
        char *s = kv_tokenizer_decode(t, ids, n, true);
        free(s);
        free(ids);
        kv_tokenizer_free(t);
    } else if (strlen(err.msg) == 0) {
        abort(); /* a failed load always says why */
    }
    return 0;
}
