/* A prompt fed in two forwards, context then question (query-agnostic
 * eviction, docs/eviction.md):
 *   - kv_model_forward_many gives every cache the bits it gets alone, so a
 *     config's question prefill does not depend on its batch-mates;
 *   - statistics carried from the context's forward into the question's
 *     (kv_attn_stats_request_head / _tail / kv_attn_stats_carry) are those
 *     of one forward of the whole prompt: column sums, SnapKV windows that
 *     reach into the context and the query moments, within float32 noise. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "support/testutil.h"

#define CTX 70
#define QN  12

static kv_model *load(const char *rel)
{
    char *dir = tu_source(rel);
    kv_model *m;
    kv_error err;
    cr_assert_eq(kv_model_load(dir, &m, &err), 0, "%s", err.msg);
    free(dir);
    return m;
}

static void prompt(int32_t *ids, int n, int vocab, unsigned seed)
{
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        ids[i] = (int32_t)((seed >> 8) % (unsigned)vocab);
    }
}

/* Three caches holding different contexts, then one question on all of
 * them at once, against the question on each alone. */
Test(split_forward, forward_many_rows_do_not_depend_on_their_batch_mates)
{
    kv_model *m = load("tests/data/models/qwen3-f32");
    int vocab = kv_model_get_config(m)->vocab;
    kv_error err;
    int32_t ctx[3][CTX], q[QN];
    prompt(q, QN, vocab, 99);
    kv_cache *together[3], *alone[3];
    for (int b = 0; b < 3; b++) {
        prompt(ctx[b], CTX - 10 * b, vocab, 7 + (unsigned)b);
        together[b] = kv_model_cache_new(m, CTX + QN, &err);
        alone[b] = kv_model_cache_new(m, CTX + QN, &err);
        cr_assert(together[b] && alone[b]);
        cr_assert_eq(kv_model_forward(m, together[b], ctx[b], CTX - 10 * b, NULL, NULL, NULL,
                                      false, &err),
                     0, "%s", err.msg);
        cr_assert_eq(
            kv_model_forward(m, alone[b], ctx[b], CTX - 10 * b, NULL, NULL, NULL, false, &err), 0);
    }
    float *lt = malloc(3 * (size_t)QN * (size_t)vocab * sizeof *lt);
    float *la = malloc((size_t)QN * (size_t)vocab * sizeof *la);
    cr_assert_eq(kv_model_forward_many(m, together, 3, q, QN, lt, true, &err), 0, "%s", err.msg);
    for (int b = 0; b < 3; b++) {
        cr_assert_eq(kv_model_forward_many(m, &alone[b], 1, q, QN, la, true, &err), 0);
        cr_assert(memcmp(lt + (size_t)b * QN * (size_t)vocab, la,
                         (size_t)QN * (size_t)vocab * sizeof *la) == 0,
                  "cache %d: the logits depend on the batch", b);
        const kv_cache_layer *x = &together[b]->layers[1], *y = &alone[b]->layers[1];
        size_t row = (size_t)together[b]->n_kv_heads * (size_t)together[b]->head_dim;
        cr_assert_eq(x->len, y->len);
        cr_assert(memcmp(x->k, y->k, (size_t)x->len * row * sizeof(float)) == 0);
        cr_assert(memcmp(x->v, y->v, (size_t)x->len * row * sizeof(float)) == 0);
        cr_assert_eq(together[b]->next_pos, CTX - 10 * b + QN);
        kv_cache_free(together[b]);
        kv_cache_free(alone[b]);
    }
    free(lt);
    free(la);
    kv_model_free(m);
}

static double rel_diff(const double *a, const double *b, size_t n)
{
    double worst = 0, scale = 1e-30;
    for (size_t i = 0; i < n; i++) {
        worst = fmax(worst, fabs(a[i] - b[i]));
        scale = fmax(scale, fabs(a[i]));
    }
    return worst / scale;
}

Test(split_forward, carried_statistics_are_those_of_one_forward)
{
    kv_model *m = load("tests/data/models/qwen3-f32");
    const kv_model_config *cfg = kv_model_get_config(m);
    kv_error err;
    int32_t ids[CTX + QN];
    prompt(ids, CTX + QN, cfg->vocab, 5);
    /* windows inside the question (4), reaching into the context (20), and
     * the query moments from row 4 with 6 rows kept one by one */
    kv_attn_stats_request whole = {.col_sums = true,
                                   .n_windows = 2,
                                   .windows = {4, 20},
                                   .q_moments = true,
                                   .q_from = 4,
                                   .q_rows = 6};
    kv_cache *one = kv_model_cache_new(m, CTX + QN, &err);
    kv_attn_stats *s1 = kv_model_stats_new(m, one, CTX + QN, &whole, &err);
    cr_assert_eq(kv_model_forward(m, one, ids, CTX + QN, &whole, s1, NULL, false, &err), 0, "%s",
                 err.msg);

    kv_attn_stats_request head, tail = whole;
    kv_attn_stats_request_head(&whole, QN, &head);
    cr_assert_eq(head.n_windows, 1);
    cr_assert_eq(head.windows[0], 20 - QN);
    kv_cache *two = kv_model_cache_new(m, CTX + QN, &err);
    kv_attn_stats *sh = kv_model_stats_new(m, two, CTX, &head, &err);
    cr_assert_eq(kv_model_forward(m, two, ids, CTX, &head, sh, NULL, false, &err), 0, "%s",
                 err.msg);
    kv_attn_stats_request_tail(&tail, &head, CTX);
    kv_attn_stats *st = kv_model_stats_new(m, two, QN, &tail, &err);
    kv_attn_stats_carry(sh, &head, st, &tail, QN, cfg->n_layers);
    cr_assert_eq(kv_model_forward(m, two, ids + CTX, QN, &tail, st, NULL, false, &err), 0, "%s",
                 err.msg);
    size_t cells = (size_t)cfg->n_heads * (size_t)(CTX + QN);
    size_t hd = (size_t)cfg->n_heads * (size_t)cfg->head_dim;
    for (int l = 0; l < cfg->n_layers; l++) {
        cr_assert_leq(rel_diff(s1[l].col_sums, st[l].col_sums, cells), 1e-5, "layer %d", l);
        for (int w = 0; w < 2; w++)
            cr_assert_leq(rel_diff(s1[l].win_sums[w], st[l].win_sums[w], cells), 1e-5,
                          "layer %d window %d", l, whole.windows[w]);
        cr_assert_eq(st[l].q_count, s1[l].q_count);
        cr_assert_leq(rel_diff(s1[l].q_sum, st[l].q_sum, hd), 1e-5);
        cr_assert_leq(rel_diff(s1[l].q_outer, st[l].q_outer, hd * (size_t)cfg->head_dim), 1e-5);
        for (size_t i = 0; i < 6 * hd; i++)
            cr_assert_float_eq(s1[l].q_first[i], st[l].q_first[i], 1e-4);
    }
    kv_model_stats_free(st, cfg->n_layers);
    kv_model_stats_free(sh, cfg->n_layers);
    kv_model_stats_free(s1, cfg->n_layers);
    kv_cache_free(one);
    kv_cache_free(two);
    kv_model_free(m);
}
