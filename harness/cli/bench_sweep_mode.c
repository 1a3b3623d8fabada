/* One mode of bench sweep, as `kvbench run` does it for one sample
 * (run/backend.c), on a random prompt:
 *   full      the full cache alone: a plain prefill (no statistics), whose
 *             cache the full row then decodes in place;
 *   batched   the full cache + K eviction configs decoded together, one
 *             batched forward per step (kv_generate_batch), after the
 *             prefill that collects every config's statistics: each config
 *             forks its cache from it (kv_fork_base), then the full row
 *             takes the prefilled cache over;
 *   sequential the same 1 + K decoded one after another.
 * The configs are those of configs/nightly.json's main sweep, with its start
 * (32) and recent (64) areas and its decode-time eviction (each step's
 * statistics, as a run's rows): H2O and SnapKV x intermediate 160, 416, 928,
 * 1952 x sum / norm_sum (16), then the same with rerotation (32); K takes
 * the first K of that list. With a cache precision the configs' caches are
 * stored at it (issue 30) while the full cache stays F32, as a run's
 * baseline does. What a run does besides (loading the model and tokenizer,
 * tokenizing, writing and scoring the answers) is not timed.
 *
 * The fork loop (decode_rows, start_row, fork_rows) and the step hook
 * (on_step) are this file's copies of run/backend.c's decode_batch,
 * row_start, row_forks and on_step, with the work counting the limit needs
 * added; a change to how the run forks or evicts belongs in both. */
#include "cli/bench_sweep_mode.h"

#include <stdlib.h>
#include <string.h>

#include "cli/eviction.h"
#include "model/generate.h"
#include "model/kernels.h"
#include "util/clock.h"

/* The i-th config of the sweep (see the top of the file). */
static void sweep_params(const kb_sweep_opts *o, int i, kv_evict_params *p)
{
    static const int inter[] = {160, 416, 928, 1952};
    *p = o->cache; /* defaults, but for the cache's precision */
    snprintf(p->algorithm, sizeof p->algorithm, "%s", i % 2 ? "snapkv" : "h2o");
    p->start_size = 32;
    p->recent_size = 64;
    p->intermediate_size = inter[(i / 2) % 4];
    snprintf(p->score_aggregation, sizeof p->score_aggregation, "%s",
             (i / 8) % 2 ? "norm_sum" : "sum");
    p->apply_rerotation = (i / 16) % 2 == 1;
}

/* A row's step hook: counts what the forward read (its cache right after
 * the forward holds every slot attention read: the new token's too, and
 * nothing evicted yet), then an eviction config's policy runs. */
typedef struct row_hook {
    kv_evictor *ev; /* NULL: the full cache */
    kv_attn_stats_request req;
    double forwards, slots, slot_bytes; /* slot_bytes: K and V of one slot of one layer */
} row_hook;

typedef struct sweep {
    const kb_sweep_opts *o;
    kv_model *m;
    kv_evict_model em;
    kv_evict_params params[KB_SWEEP_MAX_CONFIGS];
    kv_evictor *ev[KB_SWEEP_MAX_CONFIGS];
    int32_t *tokens;                   /* the pass's prompt */
    kv_cache *base;                    /* the prefilled cache, until the full row takes it */
    kv_attn_stats_request prefill_req; /* the configs' union request */
    kv_attn_stats *stats;
    kv_fork_base fork; /* the prefilled cache at the configs' precision */
    float *logits;
    row_hook hooks[KB_SWEEP_MAX_CONFIGS + 1];
} sweep;

static double cache_slots(const kv_cache *c)
{
    double n = 0;
    for (int l = 0; l < c->n_layers; l++)
        n += c->layers[l].len;
    return n;
}

static int on_step(void *user, kv_cache *c, const kv_attn_stats *stats, int step, kv_error *err)
{
    row_hook *h = user;
    h->forwards++;
    h->slots += cache_slots(c);
    return h->ev ? kv_evictor_step(h->ev, c, &h->req, stats, step, NULL, NULL, err) : 0;
}

/* Row 0 is the full cache, row i > 0 config i - 1: its options, and its
 * cache or what it forks from. A config forks (*f) the prefilled cache
 * *own at its precision; the full row takes *own over (so it starts last),
 * as a run's baseline does. */
static int start_row(sweep *s, int row, kv_cache **own, kv_cache **c, kv_fork *f,
                     kv_generate_opts *g, kv_error *err)
{
    row_hook *h = &s->hooks[row];
    *h = (row_hook){.ev = row > 0 ? s->ev[row - 1] : NULL};
    *g = (kv_generate_opts){.max_new_tokens = s->o->gen,
                            .ignore_eos = true,
                            .on_step = on_step,
                            .on_step_concurrent = true,
                            .user = h};
    if (row == 0) {
        *c = *own;
        *own = NULL;
        return 0;
    }
    kv_evictor_generation_request(h->ev, &h->req);
    g->stats_req = h->req;
    kv_cache_quant q = kv_evictor_cache_quant(h->ev);
    s->fork.prompt = *own;
    *f = (kv_fork){.ev = h->ev, .base = kv_fork_base_at(&s->fork, &q, err)};
    return f->base ? 0 : -1;
}

/* Forks rows [from, to) (kv_evictor_forks, on the model's pool) into
 * caches[row]. */
static int fork_rows(sweep *s, int from, int to, kv_fork *forks, kv_cache **caches, kv_error *err)
{
    int bad =
        kv_evictor_forks(kv_model_pool(s->m), forks + from, to - from, &s->prefill_req, s->stats);
    for (int r = from; r < to; r++)
        caches[r] = forks[r].out;
    if (bad >= 0) {
        *err = forks[from + bad].err;
        return -1;
    }
    return 0;
}

static void note_slot_bytes(sweep *s, int row, const kv_cache *k)
{
    s->hooks[row].slot_bytes =
        kv_cache_bytes_per_token(&k->quant, k->n_layers, k->n_kv_heads, k->head_dim) / k->n_layers;
}

/* FNV-1a over n token ids, from h. */
static unsigned long long hash_ids(unsigned long long h, const int32_t *ids, int n)
{
    const unsigned char *b = (const unsigned char *)ids;
    for (size_t i = 0; i < (size_t)n * sizeof *ids; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* The FLOPs and bytes of w's counts at this model's shapes: 2 per weight of
 * every projection and the LM head per row and forward; 4 * n_heads *
 * head_dim per attended slot and layer; the projection and LM-head weights
 * per weight pass, K and V as stored per attended slot. Left out as small
 * beside those: norms, RoPE, softmax, the embedding rows, and the eviction
 * statistics' [n_heads] floats per attended slot (n_heads / (2 n_kv_heads
 * head_dim) of an F32 slot's K and V: 1 % at Qwen3-0.6B). */
static void work_cost(const kv_model *m, kb_sweep_work *w)
{
    const kv_model_config *c = kv_model_get_config(m);
    double q = (double)c->n_heads * c->head_dim, kv = (double)c->n_kv_heads * c->head_dim;
    double layer = c->hidden * (q + 2 * kv) + q * c->hidden + 3.0 * c->hidden * c->ffn;
    double head = (double)c->vocab * c->hidden, params = c->n_layers * layer + head;
    /* the file's bytes per weight, spread over the matrices a forward reads */
    double stored = params + (c->tied_embeddings ? 0 : head);
    double weight_bytes = params * (double)kv_model_weight_bytes(m) / stored;
    w->proj_flops = w->row_steps * 2 * params;
    w->attn_flops = w->slot_steps * 4 * q;
    w->bytes = w->passes * weight_bytes + w->slot_bytes;
}

/* Decodes rows [0, n) together (batched) or one after another from the
 * prefilled s->base, which the full row takes over; fills p's time (from
 * t0, c0: the prefill's start), its work and its tokens' hash. */
static int decode_rows(sweep *s, int n, bool batched, double t0, double c0, kb_sweep_pass *p,
                       kv_error *err)
{
    kv_cache *caches[KB_SWEEP_MAX_CONFIGS + 1] = {0};
    kv_fork forks[KB_SWEEP_MAX_CONFIGS + 1] = {0};
    kv_generate_opts gs[KB_SWEEP_MAX_CONFIGS + 1];
    const kv_generate_opts *opts[KB_SWEEP_MAX_CONFIGS + 1];
    const float *lasts[KB_SWEEP_MAX_CONFIGS + 1];
    kv_generation outs[KB_SWEEP_MAX_CONFIGS + 1] = {0};
    kv_cache *own = s->base;
    s->base = NULL;
    int rc = 0, forwards = 0;
    for (int i = 1; i <= n && rc == 0; i++) { /* the configs, then the full row */
        int r = i % n;
        opts[r] = &gs[r];
        lasts[r] = s->logits;
        rc = start_row(s, r, &own, &caches[r], &forks[r], &gs[r], err);
        if (rc != 0 || batched)
            continue;
        if (r > 0)
            rc = fork_rows(s, r, r + 1, forks, caches, err);
        if (r == 0)
            kv_fork_base_release(&s->fork);
        if (rc == 0) {
            note_slot_bytes(s, r, caches[r]);
            rc = kv_generate_from(s->m, caches[r], s->logits, &gs[r], &outs[r], err);
        }
        forwards += outs[r].n_decode_forwards;
        kv_cache_free(caches[r]);
        caches[r] = NULL;
    }
    if (rc == 0 && batched)
        rc = fork_rows(s, 1, n, forks, caches, err);
    /* A run frees these before decoding too. */
    kv_fork_base_release(&s->fork);
    kv_cache_free(own);
    kv_model_stats_free(s->stats, kv_model_get_config(s->m)->n_layers);
    s->stats = NULL;
    for (int r = 0; r < n && rc == 0 && batched; r++)
        note_slot_bytes(s, r, caches[r]);
    if (rc == 0 && batched)
        rc = kv_generate_batch(s->m, n, caches, lasts, opts, outs, &forwards, err);
    p->wall = kv_clock_s() - t0;
    p->cpu = kv_clock_cpu_s() - c0;
    p->work = (kb_sweep_work){.passes = forwards};
    p->tokens = 14695981039346656037ull;
    for (int r = 0; r < n; r++) {
        p->work.row_steps += s->hooks[r].forwards;
        p->work.slot_steps += s->hooks[r].slots;
        p->work.slot_bytes += s->hooks[r].slots * s->hooks[r].slot_bytes;
        if (rc == 0)
            p->tokens = hash_ids(p->tokens, outs[r].ids, outs[r].n);
        kv_generation_free(&outs[r]);
        kv_cache_free(caches[r]);
    }
    work_cost(s->m, &p->work);
    return rc;
}

/* The pass's prompt through the model into a fresh s->base, as a run's
 * prefill: with the statistics of the first k configs (k = 0: none, the
 * full cache alone's). The cache has room for the full row's answer. */
static int prefill(sweep *s, int k, kv_error *err)
{
    int L = kv_model_get_config(s->m)->n_layers, P = s->o->prompt;
    kv_model_stats_free(s->stats, L);
    s->stats = NULL;
    memset(&s->prefill_req, 0, sizeof s->prefill_req);
    if (k > 0 && kv_evict_stats_request(s->params, k, true, &s->prefill_req, err) < 0)
        return -1;
    bool want = kv_attn_stats_wanted(&s->prefill_req);
    if (!(s->base = kv_model_cache_new(s->m, P + s->o->gen + 1, err)))
        return -1;
    if (want && !(s->stats = kv_model_stats_new(s->m, s->base, P, &s->prefill_req, err)))
        return -1;
    return kv_model_forward(s->m, s->base, s->tokens, P, want ? &s->prefill_req : NULL, s->stats,
                            s->logits, false, err);
}

/* Pass p's prompt: random tokens, the same in every mode. */
static void pass_prompt(sweep *s, int p)
{
    unsigned seed = 1234u + (unsigned)p;
    int vocab = kv_model_get_config(s->m)->vocab;
    for (int i = 0; i < s->o->prompt; i++) {
        seed = seed * 1103515245u + 12345u;
        s->tokens[i] = (int32_t)((seed >> 8) % (unsigned)vocab);
    }
}

static int setup(sweep *s, int n_configs, kv_error *err)
{
    kv_set_threads(s->o->threads);
    if (kv_model_load(s->o->model, &s->m, err) < 0 ||
        kv_model_set_compute(s->m, s->o->compute, err) < 0 ||
        kv_evict_model_load(&s->em, s->m, false, err) < 0)
        return -1;
    for (int i = 0; i < n_configs; i++) {
        sweep_params(s->o, i, &s->params[i]);
        if (!(s->ev[i] = kv_evictor_new(&s->params[i], &s->em, err)))
            return -1;
    }
    const kv_model_config *cfg = kv_model_get_config(s->m);
    s->logits = malloc((size_t)cfg->vocab * sizeof *s->logits);
    s->tokens = malloc((size_t)s->o->prompt * sizeof *s->tokens);
    return s->logits && s->tokens ? 0 : kv_fail(err, "out of memory");
}

static void teardown(sweep *s)
{
    for (int i = 0; i < KB_SWEEP_MAX_CONFIGS; i++)
        kv_evictor_free(s->ev[i]);
    if (s->m) {
        kv_model_stats_free(s->stats, kv_model_get_config(s->m)->n_layers);
        kv_evict_model_release(&s->em);
    }
    kv_fork_base_release(&s->fork);
    kv_cache_free(s->base);
    free(s->logits);
    free(s->tokens);
    kv_model_free(s->m);
}

int kb_sweep_mode_run(const kb_sweep_opts *o, int k, bool batched, int n_passes, kb_sweep_pass *out,
                      kv_error *err)
{
    sweep s = {.o = o};
    int rc = setup(&s, k, err);
    for (int p = 0; p < n_passes && rc == 0; p++) {
        pass_prompt(&s, p);
        double t0 = kv_clock_s(), c0 = kv_clock_cpu_s();
        rc = prefill(&s, k, err);
        out[p].prefill = kv_clock_s() - t0;
        out[p].prefill_cpu = kv_clock_cpu_s() - c0;
        if (rc == 0)
            rc = decode_rows(&s, 1 + k, k == 0 || batched, t0, c0, &out[p], err);
    }
    teardown(&s);
    return rc;
}
