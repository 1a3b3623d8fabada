/* kvcore/model against the PyTorch reference (tests/data/models, made by
 * tools/make_fixtures.sh): logits of every position within 1e-4, in one
 * prefill, in small chunks, and token by token; 64 greedy tokens identical. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvcache.h"
#include "model.h"
#include "npy.h"
#include "testutil.h"

#define TOL 1e-4

static const char *const models[] = {
    "qwen3-f32",      "qwen3-bf16",        "qwen3-f16", "qwen3-bf16-sharded",
    "qwen2-bf16",     "qwen2-f32-hd16",    "llama-f32", "llama-bf16-llama3",
};
#define N_MODELS (sizeof models / sizeof models[0])

typedef struct fixture {
    char *dir;
    kv_model *m;
    int32_t ids[256];  /* prompt + the first 63 generated tokens */
    int n_prompt, n_all;
    int32_t gen[64];
    float *ref;        /* [n_all][vocab] */
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
 * chunks of `chunk` rows. */
static void check_prefill(const char *name, int chunk)
{
    fixture f;
    fixture_load(&f, name);
    kv_model_set_chunk(f.m, chunk);
    kv_error err;
    kv_cache *c = kv_model_cache_new(f.m, 4, &err);
    float *logits = malloc((size_t)f.n_all * f.vocab * sizeof *logits);
    cr_assert_eq(kv_model_forward(f.m, c, f.ids, f.n_all, NULL, NULL, logits, true, &err), 0,
                 "%s", err.msg);
    double d = max_diff(logits, f.ref, (size_t)f.n_all * f.vocab);
    cr_expect_leq(d, TOL, "%s (chunk %d): max |logit - reference| = %g", name, chunk, d);
    cr_assert_eq(c->next_pos, f.n_all);
    for (int l = 0; l < c->n_layers; l++)
        for (int i = 0; i < f.n_all; i++)
            cr_assert_eq(c->layers[l].pos[i], i);
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

/* Prefill the prompt, then feed the reference's greedy tokens one by one:
 * each step's logits match the reference row and its argmax is the
 * reference's next token. */
Test(model, greedy_decode_matches_reference)
{
    for (size_t mi = 0; mi < N_MODELS; mi++) {
        fixture f;
        fixture_load(&f, models[mi]);
        kv_error err;
        kv_cache *c = kv_model_cache_new(f.m, 1, &err);
        float *logits = malloc(f.vocab * sizeof *logits);
        cr_assert_eq(kv_model_forward(f.m, c, f.ids, f.n_prompt, NULL, NULL, logits, false, &err),
                     0, "%s", err.msg);
        for (int k = 0; k < 64; k++) {
            const float *ref = f.ref + (size_t)(f.n_prompt - 1 + k) * f.vocab;
            double d = max_diff(logits, ref, f.vocab);
            cr_expect_leq(d, TOL, "%s step %d: max diff %g", models[mi], k, d);
            int tok = argmax(logits, f.vocab);
            cr_assert_eq(tok, f.gen[k], "%s: greedy token %d is %d, reference %d", models[mi], k,
                         tok, f.gen[k]);
            if (k < 63)
                cr_assert_eq(kv_model_forward(f.m, c, &tok, 1, NULL, NULL, logits, false, &err), 0,
                             "%s", err.msg);
        }
        free(logits);
        kv_cache_free(c);
        fixture_free(&f);
    }
}
