/* A hash map from byte strings to 64-bit integers, for word counts, word ids
 * and jieba's dictionary. Keys are not copied: they point into memory the
 * caller keeps alive for as long as the map is used. */
#ifndef KB_STRMAP_H
#define KB_STRMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct kb_strmap_entry {
    const char *key; /* NULL: empty slot */
    size_t len;
    uint64_t hash;
    int64_t value;
} kb_strmap_entry;

typedef struct kb_strmap {
    kb_strmap_entry *slots;
    size_t cap; /* a power of two, or 0 */
    size_t count;
} kb_strmap;

uint64_t kb_strmap_hash(const char *key, size_t len);

/* The entry for key, or NULL. */
kb_strmap_entry *kb_strmap_find(const kb_strmap *m, const char *key, size_t len);

/* The entry for key, inserted with value `init` when absent (*added = 1).
 * NULL when out of memory. */
kb_strmap_entry *kb_strmap_upsert(kb_strmap *m, const char *key, size_t len, int64_t init,
                                  int *added);

/* Empties the map (keeping its memory unless it is mostly unused). */
void kb_strmap_clear(kb_strmap *m);
void kb_strmap_free(kb_strmap *m);

#endif
