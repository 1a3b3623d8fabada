/* kvbench bench sweep: what decoding a sample's configs together saves.
 *
 * One prefill of a random prompt (with the attention statistics every
 * config needs), then, from that same prefill, in one process:
 *   full      the full cache alone (what a run without eviction costs),
 *   batched   the full cache + K eviction configs decoded together, one
 *             batched forward per step (kv_generate_batch),
 *   sequential the same 1 + K decoded one after another,
 * each reported as prefill + its decode wall time, with the ratios to the
 * full cache alone. The modes alternate within each repeat (the order
 * reversed every other repeat), so a busy neighbour slows all of them.
 * Batched and sequential must produce the same tokens; the bench checks it.
 * Next to each ratio stands the one an engine at this machine's limits
 * would reach with the same prefill (FP32 FMA peak and read bandwidth,
 * measured first with bench machine's loops; machine_limit_s), so a target
 * ratio can be judged against what the hardware allows.
 *
 * The configs are those of configs/nightly.json's main sweep, with its start
 * (32) and recent (64) areas and its decode-time eviction (each step's
 * statistics, as a run's rows): H2O and SnapKV x intermediate 160, 416, 928,
 * 1952 x sum / norm_sum (16), then the same with rerotation (32); K takes
 * the first K of that list. With --kv-cache-precision the configs' caches
 * are stored at that precision (issue 30) while the full cache stays F32,
 * as a run's baseline does; the limit model counts their stored bytes. */
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

typedef struct sweep {
    const sweep_opts *o;
    kv_model *m;
    kv_evict_model em;
    kv_evictor *ev[MAX_CONFIGS];
    kv_attn_stats_request prefill_req;
    kv_attn_stats_request step_req[MAX_CONFIGS];
    kv_cache *base;
    kv_fork_base fork; /* base at the configs' precision, made once per decode_rows (as a run's
                          sample) */
    kv_attn_stats *stats;
    float *logits;
    kb_machine_limit lim; /* measured before the repeats */
} sweep;

static int on_step(void *user, kv_cache *c, const kv_attn_stats *stats, int step, kv_error *err)
{
    kv_evictor *ev = user;
    kv_attn_stats_request req;
    kv_evictor_generation_request(ev, &req);
    return kv_evictor_step(ev, c, &req, stats, step, NULL, NULL, err);
}

/* Row 0 is the full cache, row i > 0 config i - 1: its cache and options. */
static int fork_row(sweep *s, int row, kv_cache **c, kv_generate_opts *g, kv_error *err)
{
    *g = (kv_generate_opts){.max_new_tokens = s->o->gen, .ignore_eos = true};
    if (row == 0)
        return (*c = kv_cache_fork(s->base, s->o->prompt + s->o->gen + 1, err)) ? 0 : -1;
    kv_evictor *ev = s->ev[row - 1];
    g->on_step = on_step;
    g->stats_req = s->step_req[row - 1];
    g->user = ev;
    kv_cache_quant q = kv_evictor_cache_quant(ev);
    s->fork.prompt = s->base;
    const kv_cache *b = kv_fork_base_at(&s->fork, &q, err);
    return b ? kv_evictor_fork(ev, b, &s->prefill_req, s->stats, c, NULL, NULL, err) : -1;
}

/* What a mode's decode had to do, for its roofline (machine_limit_s). */
typedef struct work {
    double passes;     /* weight passes: forwards of the longest row when
                          batched, of every row one after another */
    double row_steps;  /* Σ over rows of their forwards */
    double slot_steps; /* Σ over rows and their forwards of the slots of all
                          layers that attention read (from the lengths before
                          and after: growth and eviction are steady) */
    double slot_bytes; /* the same, each slot weighted by its K and V bytes at
                          its cache's precision (group parameters included) */
} work;

static double cache_slots(const kv_cache *c)
{
    double n = 0;
    for (int l = 0; l < c->n_layers; l++)
        n += c->layers[l].len;
    return n;
}

static void add_row_work(work *w, const kv_cache *c, double slots_before, int forwards,
                         bool batched)
{
    double slots = forwards * (slots_before + cache_slots(c)) / 2;
    w->row_steps += forwards;
    w->slot_steps += slots;
    w->slot_bytes += slots / c->n_layers *
                     kv_cache_bytes_per_token(&c->quant, c->n_layers, c->n_kv_heads, c->head_dim);
    if (!batched)
        w->passes += forwards;
    else if (forwards > w->passes)
        w->passes = forwards;
}

/* Decodes rows [0, n) together (batched) or one after another; ids[row]
 * gets each row's tokens ([gen] each), *w what the decode did. Returns the
 * wall seconds. */
static double decode_rows(sweep *s, int n, bool batched, int32_t *ids, work *w, kv_error *err)
{
    kv_cache *caches[MAX_CONFIGS + 1] = {0};
    kv_generate_opts gs[MAX_CONFIGS + 1];
    const kv_generate_opts *opts[MAX_CONFIGS + 1];
    const float *lasts[MAX_CONFIGS + 1];
    kv_generation outs[MAX_CONFIGS + 1] = {0};
    double slots[MAX_CONFIGS + 1];
    *w = (work){0};
    double t0 = kv_clock_s();
    int rc = 0;
    for (int r = 0; r < n && rc == 0; r++) {
        opts[r] = &gs[r];
        lasts[r] = s->logits;
        if ((rc = fork_row(s, r, &caches[r], &gs[r], err)) != 0)
            break;
        slots[r] = cache_slots(caches[r]);
        if (!batched) {
            rc = kv_generate_from(s->m, caches[r], s->logits, &gs[r], &outs[r], err);
            if (rc == 0)
                add_row_work(w, caches[r], slots[r], outs[r].n_decode_forwards, false);
            kv_cache_free(caches[r]);
            caches[r] = NULL;
        }
    }
    kv_fork_base_release(&s->fork); /* a run frees it before decoding too */
    if (rc == 0 && batched)
        rc = kv_generate_batch(s->m, n, caches, lasts, opts, outs, NULL, err);
    double t = kv_clock_s() - t0;
    for (int r = 0; r < n && rc == 0 && batched; r++)
        add_row_work(w, caches[r], slots[r], outs[r].n_decode_forwards, true);
    for (int r = 0; r < n; r++) {
        if (rc == 0)
            memcpy(ids + (size_t)r * (size_t)s->o->gen, outs[r].ids,
                   (size_t)outs[r].n * sizeof *ids);
        kv_generation_free(&outs[r]);
        kv_cache_free(caches[r]);
    }
    return rc == 0 ? t : -1;
}

/* The prompt's forward, with the statistics of every config. */
static double prefill(sweep *s, unsigned seed, kv_error *err)
{
    const kv_model_config *cfg = kv_model_get_config(s->m);
    int P = s->o->prompt;
    int32_t *tokens = malloc((size_t)P * sizeof *tokens);
    if (!tokens)
        return kv_fail(err, "out of memory");
    for (int i = 0; i < P; i++) {
        seed = seed * 1103515245u + 12345u;
        tokens[i] = (int32_t)((seed >> 8) % (unsigned)cfg->vocab);
    }
    kv_cache_free(s->base);
    kv_model_stats_free(s->stats, cfg->n_layers);
    s->stats = NULL;
    double t0 = kv_clock_s();
    int rc = (s->base = kv_model_cache_new(s->m, P + 1, err)) ? 0 : -1;
    if (rc == 0 && !(s->stats = kv_model_stats_new(s->m, s->base, P, &s->prefill_req, err)))
        rc = -1;
    if (rc == 0)
        rc = kv_model_forward(s->m, s->base, tokens, P, &s->prefill_req, s->stats, s->logits, false,
                              err);
    free(tokens);
    return rc == 0 ? kv_clock_s() - t0 : -1;
}

static int setup(sweep *s, int n_configs, kv_error *err)
{
    kv_set_threads(s->o->threads);
    if (kv_model_load(s->o->model, &s->m, err) < 0 ||
        kv_evict_model_load(&s->em, s->m, false, err) < 0)
        return -1;
    kv_evict_params ps[MAX_CONFIGS];
    for (int i = 0; i < n_configs; i++) {
        sweep_params(s->o, i, &ps[i]);
        if (!(s->ev[i] = kv_evictor_new(&ps[i], &s->em, err)))
            return -1;
        kv_evictor_generation_request(s->ev[i], &s->step_req[i]);
    }
    if (kv_evict_stats_request(ps, n_configs, true, &s->prefill_req, err) < 0)
        return -1;
    s->logits = malloc((size_t)kv_model_get_config(s->m)->vocab * sizeof *s->logits);
    return s->logits ? 0 : kv_fail(err, "out of memory");
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
    kv_model_free(s->m);
}

/* The least time a decode doing w could take on this machine: its FLOPs at
 * the FP32 FMA peak plus its bytes at the read bandwidth (the projections
 * are compute-bound when batched and attention is memory-bound; they run
 * one after another, so the two times add). FLOPs: 2 per weight of every
 * projection and the LM head per row and forward, 4 * n_heads * head_dim
 * per attended slot and layer; bytes: the projection and LM-head weights
 * per weight pass, K and V as stored per attended slot. */
static double machine_limit_s(const sweep *s, const work *w, const kb_machine_limit *lim)
{
    const kv_model_config *c = kv_model_get_config(s->m);
    double q = (double)c->n_heads * c->head_dim, kv = (double)c->n_kv_heads * c->head_dim;
    double layer = c->hidden * (q + 2 * kv) + q * c->hidden + 3.0 * c->hidden * c->ffn;
    double head = (double)c->vocab * c->hidden, params = c->n_layers * layer + head;
    /* the file's bytes per weight, spread over the matrices a forward reads */
    double stored = params + (c->tied_embeddings ? 0 : head);
    double weight_bytes = params * (double)kv_model_weight_bytes(s->m) / stored;
    double flops = w->row_steps * 2 * params + w->slot_steps * 4 * q;
    double bytes = w->passes * weight_bytes + w->slot_bytes;
    return flops / (lim->fp32_gflops * 1e9) + bytes / (lim->read_gbps * 1e9);
}

/* One repeat: the full cache alone, then batched and sequential for each K
 * (reversed order on odd repeats). t[0] full; t[1 + 2k] batched, t[2 + 2k]
 * sequential of ks[k]; every time includes the prefill; cpu: the same in
 * CPU seconds; lt: the prefill plus the decode's machine limit. ids: [2][1 + K][gen] room for the tokens of one K's two modes. */
static int one_repeat(sweep *s, int rep, double *t, double *cpu, double *lt, int32_t *ids,
                      kv_error *err)
{
    const sweep_opts *o = s->o;
    double c0 = kv_clock_cpu_s(), pf = prefill(s, 1234u + (unsigned)rep, err),
           pf_cpu = kv_clock_cpu_s() - c0;
    if (pf < 0)
        return -1;
    size_t per_mode = (size_t)(o->ks[0] + 1) * (size_t)o->gen;
    for (int k = 1; k < o->n_ks; k++)
        if ((size_t)(o->ks[k] + 1) * (size_t)o->gen > per_mode)
            per_mode = (size_t)(o->ks[k] + 1) * (size_t)o->gen;
    int n_modes = 1 + 2 * o->n_ks;
    for (int i = 0; i < n_modes; i++) {
        int mode = rep % 2 ? n_modes - 1 - i : i;
        int rows = mode == 0 ? 1 : 1 + o->ks[(mode - 1) / 2];
        bool batched = mode % 2 == 1;
        c0 = kv_clock_cpu_s();
        work w;
        double d = decode_rows(s, rows, mode == 0 || batched, ids + (batched ? 0 : per_mode), &w,
                               err);
        if (d < 0)
            return -1;
        t[mode] = pf + d;
        lt[mode] = pf + machine_limit_s(s, &w, &s->lim);
        cpu[mode] = pf_cpu + kv_clock_cpu_s() - c0;
        /* The two modes of one K run back to back in either order: compare. */
        bool second = mode > 0 && (rep % 2 ? batched : !batched);
        if (second && memcmp(ids, ids + per_mode, (size_t)rows * (size_t)o->gen * sizeof *ids))
            return kv_fail(err, "batched and sequential decoding of %d configs differ", rows - 1);
    }
    return 0;
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
    int rc = ids && t && cpu && lt ? setup(&s, max_k, &err) : kv_fail(&err, "out of memory");
    if (rc == 0)
        fprintf(stderr, "# %s: prompt %d tokens, %d new tokens, %d threads, %d repeat(s); "
                        "configs' caches %s%s\n",
                o->model, o->prompt, o->gen, kv_model_threads(s.m), o->repeats,
                o->cache.kv_cache_precision,
                strcmp(o->cache.key_quant, "by_channel") == 0 ? " (keys by channel)" : "");
    kv_pool *pool = rc == 0 ? kv_pool_new(kv_model_threads(s.m), &err) : NULL;
    if (rc == 0 && (!pool || kb_machine_limits(pool, 3, o->buffer_mib, &s.lim) != 0))
        rc = pool ? kv_fail(&err, "the machine's limits could not be measured") : -1;
    kv_pool_free(pool);
    for (int r = 0; r < o->repeats && rc == 0; r++) {
        size_t at = (size_t)r * (size_t)n_modes;
        rc = one_repeat(&s, r, t + at, cpu + at, lt + at, ids, &err);
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
        printf("machine limit: FP32 %.2f GFLOP/s, read %.2f GB/s (bench machine's loops on %d "
               "threads); the full cache alone at it: %.2f s with the measured prefill\n",
               s.lim.fp32_gflops, s.lim.read_gbps, kv_model_threads(s.m),
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
    sweep_opts o = {.prompt = 2048, .gen = 64, .repeats = 1, .ks = {4, 16, 31}, .n_ks = 3};
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
    {"buffer-mib", "N", "the machine limit's read-bandwidth buffer (default: 8x the last-level cache, at least 512)"},
    KB_EVICTION_OPTIONS, /* of them only the cache precision's apply */
    {NULL, NULL, NULL},
};

const kb_command kb_bench_sweep_cmd = {
    .name = "bench sweep",
    .summary = "full cache alone vs 1 + K configs decoded batched and one after another",
    .usage = "kvbench bench sweep --model DIR [options]",
    .description = "Wall time of the full cache alone, of 1 + K configs decoded batched and one "
                   "after another, the ratios, and the ratio at the machine's measured FMA peak "
                   "and read bandwidth.",
    .options = options,
    .run = run,
};
