/* kvcore/tokenizer: conformance with Hugging Face tokenizers on the Qwen3
 * corpus (../shared), the toy tokenizer of the tiny test models and a plain
 * byte-level BPE without merges (committed under tests/data/tokenizer), and
 * load-time refusal of features that are not implemented. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "file.h"
#include "testutil.h"
#include "tokenizer.h"

static kv_tokenizer *load_or_die(const char *dir)
{
    kv_error err = {{0}};
    kv_tokenizer *t = kv_tokenizer_load(dir, &err);
    cr_assert(t, "loading %s: %s", dir, err.msg);
    return t;
}

/* The real Qwen3 tokenizer from ../shared, or NULL (the caller skips). */
static kv_tokenizer *qwen3(void)
{
    char *dir = tu_shared("fixtures/qwen3-tokenizer/tokenizer.json");
    if (!dir)
        return NULL;
    *strrchr(dir, '/') = '\0';
    kv_tokenizer *t = load_or_die(dir);
    free(dir);
    return t;
}

#define QWEN3_OR_SKIP(t)                                                                           \
    kv_tokenizer *t = qwen3();                                                                     \
    if (!t)                                                                                        \
    cr_skip_test("fixtures/qwen3-tokenizer missing (../shared absent)")

/* Calls fn(line, ctx) for every JSON line of a file. */
static void each_json_line(const char *path, void (*fn)(const cJSON *, void *), void *ctx)
{
    char *data = tu_slurp(path, NULL);
    for (char *line = strtok(data, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        cr_assert(j, "%s: bad JSON line", path);
        fn(j, ctx);
        cJSON_Delete(j);
    }
    free(data);
}

static int32_t *json_ids(const cJSON *arr, size_t *n)
{
    *n = (size_t)cJSON_GetArraySize(arr);
    int32_t *v = malloc((*n + 1) * sizeof *v);
    size_t i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) v[i++] = (int32_t)e->valueint;
    return v;
}

static int32_t *encode(const kv_tokenizer *t, const char *s, size_t len, size_t *n)
{
    int32_t *ids;
    kv_error err = {{0}};
    cr_assert_eq(kv_tokenizer_encode(t, s, len, &ids, n, &err), 0, "%s", err.msg);
    return ids;
}

static bool same_ids(const int32_t *a, size_t na, const int32_t *b, size_t nb)
{
    return na == nb && (na == 0 || memcmp(a, b, na * sizeof *a) == 0);
}

/* ---- Qwen3 corpus ------------------------------------------------------ */

typedef struct corpus {
    cJSON *texts; /* id -> text */
    const kv_tokenizer *t;
    int checked;
} corpus;

static void collect_text(const cJSON *j, void *ctx)
{
    corpus *c = ctx;
    const cJSON *id = cJSON_GetObjectItem(j, "id"), *text = cJSON_GetObjectItem(j, "text");
    cJSON_AddStringToObject(c->texts, id->valuestring, text->valuestring);
}

static void check_case(const cJSON *j, void *ctx)
{
    corpus *c = ctx;
    const char *id = cJSON_GetObjectItem(j, "id")->valuestring;
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(c->texts, id);
    cr_assert(cJSON_IsString(text), "%s: no text in corpus.jsonl", id);
    size_t n_ref, n;
    int32_t *ref = json_ids(cJSON_GetObjectItem(j, "ids"), &n_ref);
    int32_t *ids = encode(c->t, text->valuestring, strlen(text->valuestring), &n);
    cr_expect(same_ids(ids, n, ref, n_ref), "%s: ids differ from Hugging Face (%zu vs %zu tokens)",
              id, n, n_ref);
    const cJSON *decoded = cJSON_GetObjectItem(j, "decoded");
    const char *want = cJSON_IsString(decoded) ? decoded->valuestring : text->valuestring;
    char *back = kv_tokenizer_decode(c->t, ref, n_ref, false);
    cr_expect_str_eq(back, want, "%s: decode differs", id);
    free(back);
    free(ids);
    free(ref);
    c->checked++;
}

Test(tokenizer, qwen3_corpus_matches_hugging_face)
{
    QWEN3_OR_SKIP(t);
    char *texts = tu_shared("fixtures/tokenizer-cases/corpus.jsonl");
    char *refs = tu_shared("fixtures/tokenizer-cases/corpus_ref.jsonl");
    cr_assert(texts && refs, "fixtures/tokenizer-cases missing next to qwen3-tokenizer");
    corpus c = {cJSON_CreateObject(), t, 0};
    each_json_line(texts, collect_text, &c);
    each_json_line(refs, check_case, &c);
    cr_expect_geq(c.checked, 200, "only %d cases checked", c.checked);
    cJSON_Delete(c.texts);
    free(texts);
    free(refs);
    kv_tokenizer_free(t);
}
