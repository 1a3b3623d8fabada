#include "support/sha256_hex.h"

#include <criterion/criterion.h>

#include "hub/sha256.h"

void tu_sha256_hex(const void *data, size_t n, char hex[65])
{
    lb_sha256 c;
    kv_error err;
    cr_assert_eq(lb_sha256_init(&c, &err), 0, "%s", err.msg);
    lb_sha256_update(&c, data, n);
    lb_sha256_hex(&c, hex);
    lb_sha256_free(&c);
}
