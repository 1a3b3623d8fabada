/* Fuzz target: JSON strings of any bytes (kvcore/jsonstr). For arbitrary
 * bytes s: kv_json_quote(s) is valid UTF-8 JSON, and loading it gives s back
 * exactly when s is valid UTF-8 (NULs included), else s with each ill-formed
 * part replaced by U+FFFD. kv_json_load and kv_json_check_names take the
 * bytes as JSON text too, and must fail cleanly or succeed. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/jsonstr.h"
#include "util/utf8.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data;
    kv_error err;
    json_t *any = kv_json_load(s, size, &err);
    json_decref(any);
    kv_json_check_names("fuzz", s, size, &err);

    kv_strbuf q = {0};
    if (kv_json_quote(&q, s, size) < 0) {
        kv_strbuf_free(&q);
        return 0;
    }
    if (kv_utf8_valid_prefix(q.s, q.len) != q.len || memchr(q.s, '\0', q.len))
        abort(); /* output that is not valid UTF-8 JSON text */
    json_t *back = kv_json_load(q.s, q.len, &err);
    if (!json_is_string(back))
        abort(); /* what kvbench writes, it must read */
    size_t want_n;
    char *want = kv_utf8_lossy(s, size, &want_n);
    if (want &&
        (json_string_length(back) != want_n || memcmp(json_string_value(back), want, want_n) != 0))
        abort(); /* a byte lost or changed */
    free(want);
    json_decref(back);
    kv_strbuf_free(&q);
    return 0;
}
