/* Fuzz target: the tokenizer (encode, decode, chat rendering) over arbitrary
 * bytes, invalid UTF-8 included, with the toy tokenizer of the tiny models
 * (NFC, the Qwen regex, added tokens, merges).
 *
 * Invariants beyond "no crash, no leak": decode always returns valid UTF-8,
 * and ASCII text (which NFC leaves alone) decodes back to itself. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/chat.h"
#include "fuzz_file.h"
#include "util/file.h"
#include "tokenizer/tokenizer.h"
#include "util/utf8.h"

static kv_tokenizer *tok;

static void release(void)
{
    kv_tokenizer_free(tok);
}

static const kv_tokenizer *toy(void)
{
    if (tok)
        return tok;
    /* KVB_SOURCE (set by meson test) or the tree this binary was built from,
     * so a libFuzzer run works from any folder */
    const char *src = getenv("KVB_SOURCE");
    char *dir = kv_path_join(src ? src : KVB_SOURCE_DIR, "tests/data/tokenizer/toy");
    kv_error err;
    tok = kv_tokenizer_load(dir, &err);
    free(dir);
    if (!tok) {
        fprintf(stderr, "fuzz_tokenizer: %s (set KVB_SOURCE to the source tree)\n", err.msg);
        abort();
    }
    atexit(release);
    return tok;
}

static bool is_ascii(const uint8_t *d, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (d[i] >= 0x80 || d[i] == 0)
            return false;
    return true;
}

static void check_text(const char *s)
{
    if (!s)
        abort(); /* out of memory is not expected here */
    size_t n = strlen(s);
    if (kv_utf8_valid_prefix(s, n) != n)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const kv_tokenizer *t = toy();
    int32_t *ids;
    size_t n;
    kv_error err;
    if (kv_tokenizer_encode(t, (const char *)data, size, &ids, &n, &err) != 0)
        abort(); /* encode accepts any bytes */
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= kv_tokenizer_vocab_size(t))
            abort();
    char *back = kv_tokenizer_decode(t, ids, n, false);
    check_text(back);
    if (is_ascii(data, size) && (strlen(back) != size || memcmp(back, data, size) != 0))
        abort();
    free(back);
    free(ids);

    /* the bytes as ids, most in range, some not */
    size_t k = size / sizeof(int32_t);
    int32_t *raw = malloc((k ? k : 1) * sizeof *raw);
    memcpy(raw, data, k * sizeof *raw);
    for (size_t i = 0; i < k; i++)
        if (i % 4 != 3)
            raw[i] = (int32_t)((uint32_t)raw[i] % 520u);
    for (int skip = 0; skip < 2; skip++) {
        char *s = kv_tokenizer_decode(t, raw, k, skip);
        check_text(s);
        free(s);
    }
    free(raw);

    /* chat rendering of the bytes as a user message */
    char *content = fuzz_text(data, size);
    if (!content)
        return 0;
    kv_chat_message m[] = {{"system", "s", 0}, {"user", content, 0}};
    char *chat = kv_chat_render(t, m, 2, size % 2 == 0, size % 3 == 0, &err);
    if (!chat)
        abort();
    free(chat);
    free(content);
    return 0;
}
