/* Eviction with the engine: the model's view for a policy, and the step
 * that kv_generate's hook runs after every forward. */
#include <stdlib.h>
#include <string.h>

#include "evict/evict.h"
#include "model/kernels.h"
#include "model/model.h"
#include "util/pool.h"

/* The model's o_proj descriptors, one per layer: CriticalKV reads the
 * weights the forward uses, in their dtype, instead of a widened copy. */
static int share_o_proj(kv_evict_model *em, const kv_model *m, kv_error *err)
{
    kv_weight *w = malloc((size_t)em->n_layers * sizeof *w);
    if (!w)
        return kv_fail(err, "CriticalKV: out of memory");
    for (int l = 0; l < em->n_layers; l++)
        w[l] = *kv_model_o_proj(m, l);
    em->o_proj = w;
    return 0;
}

int kv_evict_model_load(kv_evict_model *em, const kv_model *m, bool o_proj, kv_error *err)
{
    const kv_model_config *cfg = kv_model_get_config(m);
    const kv_rope *rope = kv_model_get_rope(m);
    *em = (kv_evict_model){
        .n_layers = cfg->n_layers,
        .n_heads = cfg->n_heads,
        .n_kv_heads = cfg->n_kv_heads,
        .head_dim = cfg->head_dim,
        .rope_theta = cfg->rope.theta,
        .inv_freq = rope->inv_freq, /* the engine's, llama3 scaling included */
        .hidden = cfg->hidden,
    };
    if ((o_proj && (share_o_proj(em, m, err) != 0 || kv_evict_model_vnorm_gains(em, err) != 0)) ||
        !(em->pool = kv_pool_new(kv_get_threads(), err))) {
        kv_evict_model_release(em);
        return -1;
    }
    return 0;
}

void kv_evict_model_release(kv_evict_model *em)
{
    kv_pool_free(em->pool);
    em->pool = NULL;
    free((void *)em->o_proj);
    em->o_proj = NULL;
    free((void *)em->vnorm_gain);
    em->vnorm_gain = NULL;
}

void kv_evictor_generation_request(const kv_evictor *ev, kv_attn_stats_request *req)
{
    kv_attn_stats_request decode;
    kv_evictor_stats_request(ev, true, req);
    kv_evictor_stats_request(ev, false, &decode);
    kv_attn_stats_request_merge(req, &decode); /* one scorer: at most two windows */
}

int kv_evictor_step(kv_evictor *ev, kv_cache *c, const kv_attn_stats_request *req,
                    const kv_attn_stats *stats, int step, kv_evict_trace_fn trace, void *trace_ctx,
                    kv_error *err)
{
    if (step == 0)
        kv_evictor_reset(ev);
    for (int l = 0; stats && l < c->n_layers; l++)
        if (kv_evictor_observe(ev, l, req, &stats[l], step == 0, err) != 0)
            return -1;
    return kv_evictor_compress(ev, c, trace, trace_ctx, err);
}

int kv_evictor_fork(kv_evictor *ev, const kv_cache *base, const kv_attn_stats_request *req,
                    const kv_attn_stats *stats, kv_cache **out, kv_evict_trace_fn trace,
                    void *trace_ctx, kv_error *err)
{
    *out = NULL;
    kv_evictor_reset(ev);
    for (int l = 0; stats && l < base->n_layers; l++)
        if (kv_evictor_observe(ev, l, req, &stats[l], true, err) != 0)
            return -1;
    kv_cache_quant q = kv_evictor_cache_quant(ev);
    if (kv_cache_quant_same(&q, &base->quant))
        return kv_evictor_compress_into(ev, base, out, trace, trace_ctx, err);
    /* The prompt's keys and values are stored at the config's precision
     * when its one forward ends: before eviction, which reads them so. */
    kv_cache *c = kv_cache_fork_at(base, &q, 0, err);
    if (!c)
        return -1;
    if (kv_evictor_compress(ev, c, trace, trace_ctx, err) != 0) {
        kv_cache_free(c);
        return -1;
    }
    *out = c;
    return 0;
}

typedef struct forks_job {
    kv_fork *forks;
    const kv_attn_stats_request *req;
    const kv_attn_stats *stats;
} forks_job;

static void fork_task(void *ctx, int t, int worker)
{
    (void)worker;
    forks_job *j = ctx;
    kv_fork *f = &j->forks[t];
    f->out = NULL;
    if (!f->ev)
        f->out = kv_cache_fork(f->base, f->cap, &f->err);
    else if (kv_evictor_fork(f->ev, f->base, j->req, j->stats, &f->out, NULL, NULL, &f->err) < 0)
        f->out = NULL;
}

int kv_evictor_forks(kv_pool *pool, kv_fork *forks, int n, const kv_attn_stats_request *req,
                     const kv_attn_stats *stats)
{
    kv_pool_run(pool, n, fork_task, &(forks_job){forks, req, stats});
    for (int i = 0; i < n; i++)
        if (!forks[i].out)
            return i;
    return -1;
}

const kv_cache *kv_fork_base_at(kv_fork_base *b, const kv_cache_quant *q, kv_error *err)
{
    if (kv_cache_quant_same(q, &b->prompt->quant))
        return b->prompt;
    for (int i = 0; i < b->n; i++)
        if (kv_cache_quant_same(q, &b->at[i]->quant))
            return b->at[i];
    if (b->n == KV_FORK_PRECISIONS)
        return b->prompt;
    kv_cache *c = kv_cache_fork_at(b->prompt, q, 0, err);
    return c ? (b->at[b->n++] = c) : NULL;
}

void kv_fork_base_release(kv_fork_base *b)
{
    for (int i = 0; i < b->n; i++)
        kv_cache_free(b->at[i]);
    b->n = 0;
}
