/* kvcore/safetensors: valid files, sharded indexes, and every way a header
 * or file can lie. Errors are one line naming the file (and tensor). */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/file.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "support/testutil.h"

/* Writes DIR/name: u64 header length, header, then data_len bytes. */
static void write_st(const char *dir, const char *name, const char *header, size_t data_len)
{
    char *path = kv_path_join(dir, name);
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    uint64_t n = strlen(header);
    for (int i = 0; i < 8; i++)
        fputc((int)(n >> (8 * i) & 0xff), f);
    fputs(header, f);
    for (size_t i = 0; i < data_len; i++)
        fputc((int)(i & 0xff), f);
    fclose(f);
    free(path);
}

static void write_text(const char *dir, const char *name, const char *text)
{
    char *path = kv_path_join(dir, name);
    FILE *f = fopen(path, "wb");
    fputs(text, f);
    fclose(f);
    free(path);
}

static void assert_one_line(const char *msg)
{
    cr_assert(msg[0] != '\0' && !strchr(msg, '\n'), "not a one-line error: '%s'", msg);
}

/* Opening dir fails with a one-line error containing want. */
static void expect_error(const char *dir, const char *want)
{
    kv_safetensors *st;
    kv_error err;
    cr_assert_neq(kv_safetensors_open(dir, &st, &err), 0, "'%s' was accepted", want);
    assert_one_line(err.msg);
    cr_expect(strstr(err.msg, want), "want '%s' in: %s", want, err.msg);
}

Test(safetensors, reads_a_valid_file)
{
    char *dir = tu_mkdtemp();
    write_st(dir, "model.safetensors",
             "{\"__metadata__\":{\"format\":\"pt\"},"
             "\"b\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[16,28]},"
             "\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
             "\"e\":{\"dtype\":\"F16\",\"shape\":[0],\"data_offsets\":[28,28]}}",
             28);
    kv_safetensors *st;
    kv_error err;
    cr_assert_eq(kv_safetensors_open(dir, &st, &err), 0, "%s", err.msg);
    cr_assert_eq(st->n_tensors, 3);
    const kv_st_tensor *b = kv_safetensors_find(st, "b");
    cr_assert_not_null(b);
    cr_assert_eq(b->dtype, KV_DTYPE_BF16);
    cr_assert_eq(b->n_dims, 2);
    cr_assert_eq(b->shape[1], 3);
    cr_assert_eq(b->nbytes, 12);
    uint8_t buf[12];
    cr_assert_eq(kv_safetensors_read(st, b, buf, &err), 0, "%s", err.msg);
    cr_assert_eq(buf[0], 16, "data starts after the header: byte 16 of the data section");
    /* a piece (the model's loader reads large tensors in pieces on several
     * threads) is the same bytes as the whole tensor's there */
    uint8_t part[5];
    cr_assert_eq(kv_safetensors_read_part(st, b, 7, 5, part, &err), 0, "%s", err.msg);
    cr_assert_arr_eq(part, buf + 7, 5);
    cr_assert_neq(kv_safetensors_read_part(st, b, 8, 5, part, &err), 0, "past the tensor's end");
    assert_one_line(err.msg);
    cr_expect(strstr(err.msg, "outside a tensor of 12"), "%s", err.msg);
    cr_assert_null(kv_safetensors_find(st, "zz"));
    kv_safetensors_free(st);
    tu_rmtree(dir);
    free(dir);
}

Test(safetensors, hostile_headers_are_clear_errors)
{
    struct {
        const char *header;
        size_t data;
        const char *want;
    } cases[] = {
        {"[1,2]", 0, "not a JSON object"},
        {"{\"a\":", 0, "not valid JSON"},
        {"{\"a\":3}", 0, "not an object"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "lacks"},
        {"{\"a\":{\"dtype\":\"Q4\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
         "unknown dtype 'Q4'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "shape[0]"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, "shape[0]"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":3,\"data_offsets\":[0,4]}}", 4, "not an array"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,8]}}", 4,
         "outside the 4 data bytes"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4, "outside"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, "[begin, end]"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4,
         "4 bytes of data for 2 elements"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":["
         "0,4]}}",
         4, "overflows"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
         "9 dimensions"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
         8, "overlap"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
         8, "appears twice"},
        {"{\"\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "empty name"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *dir = tu_mkdtemp();
        write_st(dir, "model.safetensors", cases[i].header, cases[i].data);
        expect_error(dir, cases[i].want);
        expect_error(dir, "model.safetensors");
        tu_rmtree(dir);
        free(dir);
    }
}

Test(safetensors, short_files_and_lying_lengths)
{
    char *dir = tu_mkdtemp();
    write_text(dir, "model.safetensors", "abc");
    expect_error(dir, "truncated");
    /* header length far beyond the file */
    char *path = kv_path_join(dir, "model.safetensors");
    FILE *f = fopen(path, "wb");
    uint8_t len[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f};
    fwrite(len, 1, 8, f);
    fputs("{}", f);
    fclose(f);
    expect_error(dir, "header length");
    free(path);
    tu_rmtree(dir);
    free(dir);
    dir = tu_mkdtemp();
    expect_error(dir, "no model.safetensors or model.safetensors.index.json");
    tu_rmtree(dir);
    free(dir);
}

/* Every truncation of a real model file fails to load, cleanly. */
Test(safetensors, every_truncation_of_a_real_file_is_an_error)
{
    char *src = tu_source("tests/data/models/qwen3-bf16");
    char *file = kv_path_join(src, "model.safetensors");
    size_t len;
    char *data = tu_slurp(file, &len);
    char *dir = tu_mkdtemp();
    const char *copy[] = {"config.json", "generation_config.json"};
    for (int i = 0; i < 2; i++) {
        char *p = kv_path_join(src, copy[i]);
        char *t = tu_slurp(p, NULL);
        write_text(dir, copy[i], t);
        free(t);
        free(p);
    }
    char *dst = kv_path_join(dir, "model.safetensors");
    for (int k = 0; k < 60; k++) {
        size_t cut = k < 40 ? (size_t)k * 97 : len - 1 - (size_t)(k - 40) * 5003;
        FILE *f = fopen(dst, "wb");
        fwrite(data, 1, cut, f);
        fclose(f);
        kv_model *m;
        kv_error err;
        cr_assert_neq(kv_model_load(dir, &m, &err), 0, "a file cut at %zu bytes loaded", cut);
        assert_one_line(err.msg);
        cr_expect(strstr(err.msg, "model.safetensors"), "%s", err.msg);
    }
    free(dst);
    free(data);
    free(file);
    free(src);
    tu_rmtree(dir);
    free(dir);
}

Test(safetensors, sharded_index)
{
    char *dir = tu_mkdtemp();
    write_st(dir, "s1.safetensors",
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
    write_st(dir, "s2.safetensors",
             "{\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8);
    write_text(
        dir, "model.safetensors.index.json",
        "{\"metadata\":{},\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s2.safetensors\"}}");
    kv_safetensors *st;
    kv_error err;
    cr_assert_eq(kv_safetensors_open(dir, &st, &err), 0, "%s", err.msg);
    cr_assert_eq(st->n_files, 2);
    const kv_st_tensor *b = kv_safetensors_find(st, "b");
    cr_assert(b && strstr(st->files[b->file], "s2.safetensors"));
    kv_safetensors_free(st);

    write_text(dir, "model.safetensors.index.json",
               "{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s1.safetensors\"}}");
    expect_error(dir, "tensor 'b' is not in s1.safetensors");
    write_text(dir, "model.safetensors.index.json",
               "{\"weight_map\":{\"a\":\"../s1.safetensors\"}}");
    expect_error(dir, "not a file name in the folder");
    write_text(dir, "model.safetensors.index.json",
               "{\"weight_map\":{\"a\":\"gone.safetensors\"}}");
    expect_error(dir, "gone.safetensors: cannot open");
    write_text(dir, "model.safetensors.index.json", "{\"weight_map\":[]}");
    expect_error(dir, "weight_map");
    write_st(dir, "s2.safetensors",
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
    write_text(dir, "model.safetensors.index.json",
               "{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s2.safetensors\"}}");
    expect_error(dir, "appears twice");
    tu_rmtree(dir);
    free(dir);
}

/* A model folder whose tensors disagree with config.json. */
static void expect_model_error(const char *edit_name, const char *header, size_t data,
                               const char *want)
{
    char *src = tu_source("tests/data/models/qwen3-f32");
    char *dir = tu_mkdtemp();
    const char *copy[] = {"config.json", "model.safetensors"};
    for (int i = 0; i < 2; i++) {
        char *p = kv_path_join(src, copy[i]), *q = kv_path_join(dir, copy[i]);
        size_t len;
        char *t = tu_slurp(p, &len);
        FILE *f = fopen(q, "wb");
        fwrite(t, 1, len, f);
        fclose(f);
        free(t);
        free(p);
        free(q);
    }
    if (edit_name)
        write_st(dir, edit_name, header, data);
    kv_model *m;
    kv_error err;
    cr_assert_neq(kv_model_load(dir, &m, &err), 0, "loaded despite: %s", want);
    assert_one_line(err.msg);
    cr_expect(strstr(err.msg, want), "want '%s' in: %s", want, err.msg);
    tu_rmtree(dir);
    free(dir);
    free(src);
}

Test(safetensors, tensors_must_match_the_config)
{
    expect_model_error("model.safetensors",
                       "{\"model.embed_tokens.weight\":{\"dtype\":\"I64\",\"shape\":[512,64],"
                       "\"data_offsets\":[0,262144]}}",
                       262144, "has dtype I64 (supported: F32, F16, BF16)");
    expect_model_error("model.safetensors",
                       "{\"model.embed_tokens.weight\":{\"dtype\":\"F32\",\"shape\":[64,512],"
                       "\"data_offsets\":[0,131072]}}",
                       131072, "has shape [64, 512], config.json implies [512, 64]");
    expect_model_error("model.safetensors",
                       "{\"model.embed_tokens.weight\":{\"dtype\":\"F32\",\"shape\":[512,64],"
                       "\"data_offsets\":[0,131072]}}",
                       131072, "tensor 'model.norm.weight' is missing");
}
