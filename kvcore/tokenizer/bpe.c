#include "tokenizer/bpe.h"
#include "util/vec.h"

#include <stdlib.h>
#include <string.h>

#define NO_RANK UINT32_MAX
#define ABSENT  SIZE_MAX

/* Words up to this many bytes merge by scanning an array (fast for the short
 * words of ordinary text); longer ones use a heap so that a 100k-byte run of
 * letters costs n log n rather than n^2. Both apply the lowest (rank,
 * position) pair first, which is Hugging Face's order. */
#define SCAN_MAX 48

typedef struct merge_slot {
    uint64_t key; /* a << 32 | b; EMPTY_KEY when unused */
    uint32_t rank;
    int32_t merged;
} merge_slot;

#define EMPTY_KEY UINT64_MAX

/* Where the bytes of one token live: arena + off, len bytes (off ABSENT: no
 * token has this id). */
typedef struct tok_ref {
    size_t off;
    uint32_t len;
} tok_ref;

/* A slot of the bytes -> id table; the hash is kept so that a probe touches
 * the token's bytes only when it is almost surely the one. */
typedef struct str_slot {
    uint32_t hash;
    int32_t id; /* -1: empty */
} str_slot;

struct kv_bpe {
    char *arena;
    size_t arena_n, arena_cap;
    tok_ref *tok; /* id -> bytes */
    int32_t id_cap, id_end;
    str_slot *slot; /* bytes -> id, open addressing */
    size_t mask, count;
    /* (a, b) -> merge */
    merge_slot *merge;
    size_t merge_mask, merge_count;
    int32_t byte_id[256];
    bool ignore_merges;
};

int kv_ids_push(kv_ids *ids, int32_t id)
{
    if (KV_VEC_RESERVE(ids->v, ids->cap, ids->n + 1, 64) < 0)
        return -1;
    ids->v[ids->n++] = id;
    return 0;
}

void kv_bpe_scratch_free(kv_bpe_scratch *s)
{
    free(s->mem);
    s->mem = NULL;
    s->cap = 0;
}

static void *scratch_get(kv_bpe_scratch *s, size_t bytes)
{
    if (bytes > s->cap) {
        size_t cap = bytes < 4096 ? 4096 : bytes + bytes / 2;
        void *m = realloc(s->mem, cap);
        if (!m)
            return NULL;
        s->mem = m;
        s->cap = cap;
    }
    return s->mem;
}

static uint64_t hash_bytes(const unsigned char *s, size_t n)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, s, n);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
    return h ^ (h >> 29);
}

static uint64_t hash_pair(uint64_t key)
{
    key *= 0x9E3779B97F4A7C15ull;
    return key ^ (key >> 31);
}

static size_t pow2_at_least(size_t n)
{
    size_t p = 16;
    while (p < n)
        p *= 2;
    return p;
}

static int str_table_alloc(kv_bpe *m, size_t cap)
{
    m->slot = malloc(cap * sizeof *m->slot);
    if (!m->slot)
        return -1;
    for (size_t i = 0; i < cap; i++)
        m->slot[i] = (str_slot){0, -1};
    m->mask = cap - 1;
    return 0;
}

static int merge_table_alloc(kv_bpe *m, size_t cap)
{
    m->merge = malloc(cap * sizeof *m->merge);
    if (!m->merge)
        return -1;
    for (size_t i = 0; i < cap; i++)
        m->merge[i].key = EMPTY_KEY;
    m->merge_mask = cap - 1;
    return 0;
}

kv_bpe *kv_bpe_new(size_t n_vocab, size_t n_merges, kv_error *err)
{
    kv_bpe *m = calloc(1, sizeof *m);
    if (!m || str_table_alloc(m, pow2_at_least(n_vocab * 2 + 1)) != 0 ||
        merge_table_alloc(m, pow2_at_least(n_merges * 2 + 1)) != 0) {
        kv_bpe_free(m);
        kv_fail(err, "tokenizer: out of memory for %zu tokens", n_vocab);
        return NULL;
    }
    for (int i = 0; i < 256; i++)
        m->byte_id[i] = -1;
    return m;
}

void kv_bpe_free(kv_bpe *m)
{
    if (!m)
        return;
    free(m->arena);
    free(m->tok);
    free(m->slot);
    free(m->merge);
    free(m);
}

static bool slot_is(const kv_bpe *m, const str_slot *sl, uint32_t h, const char *s, size_t n)
{
    const tok_ref *t = &m->tok[sl->id];
    return sl->hash == h && t->len == n && memcmp(m->arena + t->off, s, n) == 0;
}

/* The slot holding s[0..n) (whose hash_bytes is hh), or the empty slot where
 * it would go. */
static str_slot *str_probe_hashed(const kv_bpe *m, const char *s, size_t n, uint64_t hh)
{
    uint32_t h = (uint32_t)hh;
    for (size_t i = (size_t)(hh >> 20) & m->mask;; i = (i + 1) & m->mask) {
        str_slot *sl = &m->slot[i];
        if (sl->id < 0 || slot_is(m, sl, h, s, n))
            return sl;
    }
}

static str_slot *str_probe(const kv_bpe *m, const char *s, size_t n)
{
    return str_probe_hashed(m, s, n, hash_bytes((const unsigned char *)s, n));
}

int32_t kv_bpe_lookup(const kv_bpe *m, const char *s, size_t n)
{
    return str_probe(m, s, n)->id;
}

uint64_t kv_bpe_hash(const char *s, size_t n)
{
    return hash_bytes((const unsigned char *)s, n);
}

void kv_bpe_prefetch(const kv_bpe *m, uint64_t hash)
{
    __builtin_prefetch(&m->slot[(size_t)(hash >> 20) & m->mask]);
}

int32_t kv_bpe_lookup_hashed(const kv_bpe *m, const char *s, size_t n, uint64_t hash)
{
    return str_probe_hashed(m, s, n, hash)->id;
}

static int str_grow(kv_bpe *m)
{
    str_slot *old = m->slot;
    size_t old_cap = m->mask + 1;
    if (str_table_alloc(m, old_cap * 2) != 0) {
        m->slot = old;
        m->mask = old_cap - 1;
        return -1;
    }
    for (size_t i = 0; i < old_cap; i++) {
        if (old[i].id < 0)
            continue;
        const tok_ref *t = &m->tok[old[i].id];
        *str_probe(m, m->arena + t->off, t->len) = old[i];
    }
    free(old);
    return 0;
}

static int ensure_id(kv_bpe *m, int32_t id)
{
    if (id < m->id_cap)
        return 0;
    int32_t cap = m->id_cap ? m->id_cap : 1024;
    while (cap <= id)
        cap = cap > INT32_MAX / 2 ? INT32_MAX : cap * 2;
    tok_ref *tok = realloc(m->tok, (size_t)cap * sizeof *tok);
    if (!tok)
        return -1;
    m->tok = tok;
    for (int32_t i = m->id_cap; i < cap; i++)
        m->tok[i] = (tok_ref){ABSENT, 0};
    m->id_cap = cap;
    return 0;
}

static int arena_put(kv_bpe *m, const char *s, size_t n, size_t *off)
{
    if (KV_VEC_RESERVE(m->arena, m->arena_cap, m->arena_n + n, 1 << 16) < 0)
        return -1;
    memcpy(m->arena + m->arena_n, s, n);
    *off = m->arena_n;
    m->arena_n += n;
    return 0;
}

int kv_bpe_add_token(kv_bpe *m, const char *s, size_t n, int32_t id, kv_error *err)
{
    return kv_bpe_add_token_hashed(m, s, n, id, hash_bytes((const unsigned char *)s, n), err);
}

int kv_bpe_add_token_hashed(kv_bpe *m, const char *s, size_t n, int32_t id, uint64_t hash,
                            kv_error *err)
{
    if (id < 0 || n == 0 || n > UINT32_MAX)
        return kv_fail(err, "entry %d: a token needs an id >= 0 and 1 or more bytes", id);
    if (ensure_id(m, id) != 0)
        return kv_fail(err, "out of memory for token id %d", id);
    if (m->tok[id].off != ABSENT)
        return kv_fail(err, "id %d is given to two tokens", id);
    if ((m->count + 1) * 2 > m->mask + 1 && str_grow(m) != 0)
        return kv_fail(err, "out of memory for the vocabulary");
    str_slot *sl = str_probe_hashed(m, s, n, hash);
    if (sl->id >= 0)
        return kv_fail(err, "the same token appears twice (ids %d and %d)", sl->id, id);
    if (arena_put(m, s, n, &m->tok[id].off) != 0)
        return kv_fail(err, "out of memory for the vocabulary");
    m->tok[id].len = (uint32_t)n;
    if (id >= m->id_end)
        m->id_end = id + 1;
    *sl = (str_slot){(uint32_t)hash, id};
    m->count++;
    return 0;
}

const char *kv_bpe_token(const kv_bpe *m, int32_t id, size_t *len)
{
    if (id < 0 || id >= m->id_end || m->tok[id].off == ABSENT)
        return NULL;
    *len = m->tok[id].len;
    return m->arena + m->tok[id].off;
}

int32_t kv_bpe_id_end(const kv_bpe *m)
{
    return m->id_end;
}

static const merge_slot *merge_find(const kv_bpe *m, int32_t a, int32_t b)
{
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (size_t i = hash_pair(key) & m->merge_mask;; i = (i + 1) & m->merge_mask) {
        if (m->merge[i].key == key)
            return &m->merge[i];
        if (m->merge[i].key == EMPTY_KEY)
            return NULL;
    }
}

static int merge_grow(kv_bpe *m)
{
    merge_slot *old = m->merge;
    size_t old_cap = m->merge_mask + 1;
    if (merge_table_alloc(m, old_cap * 2) != 0) {
        m->merge = old;
        m->merge_mask = old_cap - 1;
        return -1;
    }
    for (size_t j = 0; j < old_cap; j++) {
        if (old[j].key == EMPTY_KEY)
            continue;
        size_t i = hash_pair(old[j].key) & m->merge_mask;
        while (m->merge[i].key != EMPTY_KEY)
            i = (i + 1) & m->merge_mask;
        m->merge[i] = old[j];
    }
    free(old);
    return 0;
}

void kv_bpe_prefetch_merge(const kv_bpe *m, int32_t a, int32_t b)
{
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    __builtin_prefetch(&m->merge[hash_pair(key) & m->merge_mask]);
}

int kv_bpe_add_merge(kv_bpe *m, int32_t a, int32_t b, int32_t merged, uint32_t rank, kv_error *err)
{
    if ((m->merge_count + 1) * 2 > m->merge_mask + 1 && merge_grow(m) != 0)
        return kv_fail(err, "out of memory for the merges");
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    size_t i = hash_pair(key) & m->merge_mask;
    while (m->merge[i].key != EMPTY_KEY && m->merge[i].key != key)
        i = (i + 1) & m->merge_mask;
    if (m->merge[i].key == EMPTY_KEY)
        m->merge_count++;
    m->merge[i] = (merge_slot){key, rank, merged};
    return 0;
}

int kv_bpe_finish(kv_bpe *m, bool ignore_merges, kv_error *err)
{
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        m->byte_id[b] = kv_bpe_lookup(m, &c, 1);
        if (m->byte_id[b] < 0)
            return kv_fail(err,
                           "vocabulary: byte 0x%02X has no token (byte-level BPE without "
                           "an unknown token or byte_fallback needs all 256 bytes)",
                           b);
    }
    m->ignore_merges = ignore_merges;
    return 0;
}

static uint32_t pair_rank(const kv_bpe *m, int32_t a, int32_t b, int32_t *merged)
{
    const merge_slot *s = merge_find(m, a, b);
    if (!s)
        return NO_RANK;
    *merged = s->merged;
    return s->rank;
}

/* Short words: ids and pair ranks in arrays; merge the first lowest pair and
 * close the gap. */
static int merge_scan(const kv_bpe *m, int32_t *id, size_t n, kv_ids *out)
{
    uint32_t rank[SCAN_MAX];
    int32_t merged[SCAN_MAX];
    for (size_t i = 0; i + 1 < n; i++)
        rank[i] = pair_rank(m, id[i], id[i + 1], &merged[i]);
    while (n > 1) {
        size_t best = 0;
        for (size_t i = 1; i + 1 < n; i++)
            if (rank[i] < rank[best])
                best = i;
        if (rank[best] == NO_RANK)
            break;
        id[best] = merged[best];
        memmove(id + best + 1, id + best + 2, (n - best - 2) * sizeof *id);
        memmove(rank + best, rank + best + 1, (n - best - 2) * sizeof *rank);
        memmove(merged + best, merged + best + 1, (n - best - 2) * sizeof *merged);
        n--;
        if (best > 0)
            rank[best - 1] = pair_rank(m, id[best - 1], id[best], &merged[best - 1]);
        if (best + 1 < n)
            rank[best] = pair_rank(m, id[best], id[best + 1], &merged[best]);
    }
    for (size_t i = 0; i < n; i++)
        if (kv_ids_push(out, id[i]) != 0)
            return -1;
    return 0;
}

/* Long words: a doubly linked list of symbols and a min-heap of candidate
 * pairs ordered by (rank, position). A heap entry remembers the ids it was
 * made for; one whose symbols have changed since is stale and skipped. */
typedef struct cand {
    uint32_t rank, pos, right;
    int32_t left_id, right_id, merged;
} cand;

static bool cand_less(const cand *x, const cand *y)
{
    return x->rank < y->rank || (x->rank == y->rank && x->pos < y->pos);
}

static void heap_push(cand *h, size_t *n, cand c)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(&c, &h[p]))
            break;
        h[i] = h[p];
        i = p;
    }
    h[i] = c;
}

static cand heap_pop(cand *h, size_t *n)
{
    cand top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && cand_less(&h[c + 1], &h[c]))
            c++;
        if (!cand_less(&h[c], &last))
            break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0)
        h[i] = last;
    return top;
}

#define NONE UINT32_MAX

static void push_pair(const kv_bpe *m, cand *h, size_t *nh, const int32_t *id, uint32_t l,
                      uint32_t r)
{
    int32_t merged;
    uint32_t rank = pair_rank(m, id[l], id[r], &merged);
    if (rank != NO_RANK)
        heap_push(h, nh, (cand){rank, l, r, id[l], id[r], merged});
}

static int merge_heap(const kv_bpe *m, int32_t *id, size_t n, uint32_t *prev, uint32_t *next,
                      cand *h, kv_ids *out)
{
    size_t nh = 0;
    for (uint32_t i = 0; i < n; i++) {
        prev[i] = i == 0 ? NONE : i - 1;
        next[i] = i + 1 == n ? NONE : i + 1;
    }
    for (uint32_t i = 0; i + 1 < n; i++)
        push_pair(m, h, &nh, id, i, i + 1);
    while (nh > 0) {
        cand c = heap_pop(h, &nh);
        /* id -1 marks a symbol absorbed by its left neighbour */
        if (id[c.pos] != c.left_id || next[c.pos] != c.right || id[c.right] != c.right_id)
            continue;
        id[c.pos] = c.merged;
        id[c.right] = -1;
        next[c.pos] = next[c.right];
        if (next[c.pos] != NONE)
            prev[next[c.pos]] = c.pos;
        if (prev[c.pos] != NONE)
            push_pair(m, h, &nh, id, prev[c.pos], c.pos);
        if (next[c.pos] != NONE)
            push_pair(m, h, &nh, id, c.pos, next[c.pos]);
    }
    for (uint32_t i = 0; i != NONE; i = next[i])
        if (kv_ids_push(out, id[i]) != 0)
            return -1;
    return 0;
}

int kv_bpe_word(const kv_bpe *m, const unsigned char *w, size_t n, kv_bpe_scratch *s, kv_ids *out,
                kv_error *err)
{
    if (m->ignore_merges) {
        int32_t whole = kv_bpe_lookup(m, (const char *)w, n);
        if (whole >= 0)
            return kv_ids_push(out, whole) == 0 ? 0 : kv_fail(err, "out of memory");
    }
    if (n >= NONE)
        return kv_fail(err, "a pre-token of %zu bytes is too long", n);
    /* Each merge adds at most two heap entries: n initial + 2n pushes. */
    size_t need = n * (sizeof(int32_t) + 2 * sizeof(uint32_t)) + 3 * n * sizeof(cand) + 16;
    char *mem = scratch_get(s, need);
    if (!mem)
        return kv_fail(err, "out of memory for a pre-token of %zu bytes", n);
    cand *h = (cand *)mem;
    int32_t *id = (int32_t *)(h + 3 * n);
    uint32_t *prev = (uint32_t *)(id + n), *next = prev + n;
    for (size_t i = 0; i < n; i++)
        id[i] = m->byte_id[w[i]];
    int rc = n <= SCAN_MAX ? merge_scan(m, id, n, out) : merge_heap(m, id, n, prev, next, h, out);
    return rc == 0 ? 0 : kv_fail(err, "out of memory");
}
