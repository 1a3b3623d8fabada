#include "matrix/hash.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/file.h"

/* A multiply-rotate mix over 8-byte little-endian words: several GB/s, so
 * hashing a 1.5 GB model costs well under a second of disk-bound time. */
static const uint64_t P1 = 0x9E3779B185EBCA87ULL;
static const uint64_t P2 = 0xC2B2AE3D27D4EB4FULL;

static uint64_t rotl(uint64_t x, int r)
{
    return (x << r) | (x >> (64 - r));
}

static uint64_t load_le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint64_t mix_word(uint64_t h, uint64_t w)
{
    h ^= rotl(w * P2, 31) * P1;
    return rotl(h, 27) * P1 + P2;
}

void kb_hash_init(kb_hash *s)
{
    memset(s, 0, sizeof *s);
    s->h = 0x27D4EB2F165667C5ULL;
}

void kb_hash_update(kb_hash *s, const void *data, size_t n)
{
    const unsigned char *p = data;
    s->len += n;
    while (n > 0 && s->n_tail > 0 && s->n_tail < 8) {
        s->tail[s->n_tail++] = *p++;
        n--;
        if (s->n_tail == 8) {
            s->h = mix_word(s->h, load_le64(s->tail));
            s->n_tail = 0;
        }
    }
    for (; n >= 8; p += 8, n -= 8)
        s->h = mix_word(s->h, load_le64(p));
    for (; n > 0; n--)
        s->tail[s->n_tail++] = *p++;
}

uint64_t kb_hash_final(const kb_hash *s)
{
    uint64_t h = s->h;
    unsigned char last[8] = {0};
    memcpy(last, s->tail, s->n_tail);
    h = mix_word(h, load_le64(last));
    h = mix_word(h, s->len);
    /* final avalanche so that nearby inputs give unrelated hashes */
    h ^= h >> 33;
    h *= P2;
    h ^= h >> 29;
    h *= P1;
    h ^= h >> 32;
    return h;
}

uint64_t kb_hash_bytes(const void *data, size_t n)
{
    kb_hash s;
    kb_hash_init(&s);
    kb_hash_update(&s, data, n);
    return kb_hash_final(&s);
}

void kb_hash_hex(uint64_t h, char out[17])
{
    snprintf(out, 17, "%016llx", (unsigned long long)h);
}

static int hashed_file_name(const char *name)
{
    size_t n = strlen(name);
    static const char *const exact[] = {"config.json", "tokenizer.json", "tokenizer_config.json",
                                        "generation_config.json", NULL};
    for (int i = 0; exact[i]; i++)
        if (strcmp(name, exact[i]) == 0)
            return 1;
    return n > 12 && strcmp(name + n - 12, ".safetensors") == 0;
}

static int hash_one_file(kb_hash *s, const char *dir, const char *name, kv_error *err)
{
    char *path = kv_path_join(dir, name);
    if (!path)
        return kv_fail(err, "out of memory");
    FILE *f = fopen(path, "rb");
    if (!f) {
        kv_fail(err, "%s: %s", path, strerror(errno));
        free(path);
        return -1;
    }
    enum { CHUNK = 1 << 20 };
    unsigned char *buf = malloc(CHUNK);
    if (!buf) {
        fclose(f);
        free(path);
        return kv_fail(err, "out of memory");
    }
    kb_hash_update(s, name, strlen(name) + 1);
    size_t got;
    uint64_t size = 0;
    kb_hash body;
    kb_hash_init(&body);
    while ((got = fread(buf, 1, CHUNK, f)) > 0) {
        kb_hash_update(&body, buf, got);
        size += got;
    }
    int bad = ferror(f);
    fclose(f);
    free(buf);
    if (bad) {
        kv_fail(err, "%s: read error", path);
        free(path);
        return -1;
    }
    free(path);
    uint64_t parts[2] = {size, kb_hash_final(&body)};
    kb_hash_update(s, parts, sizeof parts);
    return 0;
}

int kb_hash_model(const char *dir, char out[17], kv_error *err)
{
    char **names;
    size_t all;
    if (kv_dir_list(dir, NULL, &names, &all, err) < 0)
        return -1;
    size_t n = 0; /* the hashed files, kept in name order at the front */
    for (size_t i = 0; i < all; i++) {
        char *name = names[i];
        names[i] = NULL;
        if (hashed_file_name(name))
            names[n++] = name;
        else
            free(name);
    }
    int rc = 0;
    if (n == 0)
        rc = kv_fail(err, "%s: no config.json or *.safetensors to hash: is this a model folder?",
                     dir);
    if (rc == 0) {
        kb_hash s;
        kb_hash_init(&s);
        for (size_t i = 0; i < n && rc == 0; i++)
            rc = hash_one_file(&s, dir, names[i], err);
        if (rc == 0)
            kb_hash_hex(kb_hash_final(&s), out);
    }
    kv_names_free(names, n);
    return rc;
}
