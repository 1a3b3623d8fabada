/* kvbench bench sweep: what decoding a sample's configs together saves.
 *
 * Modes (bench_sweep_mode.c): the full cache alone, the full cache + K
 * configs decoded batched, and the same 1 + K one after another, each doing
 * what `kvbench run` does for one sample (its prefill, forks and decode).
 * Each mode runs in a process of its own: bench sweep starts itself with
 * the internal --one-mode option, and that child loads the model and runs
 * the mode twice on prompts of their own, printing each pass's times, work
 * and tokens on a line of its own, which this process reads back. The first
 * pass meets fresh memory, as a one-sample run does (kvbench keeps what a
 * process frees, cli/memory.c, and first touch of fresh memory is slow on
 * some VMs); the second reuses what the first freed, as a run's later
 * samples do. The two are reported apart: "cold (as a one-sample run)" and
 * "warm (from the second sample on)", each as the ratios to the full cache
 * alone in wall and CPU time. A fresh process per mode, rather than a fork
 * of this one, keeps both its memory and its thread pools its own. The
 * modes' processes alternate within each repeat (the order reversed every
 * other repeat), so a busy neighbour slows all of them. Batched and
 * sequential must produce the same tokens; the bench checks it.
 *
 * Next to each ratio stands the one an engine at this machine's limits
 * would reach (FP32 FMA and BF16 dot peak, read bandwidth, measured after
 * the modes with bench machine's loops; limit_s) for the decode work the mode counted
 * (weight passes, row forwards, attended slots and their stored bytes, from
 * the caches after each forward), every mode after the plain prefill
 * measured for the full cache alone in the same pass: at the limit the
 * statistics cost next to nothing (their sums are 1 / (4 head_dim) of
 * attention's arithmetic). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench.h"
#include "cli/bench_sweep_mode.h"
#include "cli/eviction.h"
#include "cluster/proc.h"
#include "model/cpu.h"
#include "model/kernels.h"

#define MAX_KS      8
#define MAX_REPEATS 64
/* A mode's passes in its process: the first on fresh memory (cold), the
 * second on what the first freed (warm). */
enum { COLD, WARM, N_PASSES };
static const char *const pass_label[N_PASSES] = {
    "cold (as a one-sample run: each mode's first pass, in a process of its own)",
    "warm (from the second sample on: the same process's second pass)",
};

typedef struct sweep_opts {
    kb_sweep_opts mode; /* what every mode runs with */
    int repeats;
    long buffer_mib; /* the read-bandwidth buffer of the machine limit; 0: default */
    int ks[MAX_KS], n_ks;
} sweep_opts;

/* The mode's process writes one line per pass and this one reads it:
 * print_pass and parse_pass are the two ends of that line. */
#define PASS_TAG "bench sweep pass"

static void print_pass(int p, const kb_sweep_pass *x)
{
    const kb_sweep_work *w = &x->work;
    printf(PASS_TAG
           " %d: wall %.6f cpu %.6f prefill %.6f prefill_cpu %.6f passes %.0f rows %.0f slots %.0f "
           "slot_bytes %.0f proj_flops %.6e attn_flops %.6e bytes %.6e tokens %016llx\n",
           p, x->wall, x->cpu, x->prefill, x->prefill_cpu, w->passes, w->row_steps, w->slot_steps,
           w->slot_bytes, w->proj_flops, w->attn_flops, w->bytes, x->tokens);
}

/* Pass p's line in out into *x; 0, or -1 when there is none. */
static int parse_pass(const char *out, int p, kb_sweep_pass *x)
{
    char tag[64];
    snprintf(tag, sizeof tag, PASS_TAG " %d: ", p);
    const char *at = strstr(out, tag);
    kb_sweep_work *w = &x->work;
    return at && sscanf(at + strlen(tag),
                        "wall %lf cpu %lf prefill %lf prefill_cpu %lf passes %lf rows %lf slots "
                        "%lf slot_bytes "
                        "%lf proj_flops %lf attn_flops %lf bytes %lf tokens %llx",
                        &x->wall, &x->cpu, &x->prefill, &x->prefill_cpu, &w->passes, &w->row_steps,
                        &w->slot_steps, &w->slot_bytes, &w->proj_flops, &w->attn_flops, &w->bytes,
                        &x->tokens) == 12
               ? 0
               : -1;
}

/* Mode m of a sweep: 0 the full cache alone, 1 + 2i batched and 2 + 2i
 * sequential with ks[i] configs; its --one-mode value. */
static int mode_configs(const sweep_opts *o, int m)
{
    return m == 0 ? 0 : o->ks[(m - 1) / 2];
}

static void mode_arg(const sweep_opts *o, int m, char *out, size_t n)
{
    if (m == 0)
        snprintf(out, n, "full");
    else
        snprintf(out, n, "%s:%d", m % 2 ? "batched" : "sequential", mode_configs(o, m));
}

/* Options of the sweep as a whole, which a mode's process does not take. */
static bool sweep_only(const char *name)
{
    return strcmp(name, "configs") == 0 || strcmp(name, "repeats") == 0 ||
           strcmp(name, "buffer-mib") == 0;
}

static const kb_option options[];

/* Runs mode m in a process of its own (this program, with the options given
 * to this one but the sweep's own, and --one-mode) and reads its passes
 * back into out[N_PASSES]. */
static int spawn_mode(const kb_args *a, const sweep_opts *o, int m, kb_sweep_pass *out,
                      kv_error *err)
{
    const char *argv[2 * KB_MAX_OPTIONS + 8];
    char threads[16], mode[32], dashed[KB_MAX_OPTIONS][64];
    int n = 0;
    argv[n++] = "/proc/self/exe";
    argv[n++] = "bench";
    argv[n++] = "sweep";
    for (int i = 0; options[i].name; i++) {
        const char *v = kb_arg(a, options[i].name);
        if (!v || sweep_only(options[i].name) || strcmp(options[i].name, "threads") == 0)
            continue;
        snprintf(dashed[i], sizeof dashed[i], "--%s", options[i].name);
        argv[n++] = dashed[i];
        if (options[i].metavar)
            argv[n++] = v;
    }
    snprintf(threads, sizeof threads, "%d", o->mode.threads);
    mode_arg(o, m, mode, sizeof mode);
    argv[n++] = "--threads";
    argv[n++] = threads;
    argv[n++] = "--one-mode";
    argv[n++] = mode;
    argv[n] = NULL;
    kb_proc_output r;
    int rc = kb_proc_run(argv, &r, err);
    if (rc != 0)
        return rc < 0 ? -1 : kv_fail(err, "cannot start /proc/self/exe");
    fputs(r.errs, stderr);
    for (int p = 0; p < N_PASSES && rc == 0 && r.status == 0; p++)
        rc = parse_pass(r.out, p, &out[p]);
    if (r.status != 0 || rc != 0)
        rc = kv_fail(err, "--one-mode %s: %s", mode,
                     r.status != 0 ? "its process failed" : "no pass line in its output");
    kb_proc_output_free(&r);
    return rc;
}

/* The least time a decode doing w could take on this machine: its FLOPs at
 * the arithmetic peak plus its bytes at the read bandwidth (the projections
 * are compute-bound when batched and attention is memory-bound; they run
 * one after another, so the two times add). The projections run at the
 * BF16 dot peak in bf16 mode (where the level has BF16 arithmetic), else
 * the FP32 FMA peak; attention at the FP32 peak (the queries and caches are
 * F32 or widened to it). */
static double limit_s(const sweep_opts *o, const kb_sweep_work *w, const kb_machine_limit *lim)
{
    double proj_peak = o->mode.compute == KV_COMPUTE_BF16 && lim->bf16_gflops > 0
                           ? lim->bf16_gflops
                           : lim->fp32_gflops;
    return w->proj_flops / (proj_peak * 1e9) + w->attn_flops / (lim->fp32_gflops * 1e9) +
           w->bytes / (lim->read_gbps * 1e9);
}

/* What the limit model counted for each mode (the first repeat's cold
 * pass: the same in every pass), so that it can be checked against the
 * run's shapes. */
static void print_work(const sweep_opts *o, const kb_sweep_pass (*res)[N_PASSES])
{
    printf("decode work counted for the limit (weight passes, row forwards, attended slots "
           "over all layers, their stored K and V bytes):\n");
    for (int m = 0; m < 1 + 2 * o->n_ks; m++) {
        char name[32];
        if (m == 0)
            snprintf(name, sizeof name, "full");
        else
            snprintf(name, sizeof name, "1+%d %s", mode_configs(o, m),
                     m % 2 ? "batched" : "sequent");
        const kb_sweep_work *w = &res[m][COLD].work;
        printf("%16s  %.0f passes  %.0f rows  %.0f slots  %.0f bytes\n", name, w->passes,
               w->row_steps, w->slot_steps, w->slot_bytes);
    }
}

/* The ratios of pass p's modes to the full cache alone's, per repeat (the
 * modes of one repeat saw the same machine), then their median: one table. */
static void print_table(const sweep_opts *o, int p, const kb_sweep_pass (*res)[N_PASSES],
                        const kb_machine_limit *lim)
{
    int n_modes = 1 + 2 * o->n_ks, R = o->repeats;
    printf("%s:\n", pass_label[p]);
    printf("%8s  %12s  %12s  %10s  %16s  %16s  %18s\n", "configs", "batched/full", "sequent/full",
           "seq/batch", "CPU batched/full", "CPU sequent/full", "limit batched/full");
    for (int k = 0; k < o->n_ks; k++) {
        double rb[MAX_REPEATS], rs[MAX_REPEATS], sb[MAX_REPEATS], cb[MAX_REPEATS], cs[MAX_REPEATS],
            lb[MAX_REPEATS];
        for (int r = 0; r < R; r++) {
            const kb_sweep_pass *f = &res[r * n_modes][p], *b = &res[r * n_modes + 1 + 2 * k][p],
                                *s = &res[r * n_modes + 2 + 2 * k][p];
            rb[r] = b->wall / f->wall;
            rs[r] = s->wall / f->wall;
            sb[r] = s->wall / b->wall;
            cb[r] = b->cpu / f->cpu;
            cs[r] = s->cpu / f->cpu;
            lb[r] =
                (f->prefill + limit_s(o, &b->work, lim)) / (f->prefill + limit_s(o, &f->work, lim));
        }
        printf("%8d  %11.2fx  %11.2fx  %9.2fx  %15.2fx  %15.2fx  %17.2fx\n", o->ks[k],
               kb_median(rb, R), kb_median(rs, R), kb_median(sb, R), kb_median(cb, R),
               kb_median(cs, R), kb_median(lb, R));
    }
}

/* The full cache alone's times and its time at the limit, both passes. */
static void print_full(const sweep_opts *o, const kb_sweep_pass (*res)[N_PASSES],
                       const kb_machine_limit *lim)
{
    int n_modes = 1 + 2 * o->n_ks, R = o->repeats;
    double wall[N_PASSES][MAX_REPEATS], cpu[N_PASSES][MAX_REPEATS], at[N_PASSES][MAX_REPEATS];
    for (int p = 0; p < N_PASSES; p++)
        for (int r = 0; r < R; r++) {
            const kb_sweep_pass *f = &res[r * n_modes][p];
            wall[p][r] = f->wall;
            cpu[p][r] = f->cpu;
            at[p][r] = f->prefill + limit_s(o, &f->work, lim);
        }
    printf("full cache alone: cold %.2f s (%.2f CPU s), warm %.2f s (%.2f CPU s) (medians of "
           "%d)\n",
           kb_median(wall[COLD], R), kb_median(cpu[COLD], R), kb_median(wall[WARM], R),
           kb_median(cpu[WARM], R), R);
    char bf16[32] = "none";
    if (lim->bf16_gflops > 0)
        snprintf(bf16, sizeof bf16, "%.2f GFLOP/s", lim->bf16_gflops);
    printf("machine limit: FP32 %.2f GFLOP/s, BF16 %s, read %.2f GB/s (bench machine's loops "
           "on %d threads, kernels %s); the full cache alone at it: %.2f s cold, %.2f s warm "
           "with the measured prefill\n",
           lim->fp32_gflops, bf16, lim->read_gbps, o->mode.threads, kv_isa_name(kv_isa_active()),
           kb_median(at[COLD], R), kb_median(at[WARM], R));
}

/* Both passes of repeat r's batched and sequential modes produced the same
 * tokens, for every K. */
static int same_tokens(const sweep_opts *o, const kb_sweep_pass (*res)[N_PASSES], kv_error *err)
{
    for (int k = 0; k < o->n_ks; k++)
        for (int p = 0; p < N_PASSES; p++)
            if (res[1 + 2 * k][p].tokens != res[2 + 2 * k][p].tokens)
                return kv_fail(err,
                               "batched and sequential decoding of %d configs differ (%s pass)",
                               o->ks[k], p == COLD ? "cold" : "warm");
    return 0;
}

/* Every repeat's modes, each in its own process; progress on stderr. */
static int run_modes(const kb_args *a, const sweep_opts *o, kb_sweep_pass (*res)[N_PASSES],
                     kv_error *err)
{
    int n_modes = 1 + 2 * o->n_ks;
    for (int r = 0; r < o->repeats; r++) {
        for (int i = 0; i < n_modes; i++) {
            int m = r % 2 ? n_modes - 1 - i : i;
            char name[32];
            mode_arg(o, m, name, sizeof name);
            kb_sweep_pass *x = res[r * n_modes + m];
            if (spawn_mode(a, o, m, x, err) != 0)
                return -1;
            fprintf(stderr,
                    "# repeat %d, %s: cold %.2f s (%.2f CPU s; prefill %.2f s, %.2f CPU s), "
                    "warm %.2f s (%.2f CPU s; prefill %.2f s, %.2f CPU s)\n",
                    r + 1, name, x[COLD].wall, x[COLD].cpu, x[COLD].prefill, x[COLD].prefill_cpu,
                    x[WARM].wall, x[WARM].cpu, x[WARM].prefill, x[WARM].prefill_cpu);
        }
        if (same_tokens(o, res + r * n_modes, err) != 0)
            return -1;
    }
    return 0;
}

static int bench_sweep(const kb_args *a, const sweep_opts *o)
{
    int n_modes = 1 + 2 * o->n_ks;
    kv_error err;
    kb_machine_limit lim;
    /* The limits are measured at the modes' kernel level (KVBENCH_ISA, which
     * their processes read too): held to the AVX-512 peak, a forced AVX2 run
     * would be measured against a limit its kernels cannot reach. */
    if (kv_isa_init(&err) != 0) {
        kb_error("bench sweep: %s", err.msg);
        return KB_EXIT_FAIL;
    }
    kb_sweep_pass(*res)[N_PASSES] = calloc((size_t)(n_modes * o->repeats), sizeof *res);
    fprintf(stderr,
            "# %s: prompt %d tokens, %d new tokens, %d threads, %d repeat(s), each mode "
            "in a process of its own; compute %s; configs' caches %s%s\n",
            o->mode.model, o->mode.prompt, o->mode.gen, o->mode.threads, o->repeats,
            kv_compute_name(o->mode.compute), o->mode.cache.kv_cache_precision,
            strcmp(o->mode.cache.key_quant, "by_channel") == 0 ? " (keys by channel)" : "");
    /* The modes first: the limits' read buffer, which this process keeps
     * once freed (cli/memory.c), is not held while they run. */
    int rc = res ? run_modes(a, o, res, &err) : kv_fail(&err, "out of memory");
    kv_pool *pool = rc == 0 ? kv_pool_new(o->mode.threads, &err) : NULL;
    if (rc == 0)
        rc = !pool ? -1
             : kb_machine_limits(pool, 3, o->buffer_mib, &lim) != 0
                 ? kv_fail(&err, "the machine's limits could not be measured")
                 : 0;
    kv_pool_free(pool);
    if (rc != 0) {
        kb_error("bench sweep: %s", err.msg);
    } else {
        print_full(o, res, &lim);
        for (int p = 0; p < N_PASSES; p++)
            print_table(o, p, res, &lim);
        printf("batched tokens identical to sequential: yes\n");
        print_work(o, res);
    }
    free(res);
    return rc == 0 ? 0 : KB_EXIT_FAIL;
}

/* --one-mode MODE: this process is a mode's (see the top of the file). */
static int one_mode(const kb_args *a, const kb_sweep_opts *o)
{
    const char *s = kb_arg(a, "one-mode");
    int k = 0, end = 0;
    bool batched = strncmp(s, "batched:", 8) == 0;
    if (strcmp(s, "full") != 0 &&
        (!(batched || strncmp(s, "sequential:", 11) == 0) ||
         sscanf(strchr(s, ':') + 1, "%d%n", &k, &end) != 1 || strchr(s, ':')[1 + end] != '\0' ||
         k < 1 || k > KB_SWEEP_MAX_CONFIGS)) {
        kb_error("--one-mode: want full, batched:K or sequential:K with K 1..%d, not '%s'",
                 KB_SWEEP_MAX_CONFIGS, s);
        return KB_EXIT_USAGE;
    }
    for (int i = 0; options[i].name; i++)
        if (sweep_only(options[i].name) && kb_arg(a, options[i].name)) {
            kb_error("bench sweep: --one-mode runs one mode for bench sweep, which takes --%s",
                     options[i].name);
            return KB_EXIT_USAGE;
        }
    kb_sweep_pass passes[N_PASSES];
    kv_error err;
    if (kb_sweep_mode_run(o, k, batched, N_PASSES, passes, &err) != 0) {
        kb_error("bench sweep --one-mode %s: %s", s, err.msg);
        return KB_EXIT_FAIL;
    }
    for (int p = 0; p < N_PASSES; p++)
        print_pass(p, &passes[p]);
    return 0;
}

static int run(const kb_args *a)
{
    sweep_opts o = {.mode = {.prompt = 2048, .gen = 64, .compute = KV_COMPUTE_F32}, /* a run's */
                    .repeats = 1,
                    .ks = {4, 16, 31},
                    .n_ks = 3};
    long P = o.mode.prompt, gen = o.mode.gen, rep = o.repeats, threads = 0;
    o.mode.model = kb_arg(a, "model");
    kv_evict_params cache;
    int asked = kb_eviction_params(a, &cache);
    if (asked < 0)
        return KB_EXIT_USAGE;
    if (asked == 0) {
        kb_error("bench sweep: its configs are fixed (H2O and SnapKV as configs/nightly.json); "
                 "of the eviction options only the cache's precision applies");
        return KB_EXIT_USAGE;
    }
    kv_evict_params *c = &o.mode.cache;
    kv_evict_params_default(c);
    memcpy(c->kv_cache_precision, cache.kv_cache_precision, sizeof cache.kv_cache_precision);
    memcpy(c->key_quant, cache.key_quant, sizeof cache.key_quant);
    memcpy(c->value_quant, cache.value_quant, sizeof cache.value_quant);
    c->key_group_size = cache.key_group_size;
    c->value_group_size = cache.value_group_size;
    if (!o.mode.model) {
        kb_error("bench sweep: --model DIR is required");
        return KB_EXIT_USAGE;
    }
    if (kb_arg(a, "compute") && kv_compute_parse(kb_arg(a, "compute"), &o.mode.compute) != 0) {
        kb_error("--compute: want f32 or bf16, not '%s'", kb_arg(a, "compute"));
        return KB_EXIT_USAGE;
    }
    if ((kb_arg(a, "configs") &&
         (o.n_ks = kb_parse_int_list(kb_arg(a, "configs"), "configs", o.ks, MAX_KS, 1,
                                     KB_SWEEP_MAX_CONFIGS)) <= 0) ||
        kb_arg_long(a, "prompt-tokens", 1, 1 << 20, &P) != 0 ||
        kb_arg_long(a, "gen-tokens", 1, 1 << 20, &gen) != 0 ||
        kb_arg_long(a, "repeats", 1, MAX_REPEATS, &rep) != 0 ||
        kb_arg_long(a, "threads", 1, 1024, &threads) != 0 ||
        kb_arg_long(a, "buffer-mib", 1, 1 << 20, &o.buffer_mib) != 0)
        return KB_EXIT_USAGE;
    o.mode.prompt = (int)P;
    o.mode.gen = (int)gen;
    o.repeats = (int)rep;
    kv_set_threads((int)threads); /* 0: every core, which the modes are then given */
    o.mode.threads = kv_get_threads();
    return kb_arg(a, "one-mode") ? one_mode(a, &o.mode) : bench_sweep(a, &o);
}

static const kb_option options[] = {
    {"model", "DIR", "model folder"},
    {"prompt-tokens", "N", "prompt length (default 2048)"},
    {"gen-tokens", "N", "decode steps after the prompt (default 64)"},
    {"configs", "K,K,..", "eviction configs next to the full cache (default 4,16,31)"},
    {"repeats", "N", "each mode's processes; the median is reported (default 1)"},
    {"threads", "N", "threads (default: all cores)"},
    {"compute", "f32|bf16", "compute mode (default f32, as a run's)"},
    {"buffer-mib", "N",
     "the machine limit's read-bandwidth buffer (default: 8x the last-level cache, at least 512)"},
    {"one-mode", "MODE",
     "internal: the process of one mode (full, batched:K, sequential:K) that bench sweep starts"},
    KB_EVICTION_OPTIONS, /* of them only the cache precision's apply */
    {NULL, NULL, NULL},
};

const kb_command kb_bench_sweep_cmd = {
    .name = "bench sweep",
    .summary = "full cache alone vs 1 + K configs decoded batched and one after another",
    .usage = "kvbench bench sweep --model DIR [options]",
    .description = "Wall and CPU time of the full cache alone, of 1 + K configs decoded batched "
                   "and one after another, each with the prefill and forks a run would do, each "
                   "mode in a process of its own: its first pass on fresh memory (cold, as a "
                   "one-sample run) and its second on what the first freed (warm, as a run's "
                   "later samples); the ratios, the ratio at the machine's measured arithmetic "
                   "peak and read bandwidth, and the decode work that limit counts.",
    .options = options,
    .run = run,
};
