/* datasets/hub and datasets/sha256: downloads end to end against a local
 * HTTP server (tests/support/httpd.c) on 127.0.0.1, hashed while they arrive. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hub/hub.h"
#include "hub/sha256.h"
#include "support/httpd.h"
#include "support/sha256_hex.h"
#include "support/testutil.h"

/* ---- sha256: FIPS 180-4 example vectors ---------------------------------- */

Test(sha256, known_vectors)
{
    char hex[65];
    tu_sha256_hex("", 0, hex);
    cr_assert_str_eq(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    tu_sha256_hex("abc", 3, hex);
    cr_assert_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    tu_sha256_hex(two, strlen(two), hex);
    cr_assert_str_eq(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    /* A million 'a' fed in uneven pieces exercises the block buffering. */
    lb_sha256 c;
    kv_error err;
    cr_assert_eq(lb_sha256_init(&c, &err), 0, "%s", err.msg);
    char a[997];
    memset(a, 'a', sizeof a);
    size_t left = 1000000;
    for (size_t k = 1; left > 0; k = k % 997 + 1) {
        size_t n = k < left ? k : left;
        lb_sha256_update(&c, a, n);
        left -= n;
    }
    lb_sha256_hex(&c, hex);
    cr_assert_str_eq(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    /* The digest starts over after lb_sha256_hex. */
    lb_sha256_update(&c, "abc", 3);
    lb_sha256_hex(&c, hex);
    cr_assert_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    lb_sha256_free(&c);
}

/* ---- the hub client ------------------------------------------------------------ */

#define BIG (1u << 20)
static char *big; /* 1 MiB of deterministic bytes */
static char big_sha[65];
static const char small[] = "{\"architectures\": [\"Qwen3ForCausalLM\"]}\n";
static const char *wrong_sha = "0000000000000000000000000000000000000000000000000000000000000000";

static httpd_route routes[] = {
    {.path = "/files/small.json", .kind = HTTPD_FILE},
    {.path = "/files/big.bin", .kind = HTTPD_FILE},
    {.path = "/moved/small.json", .kind = HTTPD_REDIRECT, .body = "/files/small.json"},
    {.path = "/drop/big.bin", .kind = HTTPD_DROP_ONCE},
    {.path = "/bad/big.bin", .kind = HTTPD_FILE},
    {.path = "/private/small.json", .kind = HTTPD_AUTH, .auth = "hf_sEcReT123"},
    {.path = "/flaky/small.json", .kind = HTTPD_FLAKY},
    {.path = "/norange/big.bin", .kind = HTTPD_NO_RANGE},
    {.path = "/lfs/big.bin", .kind = HTTPD_FILE},
};
enum { R_SMALL, R_BIG, R_MOVED, R_DROP, R_BAD, R_PRIVATE, R_FLAKY, R_NORANGE, R_LFS };

static httpd *srv;
static char *dir;
static lb_hub hub;

static void setup(void)
{
    big = malloc(BIG);
    unsigned x = 12345;
    for (size_t i = 0; i < BIG; i++) {
        x = x * 1103515245u + 12345u;
        big[i] = (char)(x >> 16);
    }
    tu_sha256_hex(big, BIG, big_sha);
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        bool is_big = strstr(routes[i].path, "big") != NULL;
        if (routes[i].kind != HTTPD_REDIRECT) {
            routes[i].body = is_big ? big : small;
            routes[i].len = is_big ? BIG : strlen(small);
        }
        routes[i].hits = 0;
        routes[i].last_range[0] = routes[i].last_auth[0] = '\0';
    }
    routes[R_BAD].linked_etag = wrong_sha;
    routes[R_LFS].linked_etag = big_sha;
    srv = httpd_start(routes, sizeof routes / sizeof routes[0]);
    dir = tu_mkdtemp();
    memset(&hub, 0, sizeof hub);
    hub.endpoint = httpd_url(srv);
    hub.retries = 3;
    hub.backoff_s = 0.01;
    hub.stall_s = 10;
}

static void teardown(void)
{
    httpd_stop(srv);
    tu_rmtree(dir);
    free(dir);
    free(big);
}

TestSuite(hub, .init = setup, .fini = teardown, .timeout = 60);

static char *url(const char *path)
{
    char *u = NULL;
    cr_assert_neq(asprintf(&u, "%s%s", httpd_url(srv), path), -1);
    return u;
}

static char *in_dir(const char *name)
{
    char *p = NULL;
    cr_assert_neq(asprintf(&p, "%s/%s", dir, name), -1);
    return p;
}

static void assert_file(const char *path, const char *want, size_t n)
{
    size_t len;
    char *got = tu_slurp(path, &len);
    cr_assert_eq(len, n, "%s: %zu bytes, want %zu", path, len, n);
    cr_assert(memcmp(got, want, n) == 0, "%s: content differs", path);
    free(got);
}

static bool exists(const char *path)
{
    return access(path, F_OK) == 0;
}

Test(hub, files_and_a_second_call_is_cached)
{
    char *u = url("/files/small.json"), *d = in_dir("sub/dir/config.json");
    lb_hub_result r;
    kv_error err;
    cr_assert_eq(lb_hub_download(&hub, u, d, NULL, &r, &err), 0, "%s", err.msg);
    assert_file(d, small, strlen(small));
    cr_assert_not(r.cached);
    cr_assert_eq(r.attempts, 1);
    cr_assert_eq(r.bytes, strlen(small));
    cr_assert_not(r.verified, "no hash was known");
    cr_assert_eq(lb_hub_download(&hub, u, d, NULL, &r, &err), 0);
    cr_assert(r.cached);
    cr_assert_eq(routes[R_SMALL].hits, 1, "a file already there is not fetched again");
    char part[600];
    snprintf(part, sizeof part, "%s.part", d);
    cr_assert_not(exists(part));
    free(u);
    free(d);
}

Test(hub, redirect)
{
    char *u = url("/moved/small.json"), *d = in_dir("small.json");
    kv_error err;
    cr_assert_eq(lb_hub_download(&hub, u, d, NULL, NULL, &err), 0, "%s", err.msg);
    assert_file(d, small, strlen(small));
    cr_assert_eq(routes[R_MOVED].hits, 1);
    cr_assert_eq(routes[R_SMALL].hits, 1);
    free(u);
    free(d);
}

/* A .part left by an earlier run is continued with a Range request. */
Test(hub, range_resume_of_a_partial_file)
{
    char *u = url("/files/big.bin"), *d = in_dir("big.bin"), *part = in_dir("big.bin.part");
    FILE *f = fopen(part, "wb");
    fwrite(big, 1, 1000, f);
    fclose(f);
    lb_hub_result r;
    kv_error err;
    cr_assert_eq(lb_hub_download(&hub, u, d, big_sha, &r, &err), 0, "%s", err.msg);
    cr_assert_str_eq(routes[R_BIG].last_range, "bytes=1000-");
    cr_assert(r.resumed);
    cr_assert(r.verified);
    assert_file(d, big, BIG);
    cr_assert_not(exists(part));
    free(u);
    free(d);
    free(part);
}

/* The connection drops halfway: the retry asks for the rest only. */
Test(hub, dropped_connection_resumes)
{
    char *u = url("/drop/big.bin"), *d = in_dir("big.bin");
    lb_hub_result r;
    kv_error err;
    cr_assert_eq(lb_hub_download(&hub, u, d, big_sha, &r, &err), 0, "%s", err.msg);
    cr_assert_eq(routes[R_DROP].hits, 2);
    char want[64];
    snprintf(want, sizeof want, "bytes=%u-", BIG / 2);
    cr_assert_str_eq(routes[R_DROP].last_range, want);
    cr_assert_eq(r.attempts, 2);
    cr_assert(r.resumed);
    assert_file(d, big, BIG);
    free(u);
    free(d);
}

/* A server that ignores Range sends everything: the .part is rewritten. */
Test(hub, server_without_ranges_restarts_the_file)
{
    char *u = url("/norange/big.bin"), *d = in_dir("big.bin"), *part = in_dir("big.bin.part");
    FILE *f = fopen(part, "wb");
    fputs("garbage that is not the start of the file", f);
    fclose(f);
    kv_error err;
    cr_assert_eq(lb_hub_download(&hub, u, d, big_sha, NULL, &err), 0, "%s", err.msg);
    assert_file(d, big, BIG);
    free(u);
    free(d);
    free(part);
}

/* The hash covers the bytes on disk, not only those received: a .part whose
 * start was corrupted since an earlier run is resumed, then caught. */
Test(hub, a_corrupt_partial_file_fails_the_hash_after_resuming)
{
    char *u = url("/lfs/big.bin"), *d = in_dir("big.bin"), *part = in_dir("big.bin.part");
    FILE *f = fopen(part, "wb");
    fwrite(big, 1, 1000, f);
    fputc(big[1000] ^ 1, f);
    fclose(f);
    lb_hub_result r;
    kv_error err;
    cr_assert_eq(lb_hub_download(&hub, u, d, NULL, &r, &err), -1);
    cr_assert_str_eq(routes[R_LFS].last_range, "bytes=1001-");
    cr_assert(strstr(err.msg, "sha256 mismatch"), "%s", err.msg);
    cr_assert_not(exists(d));
    cr_assert_not(exists(part));
    free(u);
    free(d);
    free(part);
}

Test(hub, lfs_hash_from_the_hub_is_checked)
{
    char *u = url("/lfs/big.bin"), *d = in_dir("model.safetensors");
    lb_hub_result r;
    kv_error err;
    cr_assert_eq(lb_hub_download(&hub, u, d, NULL, &r, &err), 0, "%s", err.msg);
    cr_assert(r.verified);
    cr_assert_str_eq(r.sha256, big_sha);
    free(u);
    free(d);
}

Test(hub, wrong_checksum_is_an_error_and_leaves_no_file)
{
    char *u = url("/bad/big.bin"), *d = in_dir("model.safetensors"),
         *part = in_dir("model.safetensors.part");
    kv_error err;
    cr_assert_eq(lb_hub_download(&hub, u, d, NULL, NULL, &err), -1);
    cr_assert(strstr(err.msg, "sha256 mismatch"), "%s", err.msg);
    cr_assert(strstr(err.msg, big_sha), "%s", err.msg);
    cr_assert_not(exists(d));
    cr_assert_not(exists(part));
    /* The caller's hash wins over a good download too. */
    char *u2 = url("/files/small.json");
    cr_assert_eq(lb_hub_download(&hub, u2, d, wrong_sha, NULL, &err), -1);
    cr_assert_not(exists(d));
    free(u);
    free(u2);
    free(d);
    free(part);
}

Test(hub, unauthorized_without_and_with_token)
{
    char *u = url("/private/small.json"), *d = in_dir("small.json");
    kv_error err;
    cr_assert_eq(lb_hub_download(&hub, u, d, NULL, NULL, &err), -1);
    cr_assert(strstr(err.msg, "HTTP 401"), "%s", err.msg);
    cr_assert(strstr(err.msg, "set HF_TOKEN"), "%s", err.msg);
    cr_assert_eq(routes[R_PRIVATE].hits, 1, "a 401 is not retried");
    cr_assert_str_eq(routes[R_PRIVATE].last_auth, "");
    cr_assert_not(exists(d));
    hub.token = "hf_wrong_token";
    cr_assert_eq(lb_hub_download(&hub, u, d, NULL, NULL, &err), -1);
    cr_assert(strstr(err.msg, "refused the token"), "%s", err.msg);
    cr_assert_null(strstr(err.msg, "hf_wrong_token"), "the token must never be printed");
    hub.token = "hf_sEcReT123";
    cr_assert_eq(lb_hub_download(&hub, u, d, NULL, NULL, &err), 0, "%s", err.msg);
    cr_assert_str_eq(routes[R_PRIVATE].last_auth, "Bearer hf_sEcReT123");
    assert_file(d, small, strlen(small));
    free(u);
    free(d);
}

Test(hub, server_errors_are_retried_and_404_is_not_found)
{
    char *u = url("/flaky/small.json"), *d = in_dir("small.json");
    lb_hub_result r;
    kv_error err;
    cr_assert_eq(lb_hub_download(&hub, u, d, NULL, &r, &err), 0, "%s", err.msg);
    cr_assert_eq(r.attempts, 2);
    char *u404 = url("/nothing/here.json"), *d404 = in_dir("here.json");
    cr_assert_eq(lb_hub_download(&hub, u404, d404, NULL, &r, &err), LB_HUB_NOT_FOUND);
    cr_assert(strstr(err.msg, "HTTP 404"), "%s", err.msg);
    cr_assert_not(exists(d404));
    free(u);
    free(d);
    free(u404);
    free(d404);
}

static void count_retry(void *ctx, const char *why, int attempt, int attempts, double wait_s)
{
    int *n = ctx;
    cr_assert(strstr(why, "HTTP 503"), "%s", why);
    cr_assert_eq(attempt, *n + 1);
    cr_assert_eq(attempts, hub.retries + 1);
    cr_assert_gt(wait_s, 0);
    (*n)++;
}

Test(hub, every_retry_is_reported)
{
    int retries = 0;
    hub.on_retry = count_retry;
    hub.retry_ctx = &retries;
    char *u = url("/flaky/small.json"), *d = in_dir("small.json");
    lb_hub_result r;
    kv_error err;
    cr_assert_eq(lb_hub_download(&hub, u, d, NULL, &r, &err), 0, "%s", err.msg);
    cr_assert_eq(r.attempts, 2);
    cr_assert_eq(retries, 1);
    free(u);
    free(d);
}

/* A host name that cannot resolve fails at once: retrying cannot help. The
 * name has a 64-byte label, which no resolver sends a query for (labels are
 * at most 63 bytes), so the test needs no network and touches none. */
Test(hub, an_unresolvable_host_fails_at_once)
{
    char host[80], u[160];
    memset(host, 'a', 64);
    strcpy(host + 64, ".invalid");
    snprintf(u, sizeof u, "http://%s/x.json", host);
    char *d = in_dir("x.json");
    lb_hub_result r;
    kv_error err;
    cr_assert_eq(lb_hub_download(&hub, u, d, NULL, &r, &err), -1);
    cr_assert_eq(r.attempts, 1, "no retry for a name that does not resolve");
    cr_assert(strstr(err.msg, "no network, or a wrong host name"), "%s", err.msg);
    free(d);
}

Test(hub, connection_refused_gives_up_after_the_retries)
{
    hub.endpoint = "http://127.0.0.1:1";
    char *d = in_dir("x.json");
    lb_hub_result r;
    kv_error err;
    cr_assert_eq(lb_hub_download(&hub, "http://127.0.0.1:1/x.json", d, NULL, &r, &err), -1);
    cr_assert_eq(r.attempts, hub.retries + 1);
    cr_assert(strstr(err.msg, "gave up after 4 attempts"), "%s", err.msg);
    free(d);
}

Test(hub, offline_uses_only_what_is_there)
{
    hub.offline = true;
    char *u = url("/files/small.json"), *d = in_dir("small.json");
    kv_error err;
    cr_assert_eq(lb_hub_download(&hub, u, d, NULL, NULL, &err), -1);
    cr_assert(strstr(err.msg, "offline"), "%s", err.msg);
    cr_assert_eq(routes[R_SMALL].hits, 0);
    FILE *f = fopen(d, "wb");
    fputs("x", f);
    fclose(f);
    lb_hub_result r;
    cr_assert_eq(lb_hub_download(&hub, u, d, NULL, &r, &err), 0);
    cr_assert(r.cached);
    cr_assert_eq(routes[R_SMALL].hits, 0);
    free(u);
    free(d);
}

Test(hub, file_urls)
{
    lb_hub h = {.endpoint = "https://hf-mirror.example/"};
    char *u = lb_hub_file_url(&h, LB_REPO_MODEL, "Qwen/Qwen3-0.6B", "main", "config.json");
    cr_assert_str_eq(u, "https://hf-mirror.example/Qwen/Qwen3-0.6B/resolve/main/config.json");
    free(u);
    u = lb_hub_file_url(&h, LB_REPO_DATASET, "THUDM/LongBench", "refs/pr/1", "a b/data.zip");
    cr_assert_str_eq(u, "https://hf-mirror.example/datasets/THUDM/LongBench/resolve/refs%2Fpr%2F1/"
                        "a%20b/data.zip");
    free(u);
}

typedef struct seen {
    int calls;
    uint64_t last_done, last_total, first_done;
} seen;

static void count_progress(void *ctx, const char *name, uint64_t done, uint64_t total)
{
    seen *s = ctx;
    cr_assert_str_eq(name, "big.bin");
    if (s->calls++ == 0)
        s->first_done = done;
    cr_assert_geq(done, s->last_done, "progress never goes back");
    s->last_done = done;
    if (total)
        s->last_total = total;
}

/* Progress counts resumed bytes as done and ends at the file size. */
Test(hub, progress_reports_bytes_of_the_whole_file)
{
    char *u = url("/files/big.bin"), *d = in_dir("big.bin"), *part = in_dir("big.bin.part");
    FILE *f = fopen(part, "wb");
    fwrite(big, 1, 4096, f);
    fclose(f);
    seen s = {0};
    hub.progress = count_progress;
    hub.progress_ctx = &s;
    kv_error err;
    cr_assert_eq(lb_hub_download(&hub, u, d, NULL, NULL, &err), 0, "%s", err.msg);
    cr_assert_gt(s.calls, 0);
    cr_assert_geq(s.first_done, 4096);
    cr_assert_eq(s.last_done, BIG);
    cr_assert_eq(s.last_total, BIG);
    free(u);
    free(d);
    free(part);
}
