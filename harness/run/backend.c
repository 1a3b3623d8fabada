#include "run/backend.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "evict/evict.h"
#include "model/generate.h"
#include "model/kernels.h"
#include "model/model.h"
#include "model/model_config.h"
#include "tokenizer/tokenizer.h"
#include "util/pool.h"

typedef struct engine {
    const kb_matrix *m;
    kv_model *model;
    kv_tokenizer *tok;
    kv_evict_model em;
    bool em_loaded;
    kv_evict_params *params; /* [n_configs]; unused for configs[0] (full cache) */
    kv_evictor **ev;         /* [n_configs]; NULL for the full cache */
    kv_cache_quant *quant;   /* [n_configs]; a full cache's precision (F32: the
                                baseline, which takes the prefilled cache over) */
} engine;

/* A sample's prefill. With a query-agnostic config pending and a context
 * part, the prompt is split (docs/eviction.md, "Query-agnostic"): base
 * then holds the context only, stats are the context's, and the question
 * ids wait for decode_batch. */
typedef struct prefill_state {
    kv_cache *base;
    kv_fork_base fork; /* base at the configs' other precisions, for their forks */
    kv_attn_stats *stats; /* [n_layers] of the prompt's (split: the context's) forward */
    kv_attn_stats_request req;
    float *logits; /* [vocab] of the last prompt position (split: after the question) */
    int32_t *stop;
    int n_stop;
    int max_new;
    int n_prompt;
    int n_context;     /* the context part's tokens */
    bool split;        /* base holds the context part only */
    int32_t *question; /* split: ids[n_context..n_prompt) */
} prefill_state;

static bool agnostic(const engine *e, size_t config)
{
    return e->ev[config] && !e->params[config].query_aware;
}

/* The F32 full cache: its row takes the prefilled cache over, after every
 * other row has copied from it. */
static bool takes_base(const engine *e, size_t config)
{
    return !e->ev[config] && e->quant[config].precision == KV_PREC_F32;
}

/* ---- prefill once, decode per config ---- */

static void prefill_free(void *ctx, void *state)
{
    engine *e = ctx;
    prefill_state *st = state;
    if (!st)
        return;
    kv_fork_base_release(&st->fork);
    kv_cache_free(st->base);
    kv_model_stats_free(st->stats, kv_model_get_config(e->model)->n_layers);
    free(st->logits);
    free(st->stop);
    free(st->question);
    free(st);
}

/* The union request of the pending configs that are (or are not)
 * query-agnostic, for their prefill. */
static int request_of(engine *e, const size_t *configs, size_t n, bool agn,
                      kv_attn_stats_request *req, kv_error *err)
{
    kv_evict_params *ps = malloc((n + 1) * sizeof *ps);
    int n_ps = 0;
    for (size_t i = 0; ps && i < n; i++)
        if (e->ev[configs[i]] && agnostic(e, configs[i]) == agn)
            ps[n_ps++] = e->params[configs[i]];
    memset(req, 0, sizeof *req);
    int rc = !ps ? kv_fail(err, "out of memory")
             : n_ps ? kv_evict_stats_request(ps, n_ps, true, req, err)
                    : 0;
    free(ps);
    return rc;
}

/* What the context's forward collects in a split prefill: what the
 * query-agnostic configs read, and the share of the query-aware configs'
 * statistics that lies in the context (their windows end in the question). */
static int context_request(engine *e, const size_t *configs, size_t n, int n_question,
                           kv_attn_stats_request *req, kv_error *err)
{
    kv_attn_stats_request aware, head;
    if (request_of(e, configs, n, true, req, err) < 0 ||
        request_of(e, configs, n, false, &aware, err) < 0)
        return -1;
    kv_attn_stats_request_head(&aware, n_question, &head);
    if (kv_attn_stats_request_merge(req, &head) != 0)
        return kv_fail(err, "eviction: the configs need more than %d distinct window sizes",
                       KV_MAX_WINDOWS);
    return 0;
}

/* The prompt's ids (the runner built them) through the model once, with
 * the statistics every config in `configs` reads. */
static int prefill(void *ctx, const int32_t *ids, size_t n_ids, size_t n_context,
                   const kb_gen_limits *g, const size_t *configs, size_t n_configs, void **state,
                   kv_error *err)
{
    engine *e = ctx;
    if (n_ids == 0 || n_ids > (size_t)INT_MAX || n_context >= n_ids)
        return kv_fail(err, "cannot prefill a prompt of %zu tokens (%zu of context)", n_ids,
                       n_context);
    prefill_state *st = calloc(1, sizeof *st);
    if (!st)
        return kv_fail(err, "out of memory");
    st->max_new = g->max_new_tokens;
    st->n_stop = g->n_stop_ids;
    st->n_prompt = (int)n_ids;
    st->n_context = (int)n_context;
    st->stop = malloc((size_t)(g->n_stop_ids + 1) * sizeof *st->stop);
    if (st->stop && g->n_stop_ids > 0)
        memcpy(st->stop, g->stop_ids, (size_t)g->n_stop_ids * sizeof *st->stop);
    for (size_t i = 0; n_context > 0 && i < n_configs; i++)
        st->split = st->split || agnostic(e, configs[i]);
    int n_fed = st->split ? st->n_context : st->n_prompt;
    if (st->split && (st->question = malloc((n_ids - n_context) * sizeof *ids)))
        memcpy(st->question, ids + n_context, (n_ids - n_context) * sizeof *ids);

    /* The union of what every pending config reads from this forward. */
    int rc = !st->stop || (st->split && !st->question) ? kv_fail(err, "out of memory")
             : st->split ? context_request(e, configs, n_configs, st->n_prompt - st->n_context,
                                           &st->req, err)
                         : request_of(e, configs, n_configs, false, &st->req, err);
    const kv_model_config *mc = kv_model_get_config(e->model);
    /* Room for the full cache's answer too (its row takes this cache over):
     * a usual answer's; a longer one grows it. */
    int room = st->max_new < 4096 ? st->max_new : 4096;
    if (rc == 0 && !(st->base = kv_model_cache_new(e->model, st->n_prompt + room + 1, err)))
        rc = -1;
    bool want = kv_attn_stats_wanted(&st->req);
    if (rc == 0 && want &&
        !(st->stats = kv_model_stats_new(e->model, st->base, n_fed, &st->req, err)))
        rc = -1;
    if (rc == 0 && !(st->logits = malloc((size_t)mc->vocab * sizeof *st->logits)))
        rc = kv_fail(err, "out of memory for logits");
    if (rc == 0)
        rc = kv_model_forward(e->model, st->base, ids, n_fed, want ? &st->req : NULL, st->stats,
                              st->split ? NULL : st->logits, false, err);
    if (rc < 0) {
        prefill_free(e, st);
        return -1;
    }
    *state = st;
    return 0;
}

typedef struct decode_hook {
    kv_evictor *ev;
    kv_attn_stats_request req;
} decode_hook;

static int on_step(void *user, kv_cache *c, const kv_attn_stats *stats, int step, kv_error *err)
{
    decode_hook *h = user;
    return kv_evictor_step(h->ev, c, &h->req, stats, step, NULL, NULL, err);
}

/* One config's row of the batch: its own cache (the prefilled one,
 * compressed under its policy) and the hook that keeps the policy active at
 * every step. */
typedef struct decode_row {
    kv_cache *c;
    kv_fork fork; /* row_start's, for row_forks: from fork.base, or none */
    decode_hook hook;
    kv_generate_opts o;
} decode_row;

/* Config's evictor for a compressed part of n tokens: with a
 * compression_ratio the budget is a share of that part (kvpress's meaning),
 * so the evictor is rebuilt for it; otherwise the run's evictor as is. */
static kv_evictor *evictor_for(engine *e, size_t config, int n, kv_error *err)
{
    if (!(e->params[config].compression_ratio > 0))
        return e->ev[config];
    kv_evict_params p = e->params[config];
    kv_evict_params_for_prompt(&p, n);
    kv_evictor *fresh = kv_evictor_new(&p, &e->em, err);
    if (!fresh) {
        kv_fail_prefix(err, e->m->configs[config].name);
        return NULL;
    }
    kv_evictor_free(e->ev[config]);
    return e->ev[config] = fresh;
}

/* The prefilled cache at precision q, for a fork (kv_fork_base_at): the
 * configs that store alike share one conversion of it. */
static const kv_cache *fork_base(prefill_state *st, const kv_cache_quant *q, kv_error *err)
{
    st->fork.prompt = st->base;
    return kv_fork_base_at(&st->fork, q, err);
}

/* Row r of a config, up to its cache: an eviction config's evictor and
 * the prefilled cache at its precision (r->fork, for row_forks). These are
 * set in config order, since either may be built here and rows share
 * them. The full cache (after the others) takes the prefilled cache over,
 * so no second copy of the prompt's keys and values is ever held. */
static int row_start(engine *e, prefill_state *st, size_t config, decode_row *r, kv_error *err)
{
    const kb_config *cfg = &e->m->configs[config];
    kv_evictor *ev = e->ev[config];
    r->hook.ev = ev;
    r->o = (kv_generate_opts){
        .max_new_tokens = st->max_new,
        .stop_ids = st->stop,
        .n_stop_ids = st->n_stop,
    };
    if (!ev && !takes_base(e, config)) { /* every token, stored at another precision */
        r->fork.cap = st->n_prompt + st->max_new + 1;
        return (r->fork.base = fork_base(st, &e->quant[config], err))
                   ? 0
                   : kv_fail_prefix(err, cfg->name);
    }
    if (!ev) {
        if (!st->base)
            return kv_fail(err, "%s: a second full-cache config", cfg->name);
        r->c = st->base;
        st->base = NULL;
        return 0;
    }
    if (!(ev = evictor_for(e, config, st->n_prompt, err)))
        return -1;
    r->hook.ev = ev;
    kv_cache_quant q = kv_evictor_cache_quant(ev);
    r->fork.ev = ev;
    if (!(r->fork.base = fork_base(st, &q, err)))
        return kv_fail_prefix(err, cfg->name);
    kv_evictor_generation_request(ev, &r->hook.req);
    r->o.on_step = on_step;
    r->o.on_step_concurrent = true; /* its own evictor and cache */
    r->o.stats_req = r->hook.req;
    r->o.user = &r->hook;
    return 0;
}

/* The forks of the rows that row_start gave one (kv_evictor_forks, on the
 * model's pool); the first failing config's error, as in order. */
static int row_forks(engine *e, const prefill_state *st, decode_row *rows, const size_t *configs,
                     size_t n, kv_error *err)
{
    kv_fork *forks = malloc((n > 0 ? n : 1) * sizeof *forks);
    size_t *row_of = malloc((n > 0 ? n : 1) * sizeof *row_of);
    int k = 0;
    if (!forks || !row_of) {
        free(forks);
        free(row_of);
        return kv_fail(err, "out of memory");
    }
    for (size_t i = 0; i < n; i++)
        if (rows[i].fork.base) {
            row_of[k] = i;
            forks[k++] = rows[i].fork;
        }
    int bad = kv_evictor_forks(kv_model_pool(e->model), forks, k, &st->req, st->stats);
    for (int f = 0; f < k; f++)
        rows[row_of[f]].c = forks[f].out;
    int rc = 0;
    if (bad >= 0) {
        *err = forks[bad].err;
        rc = kv_fail_prefix(err, e->m->configs[configs[row_of[bad]]].name);
    }
    free(forks);
    free(row_of);
    return rc;
}

/* A query-agnostic config's row: the context compressed once into its own
 * cache, then (decode_batch) the question prefilled on it; no eviction
 * runs after that, so the row has no hook. Without a context part there is
 * nothing to compress: the row copies the prefilled prompt. */
static int agnostic_start(engine *e, prefill_state *st, size_t config, decode_row *r,
                          kv_error *err)
{
    r->o = (kv_generate_opts){
        .max_new_tokens = st->max_new,
        .stop_ids = st->stop,
        .n_stop_ids = st->n_stop,
    };
    if (!st->split)
        return (r->c = kv_cache_fork(st->base, st->n_prompt + st->max_new + 1, err)) ? 0 : -1;
    kv_evictor *ev = evictor_for(e, config, st->n_context, err);
    if (!ev)
        return -1;
    kv_cache_quant q = kv_evictor_cache_quant(ev);
    const kv_cache *b = fork_base(st, &q, err);
    if (!b || kv_evictor_fork(ev, b, &st->req, st->stats, &r->c, NULL, NULL, err) < 0)
        return kv_fail_prefix(err, e->m->configs[config].name);
    return 0;
}

/* The question part on the full cache (split prefill), for the query-aware
 * configs: their statistics go on from the context's, so that they read
 * the prompt's as if it had been one forward. */
static int question_on_base(engine *e, prefill_state *st, const size_t *configs, size_t n,
                            kv_error *err)
{
    int n_layers = kv_model_get_config(e->model)->n_layers, nq = st->n_prompt - st->n_context;
    kv_attn_stats_request req;
    if (request_of(e, configs, n, false, &req, err) < 0)
        return -1;
    kv_attn_stats_request_tail(&req, &st->req, st->n_context);
    bool want = kv_attn_stats_wanted(&req);
    kv_attn_stats *stats = want ? kv_model_stats_new(e->model, st->base, nq, &req, err) : NULL;
    if (want && !stats)
        return -1;
    if (want)
        kv_attn_stats_carry(st->stats, &st->req, stats, &req, nq, n_layers);
    int rc = kv_model_forward(e->model, st->base, st->question, nq, want ? &req : NULL, stats,
                              st->logits, false, err);
    kv_model_stats_free(st->stats, n_layers);
    st->stats = stats;
    st->req = req;
    return rc;
}

/* The question part on every query-agnostic row's compressed cache, as one
 * forward; each row's first token comes from its own logits. */
static int question_on_rows(engine *e, prefill_state *st, decode_row *rows, const size_t *configs,
                            size_t n, const float **lasts, float **logits, kv_error *err)
{
    int vocab = kv_model_get_config(e->model)->vocab, k = 0;
    kv_cache **caches = calloc(n, sizeof *caches);
    *logits = malloc(n * (size_t)vocab * sizeof **logits);
    if (!caches || !*logits) {
        free(caches);
        return kv_fail(err, "out of memory");
    }
    for (size_t i = 0; i < n; i++)
        if (agnostic(e, configs[i]))
            caches[k++] = rows[i].c;
    int rc = kv_model_forward_many(e->model, caches, k, st->question, st->n_prompt - st->n_context,
                                   *logits, false, err);
    for (size_t i = 0, j = 0; i < n; i++)
        if (agnostic(e, configs[i]))
            lasts[i] = *logits + (j++) * (size_t)vocab;
    free(caches);
    return rc;
}

/* Every pending config of the sample decodes in one batch: one forward per
 * step for all configs still generating (kv_generate_batch). In a split
 * prefill the query-agnostic configs compress the context first, then the
 * question goes once onto the full cache for the others. The eviction
 * configs fork; then the full cache takes the prefilled cache over, or it
 * is freed, and the prefill's statistics with it: the batch holds only its
 * own caches. Last, the question goes onto the query-agnostic caches, all
 * in one forward. */
static int decode_batch(void *ctx, void *state, const size_t *configs, size_t n,
                        kb_decode_result *outs, kb_forward_counts *counts, kv_error *err)
{
    engine *e = ctx;
    prefill_state *st = state;
    decode_row *rows = calloc(n, sizeof *rows);
    kv_generation *gens = calloc(n, sizeof *gens);
    kv_cache **caches = calloc(n, sizeof *caches);
    const kv_generate_opts **opts = calloc(n, sizeof *opts);
    const float **lasts = calloc(n, sizeof *lasts);
    float *q_logits = NULL;
    int rc = rows && gens && caches && opts && lasts ? 0 : kv_fail(err, "out of memory");
    size_t n_agn = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (!agnostic(e, configs[i]))
            continue;
        rc = agnostic_start(e, st, configs[i], &rows[i], err);
        outs[i].kept_tokens = outs[i].kept_context_tokens = rc == 0 ? kv_cache_mean_kept(rows[i].c) : 0;
        n_agn++;
    }
    kv_fork_base_release(&st->fork); /* of the context: the question comes next */
    if (rc == 0 && st->split && n_agn < n) {
        rc = question_on_base(e, st, configs, n, err);
        counts->question_prefills++;
    }
    for (int last = 0; last < 2; last++)
        for (size_t i = 0; i < n && rc == 0; i++)
            if (!agnostic(e, configs[i]) && takes_base(e, configs[i]) == last)
                rc = row_start(e, st, configs[i], &rows[i], err);
    if (rc == 0)
        rc = row_forks(e, st, rows, configs, n, err);
    for (size_t i = 0; i < n && rc == 0; i++)
        if (!agnostic(e, configs[i])) {
            outs[i].kept_tokens = kv_cache_mean_kept(rows[i].c);
            outs[i].kept_context_tokens = kv_cache_mean_kept_before(rows[i].c, st->n_context);
        }
    kv_fork_base_release(&st->fork);
    kv_cache_free(st->base);
    st->base = NULL;
    kv_model_stats_free(st->stats, kv_model_get_config(e->model)->n_layers);
    st->stats = NULL;
    for (size_t i = 0; i < n && rc == 0; i++) {
        caches[i] = rows[i].c;
        opts[i] = &rows[i].o;
        lasts[i] = st->logits;
    }
    if (rc == 0 && st->split && n_agn > 0) {
        rc = question_on_rows(e, st, rows, configs, n, lasts, &q_logits, err);
        counts->question_batches++;
    }
    int forwards = 0;
    if (rc == 0)
        rc = kv_generate_batch(e->model, (int)n, caches, lasts, opts, gens, &forwards, err);
    for (size_t i = 0; i < n && rc == 0; i++) {
        outs[i].generated_tokens = gens[i].n;
        outs[i].decode_s = gens[i].decode_seconds;
        outs[i].text = kv_tokenizer_decode_len(e->tok, gens[i].ids, (size_t)gens[i].n, true,
                                              &outs[i].text_len);
        if (!outs[i].text)
            rc = kv_fail(err, "out of memory decoding the answer");
    }
    counts->decode_steps += forwards;
    for (size_t i = 0; rows && gens && i < n; i++) {
        kv_generation_free(&gens[i]);
        kv_cache_free(rows[i].c);
    }
    free(q_logits);
    free(rows);
    free(gens);
    free(caches);
    free(opts);
    free(lasts);
    return rc;
}

/* ---- setup ---- */

static bool any_criticalkv(const engine *e)
{
    for (size_t i = 1; i < e->m->n_configs; i++)
        if (e->params[i].refined_size > 0 &&
            strcmp(e->params[i].refined_algorithm, "criticalkv") == 0)
            return true;
    return false;
}

/* kb_runner_backend.kv_bytes_per_token: at the config's cache precision
 * (its group sizes as the cache resolves them) in this model's shapes. */
static double kv_bytes_per_token(void *ctx, size_t config)
{
    const engine *e = ctx;
    const kv_model_config *c = kv_model_get_config(e->model);
    kv_cache_quant q = kv_evict_params_cache_quant(&e->m->configs[config].evict);
    kv_error ignored; /* every config's precision was checked at open */
    if (kv_cache_quant_check(&q, c->head_dim, &ignored) < 0)
        return 0;
    return kv_cache_bytes_per_token(&q, c->n_layers, c->n_kv_heads, c->head_dim);
}

int kb_engine_backend_open(const kb_matrix *m, const char *model_dir, kb_runner_backend *b,
                           kv_error *err)
{
    memset(b, 0, sizeof *b);
    engine *e = calloc(1, sizeof *e);
    if (!e)
        return kv_fail(err, "out of memory");
    e->m = m;
    b->ctx = e;
    e->params = calloc(m->n_configs, sizeof *e->params);
    e->ev = calloc(m->n_configs, sizeof *e->ev);
    e->quant = calloc(m->n_configs, sizeof *e->quant);
    if (!e->params || !e->ev || !e->quant) {
        kv_fail(err, "out of memory");
        goto fail;
    }
    kv_set_threads((int)m->threads);
    if (kv_model_load(model_dir, &e->model, err) < 0)
        goto fail;
    kv_compute mode;
    if (kv_compute_parse(m->compute, &mode) < 0) {
        kv_fail(err, "compute: unknown mode \"%s\" (want f32 or bf16)", m->compute);
        goto fail;
    }
    if (kv_model_set_compute(e->model, mode, err) < 0)
        goto fail;
    if (!(e->tok = kv_tokenizer_load(model_dir, err)))
        goto fail;
    for (size_t i = 1; i < m->n_configs; i++) {
        const kb_config *c = &m->configs[i];
        e->params[i] = c->evict; /* decoded and checked by the matrix */
        if (!kb_config_is_full(c->params))
            continue;
        e->quant[i] = kv_evict_params_cache_quant(&c->evict);
        if (kv_cache_quant_check(&e->quant[i], kv_model_get_config(e->model)->head_dim, err) < 0) {
            kv_fail_prefix(err, c->name);
            goto fail;
        }
    }
    if (m->n_configs > 1) {
        if (kv_evict_model_load(&e->em, e->model, any_criticalkv(e), err) < 0)
            goto fail;
        e->em_loaded = true;
        for (size_t i = 1; i < m->n_configs; i++)
            if (!kb_config_is_full(m->configs[i].params) &&
                !(e->ev[i] = kv_evictor_new(&e->params[i], &e->em, err))) {
                kv_fail_prefix(err, m->configs[i].name);
                goto fail;
            }
    }
    b->tok = e->tok;
    b->max_positions = kv_model_get_config(e->model)->max_positions;
    b->prefill = prefill;
    b->decode_batch = decode_batch;
    b->prefill_free = prefill_free;
    b->kv_bytes_per_token = kv_bytes_per_token;
    return 0;
fail:
    kb_engine_backend_close(b);
    return -1;
}

void kb_engine_backend_close(kb_runner_backend *b)
{
    engine *e = b->ctx;
    if (!e)
        return;
    for (size_t i = 0; e->ev && i < e->m->n_configs; i++)
        kv_evictor_free(e->ev[i]);
    if (e->em_loaded)
        kv_evict_model_release(&e->em);
    free(e->ev);
    free(e->quant);
    free(e->params);
    kv_tokenizer_free(e->tok);
    kv_model_free(e->model);
    free(e);
    b->ctx = NULL;
}

int kb_engine_model_check(const char *model_dir, const char **arch, kv_error *err)
{
    kv_model_config cfg;
    if (kv_model_config_load(model_dir, &cfg, err) < 0)
        return -1;
    *arch = kv_arch_name(cfg.arch);
    kv_model_config_free(&cfg);
    kv_tokenizer *tok = kv_tokenizer_load(model_dir, err);
    kv_tokenizer_free(tok);
    return tok ? 0 : -1;
}
