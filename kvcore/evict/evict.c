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

/* ---- statistics requests ---- */

static void cfg_resolve(kv_evict_cfg *cfg, const kv_evict_params *p, const kv_evict_model *m)
{
    cfg->p = p;
    cfg->window = kv_evict_params_window(p);
    cfg->group = strcmp(p->strategy, "per_group") == 0 ? p->group_size : 1;
    cfg->n_sets = m && strcmp(p->strategy, "per_head") == 0 ? m->n_kv_heads : 1;
    cfg->norm_sum = strcmp(p->score_aggregation, "norm_sum") == 0;
    cfg->budget = kv_evict_params_budget(p);
    cfg->model = m;
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

/* ---- the evictor ---- */

typedef struct layer_state {
    double *score; /* [cap] accumulated raw score per slot (0 for start slots) */
    double *count; /* [cap] norm_sum counters */
    int len, cap;
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
    void *refiner_state;       /* its own (kv_refiner.state_new), or NULL */
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

static int layer_grow(layer_state *ls, int n, kv_error *err)
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
    if (!a || !b)
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
    for (int l = 0; l < ev->model.n_layers * ev->n_sets; l++)
        ev->layers[l].len = 0;
    if (ev->refiner && ev->refiner->reset)
        ev->refiner->reset(ev->refiner_state, -1);
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
    kv_cache_quant quant = kv_evict_params_cache_quant(p);
    if (kv_cache_quant_check(&quant, m->head_dim, err) != 0) {
        kv_evictor_free(ev);
        return NULL;
    }
    cfg_resolve(&ev->cfg, &ev->p, &ev->model);
    ev->n_sets = ev->cfg.n_sets;
    if (ev->refiner && ev->refiner->state_new &&
        !(ev->refiner_state = ev->refiner->state_new(&ev->cfg, err))) {
        kv_evictor_free(ev);
        return NULL;
    }
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
    }
    if (ev->refiner && ev->refiner->state_free)
        ev->refiner->state_free(ev->refiner_state);
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
    if (layer_grow(ls, n, err) != 0)
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
    for (int g = 0; prefill && g < ev->n_sets; g++)
        state(ev, layer, g)->len = 0;
    if (prefill && ev->refiner && ev->refiner->reset)
        ev->refiner->reset(ev->refiner_state, layer);
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
        if (layer_grow(state(ev, layer, g), n, err) != 0)
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

kv_cache_quant kv_evictor_cache_quant(const kv_evictor *ev)
{
    kv_cache_quant q = kv_evict_params_cache_quant(&ev->p);
    kv_error ignored; /* kv_evictor_new checked it */
    kv_cache_quant_check(&q, ev->model.head_dim, &ignored);
    return q;
}

long long kv_evictor_vnorm_count(const kv_evictor *ev)
{
    return ev->refiner && ev->refiner->work ? ev->refiner->work(ev->refiner_state) : 0;
}

const int32_t *kv_evictor_refined_positions(const kv_evictor *ev, int set, int *n)
{
    *n = ev->refined && set >= 0 && set < ev->n_sets ? ev->n_refined[set] : 0;
    return *n ? ev->refined + (size_t)set * (size_t)ev->p.refined_size : NULL;
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
                        .set = set,
                        .rng = &ev->rng,
                        .state = ev->refiner_state};
    if ((ev->refiner->prepare && ev->refiner->prepare(&c, err) != 0) ||
        ev->refiner->pick(&c, picks, err) != 0)
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

/* ---- compaction ---- */

void kv_evict_rope_freqs(double rope_theta, int head_dim, double *inv_freq)
{
    for (int f = 0; f < head_dim / 2; f++)
        inv_freq[f] = pow(rope_theta, -2.0 * f / head_dim);
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

/* A set's scores, and the refiner's state, follow its tokens to their new
 * slots; a gap (len past n_keep) scores nothing. */
static void compact_state(kv_evictor *ev, int layer, int set, const int *keep, int n_keep,
                          int len)
{
    layer_state *ls = state(ev, layer, set);
    for (int j = 0; j < n_keep; j++) {
        ls->score[j] = ls->score[keep[j]];
        ls->count[j] = ls->count[keep[j]];
    }
    if (ev->refiner && ev->refiner->compacted)
        ev->refiner->compacted(ev->refiner_state, layer, set, keep, n_keep);
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

/* AdaKV (head_budget adaptive): the heads of a layer choose together
 * (kv_adaptive_select) once they hold more than Hkv * I candidates. keep
 * and n_keep hold each head's held slots on entry and its kept slots
 * after. Returns 1 when it evicted, 0 when within the budget. The scores
 * are computed only then: a scorer that ranks by itself may draw from the
 * random generator. */
static int select_adaptive(kv_evictor *ev, const kv_cache *src, int layer, int L, int *keep,
                           int *n_keep, kv_error *err)
{
    int sets = ev->n_sets, S = ev->p.start_size, R = ev->p.recent_size, I = ev->inter[layer];
    if (kv_adaptive_candidates(n_keep, sets, S, R) <= sets * I)
        return 0;
    double *sc = malloc((size_t)sets * (size_t)L * sizeof *sc);
    int rc = sc ? 0 : kv_fail(err, "eviction: out of memory");
    for (int g = 0; rc == 0 && g < sets; g++) {
        rc = selection_scores(ev, src, layer, g, ev->tmp.d, err);
        for (int t = S; rc == 0 && t < L; t++)
            sc[(size_t)g * (size_t)L + (size_t)t] = ev->tmp.d[t - S];
    }
    if (rc == 0)
        rc = kv_adaptive_select(src, layer, sets, L, S, R, I, ev->p.alpha_safeguard, sc, keep,
                                n_keep, err);
    free(sc);
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
    kv_cache_keep kept = {sets, keep, L, n_keep, ev->p.apply_rerotation ? ev->inv_freq : NULL};
    if (rc == 0 && (evict || src != dst))
        rc = kv_cache_gather(src, dst, layer, &kept, err);
    for (int g = 0; rc == 0 && evict && g < sets; g++)
        compact_state(ev, layer, g, keep + (size_t)g * (size_t)L, n_keep[g],
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
            if (a && b)
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
    /* each layer takes the room its kept slots need as they are gathered
     * (at most M_l, or its length when shorter, and the next token's): no
     * more, since an F32 layer that borrows its rows (kvcache.h) needs none
     * of its own, and rows allocated for it anyway cost fresh huge pages */
    kv_cache *dst = kv_cache_new(src->n_layers, src->n_kv_heads, src->head_dim, 1, err);
    if (!dst)
        return -1;
    dst->next_pos = src->next_pos;
    dst->token_offset = src->token_offset;
    if (kv_cache_set_quant(dst, &src->quant, err) != 0) {
        kv_cache_free(dst);
        return -1;
    }
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
