#include "backend.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "evict.h"
#include "generate.h"
#include "jieba.h"
#include "jsonstr.h"
#include "kernels.h"
#include "model.h"
#include "prompt.h"
#include "sample.h"
#include "score.h"
#include "tasks.h"
#include "tokenizer.h"

/* What the scorers need: no model, so `kvbench report` can score too. */
typedef struct scoring {
    kb_metrics *metrics;
    kb_jieba *jieba; /* loaded on the first Chinese task */
} scoring;

typedef struct engine {
    const kb_matrix *m;
    kv_model *model;
    kv_tokenizer *tok;
    kv_evict_model em;
    bool em_loaded;
    lb_protocol protocol;
    kv_evict_params *params; /* [n_configs]; unused for configs[0] (full cache) */
    kv_evictor **ev;         /* [n_configs]; NULL for the full cache */
    scoring scoring;
    long prefills;
} engine;

typedef struct task_iter {
    const lb_task *task;
    lb_loader *loader;
    lb_sample s;
    bool has_sample;
    long index;
    cJSON *answers, *classes;
} task_iter;

typedef struct prefill_state {
    kv_cache *base;
    kv_attn_stats *stats; /* [n_layers] of the prompt's forward */
    kv_attn_stats_request req;
    float *logits; /* [vocab] of the last prompt position */
    int32_t stop[2];
    int n_stop;
    int max_new;
    int n_prompt;
} prefill_state;

/* ---- matrix hooks ---- */

static bool task_known(const char *name)
{
    return lb_task_find(name) != NULL;
}

const kb_matrix_hooks *kb_engine_matrix_hooks(void)
{
    static const kb_matrix_hooks hooks = {
        .validate_eviction = kb_matrix_validate_eviction, /* table checks + NNCF's rules */
        .task_known = task_known,
    };
    return &hooks;
}

/* ---- samples ---- */

static void task_close(void *ctx, void *iter);

/* Lines with something on them: the samples of a JSON Lines task file. */
static long count_samples(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    long n = 0;
    bool filled = false; /* the current line has a non-blank byte */
    char buf[1 << 16];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0)
        for (size_t i = 0; i < got; i++) {
            if (buf[i] == '\n') {
                n += filled;
                filled = false;
            } else if (!strchr(" \t\r", buf[i])) {
                filled = true;
            }
        }
    fclose(f);
    return n + filled;
}

/* The samples of a task in the data folder `data`, in file order. */
static int open_samples(const char *data, const kb_task_spec *spec, void **out, long *n_samples,
                        kv_error *err)
{
    const lb_task *task = lb_task_find(spec->name);
    if (!task)
        return kv_fail(err, "%s: not a task kvbench knows", spec->name);
    char *path = lb_sample_path(data, task);
    if (!path)
        return kv_fail(err, "out of memory");
    task_iter *it = calloc(1, sizeof *it);
    lb_loader_options lo = {.schema = task->family == LB_FAMILY_V2 ? LB_SCHEMA_V2 : LB_SCHEMA_V1};
    if (it)
        it->loader = lb_loader_open(path, &lo, err);
    if (!it || !it->loader) {
        if (!it)
            kv_fail(err, "out of memory");
        free(it);
        free(path);
        return -1;
    }
    it->task = task;
    *n_samples = count_samples(path);
    if (*n_samples == 0) { /* scored, it would be a 0.00 that averages count */
        kv_fail(err, "%s: empty task file (no samples): fetch it again or leave the task out",
                path);
        task_close(NULL, it);
        free(path);
        return -1;
    }
    if (spec->limit > 0 && *n_samples > spec->limit)
        *n_samples = spec->limit;
    free(path);
    *out = it;
    return 0;
}

static int task_open(void *ctx, const kb_task_spec *spec, void **out, long *n_samples,
                     kv_error *err)
{
    const engine *e = ctx;
    return open_samples(e->m->data, spec, out, n_samples, err);
}

static cJSON *string_array(const kv_str *v, size_t n)
{
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; a && i < n; i++) {
        cJSON *e = kv_json_text(v[i].p, v[i].n);
        if (!e || !cJSON_AddItemToArray(a, e)) {
            cJSON_Delete(e);
            cJSON_Delete(a);
            return NULL;
        }
    }
    return a;
}

static void iter_clear_sample(task_iter *it)
{
    if (it->has_sample)
        lb_sample_free(&it->s);
    it->has_sample = false;
    cJSON_Delete(it->answers);
    cJSON_Delete(it->classes);
    it->answers = it->classes = NULL;
}

static int task_next(void *ctx, void *iter, kb_sample *out, kv_error *err)
{
    (void)ctx;
    task_iter *it = iter;
    iter_clear_sample(it);
    int rc = lb_loader_next(it->loader, &it->s, err);
    if (rc <= 0)
        return rc;
    it->has_sample = true;
    it->answers = string_array(it->s.answers, it->s.n_answers);
    it->classes = it->s.all_classes ? string_array(it->s.all_classes, it->s.n_classes) : NULL;
    if (!it->answers)
        return kv_fail(err, "out of memory");
    *out = (kb_sample){
        .id = it->s.id,
        .index = it->index++,
        .answers = it->answers,
        .all_classes = it->classes,
        .length = it->s.length,
        .data = &it->s,
    };
    return 1;
}

static void task_close(void *ctx, void *iter)
{
    (void)ctx;
    task_iter *it = iter;
    if (!it)
        return;
    iter_clear_sample(it);
    lb_loader_close(it->loader);
    free(it);
}

/* ---- prefill once, decode per config ---- */

static void prefill_free(void *ctx, void *state)
{
    engine *e = ctx;
    prefill_state *st = state;
    if (!st)
        return;
    kv_cache_free(st->base);
    kv_model_stats_free(st->stats, kv_model_get_config(e->model)->n_layers);
    free(st->logits);
    free(st);
}

/* The policy of a config; NULL for the full cache. */
static kv_evictor *evictor_of(const engine *e, const kb_config *cfg)
{
    int k = kb_matrix_find_config(e->m, cfg->name);
    return k > 0 ? e->ev[k] : NULL;
}

/* The prompt budget when the task does not set one: the model's context,
 * less room for the answer (pred.py's model2maxlen plays this role). */
static long default_max_length(const engine *e, int max_new)
{
    long ctx = kv_model_get_config(e->model)->max_positions;
    return ctx > max_new ? ctx - max_new : 0;
}

static int prefill(void *ctx, const kb_task_spec *spec, const kb_sample *s,
                   const kb_config *const *configs, size_t n_configs, void **state,
                   long *prompt_tokens, kv_error *err)
{
    engine *e = ctx;
    const lb_task *task = lb_task_find(spec->name);
    prefill_state *st = calloc(1, sizeof *st);
    if (!st)
        return kv_fail(err, "out of memory");
    st->max_new = spec->max_new_tokens > 0 ? (int)spec->max_new_tokens : task->max_new_tokens;
    lb_prompt_options po = {
        .protocol = e->protocol,
        .max_length = spec->max_length > 0 ? spec->max_length : default_max_length(e, st->max_new),
        .enable_thinking = false,
    };
    lb_prompt p = {0};
    if (lb_prompt_build(task, (const lb_sample *)s->data, e->tok, &po, &p, err) < 0) {
        free(st);
        return -1;
    }
    st->n_stop = (int)lb_stop_tokens(e->tok, task, e->protocol, st->stop);
    st->n_prompt = (int)p.n_ids;

    /* The union of what every pending config reads from the prefill. */
    kv_evict_params *ps = malloc((n_configs + 1) * sizeof *ps);
    int n_ps = 0;
    for (size_t i = 0; ps && i < n_configs; i++)
        if (evictor_of(e, configs[i]))
            ps[n_ps++] = e->params[kb_matrix_find_config(e->m, configs[i]->name)];
    int rc = !ps ? kv_fail(err, "out of memory")
             : n_ps ? kv_evict_stats_request(ps, n_ps, true, &st->req, err)
                    : 0;
    free(ps);
    const kv_model_config *mc = kv_model_get_config(e->model);
    /* Room for the full cache's answer too (its row takes this cache over):
     * a usual answer's; a longer one grows it. */
    int room = st->max_new < 4096 ? st->max_new : 4096;
    if (rc == 0 && !(st->base = kv_model_cache_new(e->model, st->n_prompt + room + 1, err)))
        rc = -1;
    bool want = kv_attn_stats_wanted(&st->req);
    if (rc == 0 && want &&
        !(st->stats = kv_model_stats_new(e->model, st->base, st->n_prompt, &st->req, err)))
        rc = -1;
    if (rc == 0 && !(st->logits = malloc((size_t)mc->vocab * sizeof *st->logits)))
        rc = kv_fail(err, "out of memory for logits");
    if (rc == 0)
        rc = kv_model_forward(e->model, st->base, p.ids, st->n_prompt, want ? &st->req : NULL,
                              st->stats, st->logits, false, err);
    lb_prompt_free(&p);
    if (rc < 0) {
        prefill_free(e, st);
        return -1;
    }
    e->prefills++;
    *prompt_tokens = st->n_prompt;
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
    decode_hook hook;
    kv_generate_opts o;
} decode_row;

/* Row r of a config: an eviction config compresses the prefilled cache into
 * its own; the full cache (after them) takes the prefilled cache over, so
 * no second copy of the prompt's keys and values is ever held. */
static int row_start(engine *e, prefill_state *st, const kb_config *cfg, decode_row *r,
                     kv_error *err)
{
    kv_evictor *ev = evictor_of(e, cfg);
    r->hook.ev = ev;
    r->o = (kv_generate_opts){
        .max_new_tokens = st->max_new,
        .stop_ids = st->stop,
        .n_stop_ids = st->n_stop,
    };
    if (!ev) {
        if (!st->base)
            return kv_fail(err, "%s: a second full-cache config", cfg->name);
        r->c = st->base;
        st->base = NULL;
        return 0;
    }
    if (kv_evictor_fork(ev, st->base, &st->req, st->stats, &r->c, NULL, NULL, err) < 0)
        return kv_fail_prefix(err, cfg->name);
    kv_evictor_generation_request(ev, &r->hook.req);
    r->o.on_step = on_step;
    r->o.stats_req = r->hook.req;
    r->o.user = &r->hook;
    return 0;
}

/* Every pending config of the sample decodes in one batch: one forward per
 * step for all configs still generating (kv_generate_batch). The eviction
 * configs fork first; then the full cache takes the prefilled cache over,
 * or it is freed, and the prefill's statistics with it: the batch holds
 * only its own caches. */
static int decode_batch(void *ctx, void *state, const kb_task_spec *spec, const kb_sample *s,
                        const kb_config *const *cfgs, size_t n, kb_decode_result *outs,
                        long *steps, kv_error *err)
{
    (void)spec;
    (void)s;
    engine *e = ctx;
    prefill_state *st = state;
    decode_row *rows = calloc(n, sizeof *rows);
    kv_generation *gens = calloc(n, sizeof *gens);
    kv_cache **caches = calloc(n, sizeof *caches);
    const kv_generate_opts **opts = calloc(n, sizeof *opts);
    const float **lasts = calloc(n, sizeof *lasts);
    int rc = rows && gens && caches && opts && lasts ? 0 : kv_fail(err, "out of memory");
    for (int full = 0; full < 2; full++)
        for (size_t i = 0; i < n && rc == 0; i++) {
            if ((evictor_of(e, cfgs[i]) == NULL) != full)
                continue;
            rc = row_start(e, st, cfgs[i], &rows[i], err);
            caches[i] = rows[i].c;
            opts[i] = &rows[i].o;
            lasts[i] = st->logits;
            if (rc == 0)
                outs[i].kept_tokens = rows[i].c->layers[0].len;
        }
    kv_cache_free(st->base);
    st->base = NULL;
    kv_model_stats_free(st->stats, kv_model_get_config(e->model)->n_layers);
    st->stats = NULL;
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
    *steps = forwards;
    for (size_t i = 0; rows && gens && i < n; i++) {
        kv_generation_free(&gens[i]);
        kv_cache_free(rows[i].c);
    }
    free(rows);
    free(gens);
    free(caches);
    free(opts);
    free(lasts);
    return rc;
}

/* ---- scores ---- */

/* eval.py: the metric of each line (max over its answers), then
 * round(100 * total / n, 2) with the total summed in file order. */
static int score_task(const char *task, const char *const *lines, size_t n, double *score,
                      double *sample_scores, const char **metric_name, char *msg, size_t msg_n,
                      void *ctx)
{
    scoring *e = ctx;
    kb_metric metric;
    bool first_line;
    if (kb_task_metric(task, &metric, &first_line) < 0) {
        snprintf(msg, msg_n, "%s: no metric for this task", task);
        return -1;
    }
    *metric_name = kb_metric_name(metric);
    if (kb_metric_needs_jieba(metric) && !e->jieba) {
        kv_error err = {{0}};
        if (kb_jieba_load(NULL, &e->jieba, &err) < 0) {
            snprintf(msg, msg_n, "%s", err.msg);
            return -1;
        }
        kb_metrics_free(e->metrics);
        if (kb_metrics_new(e->jieba, &e->metrics, &err) < 0) {
            snprintf(msg, msg_n, "%s", err.msg);
            return -1;
        }
    }
    double total = 0;
    for (size_t i = 0; i < n; i++) {
        /* the same line reader and scorer as `kvbench score`, so that the run's
         * scores.json and a later `kvbench score` agree */
        kb_scored_line line = {0};
        kv_error err = {{0}};
        double sc = 0;
        int rc = asprintf(&line.where, "line %zu", i + 1) < 0
                     ? kv_fail(&err, "out of memory")
                     : kb_scored_line_parse(lines[i], strlen(lines[i]), task, &line, &err);
        kb_classes cl = {line.classes, line.n_classes};
        if (rc == 0)
            rc = kb_score_prediction(e->metrics, task, line.pred, line.answers, line.n_answers,
                                     line.classes ? &cl : NULL, &sc, &err);
        kb_scored_line_free(&line);
        if (rc < 0) {
            snprintf(msg, msg_n, "%s: %s", task, err.msg);
            return -1;
        }
        sample_scores[i] = sc;
        total += sc;
    }
    *score = n ? kb_py_round(100.0 * total / (double)n, 2) : 0.0;
    return 0;
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
    if (!e->params || !e->ev) {
        kv_fail(err, "out of memory");
        goto fail;
    }
    if (lb_protocol_parse(m->protocol, &e->protocol, err) < 0)
        goto fail;
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
        kv_evict_params_default(&e->params[i]);
        if (kv_evict_params_from_json(&e->params[i], m->configs[i].params, err) < 0 ||
            kv_evict_params_validate(&e->params[i], err) < 0) {
            kv_fail_prefix(err, m->configs[i].name);
            goto fail;
        }
    }
    if (m->n_configs > 1) {
        if (kv_evict_model_load(&e->em, e->model, any_criticalkv(e), err) < 0)
            goto fail;
        e->em_loaded = true;
        for (size_t i = 1; i < m->n_configs; i++)
            if (!(e->ev[i] = kv_evictor_new(&e->params[i], &e->em, err))) {
                kv_fail_prefix(err, m->configs[i].name);
                goto fail;
            }
    }
    if (kb_metrics_new(NULL, &e->scoring.metrics, err) < 0)
        goto fail;
    b->task_open = task_open;
    b->task_next = task_next;
    b->task_close = task_close;
    b->prefill = prefill;
    b->decode_batch = decode_batch;
    b->prefill_free = prefill_free;
    b->scorer = score_task;
    b->scorer_ctx = &e->scoring;
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
    free(e->params);
    kb_metrics_free(e->scoring.metrics);
    kb_jieba_free(e->scoring.jieba);
    kv_tokenizer_free(e->tok);
    kv_model_free(e->model);
    free(e);
    b->ctx = NULL;
}

long kb_task_size(const char *data, const char *task_name, kv_error *err)
{
    kb_task_spec spec = {.name = (char *)task_name};
    void *iter = NULL;
    long n = 0;
    if (open_samples(data, &spec, &iter, &n, err) < 0)
        return -1;
    kb_sample s;
    int got;
    for (n = 0; (got = task_next(NULL, iter, &s, err)) > 0;) /* the loader's count, v2 too */
        n++;
    task_close(NULL, iter);
    return got < 0 ? -1 : n;
}

int kb_scorer_open(kb_task_scorer *fn, void **ctx, kv_error *err)
{
    scoring *s = calloc(1, sizeof *s);
    if (!s)
        return kv_fail(err, "out of memory");
    if (kb_metrics_new(NULL, &s->metrics, err) < 0) {
        free(s);
        return -1;
    }
    *fn = score_task;
    *ctx = s;
    return 0;
}

void kb_scorer_close(void *ctx)
{
    scoring *s = ctx;
    if (!s)
        return;
    kb_metrics_free(s->metrics);
    kb_jieba_free(s->jieba);
    free(s);
}

long kb_engine_backend_prefills(const kb_runner_backend *b)
{
    return b->ctx ? ((const engine *)b->ctx)->prefills : 0;
}
