/* A Hugging Face hub client: files of model and dataset repositories over
 * HTTP(S) with libcurl.
 *
 * A download goes to DEST.part and is renamed to DEST only when it is
 * complete and, where a hash is known, its sha256 matches. An interrupted
 * download resumes from the .part file with an HTTP Range request; a server
 * that ignores the range sends the whole file and the .part is rewritten.
 * Transfers that fail on the way (connection dropped, stalled, HTTP 5xx or
 * 429) are retried with exponential backoff; a host name that does not
 * resolve is final at once (no network, or a wrong HF_ENDPOINT: waiting
 * does not help). The token is sent only in the
 * Authorization header (libcurl drops it on redirects to other hosts, such as
 * the hub's CDN) and never appears in a message.
 */
#ifndef LB_HUB_H
#define LB_HUB_H

#include <stdbool.h>
#include <stdint.h>

#include "util/error.h"

/* Called during a transfer with the bytes of the file so far and its size
 * (0 while unknown); resumed bytes count as done. */
typedef void (*lb_hub_progress_fn)(void *ctx, const char *name, uint64_t done, uint64_t total);

/* Called before each retry: what failed (err's message), the attempt that
 * failed (from 1), the attempts there will be at most, and the wait. */
typedef void (*lb_hub_retry_fn)(void *ctx, const char *why, int attempt, int attempts,
                                double wait_s);

typedef struct lb_hub {
    const char *endpoint; /* "https://huggingface.co", or a mirror ($HF_ENDPOINT) */
    const char *token;    /* $HF_TOKEN, or NULL */
    bool offline;         /* no network: only files already downloaded are found */
    int retries;          /* further attempts after a failed one */
    double backoff_s;     /* wait before the first retry; doubles each time */
    long stall_s;         /* a transfer slower than 1 KiB/s for this long is retried */
    lb_hub_progress_fn progress;
    void *progress_ctx;
    lb_hub_retry_fn on_retry; /* may be NULL */
    void *retry_ctx;
} lb_hub;

/* Defaults, and the environment: HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE=1.
 * The strings point into the environment. */
void lb_hub_init(lb_hub *h);

typedef enum lb_repo_kind {
    LB_REPO_MODEL,
    LB_REPO_DATASET,
} lb_repo_kind;

/* ENDPOINT/[datasets/]REPO/resolve/REVISION/FILE, path segments escaped.
 * malloc'd; NULL when out of memory. */
char *lb_hub_file_url(const lb_hub *h, lb_repo_kind kind, const char *repo, const char *revision,
                      const char *file);

enum {
    LB_HUB_NOT_FOUND = -2, /* HTTP 404: lets callers treat optional files as absent */
};

typedef struct lb_hub_result {
    bool cached;     /* DEST was already there: nothing was transferred */
    bool resumed;    /* a .part file was continued with a Range request */
    bool verified;   /* the sha256 was checked */
    int attempts;    /* HTTP transfers made */
    uint64_t bytes;  /* size of DEST */
    char sha256[65]; /* the hash checked, "" when none was known */
} lb_hub_result;

/* Downloads url to dest (parent folders are created). expect_sha256 (64 hex
 * digits) is checked when given; otherwise the hub's LFS hash (the
 * X-Linked-Etag header) when it sends one. Returns 0, LB_HUB_NOT_FOUND, or
 * -1 with err filled. res may be NULL. */
int lb_hub_download(const lb_hub *h, const char *url, const char *dest, const char *expect_sha256,
                    lb_hub_result *res, kv_error *err);

#endif
