/* CriticalKV refined selection (docs/eviction.md, Refiners): among the
 * candidates the coarse top-k left, keep those whose attention score times
 * the size of their contribution to the attention output is largest:
 * (score + 1e-4) * vnorm_t, vnorm_t = sum over query heads h of
 * ||V_{kv(h),t} . Wo_h^T||_1 with Wo_h the head's columns of o_proj. */
#include <cblas.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "evict/evict_impl.h"
#include "model/kernels.h"
#include "util/pool.h"

enum { CHUNK = 128 }; /* slots per matrix product: bounds the scratch */

typedef struct vnorm_job {
    const kv_evict_model *m;
    const float *w; /* the columns of heads [h0, h1), rows ld floats apart */
    const float *v;
    int n, ld;
    int h0, h1; /* query heads [h0, h1) */
    double *out;
    float *prod; /* [workers][CHUNK][hidden] */
} vnorm_job;

/* One chunk of slots: out[t] = sum_h ||V_kv(h),t . Wo_h^T||_1. */
static void vnorm_chunk(void *ctx, int task, int worker)
{
    const vnorm_job *j = ctx;
    const kv_evict_model *m = j->m;
    int H = m->n_heads, D = m->head_dim, hid = m->hidden, row = m->n_kv_heads * D;
    int per_kv = H / m->n_kv_heads, t0 = task * CHUNK;
    int rows = j->n - t0 < CHUNK ? j->n - t0 : CHUNK;
    float *prod = j->prod + (size_t)worker * CHUNK * (size_t)hid;
    for (int r = 0; r < rows; r++)
        j->out[t0 + r] = 0.0;
    for (int h = j->h0; h < j->h1; h++) {
        /* prod[rows][hid] = V_kv(h)[rows][D] . (Wo[:, h*D:(h+1)*D])^T */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, hid, D, 1.0f,
                    j->v + (size_t)t0 * row + (size_t)(h / per_kv) * D, row,
                    j->w + (size_t)(h - j->h0) * D, j->ld, 0.0f, prod, hid);
        for (int r = 0; r < rows; r++) {
            double l1 = 0.0;
            for (int i = 0; i < hid; i++)
                l1 += fabs((double)prod[(size_t)r * hid + i]);
            j->out[t0 + r] += l1;
        }
    }
}

/* The columns of query heads [h0, h1) of layer `layer`'s o_proj as F32,
 * *ld floats per row: the model's own data when it is F32, else those columns
 * widened into *scratch (malloc'd, the caller frees it), so a call never holds
 * more than one layer and a per-KV-head call widens only its heads. Widening
 * is exact: the products are those of an F32 copy. */
static const float *o_proj_f32(const kv_evict_model *m, int layer, int h0, int h1, int *ld,
                               float **scratch, kv_error *err)
{
    const kv_weight *w = &m->o_proj[layer];
    size_t first = (size_t)h0 * (size_t)m->head_dim, cols = (size_t)(h1 - h0) * m->head_dim;
    *scratch = NULL;
    if (w->dtype == KV_DTYPE_F32) {
        *ld = w->cols;
        return (const float *)w->data + first;
    }
    if (!(*scratch = malloc((size_t)w->rows * cols * sizeof **scratch))) {
        kv_fail(err, "CriticalKV: out of memory");
        return NULL;
    }
    *ld = (int)cols;
    if (cols == (size_t)w->cols) { /* whole rows: the engine's vectorised widening */
        kv_widen_rows(m->pool, w, 0, w->rows, *scratch);
        return *scratch;
    }
    for (size_t r = 0; r < (size_t)w->rows; r++) {
        const uint16_t *src = (const uint16_t *)w->data + r * (size_t)w->cols + first;
        float *dst = *scratch + r * cols;
        if (w->dtype == KV_DTYPE_BF16)
            for (size_t c = 0; c < cols; c++)
                dst[c] = kv_bf16_to_f32(src[c]);
        else
            for (size_t c = 0; c < cols; c++)
                dst[c] = kv_f16_to_f32(src[c]);
    }
    return *scratch;
}

int kv_criticalkv_vnorm(const kv_evict_model *m, int layer, int kv_head, const float *v, int n,
                        double *out, kv_error *err)
{
    int tasks = (n + CHUNK - 1) / CHUNK;
    int workers = m->pool ? kv_pool_threads(m->pool) : 1;
    int per_kv = m->n_heads / m->n_kv_heads;
    vnorm_job j = {.m = m, .v = v, .n = n, .h0 = 0, .h1 = m->n_heads, .out = out};
    if (kv_head >= 0) {
        j.h0 = kv_head * per_kv;
        j.h1 = j.h0 + per_kv;
    }
    float *wide;
    if (!(j.w = o_proj_f32(m, layer, j.h0, j.h1, &j.ld, &wide, err)))
        return -1;
    j.prod = malloc((size_t)workers * CHUNK * (size_t)m->hidden * sizeof *j.prod);
    if (!j.prod) {
        free(wide);
        return kv_fail(err, "CriticalKV: out of memory");
    }
    if (m->pool && tasks > 1)
        kv_pool_run(m->pool, tasks, vnorm_chunk, &j);
    else
        for (int t = 0; t < tasks; t++)
            vnorm_chunk(&j, t, 0);
    free(j.prod);
    free(wide);
    return 0;
}

/* An upper bound of the largest eigenvalue of the symmetric positive
 * semidefinite g [n][n] (destroyed): lambda_max^(2^p) <= trace(g^(2^p)), so
 * squaring p times (rescaled by the trace to stay in range) bounds it within
 * a factor n^(1/2^p) (1.16 for n = 128), mostly far closer. */
static double lambda_max_bound(double *g, double *tmp, int n)
{
    enum { SQUARINGS = 5 };
    double tr = 0.0, log_bound;
    for (int i = 0; i < n; i++)
        tr += g[(size_t)i * n + i];
    if (!(tr > 0.0))
        return 0.0; /* a zero block: every product is zero */
    log_bound = log(tr);
    for (size_t i = 0; i < (size_t)n * n; i++)
        g[i] /= tr;
    for (int p = 1; p <= SQUARINGS; p++) {
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0, g, n, g, n, 0.0, tmp,
                    n);
        double t = 0.0;
        for (int i = 0; i < n; i++)
            t += tmp[(size_t)i * n + i];
        if (!(t > 0.0))
            break;
        log_bound += log(t) / (double)(1 << p);
        for (size_t i = 0; i < (size_t)n * n; i++)
            g[i] = tmp[i] / t;
    }
    return exp(log_bound);
}

int kv_evict_model_vnorm_gains(kv_evict_model *em, kv_error *err)
{
    int H = em->n_heads, KV = em->n_kv_heads, D = em->head_dim, hid = em->hidden;
    if (!em->o_proj || hid <= 0 || KV <= 0 || H % KV != 0)
        return kv_fail(err, "CriticalKV: the value bounds need the model's o_proj");
    for (int l = 0; l < em->n_layers; l++)
        if (em->o_proj[l].rows != hid || em->o_proj[l].cols != H * D)
            return kv_fail(err, "CriticalKV: layer %d's o_proj is [%d][%d], not [%d][%d]", l,
                           em->o_proj[l].rows, em->o_proj[l].cols, hid, H * D);
    double *gain = calloc((size_t)em->n_layers * (size_t)KV, sizeof *gain);
    float *gf = malloc((size_t)D * D * sizeof *gf);
    double *g = malloc((size_t)D * D * sizeof *g), *tmp = malloc((size_t)D * D * sizeof *tmp);
    if (!gain || !gf || !g || !tmp) {
        free(gain), free(gf), free(g), free(tmp);
        return kv_fail(err, "CriticalKV: out of memory");
    }
    int rc = 0;
    for (int l = 0; l < em->n_layers; l++) {
        float *wide;
        int ld;
        const float *wo = o_proj_f32(em, l, 0, H, &ld, &wide, err);
        if (!wo) {
            rc = -1;
            break;
        }
        for (int h = 0; h < H; h++) {
            /* Gram matrix of the head's block of o_proj: Wo_h^T Wo_h, [D][D] */
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, D, D, hid, 1.0f,
                        wo + (size_t)h * D, ld, wo + (size_t)h * D, ld, 0.0f, gf, D);
            for (size_t i = 0; i < (size_t)D * D; i++)
                g[i] = gf[i];
            /* 1e-3 covers the rounding of the float Gram matrix and of the
             * weights computed later: a bound must never fall below one */
            gain[(size_t)l * KV + h / (H / KV)] += sqrt(hid * lambda_max_bound(g, tmp, D)) * 1.001;
        }
        free(wide);
    }
    free(gf), free(g), free(tmp);
    if (rc < 0) {
        free(gain);
        return -1;
    }
    free((void *)em->vnorm_gain);
    em->vnorm_gain = gain;
    return 0;
}

/* ---- the refiner's state: value weights, each computed once ---- */

/* One kept set of a layer: the value weights of its slots [0, n), NaN until
 * a selection needs one (values never change, so a weight follows its
 * token through compactions). */
typedef struct vnorm_set {
    double *w;
    int n, cap;
} vnorm_set;

typedef struct criticalkv_state {
    const kv_evict_cfg *cfg;
    vnorm_set *sets;      /* [n_layers][n_sets] */
    double *bounds;       /* [bounds_cap] upper bounds of the current call's candidates */
    int bounds_cap;
    const double *vbound; /* bounds, or NULL: every candidate's weight is computed */
    long long computed;   /* weights computed so far */
} criticalkv_state;

static vnorm_set *set_of(const kv_refine_call *c)
{
    const criticalkv_state *st = c->state;
    return &st->sets[(size_t)c->layer * (size_t)c->cfg->n_sets + (size_t)c->set];
}

/* The KV head whose tokens a set holds, -1 when all heads share it. */
static int set_head(const kv_refine_call *c)
{
    return c->cfg->n_sets > 1 ? c->set : -1;
}

static void *criticalkv_state_new(const kv_evict_cfg *cfg, kv_error *err)
{
    const kv_evict_model *m = cfg->model;
    if (!m || !m->o_proj || m->hidden <= 0) {
        kv_fail(err, "eviction: refined_algorithm criticalkv needs the model's o_proj weights");
        return NULL;
    }
    criticalkv_state *st = calloc(1, sizeof *st);
    if (st)
        st->sets = calloc((size_t)m->n_layers * (size_t)cfg->n_sets, sizeof *st->sets);
    if (!st || !st->sets) {
        free(st);
        kv_fail(err, "eviction: out of memory");
        return NULL;
    }
    st->cfg = cfg;
    return st;
}

static void criticalkv_state_free(void *state)
{
    criticalkv_state *st = state;
    if (!st)
        return;
    for (int i = 0; i < st->cfg->model->n_layers * st->cfg->n_sets; i++)
        free(st->sets[i].w);
    free(st->sets);
    free(st->bounds);
    free(st);
}

static void criticalkv_reset(void *state, int layer)
{
    criticalkv_state *st = state;
    int sets = st->cfg->n_sets, lo = layer < 0 ? 0 : layer;
    int hi = layer < 0 ? st->cfg->model->n_layers : layer + 1;
    for (int i = lo * sets; i < hi * sets; i++)
        st->sets[i].n = 0;
}

static void criticalkv_compacted(void *state, int layer, int set, const int *keep, int n_keep)
{
    criticalkv_state *st = state;
    vnorm_set *vs = &st->sets[(size_t)layer * (size_t)st->cfg->n_sets + (size_t)set];
    int n = 0; /* keep is ascending: the survivors with a weight are a prefix */
    while (n < n_keep && keep[n] < vs->n) {
        vs->w[n] = vs->w[keep[n]];
        n++;
    }
    vs->n = n;
}

static long long criticalkv_work(const void *state)
{
    return ((const criticalkv_state *)state)->computed;
}

/* Computes the value weights of the given slots, and with them those of
 * the recent area that have none yet: those become candidates over the
 * next decode steps, and one pass over o_proj serves them all. */
static int vnorm_exact(const kv_refine_call *c, const int *slots, int n, kv_error *err)
{
    criticalkv_state *st = c->state;
    vnorm_set *vs = set_of(c);
    int L = vs->n, row = kv_cache_row(c->cache), first_recent = L - c->cfg->p->recent_size;
    int *all = malloc((size_t)(n + c->cfg->p->recent_size + 1) * sizeof *all);
    if (!all)
        return kv_fail(err, "CriticalKV: out of memory");
    int m = 0;
    for (int i = 0; i < n; i++)
        if (slots[i] < first_recent)
            all[m++] = slots[i];
    for (int t = first_recent > 0 ? first_recent : 0; t < L; t++)
        if (isnan(vs->w[t]))
            all[m++] = t;
    float *v = malloc((size_t)(m > 0 ? m : 1) * (size_t)row * sizeof *v);
    double *out = malloc((size_t)(m > 0 ? m : 1) * sizeof *out);
    int rc = v && out ? 0 : kv_fail(err, "CriticalKV: out of memory");
    for (int i = 0; rc == 0 && i < m; i++) { /* as stored, dequantised */
        float *vi = v + (size_t)i * (size_t)row;
        const float *x =
            kv_cache_heads(c->cache, c->layer, KV_VALUES, all[i], 0, c->cache->n_kv_heads, vi);
        if (x != vi)
            memcpy(vi, x, (size_t)row * sizeof *v);
    }
    if (rc == 0 && m > 0)
        rc = kv_criticalkv_vnorm(c->cfg->model, c->layer, set_head(c), v, m, out, err);
    for (int i = 0; rc == 0 && i < m; i++)
        vs->w[all[i]] = out[i];
    st->computed += m;
    free(v);
    free(out);
    free(all);
    return rc;
}

/* Upper bounds of the value weights of the n candidate slots after the
 * start area from the cache's value norms and the model's per-head gains,
 * or NULL when either is missing (then every candidate's weight is
 * computed). */
static const double *vnorm_bounds(const kv_refine_call *c, int n, double *out)
{
    const kv_cache_layer *cl = &c->cache->layers[c->layer];
    int S = c->first_slot, H = c->cache->n_kv_heads, g0 = set_head(c);
    if (!c->cfg->model->vnorm_gain || cl->vlen_n < S + n)
        return NULL;
    const double *gain = c->cfg->model->vnorm_gain + (size_t)c->layer * (size_t)H;
    for (int i = 0; i < n; i++) {
        const float *vl = cl->vlen + (size_t)(S + i) * (size_t)H;
        double b = 0.0;
        if (g0 >= 0)
            b = gain[g0] * vl[g0];
        else
            for (int g = 0; g < H; g++)
                b += gain[g] * vl[g];
        out[i] = b;
    }
    return out;
}

/* Room for weights of every slot of the layer and bounds of n candidates. */
static int make_room(criticalkv_state *st, vnorm_set *vs, int L, int n, kv_error *err)
{
    if (L > vs->cap) {
        int cap = L > 2 * vs->cap ? L : 2 * vs->cap;
        double *w = realloc(vs->w, (size_t)cap * sizeof *w);
        if (!w)
            return kv_fail(err, "CriticalKV: out of memory");
        vs->w = w;
        vs->cap = cap;
    }
    if (n > st->bounds_cap) {
        double *b = realloc(st->bounds, (size_t)n * sizeof *b);
        if (!b)
            return kv_fail(err, "CriticalKV: out of memory");
        st->bounds = b;
        st->bounds_cap = n;
    }
    return 0;
}

/* A selection over the candidate slots after the start area: new slots
 * marked unknown; when only a few candidates lack a weight (decode, where
 * one arrives per step), all of them computed now with the recent area,
 * since missing one per step would cost a pass over o_proj each time; else
 * (a long prompt's first compression) bounds that let pick rule most of
 * them out. */
static int criticalkv_prepare(const kv_refine_call *c, kv_error *err)
{
    criticalkv_state *st = c->state;
    vnorm_set *vs = set_of(c);
    int L = c->cache->layers[c->layer].len, S = c->first_slot, n = c->n_tokens, missing = 0;
    if (make_room(st, vs, L, n > 0 ? n : 1, err) != 0)
        return -1;
    for (int t = vs->n; t < L; t++)
        vs->w[t] = NAN;
    vs->n = L;
    int *slots = malloc((size_t)(n > 0 ? n : 1) * sizeof *slots);
    if (!slots)
        return kv_fail(err, "CriticalKV: out of memory");
    for (int t = S; t < S + n; t++)
        if (isnan(vs->w[t]))
            slots[missing++] = t;
    int rc = 0;
    bool few = missing <= c->cfg->budget;
    if (missing > 0 && few)
        rc = vnorm_exact(c, slots, missing, err);
    free(slots);
    /* with every weight known there is nothing to rule out */
    st->vbound = few ? NULL : vnorm_bounds(c, n, st->bounds);
    return rc;
}

/* Computes the weights of the units listed that lack one. */
static int need_units(const kv_refine_call *c, const int *units, int n_units, int *slots,
                      kv_error *err)
{
    int G = c->unit, n = 0;
    for (int i = 0; i < n_units; i++)
        for (int r = 0; r < G; r++) {
            int slot = c->first_slot + units[i] * G + r;
            if (isnan(set_of(c)->w[slot]))
                slots[n++] = slot;
        }
    return n > 0 ? vnorm_exact(c, slots, n, err) : 0;
}

/* Stage 2's weight of a unit: the sum over its tokens; -inf stays. */
static double unit_weight(const kv_refine_call *c, const double *per_token, int u)
{
    double sum = 0.0;
    for (int r = 0; r < c->unit; r++) {
        int t = u * c->unit + r;
        sum += (c->scores[t] + 1e-4) * per_token[t];
    }
    return sum;
}

/* Makes sure every unit that can be among the n_pick best by
 * (score + 1e-4) * vnorm has its exact weight, computing as few as the
 * bounds allow: the best few by bound first, whose n_pick-th weight then
 * rules out every unit whose bound is lower. known[u] says which units
 * have theirs. Without bounds, every unit is computed. */
static int compute_needed(const kv_refine_call *c, int n_units, double *ub, int *order,
                          int *slots, char *known, kv_error *err)
{
    int k = c->n_pick;
    const double *vbound = ((const criticalkv_state *)c->state)->vbound;
    bool prune = vbound != NULL;
    for (int u = 0; prune && u < n_units; u++) {
        ub[u] = unit_weight(c, vbound, u);
        for (int r = 0; r < c->unit; r++) { /* a negative factor turns a bound around */
            double sc = c->scores[u * c->unit + r];
            if (isfinite(sc) && sc + 1e-4 < 0.0)
                ub[u] = INFINITY;
        }
        if (isnan(ub[u]))
            ub[u] = INFINITY;
    }
    double kth = -INFINITY;
    if (prune) {
        int m = 2 * k + 8 < n_units ? 2 * k + 8 : n_units;
        kv_evict_top(ub, n_units, m, order);
        if (need_units(c, order, m, slots, err) != 0)
            return -1;
        double *w = malloc((size_t)(m > 0 ? m : 1) * sizeof *w);
        int *idx = malloc((size_t)(m > 0 ? m : 1) * sizeof *idx);
        if (!w || !idx) {
            free(w), free(idx);
            return kv_fail(err, "CriticalKV: out of memory");
        }
        for (int i = 0; i < m; i++)
            w[i] = unit_weight(c, set_of(c)->w + c->first_slot, order[i]);
        kv_evict_top(w, m, k, idx);
        kth = k <= m ? INFINITY : -INFINITY;
        for (int i = 0; i < k && i < m; i++)
            kth = isnan(w[idx[i]]) ? -INFINITY : w[idx[i]] < kth ? w[idx[i]] : kth;
        free(w), free(idx);
    }
    /* the n_pick-th best weight so far can only rise: below it, no unit
     * can be picked (a NaN or -inf there leaves nothing to rule out) */
    int n = 0;
    for (int u = 0; u < n_units; u++) {
        known[u] = !(kth > -INFINITY) || !(ub[u] < kth);
        if (known[u])
            order[n++] = u;
    }
    return need_units(c, order, n, slots, err);
}

static int criticalkv_pick(const kv_refine_call *c, int *picks, kv_error *err)
{
    int G = c->unit, n_units = c->n_tokens / G;
    double *adj = malloc((size_t)(n_units + 1) * sizeof *adj);
    double *ub = malloc((size_t)(n_units + 1) * sizeof *ub);
    int *order = malloc((size_t)(n_units + 1) * sizeof *order);
    int *slots = malloc((size_t)(c->n_tokens + 1) * sizeof *slots);
    char *known = malloc((size_t)(n_units + 1));
    int rc = adj && ub && order && slots && known ? 0 : kv_fail(err, "CriticalKV: out of memory");
    if (rc == 0)
        rc = compute_needed(c, n_units, ub, order, slots, known, err);
    if (rc == 0) {
        for (int u = 0; u < n_units; u++) /* a unit left out is below n_pick better ones */
            adj[u] = known[u] ? unit_weight(c, set_of(c)->w + c->first_slot, u) : -INFINITY;
        kv_evict_top(adj, n_units, c->n_pick, order);
        for (int i = 0; i < c->n_pick; i++)
            picks[i] = order[i];
    }
    free(adj), free(ub), free(order), free(slots), free(known);
    return rc;
}

const kv_refiner kv_refiner_criticalkv = {
    .name = "criticalkv",
    .state_new = criticalkv_state_new,
    .state_free = criticalkv_state_free,
    .reset = criticalkv_reset,
    .prepare = criticalkv_prepare,
    .pick = criticalkv_pick,
    .compacted = criticalkv_compacted,
    .work = criticalkv_work,
};
