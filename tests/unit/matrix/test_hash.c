/* Content hashes: streaming equals one-shot, fixed values never change (old
 * run.json files must keep matching), model hashes see every byte of the
 * model files and nothing else. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "matrix/hash.h"
#include "support/testutil.h"

Test(hash, streaming_equals_one_shot_at_any_split)
{
    unsigned char buf[1000];
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (unsigned char)(i * 131 + 7);
    for (size_t n = 0; n <= 40; n++) {
        uint64_t whole = kb_hash_bytes(buf, n);
        for (size_t cut = 0; cut <= n; cut++) {
            kb_hash s;
            kb_hash_init(&s);
            kb_hash_update(&s, buf, cut);
            kb_hash_update(&s, buf + cut, n - cut);
            cr_assert_eq(kb_hash_final(&s), whole, "n %zu cut %zu", n, cut);
        }
    }
    /* length is part of the hash: trailing zero bytes change it */
    cr_assert_neq(kb_hash_bytes("a", 1), kb_hash_bytes("a\0", 2));
}

Test(hash, values_are_frozen)
{
    /* If this fails, the function changed: every stored config and model hash
     * would stop matching. Don't update these numbers; restore the function. */
    char hex[17];
    kb_hash_hex(kb_hash_bytes("", 0), hex);
    cr_assert_str_eq(hex, "f695abbace267438");
    kb_hash_hex(kb_hash_bytes("full", 4), hex);
    cr_assert_str_eq(hex, "954e730438dac901");
}

static void put(const char *dir, const char *name, const char *text)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

Test(hash, model_hash_covers_model_files_only)
{
    char *dir = tu_mkdtemp();
    put(dir, "config.json", "{\"model_type\": \"qwen3\"}");
    put(dir, "model.safetensors", "weights-1");
    char a[17], b[17], c[17], d[17];
    kv_error err;
    cr_assert_eq(kb_hash_model(dir, a, &err), 0, "%s", err.msg);
    put(dir, "README.md", "not part of the model");
    cr_assert_eq(kb_hash_model(dir, b, &err), 0);
    cr_assert_str_eq(a, b, "other files do not count");
    put(dir, "model.safetensors", "weights-2");
    cr_assert_eq(kb_hash_model(dir, c, &err), 0);
    cr_assert_str_neq(a, c, "a changed weight changes the hash");
    put(dir, "tokenizer.json", "{}");
    cr_assert_eq(kb_hash_model(dir, d, &err), 0);
    cr_assert_str_neq(c, d, "the tokenizer is part of the model");
    tu_rmtree(dir);
    free(dir);
    cr_assert_lt(kb_hash_model("/nonexistent/model", a, &err), 0);
    cr_assert(strstr(err.msg, "/nonexistent/model: cannot open the folder"), "%s", err.msg);
}
