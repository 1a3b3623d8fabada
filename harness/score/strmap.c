#include "score/strmap.h"

#include <stdlib.h>
#include <string.h>

uint64_t kb_strmap_hash(const char *key, size_t len)
{
    /* FNV-1a with a final mix: keys are short words, and this is fast and good enough. */
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)key[i]) * 0x100000001b3ull;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return h;
}

static kb_strmap_entry *probe(const kb_strmap *m, const char *key, size_t len, uint64_t h)
{
    size_t mask = m->cap - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        kb_strmap_entry *e = &m->slots[i];
        if (!e->key || (e->hash == h && e->len == len && memcmp(e->key, key, len) == 0))
            return e;
    }
}

kb_strmap_entry *kb_strmap_find(const kb_strmap *m, const char *key, size_t len)
{
    if (!m->cap)
        return NULL;
    kb_strmap_entry *e = probe(m, key, len, kb_strmap_hash(key, len));
    return e->key ? e : NULL;
}

static int grow(kb_strmap *m)
{
    size_t cap = m->cap ? m->cap * 2 : 64;
    kb_strmap_entry *slots = calloc(cap, sizeof *slots);
    if (!slots)
        return -1;
    kb_strmap old = *m;
    m->slots = slots;
    m->cap = cap;
    for (size_t i = 0; i < old.cap; i++)
        if (old.slots[i].key)
            *probe(m, old.slots[i].key, old.slots[i].len, old.slots[i].hash) = old.slots[i];
    free(old.slots);
    return 0;
}

kb_strmap_entry *kb_strmap_upsert(kb_strmap *m, const char *key, size_t len, int64_t init,
                                  int *added)
{
    /* Keep the load under 1/2 so probes stay short. */
    if ((m->count + 1) * 2 > m->cap && grow(m) < 0)
        return NULL;
    uint64_t h = kb_strmap_hash(key, len);
    kb_strmap_entry *e = probe(m, key, len, h);
    *added = !e->key;
    if (!e->key) {
        /* A zero-length key still needs a non-NULL pointer to mark the slot used. */
        *e = (kb_strmap_entry){.key = len ? key : "", .len = len, .hash = h, .value = init};
        m->count++;
    }
    return e;
}

void kb_strmap_clear(kb_strmap *m)
{
    /* A map that grew big once (a long summary) and now holds a few words (a
     * short answer) would be memset in full on every clear: give it back. */
    if (m->cap > 1024 && m->count < m->cap / 16) {
        kb_strmap_free(m);
        return;
    }
    if (m->count)
        memset(m->slots, 0, m->cap * sizeof *m->slots);
    m->count = 0;
}

void kb_strmap_free(kb_strmap *m)
{
    free(m->slots);
    *m = (kb_strmap){0};
}
