/* A tiny HTTP/1.1 server for the hub tests, on 127.0.0.1 and a port the
 * kernel picks. It runs in a thread of the test process, answers one
 * connection at a time with "Connection: close", and records what it was
 * asked so that tests can check the requests the client made. */
#ifndef KB_TEST_HTTPD_H
#define KB_TEST_HTTPD_H

#include <stddef.h>

typedef enum httpd_kind {
    HTTPD_FILE,      /* 200, or 206 for "Range: bytes=N-" */
    HTTPD_REDIRECT,  /* 302 to `body` (a path on this server) */
    HTTPD_DROP_ONCE, /* first request: full Content-Length, half the body, then close */
    HTTPD_AUTH,      /* 401 unless "Authorization: Bearer <auth>" */
    HTTPD_FLAKY,     /* first request: 503; then a file */
    HTTPD_NO_RANGE,  /* a file, always 200: ignores Range */
} httpd_kind;

typedef struct httpd_route {
    const char *path;
    httpd_kind kind;
    const char *body;
    size_t len;
    const char *linked_etag; /* sent as X-Linked-Etag when non-NULL */
    const char *auth;        /* HTTPD_AUTH: the token wanted */
    /* filled by the server: */
    int hits;
    char last_range[64]; /* the Range header of the last request, "" if none */
    char last_auth[128]; /* the Authorization header of the last request */
} httpd_route;

typedef struct httpd httpd;

/* Serves routes (the array must outlive the server; n_routes entries). */
httpd *httpd_start(httpd_route *routes, size_t n_routes);
/* "http://127.0.0.1:PORT" */
const char *httpd_url(const httpd *s);
void httpd_stop(httpd *s);

#endif
