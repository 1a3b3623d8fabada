/* Borrowed rows (kvcore/model/kvcache.h): a fork gathered from an F32 cache
 * reads the lender's rows instead of copying them. Whatever happens after,
 * to the lender or to the fork, every slot of the fork reads what a fork
 * with rows of its own holds, bit for bit: the lender growing, compacting
 * itself, storing at another precision or going first; the fork appending,
 * compacting, rerotating, being forked, compressed again or stored at
 * another precision. CI also runs these under AddressSanitizer, which
 * catches a borrowed row read after it was freed. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/kvcache.h"
#include "support/testutil.h"

enum { LAYERS = 2, HEADS = 2, D = 8, ROW = HEADS * D, N = 40 };

/* Writes n new slots of random keys and values at the end of every layer
 * (as a forward appends them), positions going on from the last. */
static void append(kv_cache *c, int n, unsigned seed)
{
    kv_error err;
    cr_assert_eq(kv_cache_reserve(c, n, &err), 0, "%s", err.msg);
    srand(seed);
    for (int l = 0; l < LAYERS; l++) {
        kv_cache_layer *cl = &c->layers[l];
        for (int s = cl->len; s < cl->len + n; s++) {
            float *k = kv_cache_full_row(c, cl, KV_KEYS, s),
                  *v = kv_cache_full_row(c, cl, KV_VALUES, s);
            for (int i = 0; i < ROW; i++) {
                k[i] = (float)rand() / RAND_MAX * 4.0f - 2.0f;
                v[i] = (float)rand() / RAND_MAX * 2.0f - 1.0f;
            }
            kv_cache_set_pos(c, l, s, s == 0 ? 0 : kv_cache_pos(c, l, s - 1, 0) + 1);
        }
        kv_cache_measure_values(c, cl, cl->len, n);
        cl->len += n;
    }
}

static kv_cache *filled(int n)
{
    kv_error err;
    kv_cache *c = kv_cache_new(LAYERS, HEADS, D, n, &err);
    cr_assert_not_null(c, "%s", err.msg);
    append(c, n, 5);
    return c;
}

/* Expects b to hold what a holds: every slot's keys and values (bits),
 * positions and value norms. */
static void expect_same(const kv_cache *a, const kv_cache *b, const char *what)
{
    float ba[ROW], bb[ROW];
    for (int l = 0; l < LAYERS; l++) {
        const kv_cache_layer *la = &a->layers[l], *lb = &b->layers[l];
        cr_assert_eq(la->len, lb->len, "%s: layer %d holds %d slots, not %d", what, l, la->len,
                     lb->len);
        cr_assert_eq(la->vlen_n, lb->vlen_n, "%s: layer %d", what, l);
        for (int s = 0; s < la->len; s++) {
            for (int part = KV_KEYS; part <= KV_VALUES; part++) {
                const float *x = kv_cache_heads(a, l, (kv_cache_part)part, s, 0, HEADS, ba);
                const float *y = kv_cache_heads(b, l, (kv_cache_part)part, s, 0, HEADS, bb);
                cr_assert_eq(memcmp(x, y, sizeof ba), 0, "%s: layer %d slot %d %s differ", what, l,
                             s, part == KV_KEYS ? "keys" : "values");
            }
            for (int h = 0; h < HEADS; h++) {
                cr_assert_eq(kv_cache_pos(a, l, s, h), kv_cache_pos(b, l, s, h), "%s", what);
                if (s < la->vlen_n)
                    cr_assert_eq(tu_f32_bits(la->vlen[s * HEADS + h]),
                                 tu_f32_bits(lb->vlen[s * HEADS + h]), "%s", what);
            }
        }
    }
}

/* Every layer of src gathered into dst, keeping keep[0..n) of each. */
static void gather(const kv_cache *src, kv_cache *dst, const int *keep, int n,
                   const double *inv_freq)
{
    kv_error err;
    kv_cache_keep k = {.sets = 1, .keep = keep, .stride = n, .n_keep = &n, .inv_freq = inv_freq};
    for (int l = 0; l < LAYERS; l++)
        cr_assert_eq(kv_cache_gather(src, dst, l, &k, &err), 0, "%s", err.msg);
}

/* A fork of src compressed into a cache of its own: borrows what it can. */
static kv_cache *compressed(const kv_cache *src, const int *keep, int n)
{
    kv_error err;
    kv_cache *c = kv_cache_new(LAYERS, HEADS, D, 1, &err);
    cr_assert_not_null(c, "%s", err.msg);
    gather(src, c, keep, n, NULL);
    return c;
}

/* The reference: a deep copy of src compressed in place, its rows its own. */
static kv_cache *copied(const kv_cache *src, const int *keep, int n)
{
    kv_error err;
    kv_cache *c = kv_cache_fork(src, 0, &err);
    cr_assert_not_null(c, "%s", err.msg);
    if (!kv_cache_borrows(src))
        cr_assert(!kv_cache_borrows(c));
    gather(c, c, keep, n, NULL);
    return c;
}

/* Every third slot of the first 30, then the last 10 (runs of one and a
 * run of ten: borrowed rows read one by one and as consecutive ones). */
static int scattered(int *keep)
{
    int n = 0;
    for (int s = 0; s < 30; s += 3)
        keep[n++] = s;
    for (int s = 30; s < N; s++)
        keep[n++] = s;
    return n;
}

/* RoPE's frequencies for head_dim D (base 10,000), for rerotation. */
static void rope_freqs(double *inv_freq)
{
    for (int i = 0; i < D / 2; i++)
        inv_freq[i] = pow(10000.0, -2.0 * i / D);
}

/* Frees caches c[0..n), in that order. */
static void free_caches(kv_cache *const *c, int n)
{
    for (int i = 0; i < n; i++)
        kv_cache_free(c[i]);
}

Test(kvcache_borrow, a_gathered_fork_borrows_and_reads_what_a_copy_holds)
{
    int keep[N], n = scattered(keep);
    kv_cache *base = filled(N), *a = compressed(base, keep, n), *r = copied(base, keep, n);
    cr_assert(kv_cache_borrows(a));
    cr_assert(!kv_cache_borrows(base), "the lender reads its own rows");
    for (int l = 0; l < LAYERS; l++)
        cr_assert_eq(a->layers[l].k_stored, n, "every kept slot borrowed");
    expect_same(a, r, "borrowed against copied");
    free_caches((kv_cache *[]){base, a, r}, 3);
}

Test(kvcache_borrow, the_lender_may_grow_compact_store_or_go_first)
{
    int keep[N], n = scattered(keep);
    kv_error err;
    kv_cache *base = filled(N), *twin = kv_cache_fork(base, 0, &err);
    kv_cache *a = compressed(base, keep, n), *r = copied(base, keep, n);
    append(base, 300, 9); /* past its room: its rows move */
    append(twin, 300, 9);
    int half[N / 2];
    for (int i = 0; i < N / 2; i++)
        half[i] = 2 * i;
    gather(base, base, half, N / 2, NULL); /* compacts its own rows */
    gather(twin, twin, half, N / 2, NULL);
    expect_same(base, twin, "the lender after growing and compacting");
    expect_same(a, r, "the borrower after its lender grew and compacted");
    /* its lent rows are no longer its own: a new fork copies */
    int k12[] = {0, 1, 2, 3, 5, 8, 9, 10, 12, 15, 17, 19};
    kv_cache *b = compressed(base, k12, 12), *rb = copied(twin, k12, 12);
    cr_assert(!kv_cache_borrows(b));
    expect_same(b, rb, "a fork of the changed lender");
    kv_cache_quant u8 = {.precision = KV_PREC_U8};
    kv_cache *c = filled(N), *rc = copied(c, keep, n), *ac = compressed(c, keep, n);
    cr_assert_eq(kv_cache_set_quant(c, &u8, &err), 0, "%s", err.msg);
    for (int l = 0; l < LAYERS; l++)
        kv_cache_commit(c, l); /* stores its rows, and drops them */
    expect_same(ac, rc, "the borrower after its lender stored its rows");
    kv_cache_free(c);
    kv_cache_free(base); /* first: the borrowers keep its rows */
    expect_same(a, r, "the borrower after its lender was freed");
    expect_same(ac, rc, "the other borrower after its lender was freed");
    free_caches((kv_cache *[]){a, ac, b, r, rc, rb, twin}, 7);
}

Test(kvcache_borrow, a_borrower_appends_compacts_forks_and_lends_on)
{
    int keep[N], n = scattered(keep);
    kv_error err;
    kv_cache *base = filled(N), *a = compressed(base, keep, n), *r = copied(base, keep, n);
    append(a, 70, 3); /* rows of its own, after the borrowed ones */
    append(r, 70, 3);
    expect_same(a, r, "after appending");
    /* drops borrowed and own slots alike; keeps some of each */
    int len = n + 70, k2[N + 70], m = 0;
    for (int s = 0; s < len; s++)
        if (s % 4 != 1 && s != n)
            k2[m++] = s;
    gather(a, a, k2, m, NULL);
    gather(r, r, k2, m, NULL);
    cr_assert(kv_cache_borrows(a) && a->layers[0].k_stored < n && a->layers[0].k_stored > 0);
    expect_same(a, r, "after compacting in place");
    kv_cache *f = kv_cache_fork(a, 0, &err), *rf = kv_cache_fork(r, 0, &err);
    cr_assert(kv_cache_borrows(f), "a fork of a borrower borrows from the same lender");
    kv_cache_free(a);
    kv_cache_free(base);
    expect_same(f, rf, "a fork of the borrower, after it and the lender went");
    int k3[] = {0, 1, 2, 5, 9, m - 3, m - 1};
    kv_cache *g = compressed(f, k3, 7), *rg = copied(rf, k3, 7);
    cr_assert(kv_cache_borrows(g));
    expect_same(g, rg, "a borrower's own fork, compressed");
    kv_cache_free(f);
    expect_same(g, rg, "the same after its source went");
    free_caches((kv_cache *[]){g, rg, rf, r}, 4);
}

Test(kvcache_borrow, turned_keys_and_per_head_sets_take_rows_of_their_own)
{
    int keep[N], n = scattered(keep);
    double inv_freq[D / 2];
    rope_freqs(inv_freq);
    kv_error err;
    kv_cache *base = filled(N), *a = compressed(base, keep, n), *r = copied(base, keep, n);
    int k2[] = {0, 3, 4, 5, 8, 11, 12};
    kv_cache *t = compressed(a, k2, 7);
    kv_cache *rt = kv_cache_fork(r, 0, &err);
    gather(a, a, k2, 7, inv_freq); /* in place: copies its borrowed keys first */
    gather(r, r, k2, 7, inv_freq);
    cr_assert(a->layers[0].k_stored == 0 && a->layers[0].v_stored == 7);
    expect_same(a, r, "rerotated in place");
    kv_cache *x = kv_cache_new(LAYERS, HEADS, D, 1, &err); /* into another cache */
    gather(t, x, (int[]){1, 2, 6}, 3, inv_freq);
    cr_assert(kv_cache_borrows(x) && x->layers[0].k_stored == 0 && x->layers[0].v_stored == 3);
    gather(rt, rt, k2, 7, NULL);
    gather(rt, rt, (int[]){1, 2, 6}, 3, inv_freq);
    expect_same(x, rt, "rerotated into another cache");
    /* per-head sets: each KV head keeps its own slots */
    kv_cache *p = compressed(base, keep, n), *rp = copied(base, keep, n);
    int sets[HEADS][4] = {{0, 2, 5, 7}, {1, 2, 3, 9}}, counts[HEADS] = {4, 4};
    kv_cache_keep ks = {.sets = HEADS, .keep = &sets[0][0], .stride = 4, .n_keep = counts};
    for (int l = 0; l < LAYERS; l++)
        cr_assert(kv_cache_gather(p, p, l, &ks, &err) == 0 &&
                      kv_cache_gather(rp, rp, l, &ks, &err) == 0,
                  "%s", err.msg);
    expect_same(p, rp, "per-head sets in place");
    free_caches((kv_cache *[]){base, a, r, t, rt, x, p, rp}, 8);
}

Test(kvcache_borrow, a_rerotated_fork_borrows_its_values_and_turns_its_own_keys)
{
    int keep[N], n = scattered(keep);
    double inv_freq[D / 2];
    rope_freqs(inv_freq);
    kv_error err;
    kv_cache *base = filled(N), *a = kv_cache_new(LAYERS, HEADS, D, 1, &err);
    kv_cache *r = kv_cache_fork(base, 0, &err);
    gather(base, a, keep, n, inv_freq);
    gather(r, r, keep, n, inv_freq);
    cr_assert(kv_cache_borrows(a));
    cr_assert(a->layers[0].k_stored == 0 && a->layers[0].v_stored == n);
    expect_same(a, r, "rerotated into a borrower");
    append(a, 9, 6);
    append(r, 9, 6);
    int k2[] = {0, 2, 3, 7, 11, 12, 13, n + 1, n + 4, n + 8};
    gather(a, a, k2, 10, inv_freq); /* decode-time eviction: keys turn again, values by index */
    gather(r, r, k2, 10, inv_freq);
    cr_assert(a->layers[0].v_stored == 7);
    expect_same(a, r, "rerotated again in place");
    kv_cache *f = kv_cache_fork(a, 0, &err), *g = compressed(a, (int[]){1, 4, 6, 8}, 4);
    kv_cache *rg = copied(r, (int[]){1, 4, 6, 8}, 4);
    cr_assert(kv_cache_borrows(g) && g->layers[0].k_stored == 0 && g->layers[0].v_stored == 3);
    kv_cache_free(base);
    kv_cache_free(a);
    expect_same(f, r, "a fork of it, after it and its lender went");
    expect_same(g, rg, "its own compressed fork");
    free_caches((kv_cache *[]){f, g, rg, r}, 4);
}

Test(kvcache_borrow, a_borrower_stores_at_another_precision_as_a_copy_would)
{
    int keep[N], n = scattered(keep);
    kv_error err;
    kv_cache *base = filled(N), *a = compressed(base, keep, n), *r = copied(base, keep, n);
    append(a, 5, 4);
    append(r, 5, 4);
    kv_cache_quant qs[] = {
        {.precision = KV_PREC_U8, .key_group = 8, .value_group = 8},
        {.precision = KV_PREC_U4, .key_by_channel = true, .key_group = 4, .value_group = 8},
        {.precision = KV_PREC_BF16}};
    for (size_t i = 0; i < sizeof qs / sizeof *qs; i++) {
        kv_cache *sa = kv_cache_fork_at(a, &qs[i], 0, &err),
                 *sr = kv_cache_fork_at(r, &qs[i], 0, &err);
        cr_assert(sa && sr, "%s", err.msg);
        expect_same(sa, sr, kv_precision_name(qs[i].precision));
        kv_cache_free(sa);
        kv_cache_free(sr);
    }
    free_caches((kv_cache *[]){base, a, r}, 3);
}
