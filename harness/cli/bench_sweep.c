/* kvbench bench sweep: what decoding a sample's configs together saves.
 *
 * Each mode does what `kvbench run` does for one sample (run/backend.c), on
 * a random prompt:
 *   full      the full cache alone: a plain prefill (no statistics), whose
 *             cache the full row then decodes in place;
 *   batched   the full cache + K eviction configs decoded together, one
 *             batched forward per step (kv_generate_batch), after the
 *             prefill that collects every config's statistics: each config
 *             forks its cache from it (kv_fork_base), then the full row
 *             takes the prefilled cache over;
 *   sequential the same 1 + K decoded one after another,
 * each reported as its prefill + its decode, wall and CPU time, with the
 * ratios to the full cache alone. The two modes of one K share one timed
 * prefill (each decodes an untimed copy of its cache). The modes alternate
 * within each repeat (the order reversed every other repeat), so a busy
 * neighbour slows all of them. Batched and sequential must produce the same
 * tokens; the bench checks it. Next to each ratio stands the one an engine
 * at this machine's limits would reach (FP32 FMA and BF16 dot peak, read
 * bandwidth, measured first with bench machine's loops; machine_limit_s)
 * for the decode work the mode counted (weight passes, row forwards,
 * attended slots and their stored bytes, from the caches after each
 * forward), every mode after the plain prefill measured for the full cache
 * alone: at the limit the statistics cost next to nothing (their sums are
 * 1 / (4 head_dim) of attention's arithmetic).
 *
 * The configs are those of configs/nightly.json's main sweep, with its start
 * (32) and recent (64) areas and its decode-time eviction (each step's
 * statistics, as a run's rows): H2O and SnapKV x intermediate 160, 416, 928,
 * 1952 x sum / norm_sum (16), then the same with rerotation (32); K takes
 * the first K of that list. With --kv-cache-precision the configs' caches
 * are stored at that precision (issue 30) while the full cache stays F32,
 * as a run's baseline does; the limit model counts their stored bytes.
 * What a run does besides (loading the model and tokenizer, tokenizing,
 * writing and scoring the answers) is not timed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench.h"
#include "cli/eviction.h"
#include "util/clock.h"
#include "evict/evict.h"
#include "model/generate.h"
#include "model/kernels.h"
#include "model/model.h"

#define MAX_CONFIGS 32
#define MAX_KS      8

typedef struct sweep_opts {
    const char *model;
    int prompt, gen, repeats, threads;
    kv_compute compute;
    long buffer_mib; /* the read-bandwidth buffer of the machine limit; 0: default */
    kv_evict_params cache; /* the configs' cache precision keys (--kv-cache-precision ...) */
    int ks[MAX_KS], n_ks;
} sweep_opts;

/* The i-th config of the sweep (see the top of the file). */
static void sweep_params(const sweep_opts *o, int i, kv_evict_params *p)
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

/* What a mode's decode did, for its roofline (machine_limit_s). */
typedef struct work {
    double passes;     /* weight passes: the batched forwards, or every row's
                          forwards one after another */
    double row_steps;  /* Σ over rows of their forwards */
    double slot_steps; /* Σ over rows, their forwards and the layers of the
                          slots attention read */
    double slot_bytes; /* the same, each slot weighted by its K and V bytes at
                          its cache's precision (group parameters included) */
} work;

/* A row's step hook: counts what the forward read (its cache right after
 * the forward holds every slot attention read: the new token's too, and
 * nothing evicted yet), then an eviction config's policy runs. */
typedef struct row_hook {
    kv_evictor *ev; /* NULL: the full cache */
    kv_attn_stats_request req;
    double forwards, slots, slot_bytes; /* slot_bytes: K and V of one slot of one layer */
} row_hook;

typedef struct sweep {
    const sweep_opts *o;
    kv_model *m;
    kv_evict_model em;
    kv_evict_params params[MAX_CONFIGS];
    kv_evictor *ev[MAX_CONFIGS];
    int32_t *tokens;  /* the repeat's prompt */
    kv_cache *base;   /* the last prefill's cache; NULL once a full row took it */
    int base_k;       /* the configs whose statistics that prefill collected */
    kv_attn_stats_request prefill_req; /* their union request */
    kv_attn_stats *stats;
    kv_fork_base fork; /* a mode's prefilled cache at the configs' precision */
    float *logits;
    row_hook hooks[MAX_CONFIGS + 1];
    kb_machine_limit lim; /* measured before the repeats */
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
    *g = (kv_generate_opts){.max_new_tokens = s->o->gen, .ignore_eos = true, .on_step = on_step,
                            .on_step_concurrent = true, .user = h};
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
 * caches[row] and notes each row's bytes per slot. */
static int fork_rows(sweep *s, int from, int to, kv_fork *forks, kv_cache **caches, kv_error *err)
{
    int bad = kv_evictor_forks(kv_model_pool(s->m), forks + from, to - from, &s->prefill_req,
                               s->stats);
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
        kv_cache_bytes_per_token(&k->quant, k->n_layers, k->n_kv_heads, k->head_dim) /
        k->n_layers;
}

/* Decodes rows [0, n) together (batched) or one after another from the
 * last prefill; ids[row] gets each row's tokens ([gen] each), *w what the
 * decode did, *cpu its CPU seconds. Rows 1.. need the prefill of n - 1
 * configs' statistics, whose cache they decode a copy of (untimed: a run
 * decodes the prefilled cache itself); the full cache alone takes the plain
 * prefill's cache over. Returns the wall seconds. */
static double decode_rows(sweep *s, int n, bool batched, int32_t *ids, work *w, double *cpu,
                          kv_error *err)
{
    kv_cache *caches[MAX_CONFIGS + 1] = {0};
    kv_fork forks[MAX_CONFIGS + 1] = {0};
    kv_generate_opts gs[MAX_CONFIGS + 1];
    const kv_generate_opts *opts[MAX_CONFIGS + 1];
    const float *lasts[MAX_CONFIGS + 1];
    kv_generation outs[MAX_CONFIGS + 1] = {0};
    kv_cache *own = s->base;
    if (n == 1)
        s->base = NULL;
    else if (!(own = kv_cache_fork(s->base, s->o->prompt + s->o->gen + 1, err)))
        return -1;
    double t0 = kv_clock_s(), c0 = kv_clock_cpu_s();
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
    kv_fork_base_release(&s->fork); /* a run frees it before decoding too */
    kv_cache_free(own);
    for (int r = 0; r < n && rc == 0 && batched; r++)
        note_slot_bytes(s, r, caches[r]);
    if (rc == 0 && batched)
        rc = kv_generate_batch(s->m, n, caches, lasts, opts, outs, &forwards, err);
    double t = kv_clock_s() - t0;
    *cpu = kv_clock_cpu_s() - c0;
    *w = (work){.passes = forwards};
    for (int r = 0; r < n; r++) {
        w->row_steps += s->hooks[r].forwards;
        w->slot_steps += s->hooks[r].slots;
        w->slot_bytes += s->hooks[r].slots * s->hooks[r].slot_bytes;
        if (rc == 0)
            memcpy(ids + (size_t)r * (size_t)s->o->gen, outs[r].ids,
                   (size_t)outs[r].n * sizeof *ids);
        kv_generation_free(&outs[r]);
        kv_cache_free(caches[r]);
    }
    return rc == 0 ? t : -1;
}

/* The repeat's prompt through the model into a fresh s->base, as a run's
 * prefill: with the statistics of the first k configs (k = 0: none, the
 * full cache alone's). The cache has room for the full row's answer. */
static double prefill(sweep *s, int k, kv_error *err)
{
    int L = kv_model_get_config(s->m)->n_layers, P = s->o->prompt;
    kv_cache_free(s->base);
    kv_model_stats_free(s->stats, L);
    s->base = NULL;
    s->stats = NULL;
    s->base_k = k;
    memset(&s->prefill_req, 0, sizeof s->prefill_req);
    if (k > 0 && kv_evict_stats_request(s->params, k, true, &s->prefill_req, err) < 0)
        return -1;
    bool want = kv_attn_stats_wanted(&s->prefill_req);
    double t0 = kv_clock_s();
    int rc = (s->base = kv_model_cache_new(s->m, P + s->o->gen + 1, err)) ? 0 : -1;
    if (rc == 0 && want && !(s->stats = kv_model_stats_new(s->m, s->base, P, &s->prefill_req, err)))
        rc = -1;
    if (rc == 0)
        rc = kv_model_forward(s->m, s->base, s->tokens, P, want ? &s->prefill_req : NULL,
                              s->stats, s->logits, false, err);
    return rc == 0 ? kv_clock_s() - t0 : -1;
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
    for (int i = 0; i < MAX_CONFIGS; i++)
        kv_evictor_free(s->ev[i]);
    if (s->m) {
        kv_model_stats_free(s->stats, kv_model_get_config(s->m)->n_layers);
        kv_evict_model_release(&s->em);
    }
    kv_cache_free(s->base);
    free(s->logits);
    free(s->tokens);
    kv_model_free(s->m);
}

/* The least time a decode doing w could take on this machine: its FLOPs at
 * the arithmetic peak plus its bytes at the read bandwidth (the projections
 * are compute-bound when batched and attention is memory-bound; they run
 * one after another, so the two times add). FLOPs: 2 per weight of every
 * projection and the LM head per row and forward, at the BF16 dot peak in
 * bf16 mode (where the level has BF16 arithmetic), else the FP32 FMA peak;
 * 4 * n_heads * head_dim per attended slot and layer (FP32: the queries and
 * caches are F32 or widened to it); bytes: the projection and LM-head
 * weights per weight pass, K and V as stored per attended slot. Left out as
 * small beside those: norms, RoPE, softmax, the embedding rows, and the
 * eviction statistics' [n_heads] floats per attended slot (n_heads /
 * (2 n_kv_heads head_dim) of an F32 slot's K and V: 1 % at Qwen3-0.6B). */
static double machine_limit_s(const sweep *s, const work *w, const kb_machine_limit *lim)
{
    const kv_model_config *c = kv_model_get_config(s->m);
    double q = (double)c->n_heads * c->head_dim, kv = (double)c->n_kv_heads * c->head_dim;
    double layer = c->hidden * (q + 2 * kv) + q * c->hidden + 3.0 * c->hidden * c->ffn;
    double head = (double)c->vocab * c->hidden, params = c->n_layers * layer + head;
    /* the file's bytes per weight, spread over the matrices a forward reads */
    double stored = params + (c->tied_embeddings ? 0 : head);
    double weight_bytes = params * (double)kv_model_weight_bytes(s->m) / stored;
    double proj_peak = s->o->compute == KV_COMPUTE_BF16 && lim->bf16_gflops > 0 ? lim->bf16_gflops
                                                                                 : lim->fp32_gflops;
    double bytes = w->passes * weight_bytes + w->slot_bytes;
    return w->row_steps * 2 * params / (proj_peak * 1e9) +
           w->slot_steps * 4 * q / (lim->fp32_gflops * 1e9) + bytes / (lim->read_gbps * 1e9);
}

/* One repeat: the full cache alone, then batched and sequential for each K
 * (reversed order on odd repeats), each after its prefill (one for both
 * modes of a K). t[0] full; t[1 + 2k] batched, t[2 + 2k] sequential of
 * ks[k]; every time includes the prefill; cpu: the same in CPU seconds; lt:
 * the plain prefill plus the decode's machine limit; wk: the decode's work. ids:
 * [2][1 + K][gen] room for the tokens of one K's two modes. */
static int one_repeat(sweep *s, int rep, double *t, double *cpu, double *lt, work *wk,
                      int32_t *ids, kv_error *err)
{
    const sweep_opts *o = s->o;
    unsigned seed = 1234u + (unsigned)rep;
    int vocab = kv_model_get_config(s->m)->vocab;
    for (int i = 0; i < o->prompt; i++) {
        seed = seed * 1103515245u + 12345u;
        s->tokens[i] = (int32_t)((seed >> 8) % (unsigned)vocab);
    }
    size_t per_mode = (size_t)(o->ks[0] + 1) * (size_t)o->gen;
    for (int k = 1; k < o->n_ks; k++)
        if ((size_t)(o->ks[k] + 1) * (size_t)o->gen > per_mode)
            per_mode = (size_t)(o->ks[k] + 1) * (size_t)o->gen;
    int n_modes = 1 + 2 * o->n_ks;
    double pf = 0, pf_cpu = 0, pf_plain = 0;
    for (int i = 0; i < n_modes; i++) {
        int mode = rep % 2 ? n_modes - 1 - i : i;
        int k = mode == 0 ? 0 : o->ks[(mode - 1) / 2];
        bool batched = mode % 2 == 1;
        if (mode == 0 || !s->base || s->base_k != k) {
            double c0 = kv_clock_cpu_s();
            if ((pf = prefill(s, k, err)) < 0)
                return -1;
            pf_cpu = kv_clock_cpu_s() - c0;
            pf_plain = k == 0 ? pf : pf_plain;
        }
        double d_cpu, d = decode_rows(s, 1 + k, mode == 0 || batched,
                                      ids + (batched ? 0 : per_mode), &wk[mode], &d_cpu, err);
        if (d < 0)
            return -1;
        t[mode] = pf + d;
        lt[mode] = machine_limit_s(s, &wk[mode], &s->lim);
        cpu[mode] = pf_cpu + d_cpu;
        /* The two modes of one K run back to back in either order: compare. */
        bool second = mode > 0 && (rep % 2 ? batched : !batched);
        if (second && memcmp(ids, ids + per_mode, (size_t)(1 + k) * (size_t)o->gen * sizeof *ids))
            return kv_fail(err, "batched and sequential decoding of %d configs differ", k);
    }
    for (int mode = 0; mode < n_modes; mode++)
        lt[mode] += pf_plain;
    return 0;
}

/* What the limit model counted for each mode (the last repeat's: the same
 * in every repeat), so that it can be checked against the run's shapes. */
static void print_work(const sweep_opts *o, const work *wk)
{
    printf("decode work counted for the limit (weight passes, row forwards, attended slots "
           "over all layers, their stored K and V bytes):\n");
    for (int mode = 0; mode < 1 + 2 * o->n_ks; mode++) {
        char name[32];
        if (mode == 0)
            snprintf(name, sizeof name, "full");
        else
            snprintf(name, sizeof name, "1+%d %s", o->ks[(mode - 1) / 2],
                     mode % 2 ? "batched" : "sequent");
        printf("%16s  %.0f passes  %.0f rows  %.0f slots  %.0f bytes\n", name, wk[mode].passes,
               wk[mode].row_steps, wk[mode].slot_steps, wk[mode].slot_bytes);
    }
}

static int bench_sweep(const sweep_opts *o)
{
    int max_k = 0;
    for (int i = 0; i < o->n_ks; i++)
        max_k = o->ks[i] > max_k ? o->ks[i] : max_k;
    sweep s = {.o = o};
    kv_error err;
    int32_t *ids = malloc(2 * (size_t)(max_k + 1) * (size_t)o->gen * sizeof *ids);
    int n_modes = 1 + 2 * o->n_ks;
    double *t = calloc((size_t)(n_modes * o->repeats), sizeof *t);
    double *cpu = calloc((size_t)(n_modes * o->repeats), sizeof *cpu);
    double *lt = calloc((size_t)(n_modes * o->repeats), sizeof *lt);
    work wk[1 + 2 * MAX_KS];
    int rc = ids && t && cpu && lt ? setup(&s, max_k, &err) : kv_fail(&err, "out of memory");
    if (rc == 0)
        fprintf(stderr, "# %s: prompt %d tokens, %d new tokens, %d threads, %d repeat(s); "
                        "compute %s; configs' caches %s%s\n",
                o->model, o->prompt, o->gen, kv_model_threads(s.m), o->repeats,
                kv_compute_name(o->compute),
                o->cache.kv_cache_precision,
                strcmp(o->cache.key_quant, "by_channel") == 0 ? " (keys by channel)" : "");
    kv_pool *pool = rc == 0 ? kv_pool_new(kv_model_threads(s.m), &err) : NULL;
    if (rc == 0 && (!pool || kb_machine_limits(pool, 3, o->buffer_mib, &s.lim) != 0))
        rc = pool ? kv_fail(&err, "the machine's limits could not be measured") : -1;
    kv_pool_free(pool);
    for (int r = 0; r < o->repeats && rc == 0; r++) {
        size_t at = (size_t)r * (size_t)n_modes;
        rc = one_repeat(&s, r, t + at, cpu + at, lt + at, wk, ids, &err);
        if (rc == 0) {
            const double *tr = t + at, *cr = cpu + at;
            fprintf(stderr, "# repeat %d: full %.2f s (%.2f CPU s)", r + 1, tr[0], cr[0]);
            for (int k = 0; k < o->n_ks; k++)
                fprintf(stderr,
                        "; 1+%d batched %.2f s (x%.2f; CPU x%.2f), sequential %.2f s (x%.2f; "
                        "CPU x%.2f)",
                        o->ks[k], tr[1 + 2 * k], tr[1 + 2 * k] / tr[0], cr[1 + 2 * k] / cr[0],
                        tr[2 + 2 * k], tr[2 + 2 * k] / tr[0], cr[2 + 2 * k] / cr[0]);
            fputc('\n', stderr);
        }
    }
    if (rc != 0) {
        kb_error("bench sweep: %s", err.msg);
    } else {
        /* Ratios per repeat (both times of one repeat saw the same machine),
         * then their median. */
        double full[64], rb[64], rs[64];
        for (int r = 0; r < o->repeats; r++)
            full[r] = t[(size_t)r * (size_t)n_modes];
        double lfull[64];
        for (int r = 0; r < o->repeats; r++)
            lfull[r] = lt[(size_t)r * (size_t)n_modes];
        printf("full cache alone: %.2f s (median of %d)\n", kb_median(full, o->repeats),
               o->repeats);
        printf("machine limit: FP32 %.2f GFLOP/s, BF16 %.2f GFLOP/s, read %.2f GB/s (bench "
               "machine's loops on %d threads); the full cache alone at it: %.2f s with the "
               "measured prefill\n",
               s.lim.fp32_gflops, s.lim.bf16_gflops, s.lim.read_gbps, kv_model_threads(s.m),
               kb_median(lfull, o->repeats));
        printf("%8s  %12s  %12s  %10s  %16s  %16s  %18s\n", "configs", "batched/full",
               "sequent/full", "seq/batch", "CPU batched/full", "CPU sequent/full",
               "limit batched/full");
        for (int k = 0; k < o->n_ks; k++) {
            double sb[64], cb[64], cs[64], lb[64];
            for (int r = 0; r < o->repeats; r++) {
                const double *tr = t + (size_t)r * (size_t)n_modes;
                const double *cr = cpu + (size_t)r * (size_t)n_modes;
                const double *lr = lt + (size_t)r * (size_t)n_modes;
                rb[r] = tr[1 + 2 * k] / tr[0];
                rs[r] = tr[2 + 2 * k] / tr[0];
                sb[r] = tr[2 + 2 * k] / tr[1 + 2 * k];
                cb[r] = cr[1 + 2 * k] / cr[0];
                cs[r] = cr[2 + 2 * k] / cr[0];
                lb[r] = lr[1 + 2 * k] / lr[0];
            }
            printf("%8d  %11.2fx  %11.2fx  %9.2fx  %15.2fx  %15.2fx  %17.2fx\n", o->ks[k],
                   kb_median(rb, o->repeats), kb_median(rs, o->repeats), kb_median(sb, o->repeats),
                   kb_median(cb, o->repeats), kb_median(cs, o->repeats), kb_median(lb, o->repeats));
        }
        printf("batched tokens identical to sequential: yes\n");
        print_work(o, wk);
    }
    teardown(&s);
    free(ids);
    free(t);
    free(cpu);
    free(lt);
    return rc == 0 ? 0 : KB_EXIT_FAIL;
}

static int run(const kb_args *a)
{
    sweep_opts o = {.prompt = 2048, .gen = 64, .repeats = 1, .ks = {4, 16, 31}, .n_ks = 3,
                    .compute = KV_COMPUTE_F32}; /* a run's default */
    long P = o.prompt, gen = o.gen, rep = o.repeats, threads = 0;
    o.model = kb_arg(a, "model");
    kv_evict_params cache;
    int asked = kb_eviction_params(a, &cache);
    if (asked < 0)
        return KB_EXIT_USAGE;
    if (asked == 0) {
        kb_error("bench sweep: its configs are fixed (H2O and SnapKV as configs/nightly.json); "
                 "of the eviction options only the cache's precision applies");
        return KB_EXIT_USAGE;
    }
    kv_evict_params_default(&o.cache);
    memcpy(o.cache.kv_cache_precision, cache.kv_cache_precision, sizeof cache.kv_cache_precision);
    memcpy(o.cache.key_quant, cache.key_quant, sizeof cache.key_quant);
    memcpy(o.cache.value_quant, cache.value_quant, sizeof cache.value_quant);
    o.cache.key_group_size = cache.key_group_size;
    o.cache.value_group_size = cache.value_group_size;
    if (!o.model) {
        kb_error("bench sweep: --model DIR is required");
        return KB_EXIT_USAGE;
    }
    if (kb_arg(a, "compute") && kv_compute_parse(kb_arg(a, "compute"), &o.compute) != 0) {
        kb_error("--compute: want f32 or bf16, not '%s'", kb_arg(a, "compute"));
        return KB_EXIT_USAGE;
    }
    if ((kb_arg(a, "configs") && (o.n_ks = kb_parse_int_list(kb_arg(a, "configs"), "configs", o.ks,
                                                             MAX_KS, 1, MAX_CONFIGS)) <= 0) ||
        kb_arg_long(a, "prompt-tokens", 1, 1 << 20, &P) != 0 ||
        kb_arg_long(a, "gen-tokens", 1, 1 << 20, &gen) != 0 ||
        kb_arg_long(a, "repeats", 1, 64, &rep) != 0 ||
        kb_arg_long(a, "threads", 1, 1024, &threads) != 0 ||
        kb_arg_long(a, "buffer-mib", 1, 1 << 20, &o.buffer_mib) != 0)
        return KB_EXIT_USAGE;
    o.prompt = (int)P;
    o.gen = (int)gen;
    o.repeats = (int)rep;
    o.threads = (int)threads;
    return bench_sweep(&o);
}

static const kb_option options[] = {
    {"model", "DIR", "model folder"},
    {"prompt-tokens", "N", "prompt length (default 2048)"},
    {"gen-tokens", "N", "decode steps after the prompt (default 64)"},
    {"configs", "K,K,..", "eviction configs next to the full cache (default 4,16,31)"},
    {"repeats", "N", "runs; the median is reported (default 1)"},
    {"threads", "N", "threads (default: all cores)"},
    {"compute", "f32|bf16", "compute mode (default f32, as a run's)"},
    {"buffer-mib", "N", "the machine limit's read-bandwidth buffer (default: 8x the last-level cache, at least 512)"},
    KB_EVICTION_OPTIONS, /* of them only the cache precision's apply */
    {NULL, NULL, NULL},
};

const kb_command kb_bench_sweep_cmd = {
    .name = "bench sweep",
    .summary = "full cache alone vs 1 + K configs decoded batched and one after another",
    .usage = "kvbench bench sweep --model DIR [options]",
    .description = "Wall time of the full cache alone, of 1 + K configs decoded batched and one "
                   "after another, each with the prefill a run would do, the ratios, the ratio at "
                   "the machine's measured arithmetic peak and read bandwidth, and the decode "
                   "work that limit counts.",
    .options = options,
    .run = run,
};
