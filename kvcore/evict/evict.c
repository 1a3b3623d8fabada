/* The evictor: score accumulation, the shared selection machinery
 * (start / intermediate / recent areas, per_token or per_group, sum or
 * norm_sum, refiners) and compaction with key rerotation.
 *
 * A layer has one kept set, or with per_head one per KV head: each set has
 * its own scores (a layer_state, indexed by cache slot) and runs the same
 * selection; all sets of a layer keep the same number of slots, so only
 * which token a head holds in a slot differs. With head_budget adaptive
 * (AdaKV) the heads of a layer choose together and keep different numbers
 * of tokens: the cache then pads the shorter heads with a gap (kvcache.h).
 * With layer_budget pyramid each layer has its own intermediate size. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "evict/evict_impl.h"

/* ---- registries: one line per scorer / refiner ---- */

static const kv_scorer *const scorers[] = {
    &kv_scorer_snapkv, &kv_scorer_h2o,     &kv_scorer_streaming,
    &kv_scorer_random, &kv_scorer_knorm,   &kv_scorer_tova,
    &kv_scorer_keydiff, &kv_scorer_expected_attention,
};
static const kv_refiner *const refiners[] = {&kv_refiner_kvcrush, &kv_refiner_criticalkv};

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

const kv_scorer *kv_scorer_find(const char *name)
{
    for (int i = 0; i < COUNT(scorers); i++)
        if (strcmp(scorers[i]->name, name) == 0)
            return scorers[i];
    return NULL;
}

const kv_refiner *kv_refiner_find(const char *name)
{
    for (int i = 0; i < COUNT(refiners); i++)
        if (strcmp(refiners[i]->name, name) == 0)
            return refiners[i];
    return NULL;
}

const char *kv_evict_algorithm(int i)
{
    return i >= 0 && i < COUNT(scorers) ? scorers[i]->name : NULL;
}

/* ---- statistics requests ---- */

const double *kv_attn_stats_window(const kv_attn_stats_request *req, const kv_attn_stats *st, int w)
{
    for (int i = 0; i < req->n_windows; i++)
        if (req->windows[i] == w)
            return st->win_sums[i];
    return NULL;
}

int kv_attn_stats_request_window(kv_attn_stats_request *req, int w)
{
    for (int i = 0; i < req->n_windows; i++)
        if (req->windows[i] == w)
            return 0;
    if (req->n_windows >= KV_MAX_WINDOWS)
        return -1;
    req->windows[req->n_windows++] = w;
    return 0;
}

static void cfg_resolve(kv_evict_cfg *cfg, const kv_evict_params *p, const kv_evict_model *m)
{
    cfg->p = p;
    cfg->window = kv_evict_params_window(p);
    cfg->group = strcmp(p->strategy, "per_group") == 0 ? p->group_size : 1;
    cfg->n_sets = m && strcmp(p->strategy, "per_head") == 0 ? m->n_kv_heads : 1;
    cfg->norm_sum = strcmp(p->score_aggregation, "norm_sum") == 0;
    cfg->model = m;
}

/* The query moments two requests need: from the lower first row, with the
 * rows one by one up to the higher. */
static void merge_q_moments(kv_attn_stats_request *dst, const kv_attn_stats_request *src)
{
    if (!src->q_moments)
        return;
    if (!dst->q_moments) {
        dst->q_moments = true;
        dst->q_from = src->q_from;
        dst->q_rows = src->q_rows;
        return;
    }
    int lo = dst->q_from < src->q_from ? dst->q_from : src->q_from;
    int hi_d = dst->q_from + dst->q_rows, hi_s = src->q_from + src->q_rows;
    dst->q_from = lo;
    dst->q_rows = (hi_d > hi_s ? hi_d : hi_s) - lo;
}

int kv_attn_stats_request_merge(kv_attn_stats_request *dst, const kv_attn_stats_request *src)
{
    dst->col_sums = dst->col_sums || src->col_sums;
    merge_q_moments(dst, src);
    for (int w = 0; w < src->n_windows; w++)
        if (kv_attn_stats_request_window(dst, src->windows[w]) != 0)
            return -1;
    return 0;
}

int kv_evict_stats_request(const kv_evict_params *ps, int n, bool prefill,
                           kv_attn_stats_request *req, kv_error *err)
{
    memset(req, 0, sizeof *req);
    for (int i = 0; i < n; i++) {
        if (kv_evict_params_validate(&ps[i], err) != 0) {
            char which[32];
            snprintf(which, sizeof which, "config %d", i);
            return kv_fail_prefix(err, which);
        }
        kv_evict_cfg cfg;
        cfg_resolve(&cfg, &ps[i], NULL);
        const kv_scorer *s = kv_scorer_find(ps[i].algorithm);
        kv_attn_stats_request one = {0};
        if (s->request)
            s->request(&cfg, prefill, &one);
        if (kv_attn_stats_request_merge(req, &one) != 0)
            return kv_fail(err,
                           "eviction: the configs need more than %d distinct "
                           "window sizes",
                           KV_MAX_WINDOWS);
    }
    return 0;
}

double kv_evict_l2(const float *x, int n)
{
    double ss = 0.0;
    for (int j = 0; j < n; j++)
        ss += (double)x[j] * x[j];
    return sqrt(ss);
}

int kv_scorer_sum_heads(const kv_scorer_obs *o, const double *sums, double *contrib, kv_error *err)
{
    const kv_attn_stats *st = o->st;
    int n = st->n_keys, sets = o->cfg->n_sets;
    if (st->n_heads % sets != 0)
        return kv_fail(err, "%d query heads do not split over %d KV heads", st->n_heads, sets);
    for (size_t t = 0; t < (size_t)sets * (size_t)n; t++)
        contrib[t] = 0.0;
    for (int h = 0; h < st->n_heads; h++) {
        const double *row = sums + (size_t)h * (size_t)n;
        double *dst = contrib + (size_t)(h / (st->n_heads / sets)) * (size_t)n;
        for (int t = 0; t < n; t++)
            dst[t] += row[t];
    }
    return 0;
}

/* ---- ordering ---- */

/* Decision 2's order: higher score first, and among equal scores the
 * higher index (so the lower slot is evicted first). NaN ranks lowest. */
static double rank_value(const double *s, int i)
{
    return isnan(s[i]) ? -INFINITY : s[i];
}

/* Is (a, i) better than (b, j)? a and b are rank values. */
static bool better(double a, int i, double b, int j)
{
    return a > b || (a == b && i > j);
}

/* Quickselect: (score, index) is a total order with distinct keys, so the
 * k best are well defined; finding them costs O(n), not a sort. */
void kv_evict_top(const double *s, int n, int k, int *idx)
{
    for (int i = 0; i < n; i++)
        idx[i] = i;
    kv_evict_top_among(s, idx, n, k);
}

void kv_evict_top_among(const double *s, int *idx, int n, int k)
{
    int lo = 0, hi = n - 1, target = k - 1;
    if (k <= 0 || k >= n)
        return;
    while (lo < hi) {
        int pivot = idx[lo + (hi - lo) / 2], i = lo, j = hi;
        double pv = rank_value(s, pivot); /* once per round, not per comparison */
        while (i <= j) {
            while (better(rank_value(s, idx[i]), idx[i], pv, pivot))
                i++;
            while (better(pv, pivot, rank_value(s, idx[j]), idx[j]))
                j--;
            if (i <= j) {
                int t = idx[i];
                idx[i++] = idx[j];
                idx[j--] = t;
            }
        }
        if (target <= j)
            hi = j;
        else if (target >= i)
            lo = i;
        else
            break;
    }
}

/* ---- the evictor ---- */

typedef struct layer_state {
    double *score; /* [cap] accumulated raw score per slot (0 for start slots) */
    double *count; /* [cap] norm_sum counters */
    double *vnorm; /* [cap] CriticalKV value weights of slots [0, n_vnorm),
                      NaN until a selection needs one */
    int len, cap, n_vnorm;
} layer_state;

typedef struct scratch {
    double *d; /* 2 * cap doubles */
    int *i;    /* 3 * cap ints */
    int cap;
} scratch;

struct kv_evictor {
    kv_evict_params p;
    kv_evict_model model;
    double *inv_freq; /* [head_dim / 2] */
    kv_evict_cfg cfg;
    const kv_scorer *scorer;
    const kv_refiner *refiner; /* NULL when refined_size == 0 */
    int n_sets;                /* kept sets per layer (cfg.n_sets) */
    bool adaptive;             /* head_budget adaptive: the sets choose together */
    int *inter;                /* [n_layers] each layer's intermediate size */
    layer_state *layers;       /* [n_layers][n_sets] */
    int step;
    kv_mt19937 rng;
    scratch tmp;
    double *scorer_state; /* [n_layers][scorer_state_n]: the scorer's own, or NULL */
    size_t scorer_state_n;
    int32_t *refined; /* [n_sets][refined_size]: positions the refiner picked at
                         the last eviction, so a trace can show them */
    int *n_refined;   /* [n_sets] */
    long long n_vnorm_computed; /* CriticalKV value weights computed so far */
};

static int scratch_need(scratch *s, int n, kv_error *err)
{
    if (n <= s->cap)
        return 0;
    int cap = n > 2 * s->cap ? n : 2 * s->cap;
    double *d = realloc(s->d, (size_t)cap * 2 * sizeof *d);
    if (!d)
        return kv_fail(err, "eviction: out of memory for %d slots", n);
    s->d = d;
    int *i = realloc(s->i, (size_t)cap * 3 * sizeof *i);
    if (!i)
        return kv_fail(err, "eviction: out of memory for %d slots", n);
    s->i = i;
    s->cap = cap;
    return 0;
}

static int layer_grow(layer_state *ls, int n, bool vnorm, kv_error *err)
{
    if (n <= ls->cap)
        return 0;
    int cap = n > 2 * ls->cap ? n : 2 * ls->cap;
    double *a = realloc(ls->score, (size_t)cap * sizeof *a);
    if (a)
        ls->score = a;
    double *b = a ? realloc(ls->count, (size_t)cap * sizeof *b) : NULL;
    if (b)
        ls->count = b;
    double *c = b && vnorm ? realloc(ls->vnorm, (size_t)cap * sizeof *c) : NULL;
    if (c)
        ls->vnorm = c;
    if (!a || !b || (vnorm && !c))
        return kv_fail(err, "eviction: out of memory for the scores of %d slots", n);
    ls->cap = cap;
    return 0;
}

/* The state of one set of a layer. */
static layer_state *state(kv_evictor *ev, int layer, int set)
{
    return &ev->layers[(size_t)layer * (size_t)ev->n_sets + (size_t)set];
}

void kv_evictor_reset(kv_evictor *ev)
{
    for (int l = 0; l < ev->model.n_layers * ev->n_sets; l++) {
        ev->layers[l].len = 0;
        ev->layers[l].n_vnorm = 0;
    }
    ev->step = 0;
    kv_mt19937_seed(&ev->rng, ev->p.seed); /* reseeded for every prompt */
}

static int check_model(const kv_evict_model *m, const kv_evictor *ev, kv_error *err)
{
    if (m->n_layers <= 0 || m->n_heads <= 0 || m->n_kv_heads <= 0 || m->head_dim <= 0 ||
        m->n_heads % m->n_kv_heads != 0)
        return kv_fail(err,
                       "eviction: bad model shape (%d layers, %d heads, %d kv heads, "
                       "head_dim %d)",
                       m->n_layers, m->n_heads, m->n_kv_heads, m->head_dim);
    if (ev->p.apply_rerotation && (m->head_dim % 2 != 0 || (!m->inv_freq && m->rope_theta <= 0)))
        return kv_fail(err,
                       "eviction: key rerotation needs an even head_dim and rope_theta > 0 "
                       "(got %d, %g)",
                       m->head_dim, m->rope_theta);
    if (ev->refiner && ev->refiner->needs_vnorm && (!m->o_proj || m->hidden <= 0))
        return kv_fail(err, "eviction: refined_algorithm criticalkv needs the model's o_proj "
                            "weights");
    return 0;
}

kv_evictor *kv_evictor_new(const kv_evict_params *p, const kv_evict_model *m, kv_error *err)
{
    if (kv_evict_params_validate_layers(p, m->n_layers, err) != 0)
        return NULL;
    kv_evictor *ev = calloc(1, sizeof *ev);
    if (!ev) {
        kv_fail(err, "eviction: out of memory");
        return NULL;
    }
    ev->p = *p;
    ev->model = *m;
    ev->scorer = kv_scorer_find(p->algorithm);
    ev->refiner = p->refined_size > 0 ? kv_refiner_find(p->refined_algorithm) : NULL;
    if (check_model(m, ev, err) != 0) {
        free(ev);
        return NULL;
    }
    cfg_resolve(&ev->cfg, &ev->p, &ev->model);
    ev->n_sets = ev->cfg.n_sets;
    if (ev->scorer->state_size && (ev->scorer_state_n = ev->scorer->state_size(&ev->cfg)) > 0 &&
        !(ev->scorer_state = calloc((size_t)m->n_layers * ev->scorer_state_n, sizeof(double)))) {
        kv_evictor_free(ev);
        kv_fail(err, "eviction: out of memory for the %s state", ev->scorer->name);
        return NULL;
    }
    ev->adaptive = strcmp(p->head_budget, "adaptive") == 0;
    ev->inter = malloc((size_t)m->n_layers * sizeof *ev->inter);
    for (int l = 0; ev->inter && l < m->n_layers; l++)
        ev->inter[l] = kv_evict_layer_intermediate(p, m->n_layers, l);
    int half = m->head_dim / 2;
    ev->inv_freq = malloc((size_t)(half > 0 ? half : 1) * sizeof *ev->inv_freq);
    ev->layers = calloc((size_t)m->n_layers * (size_t)ev->n_sets, sizeof *ev->layers);
    if (ev->refiner) {
        ev->refined = calloc((size_t)ev->n_sets * (size_t)p->refined_size, sizeof *ev->refined);
        ev->n_refined = calloc((size_t)ev->n_sets, sizeof *ev->n_refined);
    }
    if (!ev->inv_freq || !ev->inter || !ev->layers ||
        (ev->refiner && (!ev->refined || !ev->n_refined))) {
        kv_evictor_free(ev);
        kv_fail(err, "eviction: out of memory");
        return NULL;
    }
    if (m->inv_freq)
        for (int f = 0; f < half; f++)
            ev->inv_freq[f] = m->inv_freq[f];
    else
        kv_evict_rope_freqs(m->rope_theta, m->head_dim, ev->inv_freq);
    ev->model.inv_freq = NULL; /* the caller's array need not outlive this call */
    ev->cfg.inv_freq = ev->inv_freq;
    kv_evictor_reset(ev);
    return ev;
}

void kv_evictor_free(kv_evictor *ev)
{
    if (!ev)
        return;
    for (int l = 0; ev->layers && l < ev->model.n_layers * ev->n_sets; l++) {
        free(ev->layers[l].score);
        free(ev->layers[l].count);
        free(ev->layers[l].vnorm);
    }
    free(ev->layers);
    free(ev->scorer_state);
    free(ev->inter);
    free(ev->inv_freq);
    free(ev->refined);
    free(ev->n_refined);
    free(ev->tmp.d);
    free(ev->tmp.i);
    free(ev);
}

void kv_evictor_stats_request(const kv_evictor *ev, bool prefill, kv_attn_stats_request *req)
{
    memset(req, 0, sizeof *req);
    if (ev->scorer->request)
        ev->scorer->request(&ev->cfg, prefill, req);
}

const double *kv_evictor_scores(const kv_evictor *ev, int layer, int *len)
{
    const layer_state *ls = &ev->layers[(size_t)layer * (size_t)ev->n_sets];
    *len = ls->len;
    return ls->score;
}

const double *kv_evictor_counters(const kv_evictor *ev, int layer, int *len)
{
    const layer_state *ls = &ev->layers[(size_t)layer * (size_t)ev->n_sets];
    *len = ls->len;
    return ls->count;
}

/* ---- accumulation (§2.4) ---- */

/* The KV head whose tokens a set holds, -1 when all heads share it. */
static int set_head(const kv_evictor *ev, int set)
{
    return ev->n_sets > 1 ? set : -1;
}

/* Appends slots [len, n) of one set for attention-free scorers: their fixed
 * slot scores when they have them, else zeros (only the length matters). */
static int layer_extend(kv_evictor *ev, const kv_cache *c, int layer, int set, int n, kv_error *err)
{
    layer_state *ls = state(ev, layer, set);
    if (layer_grow(ls, n, ev->refiner && ev->refiner->needs_vnorm, err) != 0)
        return -1;
    for (int t = ls->len; t < n; t++) {
        ls->count[t] = 0.0;
        ls->score[t] =
            ev->scorer->slot_score ? ev->scorer->slot_score(c, layer, t, set_head(ev, set)) : 0.0;
    }
    ls->len = n;
    return 0;
}

/* The scorer's state of a layer, or NULL when it keeps none. */
static double *scorer_state(const kv_evictor *ev, int layer)
{
    return ev->scorer_state ? ev->scorer_state + (size_t)layer * ev->scorer_state_n : NULL;
}

const double *kv_evictor_scorer_state(const kv_evictor *ev, int layer)
{
    return scorer_state(ev, layer);
}

/* Adds one set's contribution of a forward to its scores (§2.4): old slots
 * accumulate, new ones start; a scorer that recomputes replaces them all
 * (old = 0). */
static void accumulate(layer_state *ls, const double *contrib, int old, int n, int rows, int S)
{
    for (int t = 0; t < n; t++) {
        if (t < S) { /* start slots are always kept and never scored */
            ls->score[t] = ls->count[t] = 0.0;
            continue;
        }
        /* rows that can see slot t among the last `rows` query rows */
        double seen = n - t < rows ? n - t : rows;
        if (t < old) {
            ls->score[t] += contrib[t];
            ls->count[t] += seen;
        } else {
            ls->score[t] = contrib[t];
            ls->count[t] = seen;
        }
    }
    ls->len = n;
}

int kv_evictor_observe(kv_evictor *ev, int layer, const kv_attn_stats_request *req,
                       const kv_attn_stats *st, bool prefill, kv_error *err)
{
    if (layer < 0 || layer >= ev->model.n_layers)
        return kv_fail(err, "eviction: no layer %d (the model has %d)", layer, ev->model.n_layers);
    if (prefill && layer == 0)
        kv_evictor_reset(ev); /* a new prompt: NNCF's clean() */
    for (int g = 0; prefill && g < ev->n_sets; g++) {
        state(ev, layer, g)->len = 0;
        state(ev, layer, g)->n_vnorm = 0;
    }
    int old = state(ev, layer, 0)->len, n = st->n_keys;
    if (n < old)
        return kv_fail(err,
                       "eviction: layer %d reports %d slots but %d are tracked (compress "
                       "the cache only through kv_evictor_compress)",
                       layer, n, old);
    if (!ev->scorer->observe)
        return 0; /* kv_evictor_compress tracks the length, with the cache at hand */
    if (scratch_need(&ev->tmp, n * ev->n_sets, err) != 0)
        return -1;
    for (int g = 0; g < ev->n_sets; g++)
        if (layer_grow(state(ev, layer, g), n, ev->refiner && ev->refiner->needs_vnorm, err) != 0)
            return -1;
    double *contrib = ev->tmp.d; /* [n_sets][n] */
    int rows = 0;
    kv_scorer_obs o = {&ev->cfg, req, st, old == 0, n - old, scorer_state(ev, layer)};
    if (ev->scorer->observe(&o, contrib, &rows, err) != 0)
        return kv_fail_prefix(err, "eviction");
    for (int g = 0; g < ev->n_sets; g++)
        accumulate(state(ev, layer, g), contrib + (size_t)g * (size_t)n,
                   ev->scorer->recomputes ? 0 : old, n, rows, ev->p.start_size);
    return 0;
}

/* ---- selection (§2.5, §2.6) ---- */

/* The selection scores of one set's slots S..L-1 into s[0..n). */
static int selection_scores(kv_evictor *ev, const kv_cache *cache, int layer, int set, double *s,
                            kv_error *err)
{
    const layer_state *ls = state(ev, layer, set);
    int S = ev->p.start_size, n = ls->len - S;
    if (ev->scorer->rank) {
        kv_scorer_rank r = {&ev->cfg, cache, layer, set_head(ev, set), S, n, &ev->rng,
                            scorer_state(ev, layer)};
        return ev->scorer->rank(&r, s, err);
    }
    bool fixed = ev->scorer->slot_score != NULL; /* not sums: no norm_sum */
    for (int i = 0; i < n; i++)
        s[i] = ev->cfg.norm_sum && !fixed ? ls->score[S + i] / ls->count[S + i] : ls->score[S + i];
    return 0;
}

/* Marks (chosen[u] = 1) the k best of the first n_units units. */
static void choose_top(const double *unit_scores, int n_units, int k, int *order, char *chosen)
{
    kv_evict_top(unit_scores, n_units, k, order);
    for (int i = 0; i < k && i < n_units; i++)
        chosen[order[i]] = 1;
}

/* CriticalKV's value weights are computed only for the slots a selection
 * needs (kv_refine_call.exact), each once: values never change. */
typedef struct vnorm_ctx {
    kv_evictor *ev;
    const kv_cache *cache;
    int layer, set;
} vnorm_ctx;

/* Computes the value weights of the given slots, and with them those of
 * the recent area that have none yet: those become candidates over the
 * next decode steps, and one pass over o_proj serves them all. */
static int vnorm_exact(void *ctx, const int *slots, int n, kv_error *err)
{
    const vnorm_ctx *x = ctx;
    layer_state *ls = state(x->ev, x->layer, x->set);
    int L = ls->len, row = kv_cache_row(x->cache), first_recent = L - x->ev->p.recent_size;
    int *all = malloc((size_t)(n + x->ev->p.recent_size + 1) * sizeof *all);
    if (!all)
        return kv_fail(err, "CriticalKV: out of memory");
    int m = 0;
    for (int i = 0; i < n; i++)
        if (slots[i] < first_recent)
            all[m++] = slots[i];
    for (int t = first_recent > 0 ? first_recent : 0; t < L; t++)
        if (isnan(ls->vnorm[t]))
            all[m++] = t;
    float *v = malloc((size_t)(m > 0 ? m : 1) * (size_t)row * sizeof *v);
    double *out = malloc((size_t)(m > 0 ? m : 1) * sizeof *out);
    int rc = v && out ? 0 : kv_fail(err, "CriticalKV: out of memory");
    for (int i = 0; rc == 0 && i < m; i++)
        memcpy(v + (size_t)i * (size_t)row, x->cache->layers[x->layer].v + (size_t)all[i] * (size_t)row,
               (size_t)row * sizeof *v);
    if (rc == 0 && m > 0)
        rc = kv_criticalkv_vnorm(&x->ev->model, x->layer, set_head(x->ev, x->set), v, m, out, err);
    for (int i = 0; rc == 0 && i < m; i++)
        ls->vnorm[all[i]] = out[i];
    x->ev->n_vnorm_computed += m;
    free(v);
    free(out);
    free(all);
    return rc;
}

/* Upper bounds of the value weights of candidate slots S..S+n-1 from the
 * cache's value norms and the model's per-head gains, or NULL when either
 * is missing (then every candidate's weight is computed). */
static const double *vnorm_bounds(kv_evictor *ev, const kv_cache *cache, int layer, int set, int n,
                                  double *out)
{
    const kv_cache_layer *cl = &cache->layers[layer];
    int S = ev->p.start_size, H = cache->n_kv_heads, g0 = set_head(ev, set);
    if (!ev->model.vnorm_gain || cl->vlen_n < S + n)
        return NULL;
    const double *gain = ev->model.vnorm_gain + (size_t)layer * (size_t)H;
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

/* Remembers the absolute positions of the refiner's picks (ascending) for
 * kv_evictor_refined_positions. */
static void record_refined(kv_evictor *ev, const kv_cache *cache, int layer, int set,
                           const int *picks, int n_pick)
{
    int G = ev->cfg.group, S = ev->p.start_size, L = cache->layers[layer].len, k = 0;
    int32_t *out = ev->refined + (size_t)set * (size_t)ev->p.refined_size;
    for (int i = 0; i < n_pick; i++)
        for (int r = 0; r < G && S + picks[i] * G + r < L && k < ev->p.refined_size; r++) {
            int32_t pos = kv_cache_pos(cache, layer, S + picks[i] * G + r, ev->n_sets > 1 ? set : 0);
            int j = k++;
            for (; j > 0 && out[j - 1] > pos; j--) /* insertion keeps them ascending */
                out[j] = out[j - 1];
            out[j] = pos;
        }
    ev->n_refined[set] = k;
}

long long kv_evictor_vnorm_count(const kv_evictor *ev)
{
    return ev->n_vnorm_computed;
}

const int32_t *kv_evictor_refined_positions(const kv_evictor *ev, int set, int *n)
{
    *n = ev->refined && set >= 0 && set < ev->n_sets ? ev->n_refined[set] : 0;
    return *n ? ev->refined + (size_t)set * (size_t)ev->p.refined_size : NULL;
}

/* CriticalKV's inputs for a selection over the n candidate slots after
 * the start area: new slots marked unknown; when only a few candidates
 * lack a weight (decode, where one arrives per step), all of them computed
 * now with the recent area, since missing one per step would cost a pass
 * over o_proj each time; else (a long prompt's first compression) bounds
 * that let the refiner rule most of them out. */
static int vnorm_prepare(vnorm_ctx *vc, int n, double *bounds, kv_refine_call *c, kv_error *err)
{
    kv_evictor *ev = vc->ev;
    layer_state *ls = state(ev, vc->layer, vc->set);
    int S = ev->p.start_size, missing = 0;
    for (int t = ls->n_vnorm; t < ls->len; t++)
        ls->vnorm[t] = NAN;
    ls->n_vnorm = ls->len;
    int *slots = malloc((size_t)(n > 0 ? n : 1) * sizeof *slots);
    if (!slots)
        return kv_fail(err, "CriticalKV: out of memory");
    for (int t = S; t < S + n; t++)
        if (isnan(ls->vnorm[t]))
            slots[missing++] = t;
    int rc = 0;
    bool few = missing <= kv_evict_params_budget(&ev->p);
    if (missing > 0 && few)
        rc = vnorm_exact(vc, slots, missing, err);
    free(slots);
    c->vnorm = ls->vnorm;
    /* with every weight known there is nothing to rule out */
    c->vbound = few ? NULL : vnorm_bounds(ev, vc->cache, vc->layer, vc->set, n, bounds);
    c->exact = vnorm_exact;
    c->exact_ctx = vc;
    return rc;
}

/* Lets the refiner pick among the candidate units the coarse top-k left. */
static int refine(kv_evictor *ev, const kv_cache *cache, int layer, int set, const double *s,
                  int n_units, char *chosen, double *masked, int *picks, kv_error *err)
{
    int G = ev->cfg.group, n_pick = ev->p.refined_size / G, n = n_units * G;
    for (int i = 0; i < n; i++)
        masked[i] = chosen[i / G] ? -INFINITY : s[i];
    kv_refine_call c = {.cfg = &ev->cfg,
                        .scores = masked,
                        .n_tokens = n,
                        .unit = G,
                        .n_pick = n_pick,
                        .first_slot = ev->p.start_size,
                        .cache = cache,
                        .layer = layer,
                        .rng = &ev->rng};
    vnorm_ctx vc = {ev, cache, layer, set};
    double *bounds = NULL;
    if (ev->refiner->needs_vnorm) {
        if (!(bounds = malloc((size_t)(n > 0 ? n : 1) * sizeof *bounds)))
            return kv_fail(err, "CriticalKV: out of memory");
        if (vnorm_prepare(&vc, n, bounds, &c, err) != 0) {
            free(bounds);
            return -1;
        }
    }
    int rc = ev->refiner->pick(&c, picks, err);
    free(bounds);
    if (rc != 0)
        return -1;
    for (int i = 0; i < n_pick; i++) {
        if (picks[i] < 0 || picks[i] >= n_units || chosen[picks[i]])
            return kv_fail(err, "eviction: refiner %s picked an invalid unit %d", ev->refiner->name,
                           picks[i]);
        chosen[picks[i]] = 1;
    }
    record_refined(ev, cache, layer, set, picks, n_pick);
    return 0;
}

/* The kept slots of one set of a layer of L slots, ascending, into keep;
 * returns how many. s holds the selection scores of slots S..L-1; the
 * layer's intermediate size is I. */
static int select_keep(kv_evictor *ev, const kv_cache *cache, int layer, int set, const double *s,
                       int L, int I, int *keep, kv_error *err)
{
    const kv_evict_params *p = &ev->p;
    int S = p->start_size, G = ev->cfg.group, n = L - S;
    int n_units = (n + G - 1) / G;     /* groups incl. a partial last one */
    int n_recent = p->recent_size / G; /* the partial group counts as recent */
    int n_cand = n_units - n_recent;   /* candidate units */
    if (n_cand < 0)
        n_cand = 0;
    double *unit_scores = ev->tmp.d + ev->tmp.cap; /* second half of the double scratch */
    int *order = ev->tmp.i;
    int *picks = ev->tmp.i + ev->tmp.cap;
    char *chosen = (char *)(ev->tmp.i + 2 * ev->tmp.cap);
    memset(chosen, 0, (size_t)n_units + 1);
    for (int u = 0; u < n_cand; u++) {
        double sum = 0.0;
        for (int r = 0; r < G; r++)
            sum += s[u * G + r]; /* candidate units are whole */
        unit_scores[u] = sum;
    }
    choose_top(unit_scores, n_cand, (I - p->refined_size) / G, order, chosen);
    if (ev->refiner &&
        refine(ev, cache, layer, set, s, n_cand, chosen, unit_scores, picks, err) != 0)
        return -1;
    for (int u = n_cand; u < n_units; u++)
        chosen[u] = 1;
    int k = 0;
    for (int t = 0; t < S && t < L; t++)
        keep[k++] = t;
    for (int u = 0; u < n_units; u++)
        for (int r = 0; chosen[u] && r < G && S + u * G + r < L; r++)
            keep[k++] = S + u * G + r;
    return k;
}

/* How many of the kept slots 0, 1, ... in a row come from slots below
 * `measured` in every set: the kept slots with their value norms. */
static int measured_prefix(const int *keep, int stride, int sets, int n_keep, int measured)
{
    int j = 0;
    for (; j < n_keep; j++)
        for (int g = 0; g < sets; g++)
            if (keep[(size_t)g * (size_t)stride + (size_t)j] >= measured)
                return j;
    return j;
}

/* ---- compaction ---- */

void kv_evict_rope_freqs(double rope_theta, int head_dim, double *inv_freq)
{
    for (int f = 0; f < head_dim / 2; f++)
        inv_freq[f] = pow(rope_theta, -2.0 * f / head_dim);
}

/* dst = x*cos + rotate_half(x)*sin with the angles' cosines and sines
 * given; dst may be x. */
static void rotate_by(float *dst, const float *x, int half, const double *c, const double *s)
{
    for (int f = 0; f < half; f++) {
        double x1 = x[f], x2 = x[f + half];
        dst[f] = (float)(x1 * c[f] - x2 * s[f]);
        dst[f + half] = (float)(x2 * c[f] + x1 * s[f]);
    }
}

void kv_evict_rope_rotate(float *x, int head_dim, const double *inv_freq, double delta)
{
    int half = head_dim / 2;
    for (int f = 0; f < half; f++) {
        double c = cos(delta * inv_freq[f]), s = sin(delta * inv_freq[f]);
        double x1 = x[f], x2 = x[f + half];
        x[f] = (float)(x1 * c - x2 * s);
        x[f + half] = (float)(x2 * c + x1 * s);
    }
}

/* The rank of slot t among the tokens KV head h holds in layer l: its slot
 * less the head's gap below it. Rerotation turns a key by the change of
 * its rank, the index it has in its own head's list, so a head's keys
 * rotate as in per-head (ragged) storage whatever the padding. */
static int held_rank(const kv_cache_layer *l, int h, int t)
{
    return l->gap && t >= l->gap[2 * h + 1] ? t - (l->gap[2 * h + 1] - l->gap[2 * h]) : t;
}

/* dst's gaps after a gather whose sets keep n_keep[g] slots, len the
 * longest: none when all sets are as long. */
static int set_gaps(kv_cache_layer *d, int sets, const int *n_keep, int len, kv_error *err)
{
    bool ragged = false;
    for (int g = 0; g < sets; g++)
        ragged = ragged || n_keep[g] != len;
    if (!ragged) {
        free(d->gap);
        d->gap = NULL;
        return 0;
    }
    if (!d->gap && !(d->gap = malloc(2 * (size_t)sets * sizeof *d->gap)))
        return kv_fail(err, "eviction: out of memory");
    for (int g = 0; g < sets; g++) {
        d->gap[2 * g] = n_keep[g];
        d->gap[2 * g + 1] = len;
    }
    return 0;
}

/* Writes the kept slots of src's layer into dst's, in order; set g keeps
 * keep[g * stride + 0 .. n_keep[g]) and moves the KV heads it holds (all
 * of them when one set is shared, head g with per_head). dst may be src
 * (rows then move down in place). The layer becomes as long as its longest
 * set; a shorter set leaves a gap after its tokens (kvcache.h). With
 * rerotation each key turns by the change of its rank (held_rank) as it is
 * copied, so a key is read and written once. Deltas only decrease along
 * the slots and come in long runs (per_token decode: one run of -1), so
 * each set's angles are computed once per run, not once per key. */
static int gather(kv_evictor *ev, const kv_cache *src, kv_cache *dst, int layer, const int *keep,
                  int stride, const int *n_keep, kv_error *err)
{
    const kv_cache_layer *s = &src->layers[layer];
    kv_cache_layer *d = &dst->layers[layer];
    int D = src->head_dim, half = D / 2, sets = ev->n_sets, nkv = src->n_kv_heads;
    int heads = sets > 1 ? 1 : nkv; /* KV heads moved per set */
    size_t row = (size_t)kv_cache_row(src), span = (size_t)heads * (size_t)D;
    bool in_place = src == dst, rotate = ev->p.apply_rerotation;
    int len = 0, shortest = s->len;
    for (int g = 0; g < sets; g++) {
        const int *kg = keep + (size_t)g * (size_t)stride;
        for (int j = 0; j < n_keep[g]; j++)
            if (kg[j] < j || kg[j] >= s->len || (j > 0 && kg[j] <= kg[j - 1]))
                return kv_fail(err, "eviction: kept slots must be ascending and < %d", s->len);
        len = n_keep[g] > len ? n_keep[g] : len;
        shortest = n_keep[g] < shortest ? n_keep[g] : shortest;
    }
    if (kv_cache_reserve_layer(dst, layer, len + 1, err) != 0)
        return -1;
    double *cs = malloc((size_t)sets * (size_t)D * sizeof *cs); /* per set: cos | sin */
    int *delta = calloc((size_t)sets, sizeof *delta);
    if (!cs || !delta) {
        free(cs);
        free(delta);
        return kv_fail(err, "eviction: out of memory");
    }
    for (int j = 0; j < len; j++)
        for (int g = 0; g < sets; g++) {
            int h0 = sets > 1 ? g : 0;
            if (j >= n_keep[g]) { /* the set's gap: attention weighs it 0, and 0 times
                                     a NaN left in fresh memory would still be NaN */
                size_t at = (size_t)j * row + (size_t)h0 * D;
                memset(d->k + at, 0, span * sizeof(float));
                memset(d->v + at, 0, span * sizeof(float));
                d->pos[(size_t)j * nkv + h0] = -1;
                d->vlen[(size_t)j * nkv + h0] = 0.0f;
                continue;
            }
            int from = keep[(size_t)g * (size_t)stride + (size_t)j];
            if (in_place && from == j)
                continue;
            double *c = cs + (size_t)g * (size_t)D, *sn = c + half;
            int shift = j - held_rank(s, h0, from);
            if (rotate && shift != delta[g]) {
                delta[g] = shift;
                for (int f = 0; f < half; f++)
                    sincos(delta[g] * ev->inv_freq[f], &sn[f], &c[f]);
            }
            /* in place, keep[j] >= j and ascending: row j is free once read */
            size_t to_off = (size_t)j * row + (size_t)h0 * D,
                   from_off = (size_t)from * row + (size_t)h0 * D;
            if (rotate && shift != 0)
                for (int h = 0; h < heads; h++)
                    rotate_by(d->k + to_off + (size_t)h * D, s->k + from_off + (size_t)h * D, half,
                              c, sn);
            else
                memcpy(d->k + to_off, s->k + from_off, span * sizeof(float));
            memcpy(d->v + to_off, s->v + from_off, span * sizeof(float));
            for (int h = h0; h < h0 + heads; h++) { /* a few numbers: no memcpy call */
                d->pos[(size_t)j * nkv + h] = s->pos[(size_t)from * nkv + h];
                d->vlen[(size_t)j * nkv + h] = s->vlen[(size_t)from * nkv + h];
            }
        }
    d->vlen_n = measured_prefix(keep, stride, sets, shortest, s->vlen_n);
    d->len = len;
    free(cs);
    free(delta);
    return set_gaps(d, sets, n_keep, len, err);
}

/* A set's scores follow its tokens to their new slots; a gap (len past
 * n_keep) scores nothing. */
static void compact_state(layer_state *ls, const int *keep, int n_keep, int len)
{
    for (int j = 0; j < n_keep; j++) {
        ls->score[j] = ls->score[keep[j]];
        ls->count[j] = ls->count[keep[j]];
        if (ls->vnorm && keep[j] < ls->n_vnorm)
            ls->vnorm[j] = ls->vnorm[keep[j]];
    }
    int n_vnorm = 0;
    while (n_vnorm < n_keep && keep[n_vnorm] < ls->n_vnorm)
        n_vnorm++;
    ls->n_vnorm = n_vnorm;
    for (int j = n_keep; j < len; j++)
        ls->score[j] = ls->count[j] = 0.0;
    ls->len = len;
}

/* Brings the state of a layer to its L slots for the scorers that need no
 * statistics to do so: the attention-free ones, and those that rank on
 * their own (expected_attention observes the prompt only). */
static int track_length(kv_evictor *ev, const kv_cache *src, int layer, int L, kv_error *err)
{
    bool observed = ev->scorer->observe && !ev->scorer->rank;
    for (int g = 0; g < ev->n_sets; g++) {
        layer_state *ls = state(ev, layer, g);
        if (observed || ls->len == L)
            continue;
        ls->len = ls->len < L ? ls->len : L;
        if (layer_extend(ev, src, layer, g, L, err) != 0)
            return -1;
    }
    for (int g = 0; g < ev->n_sets; g++)
        if (state(ev, layer, g)->len != L)
            return kv_fail(err,
                           "eviction: layer %d holds %d slots but statistics were observed for "
                           "%d (call kv_evictor_observe after every forward)",
                           layer, L, state(ev, layer, g)->len);
    return 0;
}

/* The slots of a layer that hold a token of KV head h (all, but a gap),
 * ascending, into out; returns how many. */
static int held_slots(const kv_cache *c, int layer, int h, int *out)
{
    int n = 0;
    for (int t = 0; t < c->layers[layer].len; t++)
        if (kv_cache_holds(c, layer, t, h))
            out[n++] = t;
    return n;
}

/* Every set's kept slots, keep[set * L + ...], and their counts n_keep[set]
 * (the same for every set: they depend only on L and the sizes). */
static int select_sets(kv_evictor *ev, const kv_cache *src, int layer, int L, int *keep,
                       int *n_keep, kv_error *err)
{
    for (int g = 0; g < ev->n_sets; g++) {
        int *kg = keep + (size_t)g * (size_t)L;
        if (selection_scores(ev, src, layer, g, ev->tmp.d, err) != 0)
            return -1;
        n_keep[g] = select_keep(ev, src, layer, g, ev->tmp.d, L, ev->inter[layer], kg, err);
        if (n_keep[g] < 0)
            return -1;
    }
    return 0;
}

/* AdaKV's candidates of a layer: each head's held slots past its first S,
 * before its last R; held[h * L ...] lists a head's held slots, n_held[h]
 * how many. The entries come out in (position, head) order, the order
 * kv_adaptive_pick breaks ties by: a merge of the heads' lists, each of
 * them in token order. */
typedef struct ada_entries {
    double *score;
    int *head, *slot;
    char *take;
    int n;
} ada_entries;

static void ada_free(ada_entries *e)
{
    free(e->score);
    free(e->head);
    free(e->slot);
    free(e->take);
}

static int ada_collect(kv_evictor *ev, const kv_cache *src, int layer, int L, const int *held,
                       const int *n_held, int total, ada_entries *e, kv_error *err)
{
    int sets = ev->n_sets, S = ev->p.start_size, R = ev->p.recent_size;
    size_t n = (size_t)(total > 0 ? total : 1);
    double *sc = malloc((size_t)sets * (size_t)L * sizeof *sc);
    int *at = malloc((size_t)sets * sizeof *at);
    *e = (ada_entries){malloc(n * sizeof *e->score), malloc(n * sizeof *e->head),
                       malloc(n * sizeof *e->slot), malloc(n), 0};
    int rc = sc && at && e->score && e->head && e->slot && e->take
                 ? 0
                 : kv_fail(err, "eviction: out of memory for %d candidates", total);
    for (int g = 0; rc == 0 && g < sets; g++) {
        rc = selection_scores(ev, src, layer, g, ev->tmp.d, err);
        for (int t = S; rc == 0 && t < L; t++)
            sc[(size_t)g * (size_t)L + (size_t)t] = ev->tmp.d[t - S];
        at[g] = S;
    }
    while (rc == 0 && e->n < total) {
        int best = -1;
        int32_t best_pos = 0;
        for (int g = 0; g < sets; g++) {
            if (at[g] >= n_held[g] - R)
                continue;
            int32_t pos = kv_cache_pos(src, layer, held[(size_t)g * (size_t)L + (size_t)at[g]], g);
            if (best < 0 || pos < best_pos) {
                best = g;
                best_pos = pos;
            }
        }
        int t = held[(size_t)best * (size_t)L + (size_t)at[best]++];
        e->score[e->n] = sc[(size_t)best * (size_t)L + (size_t)t];
        e->head[e->n] = best;
        e->slot[e->n++] = t;
    }
    free(sc);
    free(at);
    return rc;
}

/* AdaKV (head_budget adaptive): when a layer's heads hold more than
 * Hkv * I candidates together, they keep Hkv * I of them, chosen together
 * (kv_adaptive_pick), plus each head's start and recent tokens. keep and
 * n_keep hold each head's held slots on entry and its kept slots after.
 * Returns 1 when it evicted, 0 when within the budget. */
static int select_adaptive(kv_evictor *ev, const kv_cache *src, int layer, int L, int *keep,
                           int *n_keep, kv_error *err)
{
    int sets = ev->n_sets, S = ev->p.start_size, R = ev->p.recent_size, I = ev->inter[layer];
    int total = 0;
    for (int g = 0; g < sets; g++)
        total += n_keep[g] - S - R > 0 ? n_keep[g] - S - R : 0;
    if (total <= sets * I)
        return 0;
    ada_entries e;
    int rc = ada_collect(ev, src, layer, L, keep, n_keep, total, &e, err);
    int n_safe = (int)(I * ev->p.alpha_safeguard); /* truncated, as kvpress does */
    if (rc == 0)
        rc = kv_adaptive_pick(e.score, e.head, e.n, sets, n_safe, sets * I, e.take, err);
    char *mark = rc == 0 ? calloc((size_t)sets * (size_t)L, 1) : NULL;
    if (rc == 0 && !mark)
        rc = kv_fail(err, "eviction: out of memory");
    for (int i = 0; rc == 0 && i < e.n; i++)
        mark[(size_t)e.head[i] * (size_t)L + (size_t)e.slot[i]] = e.take[i];
    for (int g = 0; rc == 0 && g < sets; g++) {
        int *kg = keep + (size_t)g * (size_t)L, k = 0; /* kept slots overwrite held ones */
        for (int i = 0; i < n_keep[g]; i++)
            if (i < S || i >= n_keep[g] - R || mark[(size_t)g * (size_t)L + (size_t)kg[i]])
                kg[k++] = kg[i];
        n_keep[g] = k;
    }
    free(mark);
    ada_free(&e);
    return rc == 0 ? 1 : -1;
}

/* Reports one eviction: each set's positions, read from the head it holds;
 * a set shorter than the layer (AdaKV) ends in -1s. */
static void report(kv_evictor *ev, const kv_cache *c, int layer, int32_t *buf,
                   kv_evict_trace_fn trace, void *trace_ctx)
{
    int len = c->layers[layer].len;
    for (int g = 0; g < ev->n_sets; g++)
        for (int j = 0; j < len; j++) {
            int h = ev->n_sets > 1 ? g : 0;
            buf[(size_t)g * (size_t)len + (size_t)j] =
                kv_cache_holds(c, layer, j, h) ? kv_cache_pos(c, layer, j, h) : -1;
        }
    trace(trace_ctx, ev->step, layer, buf, len, ev->n_sets);
}

/* The cache length above which layer l evicts (M_l = S + I_l + R). */
static int layer_budget(const kv_evictor *ev, int l)
{
    return ev->p.start_size + ev->inter[l] + ev->p.recent_size;
}

/* Evicts one layer of src into dst (dst may be src). A layer within the
 * budget is left as it is (copied when dst is another cache). */
static int compress_layer(kv_evictor *ev, const kv_cache *src, kv_cache *dst, int layer,
                          kv_evict_trace_fn trace, void *trace_ctx, kv_error *err)
{
    int L = src->layers[layer].len, sets = ev->n_sets;
    if (track_length(ev, src, layer, L, err) != 0)
        return -1;
    if (scratch_need(&ev->tmp, L + 1, err) != 0)
        return -1;
    int *keep = malloc((size_t)(L > 0 ? L : 1) * (size_t)sets * sizeof *keep);
    int *n_keep = malloc((size_t)sets * sizeof *n_keep);
    if (!keep || !n_keep) {
        free(keep);
        free(n_keep);
        return kv_fail(err, "eviction: out of memory");
    }
    for (int g = 0; g < sets; g++) /* to begin with, every token a head holds */
        n_keep[g] = held_slots(src, layer, sets > 1 ? g : 0, keep + (size_t)g * (size_t)L);
    int evict = 0;
    if (ev->adaptive)
        evict = select_adaptive(ev, src, layer, L, keep, n_keep, err);
    else if (L > layer_budget(ev, layer))
        evict = select_sets(ev, src, layer, L, keep, n_keep, err) == 0 ? 1 : -1;
    int rc = evict < 0 ? -1 : 0;
    if (rc == 0 && (evict || src != dst))
        rc = gather(ev, src, dst, layer, keep, L, n_keep, err);
    for (int g = 0; rc == 0 && evict && g < sets; g++)
        compact_state(state(ev, layer, g), keep + (size_t)g * (size_t)L, n_keep[g],
                      dst->layers[layer].len);
    if (rc == 0 && evict && trace)
        report(ev, dst, layer, keep, trace, trace_ctx); /* keep is free now */
    free(keep);
    free(n_keep);
    return rc;
}

/* The largest M_l over the layers. */
static int largest_budget(const kv_evictor *ev)
{
    int m = 0;
    for (int l = 0; l < ev->model.n_layers; l++)
        m = layer_budget(ev, l) > m ? layer_budget(ev, l) : m;
    return m;
}

/* After an eviction a layer holds at most M_l + 1 slots (M_l, plus the
 * token of the next step; more only where AdaKV's fullest head keeps more,
 * and kv_cache_shrink keeps what a layer holds), so memory above the
 * largest M_l + 1 goes back. */
static int release_memory(kv_evictor *ev, kv_cache *cache, kv_error *err)
{
    int keep_cap = largest_budget(ev) + 1;
    if (kv_cache_shrink(cache, keep_cap, err) != 0)
        return -1;
    for (int l = 0; l < ev->model.n_layers * ev->n_sets; l++) {
        layer_state *ls = &ev->layers[l];
        if (ls->cap > 2 * keep_cap && ls->len <= keep_cap) {
            double *a = realloc(ls->score, (size_t)keep_cap * sizeof *a);
            if (a)
                ls->score = a;
            double *b = realloc(ls->count, (size_t)keep_cap * sizeof *b);
            if (b)
                ls->count = b;
            double *c = ls->vnorm ? realloc(ls->vnorm, (size_t)keep_cap * sizeof *c) : NULL;
            if (c)
                ls->vnorm = c;
            if (a && b && (c || !ls->vnorm))
                ls->cap = keep_cap;
        }
    }
    return 0;
}

/* "compact" positions (kvpress): RoPE continues at the compacted length,
 * while the sequence index of the next token stays what it was. */
static void restart_positions(kv_cache *c)
{
    int next_token = c->next_pos + c->token_offset;
    c->next_pos = c->layers[0].len;
    c->token_offset = next_token - c->next_pos;
}

int kv_evictor_compress(kv_evictor *ev, kv_cache *cache, kv_evict_trace_fn trace, void *trace_ctx,
                        kv_error *err)
{
    if (cache->n_layers != ev->model.n_layers)
        return kv_fail(err, "eviction: the cache has %d layers, the policy %d", cache->n_layers,
                       ev->model.n_layers);
    bool evicted = false;
    for (int l = 0; l < cache->n_layers; l++) {
        int before = cache->layers[l].len;
        if (compress_layer(ev, cache, cache, l, trace, trace_ctx, err) != 0)
            return -1;
        evicted = evicted || cache->layers[l].len != before;
    }
    if (strcmp(ev->p.positions, "compact") == 0)
        restart_positions(cache);
    ev->step++;
    return evicted ? release_memory(ev, cache, err) : 0;
}

int kv_evictor_compress_into(kv_evictor *ev, const kv_cache *src, kv_cache **out,
                             kv_evict_trace_fn trace, void *trace_ctx, kv_error *err)
{
    *out = NULL;
    if (src->n_layers != ev->model.n_layers)
        return kv_fail(err, "eviction: the cache has %d layers, the policy %d", src->n_layers,
                       ev->model.n_layers);
    /* every layer ends with at most M slots, or its own length when shorter:
     * a budget above the prompt allocates the prompt, not the budget */
    int cap = largest_budget(ev);
    int longest = 0;
    for (int l = 0; l < src->n_layers; l++)
        longest = src->layers[l].len > longest ? src->layers[l].len : longest;
    cap = (cap < longest ? cap : longest) + 1;
    kv_cache *dst = kv_cache_new(src->n_layers, src->n_kv_heads, src->head_dim, cap, err);
    if (!dst)
        return -1;
    dst->next_pos = src->next_pos;
    dst->token_offset = src->token_offset;
    for (int l = 0; l < src->n_layers; l++)
        if (compress_layer(ev, src, dst, l, trace, trace_ctx, err) != 0) {
            kv_cache_free(dst);
            return -1;
        }
    if (strcmp(ev->p.positions, "compact") == 0)
        restart_positions(dst);
    ev->step++;
    *out = dst;
    return 0;
}
