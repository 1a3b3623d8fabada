#include "hub/sha256.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int lb_sha256_init(lb_sha256 *c, kv_error *err)
{
    c->ctx = EVP_MD_CTX_new();
    if (!c->ctx || EVP_DigestInit_ex(c->ctx, EVP_sha256(), NULL) != 1) {
        lb_sha256_free(c);
        return kv_fail(err, "cannot start a SHA-256 digest (out of memory)");
    }
    return 0;
}

void lb_sha256_reset(lb_sha256 *c)
{
    /* Re-initialising a context that already holds SHA-256 cannot fail. */
    EVP_DigestInit_ex(c->ctx, EVP_sha256(), NULL);
}

void lb_sha256_update(lb_sha256 *c, const void *data, size_t n)
{
    EVP_DigestUpdate(c->ctx, data, n);
}

int lb_sha256_update_file(lb_sha256 *c, const char *path, kv_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return kv_fail(err, "%s: cannot open: %s", path, strerror(errno));
    unsigned char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        lb_sha256_update(c, buf, n);
    int bad = ferror(f);
    fclose(f);
    if (bad)
        return kv_fail(err, "%s: read error while hashing", path);
    return 0;
}

void lb_sha256_hex(lb_sha256 *c, char hex[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    EVP_DigestFinal_ex(c->ctx, md, &n);
    for (unsigned int i = 0; i < n; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
    lb_sha256_reset(c);
}

void lb_sha256_free(lb_sha256 *c)
{
    EVP_MD_CTX_free(c->ctx);
    c->ctx = NULL;
}
