/* `kvbench fetch` end to end against the local HTTP server (HF_ENDPOINT), and
 * datasets/archive's unzip, including archives that try to escape. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>

#include "hub/archive.h"
#include "support/httpd.h"
#include "support/sha256_hex.h"
#include "support/testutil.h"

TestSuite(fetch, .init = tu_dir_make, .fini = tu_dir_remove, .timeout = 60);
TestSuite(unzip, .init = tu_dir_make, .fini = tu_dir_remove);

/* Writes a zip with the given entries (name, content pairs, NULL-terminated). */
static char *make_zip(const char *name, const char *const *entries)
{
    char *path = tu_at(name);
    int zerr;
    zip_t *z = zip_open(path, ZIP_CREATE | ZIP_TRUNCATE, &zerr);
    cr_assert(z);
    for (size_t i = 0; entries[i]; i += 2) {
        zip_source_t *src = zip_source_buffer(z, entries[i + 1], strlen(entries[i + 1]), 0);
        cr_assert(src);
        cr_assert_geq(zip_file_add(z, entries[i], src, ZIP_FL_ENC_UTF_8), 0, "%s", zip_strerror(z));
    }
    cr_assert_eq(zip_close(z), 0);
    return path;
}

static bool exists(const char *path)
{
    return access(path, F_OK) == 0;
}

Test(unzip, extracts_folders_and_files)
{
    const char *entries[] = {"data/trec.jsonl", "{\"a\": 1}\n", "data/sub/x.txt", "x", NULL};
    char *zip = make_zip("a.zip", entries), *out = tu_at("out");
    kv_error err;
    size_t n;
    cr_assert_eq(lb_unzip(zip, out, &n, &err), 0, "%s", err.msg);
    cr_assert_eq(n, 2);
    char *p = tu_at("out/data/trec.jsonl"), *got = tu_slurp(p, NULL);
    cr_assert_str_eq(got, "{\"a\": 1}\n");
    free(got);
    free(p);
    free(zip);
    free(out);
}

static void expect_refused(const char *evil)
{
    const char *entries[] = {"data/ok.jsonl", "ok", evil, "pwned", NULL};
    char *zip = make_zip("evil.zip", entries), *out = tu_at("out");
    kv_error err;
    cr_assert_eq(lb_unzip(zip, out, NULL, &err), -1, "accepted %s", evil);
    cr_assert(strstr(err.msg, "would be written outside"), "%s", err.msg);
    char *ok = tu_at("out/data/ok.jsonl"), *escaped = tu_at("escaped.txt");
    cr_assert_not(exists(ok), "nothing is extracted from a refused archive");
    cr_assert_not(exists(escaped));
    free(ok);
    free(escaped);
    free(zip);
    free(out);
}

Test(unzip, entries_escaping_the_folder_are_refused)
{
    expect_refused("../escaped.txt");
    expect_refused("data/../../escaped.txt");
    expect_refused("/tmp/kvbench-escaped.txt");
    expect_refused("..\\escaped.txt");
    expect_refused("./data/../x");
    cr_assert_not(exists("/tmp/kvbench-escaped.txt"));
}

Test(unzip, a_planted_symlink_is_not_followed)
{
    char *out = tu_at("out"), *outside = tu_at("outside"), *link = tu_at("out/data");
    mkdir(out, 0777);
    mkdir(outside, 0777);
    cr_assert_eq(symlink(outside, link), 0);
    const char *entries[] = {"data/trec.jsonl", "x", NULL};
    char *zip = make_zip("a.zip", entries);
    kv_error err;
    cr_assert_eq(lb_unzip(zip, out, NULL, &err), -1);
    cr_assert(strstr(err.msg, "is not a folder"), "%s", err.msg);
    char *escaped = tu_at("outside/trec.jsonl");
    cr_assert_not(exists(escaped));
    free(escaped);
    free(zip);
    free(out);
    free(outside);
    free(link);
}

Test(unzip, not_a_zip)
{
    char *p = tu_at("x.zip");
    FILE *f = fopen(p, "wb");
    fputs("this is not a zip archive", f);
    fclose(f);
    kv_error err;
    cr_assert_eq(lb_unzip(p, tu_dir, NULL, &err), -1);
    cr_assert(strstr(err.msg, "not a readable zip archive"), "%s", err.msg);
    free(p);
}

/* ---- kvbench fetch over HTTP ------------------------------------------------------ */

static char *slurp_copy(const char *path, size_t *len)
{
    return tu_slurp(path, len);
}

Test(fetch, longbench_downloads_and_unpacks)
{
    const char *entries[] = {"data/trec.jsonl", "{\"x\": 1}\n", "data/trec_e.jsonl", "{}\n", NULL};
    char *zip = make_zip("served.zip", entries);
    size_t len;
    char *body = slurp_copy(zip, &len);
    httpd_route routes[] = {
        {.path = "/datasets/THUDM/LongBench/resolve/main/data.zip",
         .kind = HTTPD_FILE,
         .body = body,
         .len = len},
    };
    httpd *s = httpd_start(routes, 1);
    setenv("HF_ENDPOINT", httpd_url(s), 1);
    char *out = tu_at("lb");
    tu_result r = tu_kvbench("fetch", "longbench", "--dir", out, NULL);
    cr_assert_eq(r.status, 0, "%s%s", r.out, r.err);
    cr_assert(strstr(r.out, "unpacked 2 files"), "%s", r.out);
    cr_assert_null(strstr(r.err, "ETA"), "no progress bar when stderr is not a terminal");
    cr_assert_null(strchr(r.err, '\r'), "no progress bar when stderr is not a terminal");
    char *jsonl = tu_at("lb/data/trec.jsonl"), *got = tu_slurp(jsonl, NULL);
    cr_assert_str_eq(got, "{\"x\": 1}\n");
    free(got);
    tu_result_free(&r);
    /* Again, offline and with --dir's new spelling (issue 28): the zip is
     * there, nothing is fetched. */
    r = tu_kvbench("fetch", "longbench", "--output", out, "--offline", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "already there"), "%s", r.out);
    cr_assert_eq(routes[0].hits, 1);
    tu_result_free(&r);
    httpd_stop(s);
    unsetenv("HF_ENDPOINT");
    free(jsonl);
    free(out);
    free(body);
    free(zip);
}

Test(fetch, model_with_shards_and_checksums)
{
    static const char config[] = "{\"model_type\": \"qwen3\"}";
    static const char tok[] = "{\"model\": {}}";
    static const char tokcfg[] = "{\"eos_token\": \"<|im_end|>\"}";
    static const char index[] =
        "{\"metadata\": {}, \"weight_map\": {\"a.weight\": \"model-00001-of-00002.safetensors\", "
        "\"b.weight\": \"model-00002-of-00002.safetensors\", "
        "\"c.weight\": \"model-00001-of-00002.safetensors\"}}";
    static const char shard1[] = "SHARD-ONE-BYTES", shard2[] = "SHARD-TWO-BYTES";
    char sha1[65], sha2[65];
    tu_sha256_hex(shard1, strlen(shard1), sha1);
    tu_sha256_hex(shard2, strlen(shard2), sha2);
#define ROUTE(FILE, BODY, SHA)                                                                     \
    {.path = "/org/tiny/resolve/main/" FILE,                                                       \
     .kind = HTTPD_AUTH,                                                                           \
     .body = BODY,                                                                                 \
     .len = sizeof BODY - 1,                                                                       \
     .linked_etag = SHA,                                                                           \
     .auth = "hf_tok_42"}
    httpd_route routes[] = {
        ROUTE("config.json", config, NULL),
        ROUTE("tokenizer.json", tok, NULL),
        ROUTE("tokenizer_config.json", tokcfg, NULL),
        ROUTE("model.safetensors.index.json", index, NULL),
        ROUTE("model-00001-of-00002.safetensors", shard1, sha1),
        ROUTE("model-00002-of-00002.safetensors", shard2, sha2),
    };
    httpd *s = httpd_start(routes, 6);
    setenv("HF_ENDPOINT", httpd_url(s), 1);
    char *out = tu_at("m");

    /* Without a token: a clear message, and the token is never echoed. */
    unsetenv("HF_TOKEN");
    tu_result r = tu_kvbench("fetch", "model", "org/tiny", "--dir", out, NULL);
    cr_assert_eq(r.status, 1);
    cr_assert(strstr(r.err, "set HF_TOKEN"), "%s", r.err);
    tu_result_free(&r);
    setenv("HF_TOKEN", "hf_wrong_777", 1);
    r = tu_kvbench("fetch", "model", "org/tiny", "--dir", out, NULL);
    cr_assert_eq(r.status, 1);
    cr_assert_null(strstr(r.err, "hf_wrong_777"), "token printed: %s", r.err);
    cr_assert_null(strstr(r.out, "hf_wrong_777"), "token printed: %s", r.out);
    tu_result_free(&r);

    setenv("HF_TOKEN", "hf_tok_42", 1);
    r = tu_kvbench("fetch", "model", "org/tiny", "--dir", out, NULL);
    cr_assert_eq(r.status, 0, "%s%s", r.out, r.err);
    cr_assert_null(strstr(r.out, "hf_tok_42"));
    cr_assert(strstr(r.out, "generation_config.json") && strstr(r.out, "optional"), "%s", r.out);
    cr_assert(strstr(r.out, "sha256 ok"), "%s", r.out);
    const char *files[] = {"config.json",
                           "tokenizer.json",
                           "tokenizer_config.json",
                           "model.safetensors.index.json",
                           "model-00001-of-00002.safetensors",
                           "model-00002-of-00002.safetensors"};
    for (int i = 0; i < 6; i++) {
        char *p = tu_at("m/");
        char *q = NULL;
        cr_assert_neq(asprintf(&q, "%s%s", p, files[i]), -1);
        size_t n;
        char *got = tu_slurp(q, &n);
        cr_assert_eq(n, routes[i].len, "%s", files[i]);
        cr_assert(memcmp(got, routes[i].body, n) == 0, "%s", files[i]);
        free(got);
        free(p);
        free(q);
    }
    cr_assert_eq(routes[4].hits, 1, "shard 1 is fetched once per run although listed twice");
    tu_result_free(&r);
    httpd_stop(s);
    unsetenv("HF_ENDPOINT");
    unsetenv("HF_TOKEN");
    free(out);
}

Test(fetch, usage_errors)
{
    tu_result r = tu_kvbench("fetch", "weights", NULL);
    cr_assert_eq(r.status, 2);
    cr_assert(strstr(r.err, "known: longbench, longbench-v2, model"), "%s", r.err);
    tu_result_free(&r);
    r = tu_kvbench("fetch", "model", "no-slash", NULL);
    cr_assert_eq(r.status, 2);
    tu_result_free(&r);
}

/* A transient failure is retried, and the user sees each retry; a host name
 * that does not resolve fails at once (no network: waiting does not help). */
Test(fetch, retries_are_shown_and_an_unresolvable_host_fails_at_once)
{
    static const char config[] = "{\"model_type\": \"qwen3\"}", tok[] = "{\"model\": {}}";
    static const char tokcfg[] = "{\"eos_token\": \"<|im_end|>\"}", weights[] = "WEIGHTS";
    httpd_route routes[] = {
        {.path = "/org/tiny/resolve/main/config.json",
         .kind = HTTPD_FLAKY,
         .body = config,
         .len = sizeof config - 1},
        {.path = "/org/tiny/resolve/main/tokenizer.json",
         .kind = HTTPD_FILE,
         .body = tok,
         .len = sizeof tok - 1},
        {.path = "/org/tiny/resolve/main/tokenizer_config.json",
         .kind = HTTPD_FILE,
         .body = tokcfg,
         .len = sizeof tokcfg - 1},
        {.path = "/org/tiny/resolve/main/model.safetensors",
         .kind = HTTPD_FILE,
         .body = weights,
         .len = sizeof weights - 1},
    };
    httpd *s = httpd_start(routes, 4);
    setenv("HF_ENDPOINT", httpd_url(s), 1);
    unsetenv("HF_TOKEN");
    char *out = tu_at("m");
    tu_result r = tu_kvbench("fetch", "model", "org/tiny", "--dir", out, NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.err, "HTTP 503; attempt 1 of 6 failed, retrying in 1 s\n"), "%s", r.err);
    cr_assert_eq(routes[0].hits, 2);
    tu_result_free(&r);
    httpd_stop(s);

    /* a 64-byte label: no resolver sends a query for it, so no network is touched */
    char endpoint[128];
    memset(endpoint, 0, sizeof endpoint);
    strcpy(endpoint, "http://");
    memset(endpoint + 7, 'a', 64);
    strcat(endpoint, ".invalid");
    setenv("HF_ENDPOINT", endpoint, 1);
    char *out2 = tu_at("m2");
    r = tu_kvbench("fetch", "model", "org/tiny", "--dir", out2, NULL);
    cr_assert_eq(r.status, 1);
    cr_assert(strstr(r.err, "no network, or a wrong host name"), "%s", r.err);
    cr_assert_null(strstr(r.err, "retrying"), "%s", r.err);
    tu_result_free(&r);
    unsetenv("HF_ENDPOINT");
    free(out);
    free(out2);
}

/* `kvbench run` of a matrix naming a hub model fetches it on first use into
 * models/NAME (the fetch code called in the same process, with its report
 * lines) and runs it; the second run finds it there and fetches nothing. */
Test(fetch, a_run_fetches_its_hub_model_on_first_use)
{
    static const char *const names[] = {"config.json", "generation_config.json", "tokenizer.json",
                                        "tokenizer_config.json", "model.safetensors"};
    enum { N = sizeof names / sizeof *names };
    httpd_route routes[N];
    char *bodies[N], paths[N][96];
    for (int i = 0; i < N; i++) {
        char *src = NULL;
        cr_assert_neq(asprintf(&src, "tests/data/models/qwen3-bf16/%s", names[i]), -1);
        char *path = tu_source(src);
        size_t len;
        bodies[i] = tu_slurp(path, &len);
        snprintf(paths[i], sizeof paths[i], "/org/qwen3/resolve/main/%s", names[i]);
        routes[i] = (httpd_route){.path = paths[i], .kind = HTTPD_FILE, .body = bodies[i], .len = len};
        free(path);
        free(src);
    }
    httpd *s = httpd_start(routes, N);
    setenv("HF_ENDPOINT", httpd_url(s), 1);
    cr_assert_eq(chdir(tu_dir), 0); /* models/ is made in the working folder */
    char *data = tu_source("datasets/samples");
    FILE *f = fopen("hub.json", "w");
    fprintf(f,
            "{\"model\": \"org/qwen3\", \"data\": \"%s\", \"limit\": 1, \"max_new_tokens\": 2, "
            "\"threads\": 1, \"tasks\": [\"trec\"]}\n",
            data);
    fclose(f);
    free(data);

    tu_result r = tu_kvbench("run", "hub.json", NULL);
    cr_assert_eq(r.status, 0, "%s%s", r.out, r.err);
    cr_expect(strstr(r.err, "fetching org/qwen3 into models/qwen3"), "%s", r.err);
    cr_expect(strstr(r.out, "model ready in models/qwen3"), "%s", r.out);
    size_t n;
    char *got = tu_slurp("models/qwen3/model.safetensors", &n);
    cr_assert_eq(n, routes[N - 1].len);
    cr_assert(memcmp(got, bodies[N - 1], n) == 0);
    free(got);
    cr_assert_eq(access("results/hub/predictions/full/trec.jsonl", R_OK), 0,
                 "the run went on with the fetched model");
    tu_result_free(&r);

    r = tu_kvbench("run", "hub.json", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_expect_null(strstr(r.err, "fetching"), "%s", r.err);
    cr_expect_eq(routes[N - 1].hits, 1, "the weights were fetched once");
    tu_result_free(&r);
    httpd_stop(s);
    unsetenv("HF_ENDPOINT");
    for (int i = 0; i < N; i++)
        free(bodies[i]);
}
