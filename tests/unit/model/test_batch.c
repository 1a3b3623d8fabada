/* Batched decoding (kv_generate_batch, kv_model_forward_batch): every config
 * of a sample decoded together gives each config the tokens, logits (bit
 * for bit) and eviction decisions of decoding it alone with the one-token
 * forward, on every test model and the trained demo model, for every
 * policy, in both compute modes and at every instruction-set level this CPU
 * has; rows leave the batch when they stop without changing the others;
 * and a sweep costs one batched forward per step. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "evict/evict.h"
#include "model/generate.h"
#include "support/levels.h"
#include "model/model.h"
#include "support/testutil.h"

static const char *const models[] = {
    "tests/data/models/qwen3-f32",  "tests/data/models/qwen3-bf16",
    "tests/data/models/qwen3-f16",  "tests/data/models/qwen3-bf16-sharded",
    "tests/data/models/qwen2-bf16", "tests/data/models/qwen2-f32-hd16",
    "tests/data/models/llama-f32",  "tests/data/models/llama-bf16-llama3",
    "models/kvbench-retrieval",
};
#define N_MODELS (int)(sizeof models / sizeof models[0])

/* Budget 40 (4 + 20 + 16) under a 96-token prompt: every policy evicts at
 * the prefill and again at every decode step. */
static const char *const policies[] = {
    "{\"algorithm\": \"h2o\", \"apply_rerotation\": false}",
    "{\"algorithm\": \"h2o\", \"apply_rerotation\": true}",
    "{\"algorithm\": \"snapkv\", \"score_aggregation\": \"norm_sum\"}",
    "{\"algorithm\": \"snapkv\", \"apply_rerotation\": false, \"window_size\": 16}",
    "{\"algorithm\": \"streaming\", \"intermediate_size\": 0, \"recent_size\": 36}",
    "{\"algorithm\": \"random\", \"seed\": 3}",
    "{\"algorithm\": \"knorm\", \"positions\": \"compact\"}",
    "{\"algorithm\": \"snapkv\", \"strategy\": \"per_group\", \"group_size\": 4}",
    "{\"algorithm\": \"h2o\", \"strategy\": \"per_head\", \"score_aggregation\": \"norm_sum\"}",
    "{\"algorithm\": \"snapkv\", \"refined_size\": 12, \"apply_rerotation\": false}",
    "{\"algorithm\": \"snapkv\", \"strategy\": \"per_head\", \"refined_size\": 12, "
    "\"kvcrush_anchor\": \"random\"}",
    "{\"algorithm\": \"h2o\", \"refined_size\": 12, \"refined_algorithm\": \"criticalkv\"}",
    "{\"algorithm\": \"h2o\", \"strategy\": \"per_head\", \"refined_size\": 12, "
    "\"refined_algorithm\": \"criticalkv\", \"apply_rerotation\": false}",
    "{\"algorithm\": \"snapkv\", \"layer_budget\": \"pyramid\", \"pyramid_beta\": 4}",
    "{\"algorithm\": \"h2o\", \"strategy\": \"per_head\", \"head_budget\": \"adaptive\"}",
    "{\"algorithm\": \"snapkv\", \"strategy\": \"per_head\", \"head_budget\": \"adaptive\", "
    "\"alpha_safeguard\": 0, \"layer_budget\": \"pyramid\", \"positions\": \"compact\"}",
};
#define N_POLICIES (int)(sizeof policies / sizeof policies[0])
#define N_ROWS     (N_POLICIES + 1) /* row 0: the full cache */
#define PROMPT     96
#define GEN        20

/* One row of the batch: its evictor and everything it saw. */
typedef struct row {
    kv_evictor *ev; /* NULL: full cache */
    kv_attn_stats_request req;
    float *logits; /* [GEN][vocab] of every fed token */
    int n_logits, vocab;
} row;

static int row_step(void *user, kv_cache *c, const kv_attn_stats *stats, int step, kv_error *err)
{
    row *r = user;
    return r->ev ? kv_evictor_step(r->ev, c, &r->req, stats, step, NULL, NULL, err) : 0;
}

static int row_logits(void *user, const float *logits, int n_rows, kv_error *err)
{
    (void)err;
    row *r = user;
    cr_assert_eq(n_rows, 1);
    cr_assert_lt(r->n_logits, GEN);
    memcpy(r->logits + (size_t)r->n_logits++ * (size_t)r->vocab, logits,
           (size_t)r->vocab * sizeof *logits);
    return 0;
}

typedef struct setup {
    kv_model *m;
    kv_evict_model em;
    kv_evict_params ps[N_POLICIES];
    kv_attn_stats_request shared;
    kv_cache *base;
    kv_attn_stats *stats;
    float *last;
    int vocab, n_layers;
    const char *precision, *key_quant; /* the caches' (kv_cache_precision); NULL: f32 */
    bool f32_prompt;   /* the prompt's cache stays F32 (as a run's) whatever the policies' */
    kv_fork_base fork; /* with f32_prompt: the prompt at the policies' precision */
} setup;

/* Loads the model in compute mode `mode` and prefills a pseudo-random
 * prompt once, with the statistics of every policy. */
static void setup_open(setup *s, const char *rel, kv_compute mode)
{
    char *dir = tu_source(rel);
    kv_error err;
    cr_assert_eq(kv_model_load(dir, &s->m, &err), 0, "%s", err.msg);
    cr_assert_eq(kv_model_set_compute(s->m, mode, &err), 0, "%s", err.msg);
    cr_assert_eq(kv_evict_model_load(&s->em, s->m, true, &err), 0, "%s", err.msg);
    free(dir);
    s->vocab = kv_model_get_config(s->m)->vocab;
    s->n_layers = kv_model_get_config(s->m)->n_layers;
    for (int i = 0; i < N_POLICIES; i++) {
        kv_evict_params_default(&s->ps[i]);
        s->ps[i].start_size = 4;
        s->ps[i].recent_size = 16;
        s->ps[i].intermediate_size = 20;
        cJSON *j = cJSON_Parse(policies[i]);
        cr_assert_eq(kv_evict_params_from_json(&s->ps[i], j, &err), 0, "%s", err.msg);
        if (s->precision)
            cr_assert(kv_evict_params_set(&s->ps[i], "kv_cache_precision", s->precision, &err) == 0 &&
                          kv_evict_params_set(&s->ps[i], "key_quant", s->key_quant, &err) == 0,
                      "%s", err.msg);
        cr_assert_eq(kv_evict_params_validate(&s->ps[i], &err), 0, "%s: %s", policies[i], err.msg);
        cJSON_Delete(j);
    }
    cr_assert_eq(kv_evict_stats_request(s->ps, N_POLICIES, true, &s->shared, &err), 0);
    int32_t prompt[PROMPT];
    unsigned seed = 7;
    for (int i = 0; i < PROMPT; i++) {
        seed = seed * 1103515245u + 12345u;
        prompt[i] = (int32_t)((seed >> 8) % (unsigned)s->vocab);
    }
    s->base = kv_model_cache_new(s->m, PROMPT, &err);
    kv_cache_quant q = s->f32_prompt ? (kv_cache_quant){0} : kv_evict_params_cache_quant(&s->ps[0]);
    cr_assert(s->base && kv_cache_set_quant(s->base, &q, &err) == 0, "%s", err.msg);
    s->stats = kv_model_stats_new(s->m, s->base, PROMPT, &s->shared, &err);
    s->last = malloc((size_t)s->vocab * sizeof *s->last);
    cr_assert(s->base && s->stats && s->last);
    cr_assert_eq(
        kv_model_forward(s->m, s->base, prompt, PROMPT, &s->shared, s->stats, s->last, false, &err),
        0, "%s", err.msg);
}

static void setup_close(setup *s)
{
    kv_fork_base_release(&s->fork);
    kv_model_stats_free(s->stats, s->n_layers);
    kv_cache_free(s->base);
    free(s->last);
    kv_evict_model_release(&s->em);
    kv_model_free(s->m);
}

/* Row i's cache forked from the shared prefill under its policy; `shared`:
 * from the prompt stored once for every row at the policy's precision
 * (kv_fork_base_at), else each fork stores the F32 prompt for itself.
 * `copy`: the fork a deep copy of the prompt's cache compressed in place
 * (kv_evictor_step's first step), as forks were made before they borrowed
 * the prompt's rows (kvcache.h): so every comparison with a row decoded
 * alone also checks a borrowing fork against one with rows of its own. */
static kv_cache *row_open(setup *s, int i, row *r, bool shared, bool copy)
{
    kv_error err;
    memset(r, 0, sizeof *r);
    r->vocab = s->vocab;
    r->logits = malloc((size_t)GEN * (size_t)s->vocab * sizeof *r->logits);
    if (i == 0)
        return kv_cache_fork(s->base, PROMPT + GEN + 1, &err);
    r->ev = kv_evictor_new(&s->ps[i - 1], &s->em, &err);
    cr_assert_not_null(r->ev, "%s", err.msg);
    kv_evictor_generation_request(r->ev, &r->req);
    kv_cache *c = NULL;
    kv_cache_quant q = kv_evictor_cache_quant(r->ev);
    if (copy && kv_cache_quant_same(&q, &s->base->quant)) {
        cr_assert(c = kv_cache_fork(s->base, 0, &err), "%s", err.msg);
        cr_assert_eq(kv_evictor_step(r->ev, c, &s->shared, s->stats, 0, NULL, NULL, &err), 0, "%s",
                     err.msg);
        cr_assert(!kv_cache_borrows(c));
        return c;
    }
    s->fork.prompt = s->base;
    const kv_cache *base = shared ? kv_fork_base_at(&s->fork, &q, &err) : s->base;
    cr_assert_not_null(base, "%s", err.msg);
    cr_assert_eq(kv_evictor_fork(r->ev, base, &s->shared, s->stats, &c, NULL, NULL, &err), 0,
                 "%s", err.msg);
    return c;
}

static void row_close(row *r)
{
    kv_evictor_free(r->ev);
    free(r->logits);
}

/* Row i decoded alone the way kvbench decoded before batching: argmax, the
 * one-token kv_model_forward, the policy's step; max_new tokens at most,
 * stopping after `stop_id` (or never, -1). */
static int decode_alone(setup *s, int i, int max_new, int32_t stop_id, int32_t *ids, row *r)
{
    kv_error err;
    kv_cache *c = row_open(s, i, r, false, true);
    float *logits = malloc((size_t)s->vocab * sizeof *logits);
    memcpy(logits, s->last, (size_t)s->vocab * sizeof *logits);
    int n = 0;
    for (;;) {
        int32_t id = kv_argmax(logits, s->vocab);
        ids[n++] = id;
        if (n == max_new || id == stop_id)
            break;
        kv_attn_stats *st = NULL;
        if (r->ev && (r->req.col_sums || r->req.n_windows))
            st = kv_model_stats_new(s->m, c, 1, &r->req, &err);
        cr_assert_eq(
            kv_model_forward(s->m, c, &id, 1, st ? &r->req : NULL, st, logits, false, &err), 0,
            "%s", err.msg);
        row_logits(r, logits, 1, &err);
        cr_assert_eq(row_step(r, c, st, n, &err), 0, "%s", err.msg);
        kv_model_stats_free(st, s->n_layers);
    }
    free(logits);
    kv_cache_free(c);
    return n;
}

/* Every policy and the full cache decoded together vs each alone. Rows get
 * different lengths, and one stops at a stop id, so rows leave the batch at
 * different steps. */
static void check_model_at(const char *rel, kv_compute mode, const char *precision,
                           const char *key_quant, bool f32_prompt)
{
    setup s = {.precision = precision, .key_quant = key_quant, .f32_prompt = f32_prompt};
    setup_open(&s, rel, mode);
    cr_assert_eq(s.base->quant.precision,
                 precision && !f32_prompt ? kv_precision_parse(precision) : KV_PREC_F32);
    int32_t alone[N_ROWS][GEN], stop_of[N_ROWS];
    int n_alone[N_ROWS], max_new[N_ROWS];
    row ra[N_ROWS], rb[N_ROWS];
    for (int i = 0; i < N_ROWS; i++) {
        max_new[i] = GEN - i % 7; /* 14..20 */
        stop_of[i] = -1;
        n_alone[i] = decode_alone(&s, i, max_new[i], -1, alone[i], &ra[i]);
    }
    /* Row 3 also stops at the id it generates 5th (its first occurrence). */
    stop_of[3] = alone[3][4];
    row_close(&ra[3]);
    n_alone[3] = decode_alone(&s, 3, max_new[3], stop_of[3], alone[3], &ra[3]);
    cr_assert_leq(n_alone[3], 5);

    kv_cache *caches[N_ROWS];
    kv_generate_opts opts[N_ROWS];
    const kv_generate_opts *op[N_ROWS];
    const float *lasts[N_ROWS];
    kv_generation outs[N_ROWS];
    for (int i = 0; i < N_ROWS; i++) {
        caches[i] = row_open(&s, i, &rb[i], s.f32_prompt, false);
        /* an F32 fork of one set borrows (with rerotation, its values) */
        const kv_evict_params *p = i > 0 ? &s.ps[i - 1] : NULL;
        bool borrows = p && !kv_cache_stores(caches[i]) && strcmp(p->strategy, "per_head") != 0;
        if (borrows)
            cr_assert(p->apply_rerotation ? caches[i]->layers[0].k_stored == 0
                                          : caches[i]->layers[0].k_stored > 0,
                      "%s row %d: keys borrowed unless they turn", rel, i);
        cr_assert_eq(kv_cache_borrows(caches[i]), borrows, "%s row %d (%s)", rel, i,
                     p ? policies[i - 1] : "full");
        opts[i] = (kv_generate_opts){.max_new_tokens = max_new[i],
                                     .ignore_eos = true,
                                     .stop_ids = &stop_of[i],
                                     .n_stop_ids = stop_of[i] >= 0,
                                     .on_step = row_step,
                                     .on_logits = row_logits,
                                     .stats_req = rb[i].req,
                                     .user = &rb[i]};
        op[i] = &opts[i];
        lasts[i] = s.last;
    }
    kv_error err;
    int forwards = -1;
    cr_assert_eq(kv_generate_batch(s.m, N_ROWS, caches, lasts, op, outs, &forwards, &err), 0, "%s",
                 err.msg);
    int most = 0;
    for (int i = 0; i < N_ROWS; i++) {
        cr_assert_eq(outs[i].n, n_alone[i], "%s row %d: %d tokens batched, %d alone", rel, i,
                     outs[i].n, n_alone[i]);
        cr_assert_eq(memcmp(outs[i].ids, alone[i], (size_t)n_alone[i] * sizeof(int32_t)), 0,
                     "%s row %d (%s): tokens differ", rel, i, i ? policies[i - 1] : "full");
        cr_assert_eq(rb[i].n_logits, n_alone[i] - 1, "one forward per fed token");
        cr_assert_eq(outs[i].n_decode_forwards, n_alone[i] - 1);
        cr_assert_eq(memcmp(ra[i].logits, rb[i].logits,
                            (size_t)rb[i].n_logits * (size_t)s.vocab * sizeof(float)),
                     0, "%s, %s, level %s, row %d: logits differ", rel, kv_compute_name(mode),
                     kv_isa_name(kv_isa_active()), i);
        most = n_alone[i] - 1 > most ? n_alone[i] - 1 : most;
        kv_generation_free(&outs[i]);
        kv_cache_free(caches[i]);
        row_close(&ra[i]);
        row_close(&rb[i]);
    }
    cr_assert_eq(outs[3].stop, KV_STOP_ID);
    cr_assert_eq(forwards, most, "one batched forward per step of the longest row");
    setup_close(&s);
}

static void check_model(const char *rel, kv_compute mode)
{
    check_model_at(rel, mode, NULL, NULL, false);
}

static void check_level(kv_isa isa)
{
    (void)isa; /* set by tu_each_level */
    for (int i = 0; i < N_MODELS; i++) {
        check_model(models[i], KV_COMPUTE_F32);
        check_model(models[i], KV_COMPUTE_BF16);
    }
}

Test(batch, every_policy_equals_decoding_alone_on_every_model, .timeout = 600)
{
    tu_each_level(check_level);
}

/* The same over caches stored at another precision: rows read their own
 * stored keys and values batched as alone. */
static void check_stored(kv_isa isa)
{
    (void)isa;
    static const char *const precisions[][2] = {
        {"u8", "by_token"}, {"u4", "by_channel"}, {"bf16", "by_token"}};
    for (size_t p = 0; p < sizeof precisions / sizeof *precisions; p++)
        check_model_at("tests/data/models/qwen3-bf16", KV_COMPUTE_F32, precisions[p][0],
                       precisions[p][1], false);
}

Test(batch, every_policy_equals_decoding_alone_on_stored_caches, .timeout = 600)
{
    tu_each_level(check_stored);
}

/* A run's prompt is F32 and its configs store at their own precision: the
 * batched rows fork from the prompt stored once per precision
 * (kv_fork_base_at), each row alone from the F32 prompt that its fork
 * stores for itself; tokens and logits must agree. */
Test(batch, forks_from_one_stored_prompt_equal_forks_that_store_it_each, .timeout = 600)
{
    static const char *const precisions[][2] = {{"u8", "by_token"}, {"u4", "by_channel"}};
    for (size_t p = 0; p < sizeof precisions / sizeof *precisions; p++)
        check_model_at("tests/data/models/qwen3-bf16", KV_COMPUTE_F32, precisions[p][0],
                       precisions[p][1], true);
}

/* The forward itself: a batch over caches of different lengths and
 * positions gives each row the keys, values, positions and logits of the
 * one-token forward on a copy of its cache. */
static void check_forward(kv_compute mode)
{
    setup s = {0};
    setup_open(&s, "tests/data/models/qwen3-bf16", mode);
    kv_error err;
    enum { B = 5 }; /* partial tiles of input rows at every level */
    kv_cache *a[B], *b[B];
    int32_t tok[B] = {5, 17, 5, 9, 17};
    for (int i = 0; i < B; i++) {
        a[i] = kv_cache_fork(s.base, 0, &err);
        for (int l = 0; l < s.n_layers; l++) { /* different lengths per row */
            a[i]->layers[l].len -= 10 * i;
            a[i]->layers[l].vlen_n = a[i]->layers[l].len;
        }
        a[i]->next_pos += 3 * i;
        b[i] = kv_cache_fork(a[i], 0, &err);
    }
    float *la = malloc(B * (size_t)s.vocab * sizeof *la),
          *lb = malloc(B * (size_t)s.vocab * sizeof *lb);
    for (int i = 0; i < B; i++)
        cr_assert_eq(kv_model_forward(s.m, a[i], &tok[i], 1, NULL, NULL, la + (size_t)i * s.vocab,
                                      false, &err),
                     0, "%s", err.msg);
    cr_assert_eq(kv_model_forward_batch(s.m, b, tok, B, NULL, NULL, lb, &err), 0, "%s", err.msg);
    cr_assert_eq(memcmp(la, lb, B * (size_t)s.vocab * sizeof *la), 0,
                 "%s, level %s: logits are bit-identical", kv_compute_name(mode),
                 kv_isa_name(kv_isa_active()));
    size_t row = (size_t)kv_cache_row(a[0]);
    for (int i = 0; i < B; i++) {
        cr_assert_eq(a[i]->next_pos, b[i]->next_pos);
        for (int l = 0; l < s.n_layers; l++) {
            const kv_cache_layer *x = &a[i]->layers[l], *y = &b[i]->layers[l];
            cr_assert_eq(x->len, y->len);
            cr_assert_eq(memcmp(x->k, y->k, (size_t)x->len * row * sizeof(float)), 0);
            cr_assert_eq(memcmp(x->v, y->v, (size_t)x->len * row * sizeof(float)), 0);
            cr_assert_eq(
                memcmp(x->pos, y->pos, (size_t)x->len * (size_t)a[i]->n_kv_heads * sizeof(int32_t)),
                0);
        }
    }
    /* One cache in two rows would append twice to it: refused. */
    kv_cache *twice[2] = {b[0], b[0]};
    cr_assert_eq(kv_model_forward_batch(s.m, twice, tok, 2, NULL, NULL, lb, &err), -1);
    cr_assert(strstr(err.msg, "share one cache"), "%s", err.msg);
    for (int i = 0; i < B; i++) {
        kv_cache_free(a[i]);
        kv_cache_free(b[i]);
    }
    free(la);
    free(lb);
    setup_close(&s);
}

static void check_forward_level(kv_isa isa)
{
    (void)isa; /* set by tu_each_level */
    check_forward(KV_COMPUTE_F32);
    check_forward(KV_COMPUTE_BF16);
}

Test(batch, forward_rows_equal_one_token_forwards)
{
    tu_each_level(check_forward_level);
}

static double max_diff(const float *a, const float *b, size_t n)
{
    double d = 0;
    for (size_t i = 0; i < n; i++)
        d = fmax(d, fabs((double)a[i] - b[i]));
    return d;
}

/* A cache whose KV heads keep different numbers of tokens (AdaKV: each
 * shorter head has a gap that attention masks): a forward of several rows,
 * which takes the blocked prefill path, gives the logits of feeding the
 * same tokens one at a time, which takes the decode path. */
Test(batch, rows_over_head_gaps_equal_one_token_forwards)
{
    setup s = {0};
    setup_open(&s, "tests/data/models/qwen3-bf16", KV_COMPUTE_F32);
    int ada = -1;
    for (int i = 0; i < N_POLICIES; i++)
        if (strcmp(s.ps[i].head_budget, "adaptive") == 0 && ada < 0)
            ada = i;
    cr_assert_geq(ada, 0);
    row r;
    kv_cache *a = row_open(&s, ada + 1, &r, false, false), *b;
    kv_error err;
    bool gaps = false;
    for (int l = 0; l < s.n_layers; l++)
        gaps = gaps || a->layers[l].gap;
    cr_assert(gaps, "the policy left no gap: the test would not test it");
    cr_assert_not_null(b = kv_cache_fork(a, 0, &err), "%s", err.msg);
    enum { N = 12 };
    int32_t tok[N];
    for (int i = 0; i < N; i++)
        tok[i] = (int32_t)((7 * i + 3) % s.vocab);
    float *la = malloc(N * (size_t)s.vocab * sizeof *la),
          *lb = malloc((size_t)s.vocab * sizeof *lb);
    cr_assert_eq(kv_model_forward(s.m, a, tok, N, NULL, NULL, la, true, &err), 0, "%s", err.msg);
    for (int i = 0; i < N; i++) {
        cr_assert_eq(kv_model_forward(s.m, b, &tok[i], 1, NULL, NULL, lb, false, &err), 0, "%s",
                     err.msg);
        double d = max_diff(la + (size_t)i * s.vocab, lb, (size_t)s.vocab);
        cr_assert_leq(d, 1e-4, "row %d: logits differ by %g", i, d);
    }
    kv_cache_free(a);
    kv_cache_free(b);
    row_close(&r);
    free(la);
    free(lb);
    setup_close(&s);
}
