#include "model/generate.h"
#include "util/pool.h"
#include "util/strbuf.h"

#include <stdlib.h>
#include <string.h>

#include "util/clock.h"

/* Prompt forwards are split into slices of this many rows when every row's
 * logits are wanted, so logits memory stays [slice][vocab]. */
#define LOGITS_SLICE 256

int32_t kv_argmax(const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}


/* What a decode forward collects of a request: the query moments describe
 * the prompt (ExpectedAttention freezes them), so decode skips them. */
static kv_attn_stats_request decode_request(const kv_attn_stats_request *r)
{
    kv_attn_stats_request d = *r;
    d.q_moments = false;
    d.rows_before = 0; /* each step's statistics are its own row's */
    return d;
}

/* One forward with the statistics the options ask for, then the step hook. */
static int step(kv_model *m, kv_cache *c, const int32_t *tokens, int n, const kv_generate_opts *o,
                float *logits, bool all, int step_no, kv_error *err)
{
    kv_attn_stats *stats = NULL;
    kv_attn_stats_request r = step_no == 0 ? o->stats_req : decode_request(&o->stats_req);
    const kv_attn_stats_request *req = kv_attn_stats_wanted(&r) ? &r : NULL;
    if (req && !(stats = kv_model_stats_new(m, c, n, req, err)))
        return -1;
    int rc = kv_model_forward(m, c, tokens, n, req, stats, logits, all, err);
    if (rc == 0 && o->on_logits)
        rc = o->on_logits(o->user, logits, all ? n : 1, err);
    if (rc == 0 && o->on_step)
        rc = o->on_step(o->user, c, stats, step_no, err) < 0 ? -1 : 0;
    kv_model_stats_free(stats, kv_model_get_config(m)->n_layers);
    return rc;
}

int kv_generate(kv_model *m, kv_cache *c, const int32_t *prompt, int n_prompt,
                const kv_generate_opts *o, kv_generation *out, kv_error *err)
{
    memset(out, 0, sizeof *out);
    if (n_prompt <= 0)
        return kv_fail(err, "generate: empty prompt");
    size_t V = (size_t)kv_model_get_config(m)->vocab;
    /* With on_logits every prompt row is reported; without statistics the
     * prompt can go in slices (a forward over several calls equals one). */
    bool all = o->on_logits != NULL;
    int slice = all && !kv_attn_stats_wanted(&o->stats_req) ? LOGITS_SLICE : n_prompt;
    if (slice > n_prompt)
        slice = n_prompt;
    float *logits = malloc((all ? (size_t)slice : 1) * V * sizeof *logits);
    if (!logits)
        return kv_fail(err, "generate: out of memory for logits");
    double t0 = kv_clock_s();
    int rc = 0;
    for (int s = 0; s < n_prompt && rc == 0; s += slice) {
        int n = n_prompt - s < slice ? n_prompt - s : slice;
        /* The hook sees the prompt once, after its last slice. */
        kv_generate_opts quiet = *o;
        if (s + n < n_prompt)
            quiet.on_step = NULL;
        c->commit_held = s + n < n_prompt; /* the slices are one forward */
        rc = step(m, c, prompt + s, n, &quiet, logits, all, 0, err);
    }
    c->commit_held = false;
    double prefill = kv_clock_s() - t0;
    if (rc == 0) {
        const float *last = all ? logits + (size_t)((n_prompt - 1) % slice) * V : logits;
        rc = kv_generate_from(m, c, last, o, out, err);
    }
    out->prefill_seconds = prefill;
    free(logits);
    return rc;
}

static bool in_list(int32_t id, const int32_t *ids, int n)
{
    for (int i = 0; i < n; i++)
        if (ids[i] == id)
            return true;
    return false;
}

/* Generated text is kept (a kv_strbuf) only to look for stop strings. */

/* Does a stop string end within the last `added` bytes of the text? */
static bool hits_stop_string(const kv_generate_opts *o, const kv_strbuf *t, size_t added)
{
    for (int i = 0; i < o->n_stop_strings; i++) {
        size_t sl = strlen(o->stop_strings[i]);
        if (sl == 0 || sl > t->len)
            continue;
        size_t from = t->len - added >= sl ? t->len - added - sl + 1 : 0;
        if (memmem(t->s + from, t->len - from, o->stop_strings[i], sl))
            return true;
    }
    return false;
}

/* Why generation should stop after token id, or -1 to go on (-2: error). */
static int stop_reason(kv_model *m, const kv_generate_opts *o, kv_strbuf *text, int32_t id,
                       kv_error *err)
{
    const kv_model_config *cfg = kv_model_get_config(m);
    if (!o->ignore_eos && in_list(id, cfg->eos_ids, cfg->n_eos))
        return KV_STOP_EOS;
    if (in_list(id, o->stop_ids, o->n_stop_ids))
        return KV_STOP_ID;
    if (o->n_stop_strings > 0 && o->token_text) {
        size_t len;
        const char *s = o->token_text(o->user, id, &len);
        if (s && kv_strbuf_add(text, s, len) != 0)
            return kv_fail(err, "generate: out of memory"), -2;
        if (s && hits_stop_string(o, text, len))
            return KV_STOP_STRING;
    }
    return -1;
}

int kv_generate_from(kv_model *m, kv_cache *c, const float *last_logits, const kv_generate_opts *o,
                     kv_generation *out, kv_error *err)
{
    double prefill = out->prefill_seconds;
    int rc = kv_generate_batch(m, 1, &c, &last_logits, &o, out, NULL, err);
    out->prefill_seconds = prefill;
    return rc;
}

/* The state of a batched decode: which rows still generate, and the logits
 * each of them decides its next token from. */
typedef struct batch {
    kv_model *m;
    int n, V;
    kv_cache *const *caches;
    const kv_generate_opts *const *opts;
    kv_generation *outs;
    kv_strbuf *texts; /* [n]: generated text, for stop strings */
    int *live;        /* [n_live] row numbers, ascending */
    int n_live;
    float *logits;    /* [n_live][V]: row live[j]'s logits at j */
    int32_t *tokens;  /* [n] tokens of the next forward */
    kv_cache **fed;   /* [n] their caches */
    const kv_attn_stats_request **reqs; /* [n] */
    kv_attn_stats_request *req_of;      /* [n] the decode requests reqs point into */
    kv_attn_stats **stats;              /* [n] live row j's, from row_stats */
    kv_attn_stats **row_stats;          /* [n] row r's buffers, reused from step to step */
    int *hook_rows, *hook_rc;           /* [n] concurrent_hooks' */
    kv_error *hook_errs;                /* [n] */
    double t0;
} batch;

/* Picks each live row's next token; rows that stop leave the live list
 * (their logits row with them). Returns how many rows go on, or -1. */
static int choose(batch *bt, kv_error *err)
{
    int kept = 0;
    for (int j = 0; j < bt->n_live; j++) {
        int r = bt->live[j];
        const kv_generate_opts *o = bt->opts[r];
        kv_generation *g = &bt->outs[r];
        int32_t id = kv_argmax(bt->logits + (size_t)j * (size_t)bt->V, bt->V);
        g->ids[g->n++] = id;
        int why = stop_reason(bt->m, o, &bt->texts[r], id, err);
        /* Every generated id is streamed, the one that stops included. */
        if (why != -2 && o->on_token && o->on_token(o->user, id) != 0 && why < 0)
            why = KV_STOP_CALLBACK;
        if (why == -2)
            return -1;
        if (why >= 0)
            g->stop = (kv_stop_reason)why;
        if (why >= 0 || g->n == o->max_new_tokens) {
            g->decode_seconds = kv_clock_s() - bt->t0;
            continue;
        }
        if (kept != j)
            memmove(bt->logits + (size_t)kept * (size_t)bt->V,
                    bt->logits + (size_t)j * (size_t)bt->V, (size_t)bt->V * sizeof *bt->logits);
        bt->live[kept] = r;
        bt->tokens[kept] = id;
        bt->fed[kept++] = bt->caches[r];
    }
    bt->n_live = kept;
    return kept;
}

/* The step hooks of the live rows whose hooks may run concurrently, as
 * tasks of the model's pool: each row's hook fills its own error. */
typedef struct hooks_job {
    batch *bt;
    int *rows; /* [n] live indices */
    int *rc;   /* [n] */
    kv_error *errs; /* [n] */
} hooks_job;

static void hook_task(void *ctx, int t, int worker)
{
    (void)worker;
    hooks_job *h = ctx;
    batch *bt = h->bt;
    int j = h->rows[t];
    const kv_generate_opts *o = bt->opts[bt->live[j]];
    h->rc[t] = o->on_step(o->user, bt->fed[j], bt->stats[j], bt->outs[bt->live[j]].n, &h->errs[t]);
}

/* Runs the concurrent hooks of the live rows (the others ran in order). */
static int concurrent_hooks(batch *bt, kv_error *err)
{
    hooks_job h = {.bt = bt, .rows = bt->hook_rows, .rc = bt->hook_rc, .errs = bt->hook_errs};
    int n = 0;
    for (int j = 0; j < bt->n_live; j++) {
        const kv_generate_opts *o = bt->opts[bt->live[j]];
        if (o->on_step && o->on_step_concurrent)
            h.rows[n++] = j;
    }
    kv_pool_run(kv_model_pool(bt->m), n, hook_task, &h);
    for (int t = 0; t < n; t++) /* the first failing row's error, as in order */
        if (h.rc[t] < 0) {
            *err = h.errs[t];
            return -1;
        }
    return 0;
}

/* One batched forward of the live rows, then each row's hooks. */
static int forward_live(batch *bt, kv_error *err)
{
    int rc = 0;
    for (int j = 0; j < bt->n_live; j++) {
        const kv_generate_opts *o = bt->opts[bt->live[j]];
        bt->req_of[j] = decode_request(&o->stats_req);
        bt->reqs[j] = kv_attn_stats_wanted(&bt->req_of[j]) ? &bt->req_of[j] : NULL;
        bt->stats[j] = NULL;
        kv_attn_stats **own = &bt->row_stats[bt->live[j]];
        if (bt->reqs[j] && rc == 0 &&
            (rc = kv_model_stats_renew(bt->m, bt->fed[j], 1, bt->reqs[j], own, err)) == 0)
            bt->stats[j] = *own;
    }
    if (rc == 0)
        rc = kv_model_forward_batch(bt->m, bt->fed, bt->tokens, bt->n_live, bt->reqs, bt->stats,
                                    bt->logits, err);
    for (int j = 0; j < bt->n_live && rc == 0; j++) {
        const kv_generate_opts *o = bt->opts[bt->live[j]];
        kv_generation *g = &bt->outs[bt->live[j]];
        if (o->on_logits)
            rc = o->on_logits(o->user, bt->logits + (size_t)j * (size_t)bt->V, 1, err);
        if (rc == 0 && o->on_step && !o->on_step_concurrent)
            rc = o->on_step(o->user, bt->fed[j], bt->stats[j], g->n, err) < 0 ? -1 : 0;
    }
    if (rc == 0)
        rc = concurrent_hooks(bt, err);
    for (int j = 0; j < bt->n_live; j++)
        bt->outs[bt->live[j]].n_decode_forwards++;
    return rc;
}

static void batch_free(batch *bt)
{
    int L = kv_model_get_config(bt->m)->n_layers;
    for (int r = 0; bt->row_stats && r < bt->n; r++)
        kv_model_stats_free(bt->row_stats[r], L);
    free(bt->row_stats);
    for (int r = 0; bt->texts && r < bt->n; r++)
        free(bt->texts[r].s);
    free(bt->texts);
    free(bt->live);
    free(bt->logits);
    free(bt->tokens);
    free(bt->fed);
    free(bt->reqs);
    free(bt->req_of);
    free(bt->stats);
    free(bt->hook_rows);
    free(bt->hook_rc);
    free(bt->hook_errs);
}

int kv_generate_batch(kv_model *m, int n, kv_cache *const *caches, const float *const *last_logits,
                      const kv_generate_opts *const *opts, kv_generation *outs, int *n_forwards,
                      kv_error *err)
{
    if (n_forwards)
        *n_forwards = 0;
    batch bt = {.m = m, .n = n, .V = kv_model_get_config(m)->vocab, .caches = caches,
                .opts = opts, .outs = outs};
    size_t un = (size_t)(n > 0 ? n : 1);
    bt.texts = calloc(un, sizeof *bt.texts);
    bt.live = malloc(un * sizeof *bt.live);
    bt.logits = malloc(un * (size_t)bt.V * sizeof *bt.logits);
    bt.tokens = malloc(un * sizeof *bt.tokens);
    bt.fed = malloc(un * sizeof *bt.fed);
    bt.reqs = malloc(un * sizeof *bt.reqs);
    bt.req_of = malloc(un * sizeof *bt.req_of);
    bt.stats = malloc(un * sizeof *bt.stats);
    bt.row_stats = calloc(un, sizeof *bt.row_stats);
    bt.hook_rows = malloc(un * sizeof *bt.hook_rows);
    bt.hook_rc = malloc(un * sizeof *bt.hook_rc);
    bt.hook_errs = malloc(un * sizeof *bt.hook_errs);
    bool ok = bt.texts && bt.live && bt.logits && bt.tokens && bt.fed && bt.reqs && bt.req_of &&
              bt.stats && bt.row_stats && bt.hook_rows && bt.hook_rc && bt.hook_errs;
    for (int r = 0; r < n; r++) {
        memset(&outs[r], 0, sizeof outs[r]);
        outs[r].stop = KV_STOP_LENGTH;
        int max = opts[r]->max_new_tokens;
        if (max <= 0)
            continue;
        if (!(outs[r].ids = malloc((size_t)max * sizeof *outs[r].ids)))
            ok = false;
        else if (ok) {
            memcpy(bt.logits + (size_t)bt.n_live * (size_t)bt.V, last_logits[r],
                   (size_t)bt.V * sizeof *bt.logits);
            bt.live[bt.n_live++] = r;
        }
    }
    int rc = ok ? 0 : kv_fail(err, "generate: out of memory");
    bt.t0 = kv_clock_s();
    while (rc == 0 && bt.n_live > 0) {
        int go_on = choose(&bt, err);
        if (go_on < 0)
            rc = -1;
        else if (go_on > 0) {
            rc = forward_live(&bt, err);
            if (n_forwards)
                ++*n_forwards;
        }
    }
    batch_free(&bt);
    for (int r = 0; rc != 0 && r < n; r++)
        kv_generation_free(&outs[r]);
    return rc;
}

void kv_generation_free(kv_generation *g)
{
    free(g->ids);
    g->ids = NULL;
    g->n = 0;
}
