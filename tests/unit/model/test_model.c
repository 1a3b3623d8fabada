/* kvcore/model against the PyTorch reference (tests/data/models, made by
 * tools/make_fixtures.sh): logits of every position within 1e-4, in one
 * prefill, in small chunks, and token by token; 64 greedy tokens identical;
 * at every instruction-set level this CPU has. BF16 compute within the
 * bounds of README "Compute modes". */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/kvcache.h"
#include "support/levels.h"
#include "model/model.h"
#include "util/npy.h"
#include "support/testutil.h"

#define TOL 1e-4

static const char *const models[] = {
    "qwen3-f32",  "qwen3-bf16",     "qwen3-f16", "qwen3-bf16-sharded",
    "qwen2-bf16", "qwen2-f32-hd16", "llama-f32", "llama-bf16-llama3",
};
#define N_MODELS (sizeof models / sizeof models[0])

typedef struct fixture {
    char *dir;
    kv_model *m;
    int32_t ids[256]; /* prompt + the first 63 generated tokens */
    int n_prompt, n_all;
    int32_t gen[64];
    float *ref; /* [n_all][vocab] */
    size_t ref_rows, vocab;
} fixture;

static int read_ids(const char *path, int32_t *out, int max)
{
    size_t len;
    char *s = tu_slurp(path, &len);
    int n = 0;
    for (char *p = s; *p && n < max;) {
        out[n++] = (int32_t)strtol(p, &p, 10);
        while (*p == ',' || *p == '\n' || *p == ' ')
            p++;
    }
    free(s);
    return n;
}

static void fixture_load(fixture *f, const char *name)
{
    memset(f, 0, sizeof *f);
    char rel[256], *path;
    snprintf(rel, sizeof rel, "tests/data/models/%s", name);
    f->dir = tu_source(rel);
    kv_error err;
    cr_assert_eq(kv_model_load(f->dir, &f->m, &err), 0, "%s: %s", name, err.msg);
    path = tu_source(strcat(strcpy((char[300]){0}, rel), "/ref_ids.txt"));
    f->n_prompt = read_ids(path, f->ids, 256);
    free(path);
    path = tu_source(strcat(strcpy((char[300]){0}, rel), "/ref_gen.txt"));
    cr_assert_eq(read_ids(path, f->gen, 64), 64, "%s: ref_gen.txt", name);
    free(path);
    memcpy(f->ids + f->n_prompt, f->gen, 63 * sizeof(int32_t));
    f->n_all = f->n_prompt + 63;
    path = tu_source(strcat(strcpy((char[300]){0}, rel), "/ref_logits.npy"));
    cr_assert_eq(kv_npy_read(path, &f->ref, &f->ref_rows, &f->vocab, &err), 0, "%s", err.msg);
    free(path);
    cr_assert_eq(f->ref_rows, (size_t)f->n_all);
    cr_assert_eq(f->vocab, (size_t)kv_model_get_config(f->m)->vocab);
}

static void fixture_free(fixture *f)
{
    kv_model_free(f->m);
    free(f->ref);
    free(f->dir);
}

static double max_diff(const float *a, const float *b, size_t n)
{
    double d = 0;
    for (size_t i = 0; i < n; i++)
        if (!(fabs((double)a[i] - b[i]) <= d))
            d = isnan(a[i]) ? INFINITY : fabs((double)a[i] - b[i]);
    return d;
}

static int argmax(const float *x, size_t n)
{
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return (int)best;
}

/* Every position's logits in one call, with the prompt split into query
 * chunks of `chunk` rows (chunk <= 0: n_all + chunk rows, so the last
 * chunk holds -chunk rows). */
static void check_prefill(const char *name, int chunk)
{
    fixture f;
    fixture_load(&f, name);
    if (chunk <= 0)
        chunk += f.n_all;
    kv_model_set_chunk(f.m, chunk);
    kv_error err;
    kv_cache *c = kv_model_cache_new(f.m, 4, &err);
    float *logits = malloc((size_t)f.n_all * f.vocab * sizeof *logits);
    cr_assert_eq(kv_model_forward(f.m, c, f.ids, f.n_all, NULL, NULL, logits, true, &err), 0, "%s",
                 err.msg);
    double d = max_diff(logits, f.ref, (size_t)f.n_all * f.vocab);
    cr_expect_leq(d, TOL, "%s (chunk %d): max |logit - reference| = %g", name, chunk, d);
    cr_assert_eq(c->next_pos, f.n_all);
    for (int l = 0; l < c->n_layers; l++)
        for (int i = 0; i < f.n_all; i++)
            for (int h = 0; h < c->n_kv_heads; h++)
                cr_assert_eq(kv_cache_pos(c, l, i, h), i);
    free(logits);
    kv_cache_free(c);
    fixture_free(&f);
}

Test(model, prefill_logits_of_every_position_match_reference)
{
    for (size_t i = 0; i < N_MODELS; i++)
        check_prefill(models[i], 512);
}

Test(model, chunked_prefill_matches_reference)
{
    for (size_t i = 0; i < N_MODELS; i++)
        check_prefill(models[i], 7);
}

/* A long chunk followed by a remainder of a few rows: the remainder takes
 * the decode attention path inside a prefill (a prompt 2 tokens longer than
 * the chunk once divided by zero there). */
Test(model, prefill_ending_in_a_short_chunk_matches_reference)
{
    for (size_t i = 0; i < N_MODELS; i++)
        for (int rest = 1; rest <= 4; rest++)
            check_prefill(models[i], -rest);
}

/* Prefill the prompt, then feed the reference's greedy tokens one by one:
 * each step's logits match the reference row and its argmax is the
 * reference's next token. */
static void check_greedy(const char *name)
{
    fixture f;
    fixture_load(&f, name);
    kv_error err;
    kv_cache *c = kv_model_cache_new(f.m, 1, &err);
    float *logits = malloc(f.vocab * sizeof *logits);
    cr_assert_eq(kv_model_forward(f.m, c, f.ids, f.n_prompt, NULL, NULL, logits, false, &err), 0,
                 "%s", err.msg);
    for (int k = 0; k < 64; k++) {
        const float *ref = f.ref + (size_t)(f.n_prompt - 1 + k) * f.vocab;
        double d = max_diff(logits, ref, f.vocab);
        cr_expect_leq(d, TOL, "%s step %d: max diff %g", name, k, d);
        int tok = argmax(logits, f.vocab);
        cr_assert_eq(tok, f.gen[k], "%s: greedy token %d is %d, reference %d", name, k, tok,
                     f.gen[k]);
        if (k < 63)
            cr_assert_eq(kv_model_forward(f.m, c, &tok, 1, NULL, NULL, logits, false, &err), 0,
                         "%s", err.msg);
    }
    free(logits);
    kv_cache_free(c);
    fixture_free(&f);
}

Test(model, greedy_decode_matches_reference)
{
    for (size_t mi = 0; mi < N_MODELS; mi++)
        check_greedy(models[mi]);
}

/* The reference checks above (which ran at the CPU's best level) at level
 * isa (tests/support/levels.h). */
static void check_level(kv_isa isa)
{
    (void)isa; /* set by tu_each_level */
    for (size_t i = 0; i < N_MODELS; i++) {
        check_prefill(models[i], 512);
        check_prefill(models[i], 7);
        check_prefill(models[i], -2);
        check_greedy(models[i]);
    }
}

Test(model, reference_at_every_level_the_cpu_has)
{
    tu_each_level(check_level);
}

/* Prefill without statistics runs the blocked (flash) attention, with them
 * the full-softmax one: over 700 positions (3 tiles of keys, 6 blocks of
 * query rows, partly masked tiles, a chunk boundary) both give the same
 * logits. (The attention code is the same in BF16 mode, where rounding the
 * next matmul's inputs turns last-bit differences into BF16 steps.) */
Test(model, flash_attention_matches_the_full_softmax_path_over_many_tiles)
{
    fixture f;
    fixture_load(&f, "qwen3-f32");
    kv_error err;
    kv_model_set_chunk(f.m, 600);
    enum { N = 700 };
    int32_t ids[N];
    for (int i = 0; i < N; i++)
        ids[i] = (int32_t)((i * 7919u + 13u) % f.vocab);
    float *a = malloc((size_t)N * f.vocab * sizeof *a),
          *b = malloc((size_t)N * f.vocab * sizeof *b);
    kv_cache *c = kv_model_cache_new(f.m, N, &err);
    cr_assert_eq(kv_model_forward(f.m, c, ids, N, NULL, NULL, a, true, &err), 0, "%s", err.msg);
    kv_cache_free(c);
    c = kv_model_cache_new(f.m, N, &err);
    kv_attn_stats_request one = {.col_sums = true};
    kv_attn_stats *st = kv_model_stats_new(f.m, c, N, &one, &err);
    cr_assert_eq(kv_model_forward(f.m, c, ids, N, &one, st, b, true, &err), 0, "%s", err.msg);
    double d = max_diff(a, b, (size_t)N * f.vocab);
    cr_expect_leq(d, 1e-5, "flash vs full softmax: max diff %g", d);
    kv_model_stats_free(st, kv_model_get_config(f.m)->n_layers);
    kv_cache_free(c);
    free(a);
    free(b);
    fixture_free(&f);
}

/* ------------------------------------------------------------- BF16 mode */

#define BF16_MAX_DIFF 0.25
#define BF16_MIN_TOP1 0.95

/* BF16 mode against the F32 reference, teacher-forced (every position reads
 * the reference's tokens, so one early flip does not count as many): the
 * largest |logit difference| and the share of positions whose top token is
 * the reference's. chunk: query rows per prefill call (1: token by token,
 * the GEMV path). */
static void bf16_agreement(fixture *f, int chunk, double *max_d, double *top1)
{
    kv_error err;
    kv_cache *c = kv_model_cache_new(f->m, 4, &err);
    float *logits = malloc((size_t)f->n_all * f->vocab * sizeof *logits);
    kv_model_set_chunk(f->m, chunk);
    for (int s = 0; s < f->n_all; s += chunk) {
        int n = f->n_all - s < chunk ? f->n_all - s : chunk;
        cr_assert_eq(kv_model_forward(f->m, c, f->ids + s, n, NULL, NULL,
                                      logits + (size_t)s * f->vocab, true, &err),
                     0, "%s", err.msg);
    }
    int same = 0;
    for (int i = 0; i < f->n_all; i++) {
        const float *got = logits + (size_t)i * f->vocab, *ref = f->ref + (size_t)i * f->vocab;
        same += argmax(got, f->vocab) == argmax(ref, f->vocab);
    }
    *max_d = max_diff(logits, f->ref, (size_t)f->n_all * f->vocab);
    *top1 = (double)same / f->n_all;
    free(logits);
    kv_cache_free(c);
}

Test(model, bf16_mode_stays_close_to_the_f32_reference)
{
    for (size_t i = 0; i < N_MODELS; i++) {
        fixture f;
        fixture_load(&f, models[i]);
        kv_error err;
        cr_assert_eq(kv_model_set_compute(f.m, KV_COMPUTE_BF16, &err), 0, "%s", err.msg);
        cr_assert_eq(kv_model_compute(f.m), KV_COMPUTE_BF16);
        static const int chunks[] = {512, 7, 1};
        for (int k = 0; k < 3; k++) {
            double d, top1;
            bf16_agreement(&f, chunks[k], &d, &top1);
            if (getenv("KVB_PRINT_BF16"))
                printf("%s chunk %d: max |dlogit| %.4f, top-1 %.1f %%\n", models[i], chunks[k], d,
                       100 * top1);
            cr_expect_leq(d, BF16_MAX_DIFF, "%s (chunk %d): max |logit - f32 reference| = %g",
                          models[i], chunks[k], d);
            cr_expect_geq(top1, BF16_MIN_TOP1, "%s (chunk %d): same top-1 at %.1f %% of positions",
                          models[i], chunks[k], 100 * top1);
            /* BF16 is not F32: a mode that changed nothing would pass above */
            cr_expect_gt(d, 1e-4, "%s (chunk %d): bf16 logits equal f32's", models[i], chunks[k]);
        }
        /* rounded F32/F16 weights cannot go back */
        bool rounded = strstr(models[i], "f32") || strstr(models[i], "f16");
        cr_expect_eq(kv_model_set_compute(f.m, KV_COMPUTE_F32, &err), rounded ? -1 : 0, "%s",
                     models[i]);
        fixture_free(&f);
    }
}

/* ------------------------------------------------------ attention statistics */

typedef struct stats_run {
    kv_attn_stats *s; /* [n_layers] */
    int n_layers;
} stats_run;

static const kv_attn_stats_request req3 = {
    .col_sums = true, .n_windows = 3, .windows = {1, 8, 100}};

/* Prefill of the 40 prompt tokens with statistics, in chunks of `chunk`. */
static stats_run prefill_stats(fixture *f, int chunk)
{
    kv_error err;
    kv_model_set_chunk(f->m, chunk);
    kv_cache *c = kv_model_cache_new(f->m, 4, &err);
    stats_run r = {kv_model_stats_new(f->m, c, f->n_prompt, &req3, &err),
                   kv_model_get_config(f->m)->n_layers};
    cr_assert_not_null(r.s, "%s", err.msg);
    cr_assert_eq(kv_model_forward(f->m, c, f->ids, f->n_prompt, &req3, r.s, NULL, false, &err), 0,
                 "%s", err.msg);
    kv_cache_free(c);
    return r;
}

static double stats_diff(const double *a, const double *b, size_t n)
{
    double d = 0;
    for (size_t i = 0; i < n; i++)
        d = fmax(d, fabs(a[i] - b[i]));
    return d;
}

/* Column sums of the chunked (sgemm) path equal the sums of the rows the
 * decode (dot product) path reports one token at a time; every row of
 * probabilities sums to one, so a window of W rows sums to min(W, P). */
Test(attn_stats, prefill_sums_equal_token_by_token_rows)
{
    fixture f;
    fixture_load(&f, "qwen2-bf16");
    const kv_model_config *cfg = kv_model_get_config(f.m);
    int P = f.n_prompt, H = cfg->n_heads, L = cfg->n_layers;
    stats_run big = prefill_stats(&f, 512), small = prefill_stats(&f, 7);

    /* Token by token: row t of every layer and head, into [L][H][P][P]. */
    double *rows = calloc((size_t)L * H * P * P, sizeof *rows);
    kv_error err;
    kv_cache *c = kv_model_cache_new(f.m, 4, &err);
    kv_attn_stats_request one = {.col_sums = true};
    for (int t = 0; t < P; t++) {
        kv_attn_stats *s = kv_model_stats_new(f.m, c, 1, &one, &err);
        cr_assert_eq(kv_model_forward(f.m, c, &f.ids[t], 1, &one, s, NULL, false, &err), 0, "%s",
                     err.msg);
        for (int l = 0; l < L; l++) {
            cr_assert_eq(s[l].n_keys, t + 1);
            for (int h = 0; h < H; h++)
                memcpy(rows + (((size_t)l * H + h) * P + t) * P,
                       s[l].col_sums + (size_t)h * (t + 1), (size_t)(t + 1) * sizeof(double));
        }
        kv_model_stats_free(s, L);
    }
    kv_cache_free(c);

    double *want = malloc((size_t)H * P * sizeof *want);
    for (int l = 0; l < L; l++) {
        for (int wi = -1; wi < req3.n_windows; wi++) {
            int W = wi < 0 ? P : req3.windows[wi];
            memset(want, 0, (size_t)H * P * sizeof *want);
            for (int h = 0; h < H; h++)
                for (int t = (P - W > 0 ? P - W : 0); t < P; t++)
                    for (int j = 0; j < P; j++)
                        want[(size_t)h * P + j] += rows[(((size_t)l * H + h) * P + t) * P + j];
            for (int v = 0; v < 2; v++) {
                kv_attn_stats *s = &(v ? small : big).s[l];
                cr_assert_eq(s->n_keys, P);
                const double *got = wi < 0 ? s->col_sums : s->win_sums[wi];
                double d = stats_diff(got, want, (size_t)H * P);
                cr_expect_leq(d, 1e-5, "layer %d window %d (chunk %s): max diff %g", l, W,
                              v ? "7" : "512", d);
                double total = 0;
                for (int j = 0; j < P; j++)
                    total += got[j];
                cr_expect(fabs(total - (W < P ? W : P)) < 1e-4, "head 0 sums to %g", total);
            }
        }
    }
    kv_model_stats_free(big.s, L);
    kv_model_stats_free(small.s, L);
    free(want);
    free(rows);
    fixture_free(&f);
}

/* Attention is causal by slot order: after compaction, new tokens attend to
 * the surviving slots and keep RoPE positions from next_pos. A compacted
 * cache equals one built by feeding only the kept tokens at their original
 * positions, which the forward cannot do directly; so check the contract on
 * positions and on the statistics' width instead. */
Test(attn_stats, compacted_cache_positions_and_widths)
{
    fixture f;
    fixture_load(&f, "qwen3-f32");
    kv_error err;
    kv_cache *c = kv_model_cache_new(f.m, 4, &err);
    cr_assert_eq(kv_model_forward(f.m, c, f.ids, 10, NULL, NULL, NULL, false, &err), 0, "%s",
                 err.msg);
    int keep[] = {0, 1, 7, 8, 9};
    for (int l = 0; l < c->n_layers; l++)
        cr_assert_eq(kv_cache_compact(c, l, keep, 5, &err), 0);
    kv_attn_stats_request one = {.col_sums = true};
    kv_attn_stats *s = kv_model_stats_new(f.m, c, 2, &one, &err);
    cr_assert_eq(s[0].n_keys, 7);
    cr_assert_eq(kv_model_forward(f.m, c, f.ids + 10, 2, &one, s, NULL, false, &err), 0, "%s",
                 err.msg);
    for (int l = 0; l < c->n_layers; l++) {
        cr_assert_eq(c->layers[l].len, 7);
        for (int h = 0; h < c->n_kv_heads; h++) {
            cr_assert_eq(kv_cache_pos(c, l, 4, h), 9);
            cr_assert_eq(kv_cache_pos(c, l, 5, h), 10);
            cr_assert_eq(kv_cache_pos(c, l, 6, h), 11);
        }
        /* first new row sees 6 slots, second 7: together 2 */
        double total = 0;
        for (int j = 0; j < 7; j++)
            total += s[l].col_sums[j];
        cr_assert(fabs(total - 2) < 1e-5);
        cr_assert(s[l].col_sums[6] > 0);
    }
    cr_assert_eq(c->next_pos, 12);
    /* a stats buffer of the wrong width is refused */
    kv_attn_stats *bad = kv_model_stats_new(f.m, c, 2, &one, &err);
    cr_assert_neq(kv_model_forward(f.m, c, f.ids, 1, &one, bad, NULL, false, &err), 0);
    cr_assert(strstr(err.msg, "attention statistics"), "%s", err.msg);
    kv_model_stats_free(bad, c->n_layers);
    kv_model_stats_free(s, c->n_layers);
    kv_cache_free(c);
    fixture_free(&f);
}
