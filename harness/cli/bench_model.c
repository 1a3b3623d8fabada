#include "cli/bench_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "util/clock.h"
#include "model/cpu.h"
#include "cli/bench.h"
#include "cli/eviction.h"
#include "evict/evict.h"
#include "model/generate.h"
#include "model/kernels.h"
#include "model/model.h"

static const kb_option options[] = {
    {"model", "DIR", "Hugging Face model folder"},
    {"prompt-tokens", "N,N,..", "prompt lengths to measure (default 512,2048,8192)"},
    {"gen-tokens", "N", "decode steps after each prompt (default 128)"},
    {"repeats", "N", "runs per prompt length; the median is reported (default 3)"},
    {"warmup", "N", "unmeasured runs before the repeats of each prompt length, as llama-bench's warmup (default 0)"},
    {"threads", "N", "threads (default: all cores)"},
    {"compute", "f32|bf16", "compute mode (default f32)"},
    {"evict-keep", "N", "also decode after evicting to N slots per layer (first 4 + recent)"},
    {"prefill-stats", NULL, "the prefill collects H2O's and SnapKV's attention statistics, as a sweep's does"},
    {"against", "PRECISION", "decode speed against caches at PRECISION: one prefill forked to both, decoded in turn, the ratio"},
    {"json", NULL, "print one JSON object per measurement"},
    KB_EVICTION_OPTIONS, /* of them only the cache precision's apply */
    {NULL, NULL, NULL},
};

/* The most memory the process has held resident so far, in GiB. */
static double peak_rss_gib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / (1024.0 * 1024.0); /* ru_maxrss is in KiB */
}

/* Bytes one cached token takes at precision q in m's caches. */
static double bytes_per_token(const kv_model *m, const kv_cache_quant *q)
{
    const kv_model_config *c = kv_model_get_config(m);
    return kv_cache_bytes_per_token(q, c->n_layers, c->n_kv_heads, c->head_dim);
}

/* Median, min and max of the wall-clock rates; median of the CPU rates;
 * the caches' precision and bytes per token. */
static void report(const kb_bench_model_opts *o, const kv_model *m, const kv_cache_quant *q,
                   const char *what, int tokens, double *v, double *cpu, int n)
{
    double med = kb_median(v, n), cmed = kb_median(cpu, n);
    const char *prec = kv_precision_name(q->precision);
    if (o->json)
        printf("{\"measure\":\"%s\",\"tokens\":%d,\"tokens_per_s_median\":%.2f,"
               "\"tokens_per_s_min\":%.2f,\"tokens_per_s_max\":%.2f,\"runs\":%d,"
               "\"tokens_per_cpu_s_median\":%.2f,\"peak_rss_gib\":%.3f,"
               "\"kv_cache_precision\":\"%s\",\"key_quant\":\"%s\",\"kv_bytes_per_token\":%.0f}\n",
               what, tokens, med, v[0], v[n - 1], n, cmed, peak_rss_gib(), prec,
               q->key_by_channel ? "by_channel" : "by_token", bytes_per_token(m, q));
    else
        printf("%-22s %4s %6d  %8.2f tok/s  (min %.2f, max %.2f, %d runs; %.2f tok/cpu-s)  "
               "peak RSS %.2f GiB\n",
               what, prec, tokens, med, v[0], v[n - 1], n, cmed, peak_rss_gib());
    fflush(stdout);
}

/* The decode speed of o->quant over o->against_quant, repeat by repeat
 * (each pair ran one after the other): median, min, max; CPU-time ratio. */
static void report_ratio(const kb_bench_model_opts *o, int tokens, const double *v,
                         const double *base, const double *cpu, const double *base_cpu, int n)
{
    double r[64], rc[64];
    for (int i = 0; i < n; i++) {
        r[i] = v[i] / base[i];
        rc[i] = cpu[i] / base_cpu[i];
    }
    double med = kb_median(r, n), cmed = kb_median(rc, n);
    const char *a = kv_precision_name(o->quant.precision),
               *b = kv_precision_name(o->against_quant.precision);
    if (o->json)
        printf("{\"measure\":\"decode ratio\",\"tokens\":%d,\"kv_cache_precision\":\"%s\","
               "\"against\":\"%s\",\"ratio_median\":%.3f,\"ratio_min\":%.3f,"
               "\"ratio_max\":%.3f,\"cpu_ratio_median\":%.3f,\"runs\":%d}\n",
               tokens, a, b, med, r[0], r[n - 1], cmed, n);
    else
        printf("decode %s / %s      %6d  %8.3fx       (min %.3f, max %.3f, %d pairs; %.3fx per "
               "cpu-s)\n",
               a, b, tokens, med, r[0], r[n - 1], n, cmed);
    fflush(stdout);
}

/* Keeps the first 4 and the most recent keep - 4 slots of every layer, the
 * shape of a StreamingLLM cache: decode speed depends only on how many
 * slots remain. */
static int evict(kv_cache *c, int keep, kv_error *err)
{
    for (int l = 0; l < c->n_layers; l++) {
        int len = c->layers[l].len;
        if (len <= keep)
            continue;
        int *idx = malloc((size_t)keep * sizeof *idx), n = 0;
        if (!idx)
            return kv_fail(err, "out of memory");
        for (int j = 0; j < len; j++)
            if (j < 4 || j >= len - (keep - 4))
                idx[n++] = j;
        int rc = kv_cache_compact(c, l, idx, n, err);
        free(idx);
        if (rc != 0)
            return -1;
    }
    return 0;
}

typedef struct run_result {
    double prefill, decode, decode_evicted;             /* tokens per wall second */
    double prefill_cpu, decode_cpu, decode_evicted_cpu; /* tokens per CPU second */
} run_result;

static int decode(kv_model *m, kv_cache *c, const float *logits, int steps, double *tok_s,
                  double *tok_cpu_s, kv_error *err)
{
    kv_generate_opts g = {.max_new_tokens = steps + 1, .ignore_eos = true};
    kv_generation out;
    double cpu = kv_clock_cpu_s();
    if (kv_generate_from(m, c, logits, &g, &out, err) != 0)
        return -1;
    *tok_cpu_s = out.n_decode_forwards / (kv_clock_cpu_s() - cpu);
    *tok_s = out.n_decode_forwards / out.decode_seconds;
    kv_generation_free(&out);
    return 0;
}

/* P pseudo-random token ids from seed. */
static void random_prompt(const kv_model *m, int P, unsigned seed, int32_t *tokens)
{
    for (int i = 0; i < P; i++) {
        seed = seed * 1103515245u + 12345u;
        tokens[i] = (int32_t)((seed >> 8) % (unsigned)kv_model_get_config(m)->vocab);
    }
}

/* --prefill-stats: what a sweep's prefill collects for H2O and SnapKV
 * (the column sums over every row, the window sums of SnapKV's window). */
static int sweep_request(kv_attn_stats_request *req, kv_error *err)
{
    kv_evict_params ps[2];
    for (int i = 0; i < 2; i++) {
        kv_evict_params_default(&ps[i]);
        snprintf(ps[i].algorithm, sizeof ps[i].algorithm, "%s", i ? "snapkv" : "h2o");
    }
    return kv_evict_stats_request(ps, 2, true, req, err);
}

/* One run: prefill P random tokens (with --prefill-stats, collecting the
 * statistics: their buffers are allocated inside the timing, as a run's
 * are), decode, optionally evict and decode. */
static int one_run(const kb_bench_model_opts *o, kv_model *m, int P, unsigned seed,
                   const kv_cache_quant *q, run_result *r, kv_error *err)
{
    const kv_model_config *cfg = kv_model_get_config(m);
    int32_t *tokens = malloc((size_t)P * sizeof *tokens);
    float *logits = malloc((size_t)cfg->vocab * sizeof *logits);
    kv_cache *c = kv_model_cache_new(m, P + o->gen_tokens + 1, err);
    kv_attn_stats_request req = {0};
    kv_attn_stats *stats = NULL;
    int rc = tokens && logits && c ? 0 : (c ? kv_fail(err, "out of memory") : -1);
    if (rc == 0)
        rc = kv_cache_set_quant(c, q, err);
    if (rc == 0 && o->prefill_stats)
        rc = sweep_request(&req, err);
    if (rc == 0) {
        random_prompt(m, P, seed, tokens);
        double t0 = kv_clock_s(), cpu = kv_clock_cpu_s();
        if (o->prefill_stats && !(stats = kv_model_stats_new(m, c, P, &req, err)))
            rc = -1;
        if (rc == 0)
            rc = kv_model_forward(m, c, tokens, P, stats ? &req : NULL, stats, logits, false, err);
        r->prefill = P / (kv_clock_s() - t0);
        r->prefill_cpu = P / (kv_clock_cpu_s() - cpu);
        kv_model_stats_free(stats, cfg->n_layers);
    }
    /* The evicted decode reuses the same cache, compacted in place: a fork
     * would hold a second full cache and double the peak memory. */
    if (rc == 0 && o->gen_tokens > 0)
        rc = decode(m, c, logits, o->gen_tokens, &r->decode, &r->decode_cpu, err);
    if (rc == 0 && o->gen_tokens > 0 && o->evict_keep > 0 && P > o->evict_keep) {
        rc = evict(c, o->evict_keep, err);
        if (rc == 0)
            rc = kv_cache_shrink(c, o->evict_keep + o->gen_tokens + 1, err);
        if (rc == 0)
            rc = decode(m, c, logits, o->gen_tokens, &r->decode_evicted, &r->decode_evicted_cpu,
                        err);
    }
    kv_cache_free(c);
    free(tokens);
    free(logits);
    return rc;
}

/* The rates of the repeats at one precision. */
typedef struct series {
    double pf[64], dc[64], de[64], pfc[64], dcc[64], dec[64];
} series;

static void record(series *s, int i, const run_result *r)
{
    s->pf[i] = r->prefill;
    s->dc[i] = r->decode;
    s->de[i] = r->decode_evicted;
    s->pfc[i] = r->prefill_cpu;
    s->dcc[i] = r->decode_cpu;
    s->dec[i] = r->decode_evicted_cpu;
}

static void report_series(const kb_bench_model_opts *o, const kv_model *m, const kv_cache_quant *q,
                          int P, series *s, int n)
{
    char what[64];
    report(o, m, q, o->prefill_stats ? "prefill with stats" : "prefill", P, s->pf, s->pfc, n);
    if (o->gen_tokens > 0)
        report(o, m, q, "decode after prompt", P, s->dc, s->dcc, n);
    if (o->gen_tokens > 0 && o->evict_keep > 0 && P > o->evict_keep) {
        snprintf(what, sizeof what, "decode evicted to %d", o->evict_keep);
        report(o, m, q, what, P, s->de, s->dec, n);
    }
}

static int bench_prompt(const kb_bench_model_opts *o, kv_model *m, int P)
{
    static series s; /* 3 KB: off the stack */
    int n = o->repeats < 64 ? o->repeats : 64;
    kv_error err;
    /* Warmup runs first fault in the pages the measured ones reuse (a fault
     * costs ~37 us on a VM) and are dropped: peers such as llama-bench warm
     * up by default, so a cold first run alone would compare unlike with
     * like. */
    for (int i = -o->warmup; i < n; i++) {
        run_result r = {0};
        if (one_run(o, m, P, 1234u + (unsigned)(i + o->warmup), &o->quant, &r, &err) != 0) {
            kb_error("%s", err.msg);
            return KB_EXIT_FAIL;
        }
        if (i >= 0)
            record(&s, i, &r);
    }
    report_series(o, m, &o->quant, P, &s, n);
    return 0;
}

/* --against: one F32 prefill of the prompt, forked once per precision
 * (stored when committed, as a run stores each config's fork);
 * each repeat then decodes on one cache and right after on the other, so
 * a pair shares the machine's state of the moment (on a shared machine
 * its load moves by the minute). The prefill is not measured here. */
static int compare_prompt(const kb_bench_model_opts *o, kv_model *m, int P)
{
    static series s, base; /* 3 KB each: off the stack */
    int n = o->repeats < 64 ? o->repeats : 64, cap = P + n * (o->gen_tokens + 1) + 1;
    kv_error err;
    int32_t *tokens = malloc((size_t)P * sizeof *tokens);
    float *logits = malloc((size_t)kv_model_get_config(m)->vocab * sizeof *logits);
    kv_cache *prompt = kv_model_cache_new(m, P, &err), *a = NULL, *b = NULL;
    int rc = tokens && logits && prompt ? 0 : (prompt ? kv_fail(&err, "out of memory") : -1);
    if (rc == 0) {
        random_prompt(m, P, 1234u, tokens);
        rc = kv_model_forward(m, prompt, tokens, P, NULL, NULL, logits, false, &err);
    }
    if (rc == 0 && (!(a = kv_cache_fork_at(prompt, &o->against_quant, cap, &err)) ||
                    !(b = kv_cache_fork_at(prompt, &o->quant, cap, &err))))
        rc = -1;
    kv_cache_free(prompt);
    for (int i = 0; rc == 0 && i < n; i++) {
        run_result ra = {0}, rb = {0};
        rc = decode(m, a, logits, o->gen_tokens, &ra.decode, &ra.decode_cpu, &err);
        if (rc == 0)
            rc = decode(m, b, logits, o->gen_tokens, &rb.decode, &rb.decode_cpu, &err);
        record(&base, i, &ra);
        record(&s, i, &rb);
    }
    kv_cache_free(a);
    kv_cache_free(b);
    free(tokens);
    free(logits);
    if (rc != 0) {
        kb_error("%s", err.msg);
        return KB_EXIT_FAIL;
    }
    report_ratio(o, P, s.dc, base.dc, s.dcc, base.dcc, n); /* before the medians sort them */
    report(o, m, &o->against_quant, "decode after prompt", P, base.dc, base.dcc, n);
    report(o, m, &o->quant, "decode after prompt", P, s.dc, s.dcc, n);
    return 0;
}

int kb_bench_model(const kb_bench_model_opts *o)
{
    kv_set_threads(o->threads);
    kv_error err;
    kv_model *m;
    double t0 = kv_clock_s();
    if (kv_model_load(o->model, &m, &err) != 0) {
        kb_error("%s", err.msg);
        return KB_EXIT_FAIL;
    }
    if (kv_model_set_compute(m, o->compute, &err) != 0) {
        kb_error("%s", err.msg);
        kv_model_free(m);
        return KB_EXIT_FAIL;
    }
    const kv_model_config *c = kv_model_get_config(m);
    kb_bench_model_opts checked = *o;
    if (kv_cache_quant_check(&checked.quant, c->head_dim, &err) != 0 ||
        kv_cache_quant_check(&checked.against_quant, c->head_dim, &err) != 0) {
        kb_error("%s", err.msg);
        kv_model_free(m);
        return KB_EXIT_USAGE;
    }
    o = &checked;
    fprintf(stderr, "# KV cache %s%s: %.0f bytes per cached token",
            kv_precision_name(o->quant.precision), o->quant.key_by_channel ? " (keys by channel)" : "",
            bytes_per_token(m, &o->quant));
    if (o->against)
        fprintf(stderr, "; against %s: %.0f", kv_precision_name(o->against_quant.precision),
                bytes_per_token(m, &o->against_quant));
    fprintf(stderr, "\n");
    fprintf(stderr,
            "# %s: %s, %d layers, hidden %d, %d/%d heads x %d, ffn %d, vocab %d; %.2f GiB of "
            "weights loaded in %.1f s; %d threads; compute %s, kernels %s\n",
            o->model, kv_arch_name(c->arch), c->n_layers, c->hidden, c->n_heads, c->n_kv_heads,
            c->head_dim, c->ffn, c->vocab, (double)kv_model_weight_bytes(m) / (1 << 30),
            kv_clock_s() - t0, kv_model_threads(m), kv_compute_name(o->compute),
            kv_isa_name(kv_isa_active()));
    int rc = 0;
    for (int i = 0; i < o->n_prompts && rc == 0; i++)
        rc = (o->against ? compare_prompt : bench_prompt)(o, m, o->prompt_tokens[i]);
    kv_model_free(m);
    return rc;
}

static int run(const kb_args *a)
{
    kb_bench_model_opts o = {
        .prompt_tokens = {512, 2048, 8192}, .n_prompts = 3, .gen_tokens = 128, .repeats = 3};
    long gen = o.gen_tokens, rep = o.repeats, warm = 0, threads = 0, keep = 0;
    o.model = kb_arg(a, "model");
    o.json = kb_flag(a, "json");
    o.prefill_stats = kb_flag(a, "prefill-stats");
    if (kb_arg(a, "compute") && kv_compute_parse(kb_arg(a, "compute"), &o.compute) != 0) {
        kb_error("--compute: want f32 or bf16, not '%s'", kb_arg(a, "compute"));
        return KB_EXIT_USAGE;
    }
    if (!o.model) {
        kb_error("bench model: --model DIR is required");
        return KB_EXIT_USAGE;
    }
    if ((kb_arg(a, "prompt-tokens") &&
         (o.n_prompts = kb_parse_int_list(kb_arg(a, "prompt-tokens"), "prompt-tokens",
                                          o.prompt_tokens, 16, 1, 1 << 24)) <= 0) ||
        kb_arg_long(a, "gen-tokens", 0, 1 << 20, &gen) != 0 ||
        kb_arg_long(a, "repeats", 1, 64, &rep) != 0 ||
        kb_arg_long(a, "warmup", 0, 64, &warm) != 0 ||
        kb_arg_long(a, "threads", 1, 1024, &threads) != 0 ||
        kb_arg_long(a, "evict-keep", 8, 1 << 24, &keep) != 0)
        return KB_EXIT_USAGE;
    o.gen_tokens = (int)gen;
    o.repeats = (int)rep;
    o.warmup = (int)warm;
    o.threads = (int)threads;
    o.evict_keep = (int)keep;
    kv_evict_params p;
    int asked = kb_eviction_params(a, &p);
    if (asked < 0)
        return KB_EXIT_USAGE;
    if (asked == 0) {
        kb_error("bench model: of the eviction options only the cache precision's apply "
                 "(--kv-cache-precision, --key-quant, --value-quant, --key-group-size, "
                 "--value-group-size)");
        return KB_EXIT_USAGE;
    }
    o.quant = kv_evict_params_cache_quant(&p);
    const char *against = kb_arg(a, "against");
    if (against) {
        int prec = kv_precision_parse(against);
        if (prec < 0) {
            kb_error("--against: want f32, bf16, f16, u8 or u4, not '%s'", against);
            return KB_EXIT_USAGE;
        }
        if (o.evict_keep > 0 || o.gen_tokens == 0) {
            kb_error("--against compares decode speeds: it needs --gen-tokens above 0 and no "
                     "--evict-keep");
            return KB_EXIT_USAGE;
        }
        o.against = true;
        o.against_quant = o.quant;
        o.against_quant.precision = (kv_precision)prec;
    }
    return kb_bench_model(&o);
}

const kb_command kb_bench_model_cmd = {
    .name = "bench model",
    .summary = "prefill and decode tokens/s of --model, and peak RSS",
    .usage = "kvbench bench model --model DIR [options]",
    .description = "Prefill and decode tokens/s of random prompts (median of --repeats), and "
                   "peak RSS.",
    .options = options,
    .run = run,
};
