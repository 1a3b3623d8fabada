#include "generate.h"
#include "strbuf.h"

#include <stdlib.h>
#include <string.h>

#include "clock.h"

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

static bool wants_stats(const kv_attn_stats_request *r)
{
    return r->col_sums || r->n_windows > 0;
}

/* One forward with the statistics the options ask for, then the step hook. */
static int step(kv_model *m, kv_cache *c, const int32_t *tokens, int n, const kv_generate_opts *o,
                float *logits, bool all, int step_no, kv_error *err)
{
    kv_attn_stats *stats = NULL;
    const kv_attn_stats_request *req = wants_stats(&o->stats_req) ? &o->stats_req : NULL;
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
    int slice = all && !wants_stats(&o->stats_req) ? LOGITS_SLICE : n_prompt;
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
        rc = step(m, c, prompt + s, n, &quiet, logits, all, 0, err);
    }
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
    memset(out, 0, sizeof *out);
    out->prefill_seconds = prefill;
    out->stop = KV_STOP_LENGTH;
    int V = kv_model_get_config(m)->vocab, max = o->max_new_tokens;
    if (max <= 0)
        return 0;
    out->ids = malloc((size_t)max * sizeof *out->ids);
    float *logits = malloc((size_t)V * sizeof *logits);
    kv_strbuf text = {0};
    if (!out->ids || !logits) {
        free(logits);
        kv_generation_free(out);
        return kv_fail(err, "generate: out of memory");
    }
    memcpy(logits, last_logits, (size_t)V * sizeof *logits);
    int rc = 0;
    double t0 = kv_clock_s();
    for (int k = 0; k < max; k++) {
        int32_t id = kv_argmax(logits, V);
        out->ids[out->n++] = id;
        int why = stop_reason(m, o, &text, id, err);
        /* Every generated id is streamed, the one that stops included. */
        if (why != -2 && o->on_token && o->on_token(o->user, id) != 0 && why < 0)
            why = KV_STOP_CALLBACK;
        if (why == -2) {
            rc = -1;
            break;
        }
        if (why >= 0) {
            out->stop = (kv_stop_reason)why;
            break;
        }
        if (k + 1 == max)
            break;
        if ((rc = step(m, c, &id, 1, o, logits, false, k + 1, err)) != 0)
            break;
        out->n_decode_forwards++;
    }
    out->decode_seconds = kv_clock_s() - t0;
    free(logits);
    free(text.s);
    if (rc != 0)
        kv_generation_free(out);
    return rc;
}

void kv_generation_free(kv_generation *g)
{
    free(g->ids);
    g->ids = NULL;
    g->n = 0;
}
