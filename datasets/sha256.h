/* SHA-256 (FIPS 180-4), for checking downloads against the hub's LFS hashes. */
#ifndef LB_SHA256_H
#define LB_SHA256_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

typedef struct lb_sha256 {
    uint32_t h[8];
    uint64_t total; /* bytes hashed */
    uint8_t block[64];
    size_t fill; /* bytes waiting in block */
} lb_sha256;

void lb_sha256_init(lb_sha256 *c);
void lb_sha256_update(lb_sha256 *c, const void *data, size_t n);
/* Writes the digest as 64 lowercase hex digits and a NUL. */
void lb_sha256_hex(lb_sha256 *c, char hex[65]);

/* The digest of a whole file as hex. */
int lb_sha256_file(const char *path, char hex[65], kv_error *err);

#endif
