#include "hub/hub.h"

#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util/file.h"
#include "hub/sha256.h"

void lb_hub_init(lb_hub *h)
{
    memset(h, 0, sizeof *h);
    const char *ep = getenv("HF_ENDPOINT");
    h->endpoint = ep && *ep ? ep : "https://huggingface.co";
    const char *tok = getenv("HF_TOKEN");
    h->token = tok && *tok ? tok : NULL;
    const char *off = getenv("HF_HUB_OFFLINE");
    h->offline = off && (strcmp(off, "1") == 0 || strcasecmp(off, "true") == 0);
    h->retries = 5;
    h->backoff_s = 1.0;
    h->stall_s = 60;
}

/* ---- URLs ---------------------------------------------------------------- */

/* Appends s to out with every byte outside [A-Za-z0-9-._~] percent-escaped,
 * '/' kept when keep_slash. Returns the new end. */
static char *escape_into(char *out, const char *s, bool keep_slash)
{
    static const char hex[] = "0123456789ABCDEF";
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (isalnum(*p) || strchr("-._~", *p) || (keep_slash && *p == '/')) {
            *out++ = (char)*p;
        } else {
            *out++ = '%';
            *out++ = hex[*p >> 4];
            *out++ = hex[*p & 15];
        }
    }
    return out;
}

char *lb_hub_file_url(const lb_hub *h, lb_repo_kind kind, const char *repo, const char *revision,
                      const char *file)
{
    size_t ep = strlen(h->endpoint);
    while (ep > 0 && h->endpoint[ep - 1] == '/')
        ep--;
    size_t n = ep + 3 * (strlen(repo) + strlen(revision) + strlen(file)) + 32;
    char *url = malloc(n);
    if (!url)
        return NULL;
    char *p = url;
    memcpy(p, h->endpoint, ep);
    p += ep;
    if (kind == LB_REPO_DATASET)
        p = stpcpy(p, "/datasets");
    *p++ = '/';
    p = escape_into(p, repo, true);
    p = stpcpy(p, "/resolve/");
    p = escape_into(p, revision, false); /* "refs/pr/1" is one segment in the hub's URLs */
    *p++ = '/';
    p = escape_into(p, file, true);
    *p = '\0';
    return url;
}

/* ---- one transfer ---------------------------------------------------------- */

typedef struct xfer {
    const lb_hub *hub;
    const char *part;      /* DEST.part */
    const char *name;      /* for progress and messages */
    FILE *fp;              /* opened at the first body byte, so failures leave no file */
    uint64_t offset;       /* bytes of .part when the request was sent */
    long status;           /* of the response being received */
    long long range_start; /* from Content-Range, -1 if none */
    uint64_t size;         /* whole file size when known, else 0 */
    char linked_sha[65];   /* X-Linked-Etag: the LFS sha256, kept across redirects */
    lb_sha256 sha;         /* of the .part's bytes, fed as they are written */
    uint64_t hashed;       /* how many bytes of the .part sha has seen */
    bool bad_range;        /* a 206 that does not continue our bytes */
    int io_errno;          /* a failed local write */
} xfer;

static bool is_hex64(const char *s, size_t n)
{
    if (n != 64)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isxdigit((unsigned char)s[i]))
            return false;
    return true;
}

/* "Name: value" with the name compared case-insensitively; the value, trimmed. */
static bool header_value(const char *line, size_t n, const char *name, const char **v, size_t *vn)
{
    size_t k = strlen(name);
    if (n <= k || strncasecmp(line, name, k) != 0 || line[k] != ':')
        return false;
    const char *a = line + k + 1, *b = line + n;
    while (a < b && (*a == ' ' || *a == '\t'))
        a++;
    while (b > a && (b[-1] == '\r' || b[-1] == '\n' || b[-1] == ' '))
        b--;
    *v = a;
    *vn = (size_t)(b - a);
    return true;
}

static size_t on_header(char *line, size_t size, size_t nitems, void *ctx)
{
    xfer *x = ctx;
    size_t n = size * nitems;
    const char *v;
    size_t vn;
    if (n > 5 && memcmp(line, "HTTP/", 5) == 0) { /* a new response (redirects make several) */
        const char *sp = memchr(line, ' ', n);
        x->status = sp ? strtol(sp + 1, NULL, 10) : 0;
        x->range_start = -1;
        x->size = 0;
    } else if (header_value(line, n, "X-Linked-Etag", &v, &vn)) {
        if (vn >= 2 && v[0] == '"' && v[vn - 1] == '"')
            v++, vn -= 2;
        if (is_hex64(v, vn)) {
            memcpy(x->linked_sha, v, 64);
            x->linked_sha[64] = '\0';
            for (int i = 0; i < 64; i++)
                x->linked_sha[i] = (char)tolower((unsigned char)x->linked_sha[i]);
        }
    } else if (header_value(line, n, "Content-Range", &v, &vn)) {
        unsigned long long a, b, total;
        if (sscanf(v, "bytes %llu-%llu/%llu", &a, &b, &total) == 3) {
            x->range_start = (long long)a;
            x->size = total;
        }
    } else if (header_value(line, n, "Content-Length", &v, &vn) && x->status == 200) {
        x->size = strtoull(v, NULL, 10);
    }
    return n;
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *ctx)
{
    xfer *x = ctx;
    size_t n = size * nmemb;
    if (x->status != 200 && x->status != 206)
        return n; /* an error page: not part of the file */
    if (!x->fp) {
        if (x->status == 206 && (x->range_start < 0 || (uint64_t)x->range_start != x->offset)) {
            x->bad_range = true;
            return 0;
        }
        /* 200 is the whole file even if we asked for a range: start over. */
        if (x->status == 200) {
            x->offset = 0;
            lb_sha256_reset(&x->sha);
            x->hashed = 0;
        }
        x->fp = fopen(x->part, x->status == 200 ? "wb" : "ab");
        if (!x->fp) {
            x->io_errno = errno;
            return 0;
        }
    }
    if (fwrite(data, 1, n, x->fp) != n) {
        x->io_errno = errno ? errno : EIO;
        return 0;
    }
    lb_sha256_update(&x->sha, data, n);
    x->hashed += n;
    return n;
}

static int on_progress(void *ctx, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
    (void)ultotal;
    (void)ulnow;
    xfer *x = ctx;
    if (x->hub->progress && (x->status == 200 || x->status == 206))
        x->hub->progress(x->hub->progress_ctx, x->name, x->offset + (uint64_t)dlnow,
                         dltotal > 0 ? x->offset + (uint64_t)dltotal : 0);
    return 0;
}

static uint64_t file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

/* What one attempt came to. */
typedef enum outcome {
    DONE,    /* the .part holds the whole file */
    RETRY,   /* worth another attempt */
    RESTART, /* throw the .part away, then retry */
    FAILED,  /* err says why; no retry helps */
    NOT_FOUND,
} outcome;

static outcome http_failure(const lb_hub *h, long status, const char *url, kv_error *err)
{
    if (status == 404) {
        kv_fail(err, "%s: not found on the hub (HTTP 404)", url);
        return NOT_FOUND;
    }
    if (status == 401 || status == 403) {
        if (h->token)
            kv_fail(err,
                    "%s: the hub refused the token in HF_TOKEN (HTTP %ld): check that it "
                    "can read this repository",
                    url, status);
        else
            kv_fail(err,
                    "%s: the hub wants a login (HTTP %ld): set HF_TOKEN to an access token "
                    "(and accept the repository's licence on its page)",
                    url, status);
        return FAILED;
    }
    if (status == 429 || status >= 500) {
        kv_fail(err, "%s: the server answered HTTP %ld", url, status);
        return RETRY;
    }
    kv_fail(err, "%s: unexpected HTTP %ld", url, status);
    return FAILED;
}

/* Makes x->sha cover exactly the .part's bytes. They normally are (every
 * byte written was fed); a .part left by an earlier run or cut by a failed
 * write is read back once. */
static int sync_hash(xfer *x, kv_error *err)
{
    uint64_t have = file_size(x->part);
    if (x->hashed == have)
        return 0;
    lb_sha256_reset(&x->sha);
    x->hashed = 0;
    if (have > 0 && lb_sha256_update_file(&x->sha, x->part, err) < 0)
        return -1;
    x->hashed = have;
    return 0;
}

static outcome attempt(const lb_hub *h, CURL *c, const char *url, xfer *x, kv_error *err)
{
    if (sync_hash(x, err) < 0)
        return FAILED;
    x->offset = file_size(x->part);
    x->status = 0;
    x->fp = NULL;
    x->bad_range = false;
    x->io_errno = 0;
    char range[32];
    snprintf(range, sizeof range, "%llu-", (unsigned long long)x->offset);
    curl_easy_setopt(c, CURLOPT_RANGE, x->offset ? range : NULL);
    char curl_msg[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, curl_msg);
    CURLcode rc = curl_easy_perform(c);
    bool close_failed = x->fp && fclose(x->fp) != 0;
    x->fp = NULL;
    if (x->io_errno || close_failed) {
        kv_fail(err, "%s: cannot write: %s", x->part, strerror(x->io_errno ? x->io_errno : EIO));
        return FAILED;
    }
    if (x->bad_range) {
        kv_fail(err, "%s: the server sent a range that does not continue the partial file", url);
        return RESTART;
    }
    if (x->status == 416) { /* our range starts at or past the end: the .part is suspect */
        kv_fail(err, "%s: the server refused to resume (HTTP 416)", url);
        return RESTART;
    }
    if (rc == CURLE_COULDNT_RESOLVE_HOST || rc == CURLE_COULDNT_RESOLVE_PROXY) {
        kv_fail(err,
                "%s: %s: no network, or a wrong host name (HF_ENDPOINT, a proxy)? Files "
                "already downloaded are used with --offline",
                url, curl_msg[0] ? curl_msg : curl_easy_strerror(rc));
        return FAILED;
    }
    if (rc != CURLE_OK) {
        kv_fail(err, "%s: %s", url, curl_msg[0] ? curl_msg : curl_easy_strerror(rc));
        return rc == CURLE_UNSUPPORTED_PROTOCOL || rc == CURLE_URL_MALFORMAT ? FAILED : RETRY;
    }
    if (x->status != 200 && x->status != 206)
        return http_failure(h, x->status, url, err);
    uint64_t have = file_size(x->part);
    if (x->size && have != x->size) {
        kv_fail(err, "%s: got %llu of %llu bytes", url, (unsigned long long)have,
                (unsigned long long)x->size);
        return have > x->size ? RESTART : RETRY;
    }
    if (!x->fp && have == 0 && x->status == 200) { /* an empty file: create it */
        FILE *f = fopen(x->part, "wb");
        if (!f || fclose(f) != 0) {
            kv_fail(err, "%s: cannot write: %s", x->part, strerror(errno));
            return FAILED;
        }
    }
    return DONE;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static CURL *new_handle(const lb_hub *h, const char *url, xfer *x, struct curl_slist **headers)
{
    CURL *c = curl_easy_init(); /* initialises libcurl globally on first use */
    if (!c)
        return NULL;
    *headers = NULL;
    if (h->token) {
        char *auth = NULL;
        if (asprintf(&auth, "Authorization: Bearer %s", h->token) < 0) {
            curl_easy_cleanup(c);
            return NULL;
        }
        *headers = curl_slist_append(NULL, auth);
        free(auth);
        if (!*headers) {
            curl_easy_cleanup(c);
            return NULL;
        }
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, *headers);
    }
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "kvbench/0.1 (libcurl)");
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, h->stall_s > 0 ? h->stall_s : 60L);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, x);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    return c;
}

/* Runs attempts until the .part is complete, a failure is final, or the
 * retries are spent. */
static int transfer(const lb_hub *h, const char *url, xfer *x, lb_hub_result *res, kv_error *err)
{
    struct curl_slist *headers;
    CURL *c = new_handle(h, url, x, &headers);
    if (!c)
        return kv_fail(err, "%s: cannot start a transfer (out of memory)", url);
    double wait = h->backoff_s;
    int rc = -1;
    for (int i = 0;; i++) {
        if (file_size(x->part) > 0)
            res->resumed = true;
        res->attempts++;
        outcome o = attempt(h, c, url, x, err);
        if (o == DONE || o == FAILED || o == NOT_FOUND) {
            rc = o == DONE ? 0 : o == NOT_FOUND ? LB_HUB_NOT_FOUND : -1;
            break;
        }
        if (o == RESTART)
            unlink(x->part);
        if (i >= h->retries) {
            char tries[64];
            snprintf(tries, sizeof tries, "gave up after %d attempts", res->attempts);
            kv_fail_prefix(err, tries);
            break;
        }
        if (h->on_retry)
            h->on_retry(h->retry_ctx, err->msg, res->attempts, h->retries + 1, wait);
        sleep_s(wait);
        wait *= 2;
    }
    curl_slist_free_all(headers);
    curl_easy_cleanup(c);
    return rc;
}

/* ---- the whole download -------------------------------------------------------- */

/* The folders above path. */
static int make_parents(const char *path, kv_error *err)
{
    char *dir = strdup(path);
    if (!dir)
        return kv_fail(err, "out of memory");
    char *slash = strrchr(dir, '/');
    int rc = 0;
    if (slash && slash != dir) {
        *slash = '\0';
        rc = kv_mkdirs(dir, err);
    }
    free(dir);
    return rc;
}

static int verify(xfer *x, const char *want, lb_hub_result *res, kv_error *err)
{
    const char *part = x->part;
    if (sync_hash(x, err) < 0)
        return -1;
    char got[65];
    lb_sha256_hex(&x->sha, got);
    if (strcasecmp(got, want) != 0) {
        unlink(part);
        return kv_fail(err,
                       "%s: sha256 mismatch: the file has %s, the hub says %s; the "
                       "download was deleted",
                       part, got, want);
    }
    res->verified = true;
    snprintf(res->sha256, sizeof res->sha256, "%s", want);
    return 0;
}

int lb_hub_download(const lb_hub *h, const char *url, const char *dest, const char *expect_sha256,
                    lb_hub_result *res, kv_error *err)
{
    lb_hub_result local;
    if (!res)
        res = &local;
    memset(res, 0, sizeof *res);
    if (expect_sha256 && !is_hex64(expect_sha256, strlen(expect_sha256)))
        return kv_fail(err, "%s: the expected sha256 must be 64 hex digits", dest);
    if (access(dest, F_OK) == 0) {
        res->cached = true;
        res->bytes = file_size(dest);
        return 0;
    }
    if (h->offline)
        return kv_fail(err,
                       "%s is not downloaded and the hub is offline (--offline or "
                       "HF_HUB_OFFLINE=1)",
                       dest);
    if (make_parents(dest, err) < 0)
        return -1;
    char *part = NULL;
    if (asprintf(&part, "%s.part", dest) < 0)
        return kv_fail(err, "out of memory");
    const char *slash = strrchr(dest, '/');
    xfer x = {.hub = h, .part = part, .name = slash ? slash + 1 : dest};
    if (lb_sha256_init(&x.sha, err) < 0) {
        free(part);
        return -1;
    }
    int rc = transfer(h, url, &x, res, err);
    const char *want = expect_sha256 ? expect_sha256 : x.linked_sha[0] ? x.linked_sha : NULL;
    if (rc == 0 && want)
        rc = verify(&x, want, res, err);
    lb_sha256_free(&x.sha);
    if (rc == 0 && rename(part, dest) != 0)
        rc = kv_fail(err, "cannot rename %s to %s: %s", part, dest, strerror(errno));
    if (rc == 0)
        res->bytes = file_size(dest);
    free(part);
    return rc;
}
