/* kv_bpe from tokenizer.json: model.vocab and model.merges (150k entries
 * each for Qwen3) are scanned in place with kv_jscan straight into the hash
 * tables; building cJSON nodes for them would cost a million allocations. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/bpe.h"
#include "tokenizer/bytelevel.h"
#include "util/jscan.h"

/* The members of the object at s[at..end): the ':' outside strings at its
 * own depth (the text was checked by the scan that found it). */
static size_t count_members(const char *s, size_t at, size_t end)
{
    size_t n = 0;
    int depth = 0;
    kv_jbytes st = {0};
    for (size_t i = at; i < end; i++) {
        char c = s[i];
        if (!kv_jbytes_outside(&st, c))
            continue;
        if (c == '{' || c == '[')
            depth++;
        else if (c == '}' || c == ']')
            depth--;
        else if (c == ':' && depth == 1)
            n++;
    }
    return n;
}

static int find_in_model(kv_jscan *j, kv_bpe_json *where, char **key, size_t *cap)
{
    size_t len;
    bool more = true;
    if (kv_jscan_eat(j, '{') != 0)
        return -1;
    if (kv_jscan_peek(j) == '}')
        return kv_jscan_eat(j, '}');
    while (more) {
        if (kv_jscan_string(j, key, cap, &len) != 0 || kv_jscan_eat(j, ':') != 0)
            return -1;
        kv_jscan_peek(j);
        size_t at = j->pos;
        if (kv_jscan_skip(j) != 0)
            return -1;
        if (strcmp(*key, "vocab") == 0) {
            where->vocab_at = at, where->vocab_end = j->pos;
            where->vocab_count = count_members(j->s, at, j->pos);
        } else if (strcmp(*key, "merges") == 0)
            where->merges_at = at, where->merges_end = j->pos;
        if (kv_jscan_next(j, '}', &more) != 0)
            return -1;
    }
    return 0;
}

/* Finds model.vocab and model.merges in the top-level object. */
int kv_bpe_json_find(const char *s, size_t n, kv_bpe_json *where, kv_error *err)
{
    memset(where, 0, sizeof *where);
    kv_jscan j;
    kv_jscan_init(&j, s, n);
    char *key = NULL;
    size_t cap = 0, len;
    bool more = kv_jscan_peek(&j) == '{';
    int rc = kv_jscan_eat(&j, '{');
    if (rc == 0 && kv_jscan_peek(&j) == '}')
        more = false;
    while (rc == 0 && more) {
        rc = kv_jscan_string(&j, &key, &cap, &len);
        if (rc == 0)
            rc = kv_jscan_eat(&j, ':');
        if (rc == 0 && strcmp(key, "model") == 0 && kv_jscan_peek(&j) == '{')
            rc = find_in_model(&j, where, &key, &cap);
        else if (rc == 0)
            rc = kv_jscan_skip(&j);
        if (rc == 0)
            rc = kv_jscan_next(&j, '}', &more);
    }
    free(key);
    if (rc != 0)
        return kv_fail(err, "not valid JSON (line %zu: %s)", kv_jscan_line(&j), j.err);
    return 0;
}

/* A copy of the text with model.vocab as {} and model.merges as [], for
 * cJSON. */
char *kv_bpe_json_strip(const char *s, size_t n, const kv_bpe_json *where, size_t *out_len)
{
    char *out = malloc(n + 5);
    if (!out)
        return NULL;
    typedef struct cut_t {
        size_t at, end;
        const char *with;
    } cut_t;
    cut_t cut[2] = {{where->vocab_at, where->vocab_end, "{}"},
                    {where->merges_at, where->merges_end, "[]"}};
    if (cut[1].at < cut[0].at) {
        cut_t tmp = cut[0];
        cut[0] = cut[1];
        cut[1] = tmp;
    }
    size_t from = 0, o = 0;
    for (int i = 0; i < 2; i++) {
        if (cut[i].end == 0)
            continue;
        memcpy(out + o, s + from, cut[i].at - from);
        o += cut[i].at - from;
        memcpy(out + o, cut[i].with, 2);
        o += 2;
        from = cut[i].end;
    }
    memcpy(out + o, s + from, n - from);
    o += n - from;
    out[o] = '\0';
    *out_len = o;
    return out;
}

/* Scratch strings of the scan. */
typedef struct scan_bufs {
    char *a, *b;
    size_t cap_a, cap_b;
} scan_bufs;

static int scan_fail(const kv_jscan *j, const char *what, kv_error *err)
{
    return kv_fail(err, "%s: not valid JSON (line %zu: %s)", what, kv_jscan_line(j), j->err);
}

/* Vocabulary entries are inserted in batches, hashed and prefetched first
 * (see merge batches below for why). */
#define BATCH 64

typedef struct vocab_item {
    size_t off; /* bytes at batch->bytes + off */
    uint32_t len;
    int32_t id;
} vocab_item;

typedef struct vocab_batch {
    char *bytes;
    size_t n, cap;
    vocab_item item[BATCH];
    size_t count;
} vocab_batch;

static int grow_bytes(char **bytes, size_t *cap, size_t need, kv_error *err)
{
    if (need <= *cap && *bytes) /* allocated even for an empty first token: NULL + 0 is UB */
        return 0;
    char *m = realloc(*bytes, need * 2 + 4096);
    if (!m)
        return kv_fail(err, "out of memory");
    *bytes = m;
    *cap = need * 2 + 4096;
    return 0;
}

/* Appends token s[0..n) (byte-level alphabet) with its id. */
static int vocab_add(vocab_batch *b, const char *s, size_t n, double id, int64_t id_limit,
                     kv_error *err)
{
    if (id < 0 || id > INT32_MAX - 1 || id != (double)(int32_t)id)
        return kv_fail(err, "model.vocab: token \"%s\" needs a non-negative integer id", s);
    if (id >= (double)id_limit)
        return kv_fail(err,
                       "model.vocab: token \"%s\" has id %.0f, but the vocabulary has %lld "
                       "tokens (vocab and added_tokens), so ids must be below %lld",
                       s, id, (long long)id_limit, (long long)id_limit);
    if (grow_bytes(&b->bytes, &b->cap, b->n + n, err) != 0)
        return -1;
    long len = kv_bytelevel_to_bytes(s, n, b->bytes + b->n);
    if (len < 0)
        return kv_fail(err,
                       "model.vocab: token \"%s\" is not in the byte-level alphabet "
                       "(only byte-level BPE is supported)",
                       s);
    b->item[b->count++] = (vocab_item){b->n, (uint32_t)len, (int32_t)id};
    b->n += (size_t)len;
    return 0;
}

static int vocab_flush(kv_bpe *m, vocab_batch *b, kv_error *err)
{
    uint64_t h[BATCH];
    for (size_t i = 0; i < b->count; i++) {
        h[i] = kv_bpe_hash(b->bytes + b->item[i].off, b->item[i].len);
        kv_bpe_prefetch(m, h[i]);
    }
    for (size_t i = 0; i < b->count; i++) {
        const vocab_item *it = &b->item[i];
        if (kv_bpe_add_token_hashed(m, b->bytes + it->off, it->len, it->id, h[i], err) != 0)
            return kv_fail_prefix(err, "model.vocab");
    }
    b->count = 0;
    b->n = 0;
    return 0;
}

static int scan_vocab(kv_bpe *m, kv_jscan *j, scan_bufs *sb, int64_t id_limit, kv_error *err)
{
    if (kv_jscan_peek(j) != '{')
        return kv_fail(err, "model.vocab must be an object of token: id");
    kv_jscan_eat(j, '{');
    bool more = kv_jscan_peek(j) != '}';
    if (!more)
        j->pos++;
    vocab_batch batch = {0};
    int rc = 0;
    while (more && rc == 0) {
        size_t n;
        double id;
        if (kv_jscan_string(j, &sb->a, &sb->cap_a, &n) != 0 || kv_jscan_eat(j, ':') != 0 ||
            kv_jscan_number(j, &id) != 0 || kv_jscan_next(j, '}', &more) != 0)
            rc = scan_fail(j, "model.vocab", err);
        if (rc == 0)
            rc = vocab_add(&batch, sb->a, n, id, id_limit, err);
        if (rc == 0 && (batch.count == BATCH || !more))
            rc = vocab_flush(m, &batch, err);
    }
    free(batch.bytes);
    return rc;
}

/* Merges are resolved in batches: each needs three lookups (a, b and a+b),
 * which are cache misses in tables of 150k entries; hashing and prefetching a
 * whole batch first lets those misses overlap. */

typedef struct merge_item {
    size_t off;      /* a's bytes at batch->bytes + off, b's right after */
    uint32_t la, lb; /* byte lengths */
    uint32_t rank;
} merge_item;

typedef struct merge_batch {
    char *bytes;
    size_t n, cap;
    merge_item item[BATCH];
    size_t count;
} merge_batch;

/* Appends one merge, its sides given in the byte-level alphabet. */
static int batch_add(merge_batch *b, const char *sa, size_t na, const char *sb, size_t nb,
                     uint32_t rank, kv_error *err)
{
    if (grow_bytes(&b->bytes, &b->cap, b->n + na + nb, err) != 0)
        return -1;
    long la = kv_bytelevel_to_bytes(sa, na, b->bytes + b->n);
    long lb = la < 0 ? -1 : kv_bytelevel_to_bytes(sb, nb, b->bytes + b->n + (size_t)la);
    if (la < 0 || lb < 0)
        return kv_fail(err, "model.merges[%u]: token \"%.*s\" is not in the vocabulary", rank,
                       la < 0 ? (int)na : (int)nb, la < 0 ? sa : sb);
    b->item[b->count++] = (merge_item){b->n, (uint32_t)la, (uint32_t)lb, rank};
    b->n += (size_t)(la + lb);
    return 0;
}

static int batch_flush(kv_bpe *m, merge_batch *b, kv_error *err)
{
    uint64_t h[BATCH][3];
    for (size_t i = 0; i < b->count; i++) {
        const merge_item *it = &b->item[i];
        const char *a = b->bytes + it->off;
        h[i][0] = kv_bpe_hash(a, it->la);
        h[i][1] = kv_bpe_hash(a + it->la, it->lb);
        h[i][2] = kv_bpe_hash(a, it->la + it->lb);
        for (int k = 0; k < 3; k++)
            kv_bpe_prefetch(m, h[i][k]);
    }
    int32_t id[BATCH][3];
    for (size_t i = 0; i < b->count; i++) {
        const merge_item *it = &b->item[i];
        const char *a = b->bytes + it->off;
        id[i][0] = kv_bpe_lookup_hashed(m, a, it->la, h[i][0]);
        id[i][1] = kv_bpe_lookup_hashed(m, a + it->la, it->lb, h[i][1]);
        id[i][2] = kv_bpe_lookup_hashed(m, a, it->la + it->lb, h[i][2]);
        if (id[i][0] < 0 || id[i][1] < 0)
            return kv_fail(err, "model.merges[%u]: token \"%.*s\" is not in the vocabulary",
                           it->rank, id[i][0] < 0 ? (int)it->la : (int)it->lb,
                           id[i][0] < 0 ? a : a + it->la);
        if (id[i][2] < 0)
            return kv_fail(err, "model.merges[%u]: \"%.*s\" (the merge) is not in the vocabulary",
                           it->rank, (int)(it->la + it->lb), a);
        kv_bpe_prefetch_merge(m, id[i][0], id[i][1]);
    }
    for (size_t i = 0; i < b->count; i++)
        if (kv_bpe_add_merge(m, id[i][0], id[i][1], id[i][2], b->item[i].rank, err) != 0)
            return -1;
    b->count = 0;
    b->n = 0;
    return 0;
}

/* One merge: "a b" or ["a", "b"]. */
static int scan_merge(kv_jscan *j, scan_bufs *sb, merge_batch *batch, uint32_t rank, kv_error *err)
{
    size_t na, nb;
    if (kv_jscan_peek(j) == '"') {
        if (kv_jscan_string(j, &sb->a, &sb->cap_a, &na) != 0)
            return scan_fail(j, "model.merges", err);
        const char *sp = memchr(sb->a, ' ', na);
        if (!sp || memchr(sp + 1, ' ', na - (size_t)(sp + 1 - sb->a)))
            return kv_fail(err,
                           "model.merges[%u]: \"%s\" is not two tokens separated by a "
                           "space",
                           rank, sb->a);
        return batch_add(batch, sb->a, (size_t)(sp - sb->a), sp + 1, na - (size_t)(sp + 1 - sb->a),
                         rank, err);
    }
    if (kv_jscan_peek(j) != '[')
        return kv_fail(err, "model.merges[%u] is neither \"a b\" nor [\"a\", \"b\"]", rank);
    if (kv_jscan_eat(j, '[') != 0 || kv_jscan_string(j, &sb->a, &sb->cap_a, &na) != 0 ||
        kv_jscan_eat(j, ',') != 0 || kv_jscan_string(j, &sb->b, &sb->cap_b, &nb) != 0 ||
        kv_jscan_eat(j, ']') != 0)
        return kv_fail(err, "model.merges[%u] is neither \"a b\" nor [\"a\", \"b\"] (line %zu)",
                       rank, kv_jscan_line(j));
    return batch_add(batch, sb->a, na, sb->b, nb, rank, err);
}

static int scan_merges(kv_bpe *m, kv_jscan *j, scan_bufs *sb, kv_error *err)
{
    char c = kv_jscan_peek(j);
    if (c == 'n') /* null */
        return 0;
    if (c != '[')
        return kv_fail(err, "model.merges must be an array");
    j->pos++;
    bool more = kv_jscan_peek(j) != ']';
    if (!more)
        j->pos++;
    merge_batch batch = {0};
    int rc = 0;
    for (uint32_t rank = 0; more && rc == 0; rank++) {
        rc = scan_merge(j, sb, &batch, rank, err);
        if (rc == 0 && kv_jscan_next(j, ']', &more) != 0)
            rc = scan_fail(j, "model.merges", err);
        if (rc == 0 && (batch.count == BATCH || !more))
            rc = batch_flush(m, &batch, err);
    }
    free(batch.bytes);
    return rc;
}

kv_bpe *kv_bpe_json_load(const char *text, const kv_bpe_json *where, bool ignore_merges,
                         int64_t id_limit, kv_error *err)
{
    if (where->vocab_end == 0) {
        kv_fail(err, "model.vocab is missing");
        return NULL;
    }
    /* Sizes guessed from the text (pretty-printed Qwen3: 24 bytes per vocab
     * entry, 46 per merge; the tables grow when the guess is low). */
    size_t n_vocab = (where->vocab_end - where->vocab_at) / 16;
    size_t n_merges = (where->merges_end - where->merges_at) / 32;
    kv_bpe *m = kv_bpe_new(n_vocab, n_merges, err);
    if (!m)
        return NULL;
    scan_bufs sb = {0};
    kv_jscan j;
    kv_jscan_init(&j, text, where->vocab_end);
    j.pos = where->vocab_at;
    int rc = scan_vocab(m, &j, &sb, id_limit, err);
    if (rc == 0 && where->merges_end) {
        kv_jscan_init(&j, text, where->merges_end);
        j.pos = where->merges_at;
        rc = scan_merges(m, &j, &sb, err);
    }
    free(sb.a);
    free(sb.b);
    if (rc == 0)
        rc = kv_bpe_finish(m, ignore_merges, err);
    if (rc != 0) {
        kv_bpe_free(m);
        return NULL;
    }
    return m;
}
