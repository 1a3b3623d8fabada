/* Fuzz target: the LongBench sample loader over arbitrary bytes. Each line
 * is parsed directly, and the whole input is loaded from a file with the skip
 * policy: every non-blank line must come out as a sample or a counted skip. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_file.h"
#include "longbench/sample.h"

static void check_sample(const lb_sample *s)
{
    if (!s->id.p || !s->input.p || !s->context.p || !s->dataset || !s->language || s->n_answers < 1)
        abort();
    for (size_t i = 0; i < s->n_answers; i++)
        if (!s->answers[i].p || s->answers[i].p[s->answers[i].n] != '\0')
            abort();
    /* text keeps its length; ids and names never hold a NUL */
    if (s->context.p[s->context.n] != '\0' || s->input.p[s->input.n] != '\0')
        abort();
    if (!s->all_classes && s->n_classes != 0)
        abort();
}

/* Lines that the JSONL reader returns: not empty and not only ' ', '\t', '\r'. */
static long count_lines(const uint8_t *data, size_t size)
{
    long n = 0;
    bool content = false;
    for (size_t i = 0; i < size; i++) {
        if (data[i] == '\n') {
            n += content;
            content = false;
        } else if (data[i] != ' ' && data[i] != '\t' && data[i] != '\r') {
            content = true;
        }
    }
    return n + content;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[96];
    if (fuzz_write_temp(data, size, "sample", path) < 0)
        return 0;
    /* A file starting with '[' is a JSON array (LongBench v2's data.json). */
    size_t first = 0;
    while (first < size && strchr(" \t\r\n", data[first]) && data[first])
        first++;
    bool array = first < size && data[first] == '[';
    for (int schema = 0; schema < 2; schema++) {
        lb_loader_options opts = {.on_error = LB_ON_ERROR_SKIP, .schema = (lb_schema)schema};
        kv_error err;
        lb_loader *l = lb_loader_open(path, &opts, &err);
        lb_sample s;
        long good = 0;
        while (l && lb_loader_next(l, &s, &err) == 1) {
            check_sample(&s);
            if (schema == LB_SCHEMA_V2 && (!s.choices[0].p || !s.choices[3].p))
                abort();
            lb_sample_free(&s);
            good++;
        }
        if (l && !array && good + lb_loader_skipped(l) != count_lines(data, size))
            abort(); /* a line was lost or counted twice */
        lb_loader_close(l);
    }
    unlink(path);
    return 0;
}
