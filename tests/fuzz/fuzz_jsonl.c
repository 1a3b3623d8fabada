/* Fuzz target: the JSONL line reader over arbitrary bytes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "fuzz_file.h"
#include "longbench/jsonl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[96];
    if (fuzz_write_temp(data, size, "jsonl", path) < 0)
        return 0;
    lb_jsonl *r = lb_jsonl_open(path);
    size_t total = 0;
    while (r && lb_jsonl_next(r) == 1)
        total += r->len + 1;
    if (total > size + 1)
        abort(); /* a reader cannot return more bytes than the file has */
    lb_jsonl_close(r);
    unlink(path);
    return 0;
}
