/* Eviction with the engine: the model's view for a policy, and the step
 * that kv_generate's hook runs after every forward. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "evict.h"
#include "kernels.h"
#include "model.h"
#include "pool.h"
#include "safetensors.h"

/* Reads one o_proj weight as f32 [hidden][n_heads * head_dim]. */
static float *read_o_proj(const kv_safetensors *st, int layer, size_t want, kv_error *err)
{
    char name[96];
    snprintf(name, sizeof name, "model.layers.%d.self_attn.o_proj.weight", layer);
    const kv_st_tensor *t = kv_safetensors_find(st, name);
    if (!t) {
        kv_fail(err, "CriticalKV: the model has no tensor %s", name);
        return NULL;
    }
    size_t el = t->dtype == KV_DTYPE_F32 ? 4 : 2;
    if (t->dtype == KV_DTYPE_OTHER || t->nbytes != want * el) {
        kv_fail(err, "CriticalKV: %s is not a %zu-element F32/BF16/F16 tensor", name, want);
        return NULL;
    }
    float *w = malloc(want * sizeof *w);
    void *raw = t->dtype == KV_DTYPE_F32 ? (void *)w : malloc(t->nbytes);
    if (!w || !raw || kv_safetensors_read(st, t, raw, err) != 0) {
        if (!w || !raw)
            kv_fail(err, "CriticalKV: out of memory for %s", name);
        if (raw != w)
            free(raw);
        free(w);
        return NULL;
    }
    if (raw != w) {
        const uint16_t *h = raw;
        for (size_t i = 0; i < want; i++)
            w[i] = t->dtype == KV_DTYPE_BF16 ? kv_bf16_to_f32(h[i]) : kv_f16_to_f32(h[i]);
        free(raw);
    }
    return w;
}

static int load_o_proj(kv_evict_model *em, const char *dir, kv_error *err)
{
    kv_safetensors *st = NULL;
    if (kv_safetensors_open(dir, &st, err) != 0)
        return -1;
    float **w = calloc((size_t)em->n_layers, sizeof *w);
    int rc = w ? 0 : kv_fail(err, "CriticalKV: out of memory");
    size_t want = (size_t)em->hidden * (size_t)em->n_heads * (size_t)em->head_dim;
    for (int l = 0; rc == 0 && l < em->n_layers; l++)
        if (!(w[l] = read_o_proj(st, l, want, err)))
            rc = -1;
    kv_safetensors_free(st);
    em->o_proj = (const float *const *)w;
    return rc;
}

int kv_evict_model_load(kv_evict_model *em, const kv_model *m, const char *dir, bool o_proj,
                        kv_error *err)
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
    if (o_proj && (load_o_proj(em, dir, err) != 0 || kv_evict_model_vnorm_gains(em, err) != 0 ||
                   !(em->pool = kv_pool_new(kv_get_threads(), err)))) {
        kv_evict_model_release(em);
        return -1;
    }
    return 0;
}

void kv_evict_model_release(kv_evict_model *em)
{
    kv_pool_free(em->pool);
    em->pool = NULL;
    if (em->o_proj) {
        for (int l = 0; l < em->n_layers; l++)
            free((void *)em->o_proj[l]);
        free((void *)em->o_proj);
    }
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
    return kv_evictor_compress_into(ev, base, out, trace, trace_ctx, err);
}
