/* kvcore/tokenizer: conformance with Hugging Face tokenizers on the Qwen3
 * corpus (tests/data/tokenizer/cases), the toy tokenizer of the tiny test models and a plain
 * byte-level BPE without merges (committed under tests/data/tokenizer), and
 * load-time refusal of features that are not implemented. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/file.h"
#include "support/testutil.h"
#include "tokenizer/tokenizer.h"

static kv_tokenizer *load_or_die(const char *dir)
{
    kv_error err = {{0}};
    kv_tokenizer *t = kv_tokenizer_load(dir, &err);
    cr_assert(t, "loading %s: %s", dir, err.msg);
    return t;
}

/* The real Qwen3 tokenizer (tests/data/tokenizer/qwen3). */
static kv_tokenizer *qwen3(void)
{
    char *dir = tu_data("tokenizer/qwen3");
    kv_tokenizer *t = load_or_die(dir);
    free(dir);
    return t;
}

/* The toy tokenizer of the tiny test models, committed in the tree. */
static kv_tokenizer *toy_tokenizer(void)
{
    char *dir = tu_source("tests/data/tokenizer/toy");
    kv_tokenizer *t = load_or_die(dir);
    free(dir);
    return t;
}

/* Calls fn(line, ctx) for every JSON line of a file. */
static void each_json_line(const char *path, void (*fn)(const cJSON *, void *), void *ctx)
{
    char *data = tu_slurp(path, NULL), *save;
    for (char *line = strtok_r(data, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
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
    kv_tokenizer *t = qwen3();
    char *texts = tu_data("tokenizer/cases/corpus.jsonl");
    char *refs = tu_data("tokenizer/cases/corpus_ref.jsonl");
    corpus c = {cJSON_CreateObject(), t, 0};
    each_json_line(texts, collect_text, &c);
    each_json_line(refs, check_case, &c);
    cr_expect_geq(c.checked, 200, "only %d cases checked", c.checked);
    cJSON_Delete(c.texts);
    free(texts);
    free(refs);
    kv_tokenizer_free(t);
}

Test(tokenizer, qwen3_vocabulary_and_special_tokens)
{
    kv_tokenizer *t = qwen3();
    cr_expect_eq(kv_tokenizer_vocab_size(t), 151669);
    cr_expect_eq(kv_tokenizer_token_id(t, "<|im_start|>"), 151644);
    cr_expect_eq(kv_tokenizer_token_id(t, "<|im_end|>"), 151645);
    cr_expect_eq(kv_tokenizer_token_id(t, "<think>"), 151667);
    cr_expect_eq(kv_tokenizer_token_id(t, "Hello"), 9707);
    cr_expect_eq(kv_tokenizer_token_id(t, "Ġ"), 220);
    cr_expect_eq(kv_tokenizer_token_id(t, "Ċ"), 198);
    cr_expect_eq(kv_tokenizer_token_id(t, "<|im_end"), -1);
    cr_expect_eq(kv_tokenizer_token_id(t, ""), -1);
    cr_expect(kv_tokenizer_is_special(t, 151645));
    cr_expect(!kv_tokenizer_is_special(t, 151667), "<think> is not special");
    cr_expect(!kv_tokenizer_is_special(t, 9707));
    cr_expect_eq(kv_tokenizer_bos_id(t), -1, "Qwen3 has no BOS");
    cr_expect_eq(kv_tokenizer_eos_id(t), 151645);
    kv_tokenizer_free(t);
}

Test(tokenizer, qwen3_skip_special_drops_only_special_tokens)
{
    kv_tokenizer *t = qwen3();
    const char *text = "<|im_start|>user\n<think>x</think><tool_call><|endoftext|>";
    size_t n;
    int32_t *ids = encode(t, text, strlen(text), &n);
    char *all = kv_tokenizer_decode(t, ids, n, false);
    char *kept = kv_tokenizer_decode(t, ids, n, true);
    cr_expect_str_eq(all, text);
    cr_expect_str_eq(kept, "user\n<think>x</think><tool_call>");
    free(all);
    free(kept);
    free(ids);
    kv_tokenizer_free(t);
}

Test(tokenizer, qwen3_partial_utf8_decodes_to_replacement_characters)
{
    kv_tokenizer *t = qwen3();
    /* "€" is E2 82 AC; its first byte alone, then the two others alone */
    int32_t e2 = kv_tokenizer_token_id(t, "â"), b82 = kv_tokenizer_token_id(t, "Ĥ");
    cr_assert(e2 >= 0 && b82 >= 0);
    int32_t ids[] = {e2, 9707, b82};
    char *s = kv_tokenizer_decode(t, ids, 3, false);
    cr_expect_str_eq(s, "\xEF\xBF\xBDHello\xEF\xBF\xBD");
    free(s);
    int32_t out_of_range[] = {-5, 9707, 1 << 30};
    s = kv_tokenizer_decode(t, out_of_range, 3, false);
    cr_expect_str_eq(s, "Hello", "ids that are not tokens are skipped");
    free(s);
    kv_tokenizer_free(t);
}

Test(tokenizer, invalid_utf8_input_reads_as_replacement_characters)
{
    kv_tokenizer *t = toy_tokenizer();
    size_t n1, n2;
    const char bad[] = "a\xF1\x80\x80\xE1\x80\xC2"
                       "b\x80";
    const char fixed[] = "a\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"
                         "b\xEF\xBF\xBD";
    int32_t *a = encode(t, bad, sizeof bad - 1, &n1);
    int32_t *b = encode(t, fixed, sizeof fixed - 1, &n2);
    cr_expect(same_ids(a, n1, b, n2));
    free(a);
    free(b);
    kv_tokenizer_free(t);
}

Test(tokenizer, long_words_round_trip)
{
    /* A 30,000-byte word takes the heap path of the merge loop (the corpus
     * checks its ids on words up to 900 bytes); every byte must come back. */
    kv_tokenizer *t = toy_tokenizer();
    size_t reps = 10000;
    char *run = malloc(reps * 3 + 1);
    for (size_t i = 0; i < reps; i++)
        memcpy(run + i * 3, "the", 3);
    run[reps * 3] = '\0';
    size_t n;
    int32_t *ids = encode(t, run, reps * 3, &n);
    char *back = kv_tokenizer_decode(t, ids, n, false);
    cr_expect_str_eq(back, run);
    cr_expect_lt(n, reps * 3, "letters merge");
    free(back);
    free(ids);
    free(run);
    kv_tokenizer_free(t);
}

/* ---- the toy tokenizer of the tiny test models ------------------------- */

typedef struct toy {
    const kv_tokenizer *t;
    int checked;
} toy;

static void check_toy_case(const cJSON *j, void *ctx)
{
    toy *c = ctx;
    const char *id = cJSON_GetObjectItem(j, "id")->valuestring;
    const char *text = cJSON_GetObjectItem(j, "text")->valuestring;
    size_t n_ref, n;
    int32_t *ref = json_ids(cJSON_GetObjectItem(j, "ids"), &n_ref);
    int32_t *ids = encode(c->t, text, strlen(text), &n);
    cr_expect(same_ids(ids, n, ref, n_ref), "%s: ids differ from the reference", id);
    char *back = kv_tokenizer_decode(c->t, ids, n, false);
    cr_expect_str_eq(back, cJSON_GetObjectItem(j, "decoded")->valuestring, "%s", id);
    free(back);
    free(ids);
    free(ref);
    c->checked++;
}

Test(tokenizer, toy_tokenizer_matches_reference)
{
    /* tests/data/tokenizer/toy: written by tests/tools/reference/make_tiny_qwen3.py;
     * toy_cases.jsonl: ids from its qwen_tokenizer_ref.py. */
    char *dir = tu_source("tests/data/tokenizer/toy");
    char *cases = tu_source("tests/data/tokenizer/toy_cases.jsonl");
    kv_tokenizer *t = load_or_die(dir);
    cr_expect_eq(kv_tokenizer_vocab_size(t), 503);
    cr_expect_eq(kv_tokenizer_token_id(t, "<|im_end|>"), 498);
    cr_expect_eq(kv_tokenizer_eos_id(t), 498);
    toy c = {t, 0};
    each_json_line(cases, check_toy_case, &c);
    cr_expect_eq(c.checked, 16);
    kv_tokenizer_free(t);
    free(dir);
    free(cases);
}

Test(tokenizer, byte_level_without_merges)
{
    char *dir = tu_source("tests/data/tokenizer/bytes");
    kv_tokenizer *t = load_or_die(dir);
    cr_expect_eq(kv_tokenizer_vocab_size(t), 257);
    const char *text = "Hi <|endoftext|>\xC3\xA9\n";
    size_t n;
    int32_t *ids = encode(t, text, strlen(text), &n);
    /* GPT-2 byte order: printable bytes 0x21.. first, so 'H' is 0x48 - 0x21 */
    int32_t want[] = {0x48 - 0x21,
                      0x69 - 0x21,
                      kv_tokenizer_token_id(t, "Ġ"),
                      256,
                      kv_tokenizer_token_id(t, "Ã"),
                      kv_tokenizer_token_id(t, "©"),
                      kv_tokenizer_token_id(t, "Ċ")};
    cr_expect(same_ids(ids, n, want, sizeof want / sizeof *want), "got %zu ids", n);
    char *back = kv_tokenizer_decode(t, ids, n, false);
    cr_expect_str_eq(back, text);
    free(back);
    back = kv_tokenizer_decode(t, ids, n, true);
    cr_expect_str_eq(back, "Hi \xC3\xA9\n");
    free(back);
    free(ids);
    kv_tokenizer_free(t);
    free(dir);
}

/* ---- random texts against Hugging Face's JS port ----------------------- */

/* tests/data/tokenizer/random_*.jsonl: texts from tests/tools/random_texts.py
 * with ids and decoded text from tests/tools/encode_js.mjs. */
static void check_ref_file(const char *model_dir, const char *rel)
{
    kv_tokenizer *t = load_or_die(model_dir);
    char *path = tu_source(rel);
    toy c = {t, 0};
    each_json_line(path, check_toy_case, &c);
    cr_expect_geq(c.checked, 200, "%s: only %d cases", rel, c.checked);
    free(path);
    kv_tokenizer_free(t);
}

Test(tokenizer, random_texts_match_hugging_face_js_toy_and_bytes)
{
    char *toy_dir = tu_source("tests/data/tokenizer/toy");
    char *bytes_dir = tu_source("tests/data/tokenizer/bytes");
    check_ref_file(toy_dir, "tests/data/tokenizer/random_toy.jsonl");
    check_ref_file(bytes_dir, "tests/data/tokenizer/random_bytes.jsonl");
    free(toy_dir);
    free(bytes_dir);
}

Test(tokenizer, random_texts_match_hugging_face_js_qwen3)
{
    char *dir = tu_data("tokenizer/qwen3");
    check_ref_file(dir, "tests/data/tokenizer/random_qwen3.jsonl");
    free(dir);
}

/* ---- real LongBench prompts -------------------------------------------- */

typedef struct lb_case {
    const kv_tokenizer *t;
    const char *dir; /* tests/data/longbench */
    int checked;
} lb_case;

/* Lines {"id": "TASK-i", "ids"}: the ids of line i of TASK.head3.jsonl's
 * context + "\n" + input, from HF's JS port (tests/tools/encode_js.mjs). */
static void check_longbench_case(const cJSON *j, void *ctx)
{
    lb_case *c = ctx;
    const char *id = cJSON_GetObjectItem(j, "id")->valuestring;
    const char *dash = strrchr(id, '-');
    char path[4096];
    snprintf(path, sizeof path, "%s/%.*s.head3.jsonl", c->dir, (int)(dash - id), id);
    char *data = tu_slurp(path, NULL), *save, *line = strtok_r(data, "\n", &save);
    for (int i = atoi(dash + 1); i > 0 && line; i--)
        line = strtok_r(NULL, "\n", &save);
    cr_assert(line, "%s: no line for %s", path, id);
    cJSON *rec = cJSON_Parse(line);
    const char *context = cJSON_GetObjectItem(rec, "context")->valuestring;
    const char *input = cJSON_GetObjectItem(rec, "input")->valuestring;
    size_t len = strlen(context) + 1 + strlen(input), n, n_ref;
    char *text = malloc(len + 1);
    snprintf(text, len + 1, "%s\n%s", context, input);
    int32_t *ids = encode(c->t, text, len, &n);
    int32_t *ref = json_ids(cJSON_GetObjectItem(j, "ids"), &n_ref);
    cr_expect(same_ids(ids, n, ref, n_ref), "%s: ids differ (%zu vs %zu tokens)", id, n, n_ref);
    free(ref);
    free(ids);
    free(text);
    cJSON_Delete(rec);
    free(data);
    c->checked++;
}

Test(tokenizer, longbench_samples_match_hugging_face_js)
{
    char *dir = tu_data("longbench");
    kv_tokenizer *t = qwen3();
    char *refs = tu_source("tests/data/tokenizer/longbench_qwen3.jsonl");
    lb_case c = {t, dir, 0};
    each_json_line(refs, check_longbench_case, &c);
    cr_expect_eq(c.checked, 9);
    free(refs);
    kv_tokenizer_free(t);
    free(dir);
}

/* ---- one tokenizer, many threads --------------------------------------- */

typedef struct worker {
    const kv_tokenizer *t;
    const char *text;
    int32_t *ids;
    size_t n;
    int rc;
} worker;

static void *encode_many(void *arg)
{
    worker *w = arg;
    kv_error err;
    for (int i = 0; i < 20 && w->rc == 0; i++) {
        free(w->ids);
        w->rc = kv_tokenizer_encode(w->t, w->text, strlen(w->text), &w->ids, &w->n, &err);
    }
    return NULL;
}

Test(tokenizer, concurrent_encodes_agree)
{
    /* The engine and runner may encode on several threads with one loaded
     * tokenizer: encode keeps its state per call. */
    char *dir = tu_source("tests/data/tokenizer/toy");
    kv_tokenizer *t = load_or_die(dir);
    const char *text = "It's fine, we'll see <|im_end|> Caf\xC3\xA9 2025-04-29\n\n  x";
    size_t n;
    int32_t *want = encode(t, text, strlen(text), &n);
    pthread_t th[4];
    worker w[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (worker){t, text, NULL, 0, 0};
        pthread_create(&th[i], NULL, encode_many, &w[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        cr_expect_eq(w[i].rc, 0);
        cr_expect(same_ids(w[i].ids, w[i].n, want, n), "thread %d", i);
        free(w[i].ids);
    }
    free(want);
    kv_tokenizer_free(t);
    free(dir);
}

static char *toy_with(const char *key, const char *json_value);

/* ---- add_special_tokens=True ------------------------------------------ */

Test(tokenizer, template_processing_adds_its_tokens_only_when_asked)
{
    /* Llama-3 style: BOS before the sequence (and here an EOS after it). */
    char *dir = toy_with(
        "post_processor",
        "{\"type\": \"Sequence\", \"processors\": [{\"type\": \"ByteLevel\"}, {\"type\": "
        "\"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<|endoftext|>\", "
        "\"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}, {\"SpecialToken\": "
        "{\"id\": \"<|im_end|>\", \"type_id\": 0}}], \"special_tokens\": {\"<|endoftext|>\": "
        "{\"id\": \"<|endoftext|>\", \"ids\": [496], \"tokens\": [\"<|endoftext|>\"]}, "
        "\"<|im_end|>\": {\"id\": \"<|im_end|>\", \"ids\": [498], \"tokens\": "
        "[\"<|im_end|>\"]}}}]}");
    kv_tokenizer *t = load_or_die(dir);
    size_t n;
    int32_t *ids = encode(t, "The", 3, &n);
    int32_t plain[] = {275};
    cr_expect(same_ids(ids, n, plain, 1), "encode adds nothing");
    free(ids);
    kv_error err = {{0}};
    cr_assert_eq(kv_tokenizer_encode_special(t, "The", 3, &ids, &n, &err), 0, "%s", err.msg);
    int32_t special[] = {496, 275, 498};
    cr_expect(same_ids(ids, n, special, 3), "got %zu ids", n);
    free(ids);
    kv_tokenizer_free(t);
    tu_rmtree(dir);
    free(dir);
}

Test(tokenizer, qwen3_adds_no_special_tokens)
{
    kv_tokenizer *t = qwen3();
    size_t n1, n2;
    kv_error err = {{0}};
    int32_t *a = encode(t, "Hello world", 11, &n1), *b;
    cr_assert_eq(kv_tokenizer_encode_special(t, "Hello world", 11, &b, &n2, &err), 0);
    cr_expect(same_ids(a, n1, b, n2), "Qwen3 has no BOS or EOS");
    free(a);
    free(b);
    kv_tokenizer_free(t);
}

Test(tokenizer, regex_beyond_the_jit_stack_falls_back_to_the_interpreter)
{
    /* One match over 400 kB that backtracks through every character: more
     * than PCRE2's JIT stack holds. */
    char *dir = toy_with("pre_tokenizer",
                         "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", "
                         "\"pattern\": {\"Regex\": \"(?:a|b(?=a|b|c))+c\"}, \"behavior\": "
                         "\"Isolated\", \"invert\": false}, {\"type\": \"ByteLevel\", "
                         "\"use_regex\": false}]}");
    kv_tokenizer *t = load_or_die(dir);
    size_t len = 400001, n;
    char *text = malloc(len + 1);
    for (size_t i = 0; i < len - 1; i++)
        text[i] = i % 2 ? 'b' : 'a';
    text[len - 1] = 'c';
    text[len] = '\0';
    int32_t *ids = encode(t, text, len, &n);
    char *back = kv_tokenizer_decode(t, ids, n, false);
    cr_expect_str_eq(back, text);
    free(back);
    free(ids);
    free(text);
    kv_tokenizer_free(t);
    tu_rmtree(dir);
    free(dir);
}

/* ---- refusing what is not implemented ---------------------------------- */

/* Writes the toy tokenizer.json with one part replaced into a temporary
 * folder and returns the load error. */
/* A temporary folder with the toy tokenizer.json where key ("model.type":
 * one level of nesting) is replaced by json_value. */
static char *toy_with(const char *key, const char *json_value)
{
    char *src = tu_source("tests/data/tokenizer/toy/tokenizer.json");
    char *text = tu_slurp(src, NULL);
    cJSON *root = cJSON_Parse(text);
    cJSON *v = cJSON_Parse(json_value);
    cr_assert(root && v);
    char parent[64] = "";
    const char *dot = strchr(key, '.'), *leaf = dot ? dot + 1 : key;
    if (dot)
        snprintf(parent, sizeof parent, "%.*s", (int)(dot - key), key);
    cJSON *at = dot ? cJSON_GetObjectItem(root, parent) : root;
    cJSON_ReplaceItemInObject(at, leaf, v);
    char *dir = tu_mkdtemp(), *out = kv_path_join(dir, "tokenizer.json");
    char *printed = cJSON_PrintUnformatted(root);
    FILE *f = fopen(out, "w");
    fputs(printed, f);
    fclose(f);
    free(printed);
    free(out);
    cJSON_Delete(root);
    free(text);
    free(src);
    return dir;
}

/* The load error of the toy tokenizer with key replaced by json_value. */
static char *load_error_with(const char *key, const char *json_value)
{
    char *dir = toy_with(key, json_value);
    kv_error err = {{0}};
    kv_tokenizer *t = kv_tokenizer_load(dir, &err);
    cr_expect_null(t, "a tokenizer with %s = %s must not load", key, json_value);
    kv_tokenizer_free(t);
    tu_rmtree(dir);
    free(dir);
    return strdup(err.msg);
}

#define EXPECT_REFUSED(key, value, words)                                                          \
    do {                                                                                           \
        char *msg = load_error_with(key, value);                                                   \
        cr_expect(strstr(msg, words), "%s = %s: error \"%s\" should name %s", key, value, msg,     \
                  words);                                                                          \
        free(msg);                                                                                 \
    } while (0)

Test(tokenizer, unsupported_features_are_load_errors_that_name_them)
{
    EXPECT_REFUSED("normalizer", "{\"type\": \"Lowercase\"}", "normalizer \"Lowercase\"");
    EXPECT_REFUSED("pre_tokenizer", "{\"type\": \"Metaspace\"}", "pre_tokenizer \"Metaspace\"");
    EXPECT_REFUSED("pre_tokenizer",
                   "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"a\"}, \"behavior\": "
                   "\"Removed\", \"invert\": false}",
                   "behavior \"Removed\"");
    EXPECT_REFUSED("pre_tokenizer",
                   "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"(?i:[a-z])\"}, \"behavior\": "
                   "\"Isolated\", \"invert\": false}",
                   "(?i:...)");
    EXPECT_REFUSED("pre_tokenizer",
                   "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, \"behavior\": "
                   "\"Isolated\", \"invert\": false}",
                   "does not compile");
    EXPECT_REFUSED("pre_tokenizer", "null", "no ByteLevel");
    EXPECT_REFUSED("pre_tokenizer",
                   "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"ByteLevel\", "
                   "\"use_regex\": false}, {\"type\": \"Split\", \"pattern\": {\"String\": \" \"}, "
                   "\"behavior\": \"Isolated\"}]}",
                   "Split step after ByteLevel");
    EXPECT_REFUSED("decoder", "{\"type\": \"WordPiece\"}", "decoder \"WordPiece\"");
    EXPECT_REFUSED("post_processor", "{\"type\": \"BertProcessing\"}", "BertProcessing");
    EXPECT_REFUSED("truncation", "{\"max_length\": 8}", "truncation");
    EXPECT_REFUSED("post_processor",
                   "{\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": "
                   "{\"id\": \"<s>\"}}, {\"Sequence\": {\"id\": \"A\"}}], \"special_tokens\": {}}",
                   "special token \"<s>\" has no ids");
    EXPECT_REFUSED("post_processor",
                   "{\"type\": \"TemplateProcessing\", \"single\": [{\"Sequence\": {\"id\": "
                   "\"A\"}}, {\"Sequence\": {\"id\": \"B\"}}]}",
                   "one $A");
    EXPECT_REFUSED("post_processor",
                   "{\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": "
                   "{\"id\": \"<s>\"}}, {\"Sequence\": {\"id\": \"A\"}}], \"special_tokens\": "
                   "{\"<s>\": {\"ids\": [90000]}}}",
                   "id 90000 is not a token");
    EXPECT_REFUSED("model.type", "\"WordPiece\"", "model type \"WordPiece\"");
    EXPECT_REFUSED("model.dropout", "0.1", "dropout");
    EXPECT_REFUSED("model.continuing_subword_prefix", "\"##\"", "continuing_subword_prefix");
    EXPECT_REFUSED("model.merges", "[\"a b c\"]", "merges[0]");
    EXPECT_REFUSED("model.merges", "[[\"a\", \"zz\"]]", "not in the vocabulary");
    EXPECT_REFUSED("added_tokens",
                   "[{\"id\": 600, \"content\": \"<x>\", \"lstrip\": true, \"special\": true}]",
                   "lstrip");
}

/* Memory follows the largest id, so ids are checked against the size of the
 * vocabulary before anything is allocated for them: a tokenizer.json with one
 * id of 10^9 (the toy has 496 vocab entries and 7 added tokens) is an error
 * naming the token, at once, not gigabytes of tables. */
Test(tokenizer, ids_beyond_the_vocabulary_size_are_refused)
{
    char *src = tu_source("tests/data/tokenizer/toy/tokenizer.json");
    char *text = tu_slurp(src, NULL);
    cJSON *root = cJSON_Parse(text);
    cJSON *first = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "model"), "vocab")->child;
    cJSON_SetNumberValue(first, 1e9);
    char *dir = tu_mkdtemp(), *out = kv_path_join(dir, "tokenizer.json");
    char *printed = cJSON_PrintUnformatted(root);
    FILE *f = fopen(out, "w");
    fputs(printed, f);
    fclose(f);
    kv_error err = {{0}};
    cr_expect_null(kv_tokenizer_load(dir, &err));
    char want[256];
    snprintf(want, sizeof want,
             "token \"%s\" has id 1000000000, but the vocabulary has 503 tokens (vocab and "
             "added_tokens), so ids must be below 503",
             first->string);
    cr_expect(strstr(err.msg, want), "%s", err.msg);
    EXPECT_REFUSED("added_tokens",
                   "[{\"id\": 1000000000, \"content\": \"<x>\", \"special\": true}]",
                   "added token \"<x>\" has id 1000000000, but the vocabulary has 497 tokens");
    tu_rmtree(dir);
    free(printed);
    free(out);
    free(dir);
    cJSON_Delete(root);
    free(text);
    free(src);
}

Test(tokenizer, byte_level_vocabulary_needs_every_byte)
{
    char *dir = tu_mkdtemp(), *path = kv_path_join(dir, "tokenizer.json");
    FILE *f = fopen(path, "w");
    fputs("{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"decoder\": {\"type\": "
          "\"ByteLevel\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}",
          f);
    fclose(f);
    kv_error err = {{0}};
    cr_expect_null(kv_tokenizer_load(dir, &err));
    cr_expect(strstr(err.msg, "byte 0x00 has no token"), "%s", err.msg);
    tu_rmtree(dir);
    free(path);
    free(dir);
}

/* The GPT-2 code point that stands for byte b. */
static unsigned byte_cp(int b)
{
    int extra = 0;
    for (int x = 0; x < b; x++)
        extra += !((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE));
    bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    return printable ? (unsigned)b : 0x100u + (unsigned)extra;
}

Test(tokenizer, json_escapes_and_string_merges)
{
    /* Every vocab key written as a \u escape, a merge in "a b" form and an
     * added token given as a surrogate pair: the scanner must read them as
     * the raw characters. */
    char *dir = tu_mkdtemp(), *path = kv_path_join(dir, "tokenizer.json");
    FILE *f = fopen(path, "w");
    fputs("{\"added_tokens\": [{\"id\": 257, \"content\": \"\\ud83d\\ude00\", \"special\": "
          "false}],\n \"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"decoder\": {\"type\": "
          "\"ByteLevel\"},\n \"model\": {\"merges\": [\"\\u0120 a\"], \"vocab\": {",
          f);
    for (int b = 0; b < 256; b++)
        fprintf(f, "\"\\u%04x\": %d, ", byte_cp(b), b);
    fputs("\"\\u0120\\u0061\": 256}}}", f);
    fclose(f);
    kv_tokenizer *t = load_or_die(dir);
    size_t n;
    const char text[] = " a\xF0\x9F\x98\x80 b";
    int32_t *ids = encode(t, text, sizeof text - 1, &n);
    int32_t want[] = {256, 257, ' ', 'b'}; /* this vocab gives byte b the id b */
    cr_expect(same_ids(ids, n, want, 4), "got %zu ids", n);
    cr_expect_eq(kv_tokenizer_token_id(t, "\xC4\xA0"
                                          "a"),
                 256, "\"Ġa\" is the merged token");
    free(ids);
    kv_tokenizer_free(t);
    tu_rmtree(dir);
    free(path);
    free(dir);
}

Test(tokenizer, missing_or_broken_files_are_errors_naming_the_file)
{
    kv_error err = {{0}};
    cr_expect_null(kv_tokenizer_load("/nonexistent/model", &err));
    cr_expect(strstr(err.msg, "/nonexistent/model/tokenizer.json"), "%s", err.msg);
    char *dir = tu_mkdtemp(), *path = kv_path_join(dir, "tokenizer.json");
    FILE *f = fopen(path, "w");
    fputs("{\"model\": ", f);
    fclose(f);
    cr_expect_null(kv_tokenizer_load(dir, &err));
    cr_expect(strstr(err.msg, "not valid JSON") && strstr(err.msg, path), "%s", err.msg);
    tu_rmtree(dir);
    free(path);
    free(dir);
}
