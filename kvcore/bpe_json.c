/* kv_bpe from tokenizer.json: model.vocab and model.merges (150k entries
 * each for Qwen3) are scanned in place with kv_jscan straight into the hash
 * tables; building cJSON nodes for them would cost a million allocations. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bpe.h"
#include "bytelevel.h"
#include "jscan.h"

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
        if (strcmp(*key, "vocab") == 0)
            where->vocab_at = at, where->vocab_end = j->pos;
        else if (strcmp(*key, "merges") == 0)
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
    char *a, *b, *bytes;
    size_t cap_a, cap_b, cap_bytes;
} scan_bufs;

static int bytes_room(scan_bufs *sb, size_t need)
{
    if (need <= sb->cap_bytes)
        return 0;
    char *m = realloc(sb->bytes, need * 2);
    if (!m)
        return -1;
    sb->bytes = m;
    sb->cap_bytes = need * 2;
    return 0;
}

static int scan_fail(const kv_jscan *j, const char *what, kv_error *err)
{
    return kv_fail(err, "%s: not valid JSON (line %zu: %s)", what, kv_jscan_line(j), j->err);
}

static int add_vocab_entry(kv_bpe *m, scan_bufs *sb, size_t n, double id, kv_error *err)
{
    if (id < 0 || id > INT32_MAX - 1 || id != (double)(int32_t)id)
        return kv_fail(err, "model.vocab: token \"%s\" needs a non-negative integer id", sb->a);
    if (bytes_room(sb, n + 1) != 0)
        return kv_fail(err, "out of memory");
    long bytes = kv_bytelevel_to_bytes(sb->a, n, sb->bytes);
    if (bytes < 0)
        return kv_fail(err,
                       "model.vocab: token \"%s\" is not in the byte-level alphabet "
                       "(only byte-level BPE is supported)",
                       sb->a);
    if (kv_bpe_add_token(m, sb->bytes, (size_t)bytes, (int32_t)id, err) != 0)
        return kv_fail_prefix(err, "model.vocab");
    return 0;
}

static int scan_vocab(kv_bpe *m, kv_jscan *j, scan_bufs *sb, kv_error *err)
{
    if (kv_jscan_peek(j) != '{')
        return kv_fail(err, "model.vocab must be an object of token: id");
    kv_jscan_eat(j, '{');
    bool more = kv_jscan_peek(j) != '}';
    if (!more)
        j->pos++;
    while (more) {
        size_t n;
        double id;
        if (kv_jscan_string(j, &sb->a, &sb->cap_a, &n) != 0 || kv_jscan_eat(j, ':') != 0 ||
            kv_jscan_number(j, &id) != 0)
            return scan_fail(j, "model.vocab", err);
        if (add_vocab_entry(m, sb, n, id, err) != 0)
            return -1;
        if (kv_jscan_next(j, '}', &more) != 0)
            return scan_fail(j, "model.vocab", err);
    }
    return 0;
}

/* One side of a merge: its byte string's token id; the bytes are written at
 * sb->bytes + off. */
static int32_t merge_side(const kv_bpe *m, const char *s, size_t n, scan_bufs *sb, size_t off,
                          long *len)
{
    *len = kv_bytelevel_to_bytes(s, n, sb->bytes + off);
    return *len < 0 ? -1 : kv_bpe_lookup(m, sb->bytes + off, (size_t)*len);
}

static int add_merge(kv_bpe *m, scan_bufs *sb, const char *a, size_t na, const char *b, size_t nb,
                     uint32_t rank, kv_error *err)
{
    if (bytes_room(sb, na + nb + 1) != 0)
        return kv_fail(err, "out of memory");
    long la, lb;
    int32_t ia = merge_side(m, a, na, sb, 0, &la);
    int32_t ib = ia < 0 ? -1 : merge_side(m, b, nb, sb, (size_t)la, &lb);
    if (ia < 0 || ib < 0)
        return kv_fail(err, "model.merges[%u]: token \"%.*s\" is not in the vocabulary", rank,
                       ia < 0 ? (int)na : (int)nb, ia < 0 ? a : b);
    int32_t merged = kv_bpe_lookup(m, sb->bytes, (size_t)(la + lb));
    if (merged < 0)
        return kv_fail(err,
                       "model.merges[%u]: the merge of \"%.*s\" and \"%.*s\" is not in the "
                       "vocabulary",
                       rank, (int)na, a, (int)nb, b);
    return kv_bpe_add_merge(m, ia, ib, merged, rank, err);
}

/* One merge: "a b" or ["a", "b"]. */
static int scan_merge(kv_bpe *m, kv_jscan *j, scan_bufs *sb, uint32_t rank, kv_error *err)
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
        return add_merge(m, sb, sb->a, (size_t)(sp - sb->a), sp + 1, na - (size_t)(sp + 1 - sb->a),
                         rank, err);
    }
    if (kv_jscan_peek(j) != '[')
        return kv_fail(err, "model.merges[%u] is neither \"a b\" nor [\"a\", \"b\"]", rank);
    if (kv_jscan_eat(j, '[') != 0 || kv_jscan_string(j, &sb->a, &sb->cap_a, &na) != 0 ||
        kv_jscan_eat(j, ',') != 0 || kv_jscan_string(j, &sb->b, &sb->cap_b, &nb) != 0 ||
        kv_jscan_eat(j, ']') != 0)
        return kv_fail(err, "model.merges[%u] is neither \"a b\" nor [\"a\", \"b\"] (line %zu)",
                       rank, kv_jscan_line(j));
    return add_merge(m, sb, sb->a, na, sb->b, nb, rank, err);
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
    for (uint32_t rank = 0; more; rank++) {
        if (scan_merge(m, j, sb, rank, err) != 0)
            return -1;
        if (kv_jscan_next(j, ']', &more) != 0)
            return scan_fail(j, "model.merges", err);
    }
    return 0;
}

kv_bpe *kv_bpe_json_load(const char *text, const kv_bpe_json *where, bool ignore_merges,
                         kv_error *err)
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
    int rc = scan_vocab(m, &j, &sb, err);
    if (rc == 0 && where->merges_end) {
        kv_jscan_init(&j, text, where->merges_end);
        j.pos = where->merges_at;
        rc = scan_merges(m, &j, &sb, err);
    }
    free(sb.a);
    free(sb.b);
    free(sb.bytes);
    if (rc == 0)
        rc = kv_bpe_finish(m, ignore_merges, err);
    if (rc != 0) {
        kv_bpe_free(m);
        return NULL;
    }
    return m;
}
