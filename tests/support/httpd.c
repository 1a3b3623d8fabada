#include "support/httpd.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

struct httpd {
    int fd;
    pthread_t thread;
    atomic_bool stop;
    httpd_route *routes;
    size_t n_routes;
    char url[64];
};

static void send_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w <= 0)
            return;
        c += w;
        n -= (size_t)w;
    }
}

static void send_head(int fd, int status, const char *reason, const char *extra, size_t len)
{
    char h[1024];
    int n = snprintf(h, sizeof h,
                     "HTTP/1.1 %d %s\r\nContent-Length: %zu\r\nConnection: close\r\n%s\r\n", status,
                     reason, len, extra ? extra : "");
    send_all(fd, h, (size_t)n);
}

/* Copies header `name`'s value from the request into out ("" if absent). */
static void header(const char *req, const char *name, char *out, size_t cap)
{
    out[0] = '\0';
    size_t k = strlen(name);
    for (const char *l = strstr(req, "\r\n"); l; l = strstr(l + 2, "\r\n")) {
        const char *s = l + 2;
        if (strncasecmp(s, name, k) == 0 && s[k] == ':') {
            s += k + 1;
            while (*s == ' ')
                s++;
            size_t n = strcspn(s, "\r\n");
            snprintf(out, cap, "%.*s", (int)n, s);
            return;
        }
    }
}

static void send_file(int fd, httpd_route *r, bool honour_range)
{
    char extra[512] = "";
    if (r->linked_etag)
        snprintf(extra, sizeof extra, "X-Linked-Etag: \"%s\"\r\n", r->linked_etag);
    unsigned long long from;
    if (honour_range && sscanf(r->last_range, "bytes=%llu-", &from) == 1) {
        if (from >= r->len) {
            send_head(fd, 416, "Range Not Satisfiable", extra, 0);
            return;
        }
        size_t m = strlen(extra);
        snprintf(extra + m, sizeof extra - m, "Content-Range: bytes %llu-%zu/%zu\r\n", from,
                 r->len - 1, r->len);
        send_head(fd, 206, "Partial Content", extra, r->len - from);
        send_all(fd, r->body + from, r->len - from);
        return;
    }
    send_head(fd, 200, "OK", extra, r->len);
    send_all(fd, r->body, r->len);
}

static void respond(httpd *s, int fd, const char *req)
{
    char path[512] = "";
    sscanf(req, "GET %511s", path);
    httpd_route *r = NULL;
    for (size_t i = 0; i < s->n_routes && !r; i++)
        if (strcmp(s->routes[i].path, path) == 0)
            r = &s->routes[i];
    if (!r) {
        send_head(fd, 404, "Not Found", NULL, 9);
        send_all(fd, "not found", 9);
        return;
    }
    r->hits++;
    header(req, "Range", r->last_range, sizeof r->last_range);
    header(req, "Authorization", r->last_auth, sizeof r->last_auth);
    char extra[600];
    switch (r->kind) {
    case HTTPD_FILE:
        send_file(fd, r, true);
        break;
    case HTTPD_NO_RANGE:
        send_file(fd, r, false);
        break;
    case HTTPD_REDIRECT:
        snprintf(extra, sizeof extra, "Location: %s\r\n", r->body);
        send_head(fd, 302, "Found", extra, 0);
        break;
    case HTTPD_DROP_ONCE:
        if (r->hits == 1) {
            send_head(fd, 200, "OK", NULL, r->len);
            send_all(fd, r->body, r->len / 2);
        } else {
            send_file(fd, r, true);
        }
        break;
    case HTTPD_AUTH: {
        char want[160];
        snprintf(want, sizeof want, "Bearer %s", r->auth);
        if (strcmp(r->last_auth, want) == 0) {
            send_file(fd, r, true);
        } else {
            send_head(fd, 401, "Unauthorized", NULL, 12);
            send_all(fd, "unauthorized", 12);
        }
        break;
    }
    case HTTPD_FLAKY:
        if (r->hits == 1) {
            send_head(fd, 503, "Service Unavailable", NULL, 4);
            send_all(fd, "busy", 4);
        } else {
            send_file(fd, r, true);
        }
        break;
    }
}

/* Reads the request head (up to the blank line). */
static bool read_request(int fd, char *buf, size_t cap)
{
    size_t n = 0;
    while (n + 1 < cap) {
        ssize_t got = recv(fd, buf + n, cap - 1 - n, 0);
        if (got <= 0)
            return false;
        n += (size_t)got;
        buf[n] = '\0';
        if (strstr(buf, "\r\n\r\n"))
            return true;
    }
    return false;
}

static void *serve(void *arg)
{
    httpd *s = arg;
    while (!atomic_load(&s->stop)) {
        struct pollfd p = {.fd = s->fd, .events = POLLIN};
        if (poll(&p, 1, 50) <= 0)
            continue;
        int c = accept(s->fd, NULL, NULL);
        if (c < 0)
            continue;
        char req[8192];
        if (read_request(c, req, sizeof req))
            respond(s, c, req);
        shutdown(c, SHUT_WR);
        close(c);
    }
    return NULL;
}

httpd *httpd_start(httpd_route *routes, size_t n_routes)
{
    httpd *s = calloc(1, sizeof *s);
    s->routes = routes;
    s->n_routes = n_routes;
    s->fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK); /* tests only ever talk to 127.0.0.1 */
    socklen_t len = sizeof a;
    if (s->fd < 0 || bind(s->fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(s->fd, 16) != 0 ||
        getsockname(s->fd, (struct sockaddr *)&a, &len) != 0) {
        perror("httpd");
        abort();
    }
    snprintf(s->url, sizeof s->url, "http://127.0.0.1:%d", ntohs(a.sin_port));
    pthread_create(&s->thread, NULL, serve, s);
    return s;
}

const char *httpd_url(const httpd *s)
{
    return s->url;
}

void httpd_stop(httpd *s)
{
    atomic_store(&s->stop, true);
    pthread_join(s->thread, NULL);
    close(s->fd);
    free(s);
}
