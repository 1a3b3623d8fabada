/* SHA-256 in hex for the hub tests: the checksums their test server
 * announces, and the known vectors of the hub's own lb_sha256. */
#ifndef KB_TEST_SHA256_HEX_H
#define KB_TEST_SHA256_HEX_H

#include <stddef.h>

/* The SHA-256 of data[0..n) by lb_sha256, as 64 lowercase hex digits. */
void tu_sha256_hex(const void *data, size_t n, char hex[65]);

#endif
