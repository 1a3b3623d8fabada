/* SHA-256 of downloads, from libcrypto (OpenSSL), for checking them against
 * the hub's LFS hashes while the bytes arrive. */
#ifndef LB_SHA256_H
#define LB_SHA256_H

#include <stddef.h>

#include "util/error.h"

struct evp_md_ctx_st; /* OpenSSL's EVP_MD_CTX */

typedef struct lb_sha256 {
    struct evp_md_ctx_st *ctx;
} lb_sha256;

/* Starts a digest; -1 when out of memory. Release it with lb_sha256_free. */
int lb_sha256_init(lb_sha256 *c, kv_error *err);
/* Starts over on the same context. */
void lb_sha256_reset(lb_sha256 *c);
void lb_sha256_update(lb_sha256 *c, const void *data, size_t n);
/* Feeds the whole file at path. */
int lb_sha256_update_file(lb_sha256 *c, const char *path, kv_error *err);
/* Writes the digest as 64 lowercase hex digits and a NUL; the context then
 * starts over. */
void lb_sha256_hex(lb_sha256 *c, char hex[65]);
void lb_sha256_free(lb_sha256 *c);

#endif
