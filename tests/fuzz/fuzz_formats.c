/* Fuzz target: other harnesses' prediction files (score/formats.h). The
 * input is read as a Python list repr, as kvpress's predictions.csv and as
 * an lm-eval samples file: each either fails with a message or gives lines
 * that LongBench's scorer accepts (a list repr: valid JSON). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "score/formats.h"
#include "fuzz_file.h"
#include "util/jsonstr.h"

static void read_as(const uint8_t *data, size_t size, kb_pred_format f, const char *tag)
{
    char path[96];
    if (fuzz_write_temp(data, size, tag, path) < 0)
        return;
    kb_predictions p = {0};
    kv_error err = {{0}};
    if (kb_predictions_read_format(&p, path, f, &err) < 0 && !err.msg[0])
        abort(); /* every failure explains itself */
    for (size_t i = 0; i < p.n; i++)
        if (!p.v[i].dataset || !p.v[i].where)
            abort();
    kb_predictions_free(&p);
    unlink(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kv_strbuf b = {0};
    kv_error err = {{0}};
    if (kb_py_list_to_json((const char *)data, size, &b, &err) == 0) {
        json_t *v = kv_json_load(b.s, b.len, &err);
        if (!v || !(json_is_array(v) || json_is_null(v)))
            abort(); /* what the reader hands the scorer is JSON */
        json_decref(v);
    } else if (!err.msg[0]) {
        abort();
    }
    kv_strbuf_free(&b);
    read_as(data, size, KB_FORMAT_KVPRESS, "kvpress");
    read_as(data, size, KB_FORMAT_LM_EVAL, "samples_lmeval");
    return 0;
}
