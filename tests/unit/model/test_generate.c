/* kvcore/generate and `kvbench generate` on the tiny reference models. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/cpu.h"
#include "model/generate.h"
#include "model/model.h"
#include "model/model_config.h"
#include "util/npy.h"
#include "support/testutil.h"

static char *model_dir(const char *name)
{
    char rel[256];
    snprintf(rel, sizeof rel, "tests/data/models/%s", name);
    return tu_source(rel);
}

static int read_ids(const char *dir, const char *file, int32_t *out, int max)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    char *s = tu_slurp(path, NULL);
    int n = 0;
    for (char *p = s; *p && n < max;) {
        out[n++] = (int32_t)strtol(p, &p, 10);
        while (*p == ',' || *p == '\n')
            p++;
    }
    free(s);
    return n;
}

/* The CLI's --dump-logits and generated ids against the reference. */
static void check_cli(const char *name)
{
    char *dir = model_dir(name), *tmp = tu_mkdtemp();
    char *ids_path = malloc(strlen(dir) + 32), npy[512];
    sprintf(ids_path, "%s/ref_ids.txt", dir);
    char *ids = tu_slurp(ids_path, NULL);
    ids[strcspn(ids, "\n")] = '\0';
    snprintf(npy, sizeof npy, "%s/logits.npy", tmp);
    tu_result r =
        tu_kvbench("generate", "--model", dir, "--tokens", ids, "--max-new-tokens", "64",
                   "--ignore-eos", "--json", "--threads", "2", "--dump-logits", npy, NULL);
    cr_assert_eq(r.status, 0, "%s: %s", name, r.err);
    int32_t gen[64];
    cr_assert_eq(read_ids(dir, "ref_gen.txt", gen, 64), 64);
    char want[1024] = "\"generated_ids\":[";
    for (int i = 0; i < 64; i++)
        sprintf(want + strlen(want), "%s%d", i ? "," : "", gen[i]);
    strcat(want, "]");
    cr_assert(strstr(r.out, want), "%s: generated ids differ from the reference:\n%s", name, r.out);

    float *got, *ref;
    size_t rows, cols, rrows, rcols;
    kv_error err;
    char ref_path[512];
    snprintf(ref_path, sizeof ref_path, "%s/ref_logits.npy", dir);
    cr_assert_eq(kv_npy_read(npy, &got, &rows, &cols, &err), 0, "%s", err.msg);
    cr_assert_eq(kv_npy_read(ref_path, &ref, &rrows, &rcols, &err), 0, "%s", err.msg);
    cr_assert_eq(rows, rrows, "%s: %zu logits rows, reference %zu (P + N - 1)", name, rows, rrows);
    cr_assert_eq(cols, rcols);
    double d = 0;
    for (size_t i = 0; i < rows * cols; i++)
        d = fmax(d, fabs((double)got[i] - ref[i]));
    cr_expect_leq(d, 1e-4, "%s: dumped logits differ from the reference by %g", name, d);
    free(got);
    free(ref);
    free(ids);
    free(ids_path);
    tu_result_free(&r);
    tu_rmtree(tmp);
    free(tmp);
    free(dir);
}

Test(generate_cli, dump_logits_and_tokens_match_reference)
{
    check_cli("qwen3-bf16");
    check_cli("llama-bf16-llama3");
}

Test(generate_cli, bad_inputs_are_one_line_errors)
{
    char *dir = model_dir("qwen3-bf16");
    struct {
        const char *args[6];
        int status;
        const char *msg;
    } cases[] = {
        {{"--model", "/nonexistent", "--tokens", "1"}, 1, "/nonexistent/config.json"},
        {{"--model", dir, "--tokens", "1,512"}, 1, "outside the vocabulary"},
        {{"--model", dir, "--tokens", "1,x"}, 2, "--tokens"},
        {{"--model", dir}, 2, "exactly one of"},
        {{"--model", dir, "--tokens", "1", "--max-new-tokens", "-3"}, 2, "max-new-tokens"},
        {{"--model", dir, "--tokens", "1", "--compute", "fp8"}, 2, "--compute: want f32 or bf16"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *argv[10] = {"generate"};
        int n = 1;
        for (int k = 0; k < 6 && cases[i].args[k]; k++)
            argv[n++] = (char *)cases[i].args[k];
        argv[n] = NULL;
        tu_result r = tu_kvbench(argv[0], argv[1], argv[2], argv[3], argv[4], argv[5], argv[6],
                                 argv[7], NULL);
        cr_expect_eq(r.status, cases[i].status, "case %zu: status %d, stderr %s", i, r.status,
                     r.err);
        cr_expect(strstr(r.err, cases[i].msg), "case %zu: %s", i, r.err);
        cr_expect(strncmp(r.err, "kvbench: ", 9) == 0 &&
                      strchr(r.err, '\n') == r.err + strlen(r.err) - 1,
                  "case %zu: not one line: %s", i, r.err);
        tu_result_free(&r);
    }
    free(dir);
}

Test(generate_cli, prompt_text_uses_the_tokenizer)
{
    char *dir = model_dir("qwen3-bf16");
    tu_result r = tu_kvbench("generate", "--model", dir, "--prompt", "The capital of France is",
                             "--max-new-tokens", "5", "--json", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "\"prompt_ids\":[") && strstr(r.out, "\"text\":\""), "%s", r.out);
    tu_result_free(&r);
    free(dir);
}

/* ------------------------------------------------------------ library API */

typedef struct hook_log {
    int steps, tokens;
    int last_step;
    int n_keys_ok;
    kv_model *m;
    bool compact;
} hook_log;

static int count_token(void *user, int32_t id)
{
    (void)id;
    ((hook_log *)user)->tokens++;
    return 0;
}

/* Checks each step's statistics are shaped for the cache after the step and
 * sum to one per query row; optionally evicts the oldest half of the middle,
 * as an eviction policy would between steps. */
static int on_step(void *user, kv_cache *c, const kv_attn_stats *stats, int step, kv_error *err)
{
    hook_log *h = user;
    cr_assert_eq(step, h->steps, "steps are numbered in order");
    h->steps++;
    h->last_step = step;
    cr_assert_not_null(stats);
    int rows = step == 0 ? 40 : 1;
    for (int l = 0; l < c->n_layers; l++) {
        cr_assert_eq(stats[l].n_keys, c->layers[l].len);
        double s = 0;
        for (int j = 0; j < stats[l].n_keys; j++)
            s += stats[l].col_sums[j];
        cr_assert(fabs(s - rows) < 1e-4, "layer %d head 0: column sums add to %g, want %d", l, s,
                  rows);
        h->n_keys_ok++;
    }
    if (h->compact && step == 0)
        for (int l = 0; l < c->n_layers; l++) {
            int keep[64], n = 0;
            for (int j = 0; j < c->layers[l].len; j++)
                if (j < 4 || j >= c->layers[l].len - 16)
                    keep[n++] = j;
            if (kv_cache_compact(c, l, keep, n, err) != 0)
                return -1;
        }
    return 0;
}

static void generate_with(const char *name, kv_generate_opts *o, kv_generation *out, hook_log *h)
{
    char *dir = model_dir(name);
    kv_error err;
    cr_assert_eq(kv_model_load(dir, &h->m, &err), 0, "%s", err.msg);
    int32_t ids[64];
    int n = read_ids(dir, "ref_ids.txt", ids, 64);
    kv_cache *c = kv_model_cache_new(h->m, 8, &err);
    o->user = h;
    cr_assert_eq(kv_generate(h->m, c, ids, n, o, out, &err), 0, "%s", err.msg);
    kv_cache_free(c);
    free(dir);
}

Test(generate, stops_at_max_new_tokens_and_streams_every_token)
{
    hook_log h = {0};
    kv_generate_opts o = {.max_new_tokens = 10, .ignore_eos = true, .on_token = count_token};
    kv_generation out;
    generate_with("qwen3-f32", &o, &out, &h);
    cr_assert_eq(out.n, 10);
    cr_assert_eq(h.tokens, 10);
    cr_assert_eq(out.stop, KV_STOP_LENGTH);
    cr_assert_eq(out.n_decode_forwards, 9, "the last token is produced, not fed");
    kv_generation_free(&out);
    kv_model_free(h.m);
}

Test(generate, stops_at_an_extra_stop_id_and_at_eos)
{
    int32_t gen[64];
    char *dir = model_dir("qwen3-f32");
    read_ids(dir, "ref_gen.txt", gen, 64);
    free(dir);
    /* The reference's 8th token is the first 474: stopping there ends at 8. */
    int32_t stop = gen[7];
    hook_log h = {0};
    kv_generate_opts o = {.max_new_tokens = 64, .stop_ids = &stop, .n_stop_ids = 1};
    kv_generation out;
    generate_with("qwen3-f32", &o, &out, &h);
    int first = 0;
    while (gen[first] != stop)
        first++;
    cr_assert_eq(out.n, first + 1);
    cr_assert_eq(out.ids[out.n - 1], stop);
    cr_assert_eq(out.stop, KV_STOP_ID);
    kv_generation_free(&out);

    /* Make that id an eos of the model: same stop, reported as eos; with
     * ignore_eos generation runs to the limit. */
    kv_model_config *cfg = (kv_model_config *)kv_model_get_config(h.m);
    cfg->eos_ids[0] = stop;
    char *d2 = model_dir("qwen3-f32");
    int32_t ids[64];
    int n = read_ids(d2, "ref_ids.txt", ids, 64);
    free(d2);
    kv_error err;
    kv_cache *c = kv_model_cache_new(h.m, 8, &err);
    kv_generate_opts o2 = {.max_new_tokens = 64};
    cr_assert_eq(kv_generate(h.m, c, ids, n, &o2, &out, &err), 0, "%s", err.msg);
    cr_assert_eq(out.n, first + 1);
    cr_assert_eq(out.stop, KV_STOP_EOS);
    kv_generation_free(&out);
    kv_cache_free(c);
    kv_model_free(h.m);
}

static const char *fake_text(void *user, int32_t id, size_t *len)
{
    (void)user;
    static char buf[16];
    *len = (size_t)snprintf(buf, sizeof buf, "<%d>", id);
    return buf;
}

Test(generate, stops_at_a_stop_string_spanning_tokens)
{
    int32_t gen[64];
    char *dir = model_dir("qwen3-f32");
    read_ids(dir, "ref_gen.txt", gen, 64);
    free(dir);
    char stop[64];
    /* "226><474": spans tokens 7 and 8 (the first 474), ends in token 8 */
    snprintf(stop, sizeof stop, "%d><%d", gen[6], gen[7]);
    const char *stops[] = {stop};
    hook_log h = {0};
    kv_generate_opts o = {.max_new_tokens = 64,
                          .ignore_eos = true,
                          .stop_strings = stops,
                          .n_stop_strings = 1,
                          .token_text = fake_text};
    kv_generation out;
    generate_with("qwen3-f32", &o, &out, &h);
    cr_assert_eq(out.stop, KV_STOP_STRING);
    cr_assert_eq(out.n, 8);
    kv_generation_free(&out);
    kv_model_free(h.m);
}

Test(generate, step_hook_sees_statistics_and_may_compact_the_cache)
{
    hook_log h = {.compact = true};
    kv_generate_opts o = {.max_new_tokens = 8,
                          .ignore_eos = true,
                          .on_step = on_step,
                          .stats_req = {.col_sums = true}};
    kv_generation out;
    generate_with("qwen2-bf16", &o, &out, &h);
    cr_assert_eq(h.steps, 8, "the prompt and 7 fed tokens");
    cr_assert_eq(out.n, 8);
    kv_generation_free(&out);
    kv_model_free(h.m);
}

/* --chat --no-think: the toy template and tokenizer give the reference's
 * prompt ids, and 16 greedy tokens follow (ref_chat.txt). */
Test(generate_cli, chat_prompt_matches_reference)
{
    char *dir = model_dir("qwen3-bf16");
    char path[512];
    snprintf(path, sizeof path, "%s/ref_chat.txt", dir);
    char *ref = tu_slurp(path, NULL);
    char *ids = strstr(ref, "ids: "), *gen = strstr(ref, "generated: ");
    cr_assert(ids && gen);
    ids += 5;
    gen += 11;
    ids[strcspn(ids, "\n")] = '\0';
    gen[strcspn(gen, "\n")] = '\0';
    tu_result r = tu_kvbench("generate", "--model", dir, "--prompt",
                             "What is the capital of France?", "--chat", "--no-think",
                             "--max-new-tokens", "16", "--ignore-eos", "--json", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    char want[2048];
    snprintf(want, sizeof want, "\"prompt_ids\":[%s],\"generated_ids\":[%s]", ids, gen);
    cr_assert(strstr(r.out, want), "want %s\ngot %s", want, r.out);
    tu_result_free(&r);
    free(ref);
    free(dir);
}

typedef struct logit_sink {
    float *rows;
    int n, vocab;
} logit_sink;

static int collect(void *user, const float *logits, int n_rows, kv_error *err)
{
    (void)err;
    logit_sink *s = user;
    memcpy(s->rows + (size_t)s->n * s->vocab, logits, (size_t)n_rows * s->vocab * sizeof(float));
    s->n += n_rows;
    return 0;
}

/* A prompt longer than one logits slice (256 rows): the rows on_logits
 * sees equal one forward over the whole sequence. */
Test(generate, logits_of_a_long_prompt_come_in_order)
{
    char *dir = model_dir("llama-f32");
    kv_model *m;
    kv_error err;
    cr_assert_eq(kv_model_load(dir, &m, &err), 0, "%s", err.msg);
    int P = 300, G = 4, V = kv_model_get_config(m)->vocab;
    int32_t ids[304];
    for (int i = 0; i < P; i++)
        ids[i] = (int32_t)((i * 131 + 7) % 500);
    logit_sink s = {.rows = malloc((size_t)(P + G) * V * sizeof(float)), .vocab = V};
    kv_generate_opts o = {
        .max_new_tokens = G, .ignore_eos = true, .on_logits = collect, .user = &s};
    kv_cache *c = kv_model_cache_new(m, 8, &err);
    kv_generation out;
    cr_assert_eq(kv_generate(m, c, ids, P, &o, &out, &err), 0, "%s", err.msg);
    cr_assert_eq(s.n, P + G - 1);
    memcpy(ids + P, out.ids, (G - 1) * sizeof(int32_t));
    float *all = malloc((size_t)(P + G - 1) * V * sizeof(float));
    kv_cache *c2 = kv_model_cache_new(m, 8, &err);
    cr_assert_eq(kv_model_forward(m, c2, ids, P + G - 1, NULL, NULL, all, true, &err), 0);
    double d = 0;
    for (size_t i = 0; i < (size_t)(P + G - 1) * V; i++)
        d = fmax(d, fabs((double)all[i] - s.rows[i]));
    cr_assert_leq(d, 1e-4, "max diff %g", d);
    kv_generation_free(&out);
    kv_cache_free(c);
    kv_cache_free(c2);
    free(all);
    free(s.rows);
    kv_model_free(m);
    free(dir);
}

/* `kvbench bench model` runs end to end (what it measures is not asserted:
 * performance is not a unit test). */
Test(generate_cli, bench_model_reports_each_measure)
{
    char *dir = model_dir("qwen3-bf16");
    tu_result r =
        tu_kvbench("bench", "model", "--model", dir, "--prompt-tokens", "16,24", "--gen-tokens",
                   "3", "--repeats", "1", "--evict-keep", "12", "--json", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "{\"measure\":\"prefill\",\"tokens\":24,"), "%s", r.out);
    cr_assert(strstr(r.out, "{\"measure\":\"decode after prompt\",\"tokens\":16,"), "%s", r.out);
    cr_assert(strstr(r.out, "{\"measure\":\"decode evicted to 12\",\"tokens\":24,"), "%s", r.out);
    tu_result_free(&r);
    free(dir);
}

/* --warmup adds unmeasured runs: the report still counts --repeats runs,
 * and an out-of-range count is refused naming the flag. */
Test(generate_cli, bench_model_warmup_runs_are_not_reported)
{
    char *dir = model_dir("qwen3-bf16");
    tu_result r = tu_kvbench("bench", "model", "--model", dir, "--prompt-tokens", "16",
                             "--gen-tokens", "2", "--repeats", "2", "--warmup", "3", "--json", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "{\"measure\":\"prefill\",\"tokens\":16,"), "%s", r.out);
    cr_assert(strstr(r.out, "\"runs\":2,") && !strstr(r.out, "\"runs\":5,"), "%s", r.out);
    tu_result_free(&r);
    r = tu_kvbench("bench", "model", "--model", dir, "--warmup", "-1", NULL);
    cr_assert_neq(r.status, 0);
    cr_assert(strstr(r.err, "--warmup"), "%s", r.err);
    tu_result_free(&r);
    free(dir);
}

/* The rows of one of bench sweep's tables (the one after `label`): each K
 * of --configs 1,3 once, the limit ratio no better than the full cache
 * alone (1 + K rows do at least one row's work). */
static void expect_table(const char *out, const char *label)
{
    const char *at = strstr(out, label);
    cr_assert_not_null(at, "no table '%s' in:\n%s", label, out);
    int rows = 0;
    for (const char *p = strstr(at, "limit batched/full\n"); p && (p = strchr(p, '\n'));) {
        int k;
        double v[6];
        if (sscanf(++p, "%d %lfx %lfx %lfx %lfx %lfx %lfx", &k, &v[0], &v[1], &v[2], &v[3], &v[4],
                   &v[5]) != 7)
            break;
        cr_assert(k == (rows ? 3 : 1), "%s: %s", label, out);
        cr_assert_geq(v[5], 1.0, "%s: the limit ratio of %d configs: %s", label, k, out);
        rows++;
    }
    cr_assert_eq(rows, 2, "%s: %s", label, out);
}

/* bench sweep decodes the same configs batched and one after another, each
 * mode in a process of its own, and refuses to report unless their tokens
 * agree; it reports each mode's first pass (cold, as a one-sample run) and
 * its second (warm), each beside the ratio at the machine's measured
 * limits. */
Test(generate_cli, bench_sweep_compares_modes_and_the_machine_limit)
{
    char *dir = model_dir("qwen3-bf16");
    tu_result r = tu_kvbench("bench", "sweep", "--model", dir, "--prompt-tokens", "40",
                             "--gen-tokens", "4", "--configs", "1,3", "--threads", "2",
                             "--buffer-mib", "64", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "batched tokens identical to sequential: yes"), "%s", r.out);
    cr_assert(strstr(r.out, "machine limit: FP32 "), "%s", r.out);
    expect_table(r.out, "\ncold (as a one-sample run");
    expect_table(r.out, "\nwarm (from the second sample on");
    /* one process per mode: full, then batched and sequential of each K */
    const char *modes[] = {"full", "batched:1", "sequential:1", "batched:3", "sequential:3"};
    for (size_t i = 0; i < sizeof modes / sizeof *modes; i++) {
        char line[64];
        snprintf(line, sizeof line, "# repeat 1, %s: cold ", modes[i]);
        cr_assert(strstr(r.err, line), "no '%s' in:\n%s", line, r.err);
    }
    char want[64];
    snprintf(want, sizeof want, "threads, kernels %s)", kv_isa_name(kv_isa_detected()));
    cr_assert(strstr(r.out, want), "%s", r.out);
    tu_result_free(&r);

    /* The limit is the forced level's: at avx2 the AVX2 FMA loop and no
     * BF16 arithmetic, as the modes' processes run. A bad level fails
     * before any mode runs. */
    setenv(KV_ISA_ENV, "avx2", 1);
    r = tu_kvbench("bench", "sweep", "--model", dir, "--prompt-tokens", "40", "--gen-tokens", "2",
                   "--configs", "1", "--threads", "2", "--buffer-mib", "64", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "GFLOP/s, BF16 none, read "), "%s", r.out);
    cr_assert(strstr(r.out, "threads, kernels avx2)"), "%s", r.out);
    tu_result_free(&r);
    setenv(KV_ISA_ENV, "sse9", 1);
    r = tu_kvbench("bench", "sweep", "--model", dir, "--prompt-tokens", "40", NULL);
    cr_assert_eq(r.status, 1, "%s", r.err);
    cr_assert_str_eq(r.err, "kvbench: bench sweep: KVBENCH_ISA: unknown instruction-set level "
                            "'sse9' (want avx2, avx512 or avx512bf16)\n");
    unsetenv(KV_ISA_ENV);
    tu_result_free(&r);
    free(dir);
}

/* A mode's process (--one-mode, which bench sweep starts) prints one line
 * per pass that bench sweep reads back: its times, its work and its
 * tokens' hash, which batched and sequential share pass by pass while two
 * passes (prompts of their own) differ. */
Test(generate_cli, bench_sweep_mode_process_prints_its_passes)
{
    char *dir = model_dir("qwen3-bf16");
    unsigned long long tokens[2][2];
    const char *modes[] = {"batched:2", "sequential:2"};
    for (int m = 0; m < 2; m++) {
        tu_result r = tu_kvbench("bench", "sweep", "--model", dir, "--prompt-tokens", "40",
                                 "--gen-tokens", "4", "--threads", "1", "--one-mode", modes[m],
                                 NULL);
        cr_assert_eq(r.status, 0, "%s", r.err);
        for (int p = 0; p < 2; p++) {
            char tag[64];
            snprintf(tag, sizeof tag, "bench sweep pass %d: ", p);
            const char *at = strstr(r.out, tag);
            cr_assert_not_null(at, "no '%s' in:\n%s", tag, r.out);
            double wall, cpu, prefill, passes, rows;
            cr_assert_eq(sscanf(at + strlen(tag),
                                "wall %lf cpu %lf prefill %lf prefill_cpu %*f passes %lf rows %lf slots %*f "
                                "slot_bytes %*f proj_flops %*f attn_flops %*f bytes %*f tokens "
                                "%llx",
                                &wall, &cpu, &prefill, &passes, &rows, &tokens[m][p]),
                         6, "%s", at);
            cr_assert(wall > 0 && prefill > 0 && prefill < wall, "%s", at);
            /* 4 new tokens: 3 decode forwards of 3 rows */
            cr_assert_eq(passes, m == 0 ? 3 : 9, "%s", at);
            cr_assert_eq(rows, 9, "%s", at);
        }
        tu_result_free(&r);
    }
    cr_assert_eq(tokens[0][0], tokens[1][0]);
    cr_assert_eq(tokens[0][1], tokens[1][1]);
    cr_assert_neq(tokens[0][0], tokens[0][1]);
    free(dir);
}

/* --one-mode takes one mode (K within the sweep's configs) and none of the
 * options that belong to the sweep as a whole: each misuse is a one-line
 * usage error naming the option. */
Test(generate_cli, bench_sweep_refuses_one_mode_misuse)
{
    char *dir = model_dir("qwen3-bf16");
    const char *bad[][4] = {
        {"--one-mode", "batched", NULL, "--one-mode: want full, batched:K or sequential:K"},
        {"--one-mode", "sequential:0", NULL, "not 'sequential:0'"},
        {"--one-mode", "batched:33", NULL, "not 'batched:33'"},
        {"--one-mode", "batched:3x", NULL, "not 'batched:3x'"},
        {"--one-mode", "full", "--configs", "which takes --configs"},
        {"--one-mode", "full", "--repeats", "which takes --repeats"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        tu_result r = bad[i][2] ? tu_kvbench("bench", "sweep", "--model", dir, bad[i][0],
                                             bad[i][1], bad[i][2], "2", NULL)
                                : tu_kvbench("bench", "sweep", "--model", dir, bad[i][0],
                                             bad[i][1], NULL);
        cr_assert_eq(r.status, 2, "%s %s: %s", bad[i][1], bad[i][2] ? bad[i][2] : "", r.err);
        cr_assert(strstr(r.err, bad[i][3]), "%s", r.err);
        cr_assert_eq(strchr(r.err, '\n'), r.err + strlen(r.err) - 1, "one line: %s", r.err);
        cr_assert_eq(r.out[0], '\0', "%s", r.out);
        tu_result_free(&r);
    }
    free(dir);
}

/* bench sweep --kv-cache-precision stores the configs' caches at that
 * precision (the full cache stays F32): batched still equals sequential,
 * the header says so, and eviction options other than the cache's are
 * refused (its configs are fixed). */
Test(generate_cli, bench_sweep_at_a_cache_precision)
{
    char *dir = model_dir("qwen3-bf16");
    tu_result r = tu_kvbench("bench", "sweep", "--model", dir, "--prompt-tokens", "40",
                             "--gen-tokens", "4", "--configs", "3", "--threads", "2",
                             "--buffer-mib", "64", "--kv-cache-precision", "u4", "--key-quant",
                             "by_channel", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.err, "configs' caches u4 (keys by channel)"), "%s", r.err);
    cr_assert(strstr(r.out, "batched tokens identical to sequential: yes"), "%s", r.out);
    tu_result_free(&r);
    r = tu_kvbench("bench", "sweep", "--model", dir, "--eviction", "h2o", NULL);
    cr_assert_eq(r.status, 2, "%s", r.err);
    cr_assert(strstr(r.err, "of the eviction options only the cache's precision applies"), "%s",
              r.err);
    tu_result_free(&r);
    free(dir);
}

/* bench sweep's limit model counts what the decode of each mode did
 * (weight passes, row forwards, attended slots and their stored bytes);
 * the counts must be those the shapes give. 300-token prompt, 8 new tokens
 * (7 decode forwards), F32 caches: the full cache attends 300 + j slots
 * per layer at forward j; configs 1-2 (H2O and SnapKV, start 32 +
 * intermediate 160 + recent 64) are compressed to 256 at the fork and,
 * evicting at every step, attend 257; config 3 (H2O, budget 512) never
 * evicts and attends as the full cache. */
enum { SWEEP_PROMPT = 300, SWEEP_GEN = 8 };

/* Slots one row attends over its decode, all layers: at forward j (1 ..
 * SWEEP_GEN - 1) the prompt and j tokens, at most budget + 1 (the new one
 * before eviction). */
static double row_slots(const kv_model_config *c, int budget)
{
    double n = 0;
    for (int j = 1; j < SWEEP_GEN; j++)
        n += SWEEP_PROMPT + j < budget + 1 ? SWEEP_PROMPT + j : budget + 1;
    return n * c->n_layers;
}

/* Mode `name`'s counts as bench sweep printed them against the wanted. */
static void expect_work(const char *out, const char *name, double passes, double rows,
                        double slots, double slot_bytes)
{
    char line[64];
    snprintf(line, sizeof line, " %s  ", name);
    const char *at = strstr(out, line);
    cr_assert_not_null(at, "no work line for %s in:\n%s", name, out);
    double v[4];
    cr_assert_eq(sscanf(at + strlen(line), "%lf passes %lf rows %lf slots %lf bytes", &v[0], &v[1],
                        &v[2], &v[3]),
                 4, "%s", at);
    cr_expect_eq(v[0], passes, "%s: weight passes %.0f, want %.0f", name, v[0], passes);
    cr_expect_eq(v[1], rows, "%s: row forwards %.0f, want %.0f", name, v[1], rows);
    cr_expect_eq(v[2], slots, "%s: attended slots %.0f, want %.0f", name, v[2], slots);
    cr_expect_eq(v[3], slots * slot_bytes, "%s: K/V bytes %.0f, want %.0f", name, v[3],
                 slots * slot_bytes);
}

Test(generate_cli, bench_sweep_counts_the_decode_work_of_its_limit)
{
    char *dir = model_dir("qwen3-bf16");
    tu_result r = tu_kvbench("bench", "sweep", "--model", dir, "--prompt-tokens", "300",
                             "--gen-tokens", "8", "--configs", "2,3", "--threads", "1",
                             "--buffer-mib", "1", NULL);
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    kv_model_config c;
    kv_error err;
    cr_assert_eq(kv_model_config_load(dir, &c, &err), 0, "%s", err.msg);
    double slot_bytes = 2.0 * c.n_kv_heads * c.head_dim * sizeof(float); /* K and V, F32 */
    double full = row_slots(&c, 1 << 30), evicting = row_slots(&c, 32 + 160 + 64);
    int f = SWEEP_GEN - 1;
    expect_work(r.out, "full", f, f, full, slot_bytes);
    expect_work(r.out, "1+2 batched", f, 3 * f, full + 2 * evicting, slot_bytes);
    expect_work(r.out, "1+2 sequent", 3 * f, 3 * f, full + 2 * evicting, slot_bytes);
    expect_work(r.out, "1+3 batched", f, 4 * f, 2 * full + 2 * evicting, slot_bytes);
    expect_work(r.out, "1+3 sequent", 4 * f, 4 * f, 2 * full + 2 * evicting, slot_bytes);
    kv_model_config_free(&c);
    tu_result_free(&r);
    free(dir);
}

/* The compute mode and the kernels' level are part of what bench model
 * and version report; KVBENCH_ISA naming no level is a one-line error. */
Test(generate_cli, compute_mode_and_kernel_level_are_reported)
{
    char *dir = model_dir("qwen3-f32");
    tu_result r = tu_kvbench("bench", "model", "--model", dir, "--prompt-tokens", "16",
                             "--gen-tokens", "2", "--repeats", "1", "--compute", "bf16", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    char want[64];
    snprintf(want, sizeof want, "compute bf16, kernels %s", kv_isa_name(kv_isa_detected()));
    cr_assert(strstr(r.err, want), "%s", r.err);
    tu_result_free(&r);

    r = tu_kvbench("generate", "--model", dir, "--tokens", "1,2,3", "--max-new-tokens", "3",
                   "--compute", "bf16", "--json", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "\"generated_ids\":["), "%s", r.out);
    tu_result_free(&r);

    r = tu_kvbench("version", "--libraries", NULL);
    snprintf(want, sizeof want, "kernels %s (CPU: %s;", kv_isa_name(kv_isa_detected()),
             kv_isa_name(kv_isa_detected()));
    cr_assert(strstr(r.out, want), "%s", r.out);
    cr_assert(strstr(r.out, "; built with -march="), "%s", r.out);
    /* each mode's prefill path: oneDNN's BF16 matmul only at avx512bf16 */
    bool onednn = kv_isa_detected() >= KV_ISA_AVX512BF16;
    cr_assert(strstr(r.out, onednn ? "bf16 mode oneDNN bf16 x bf16 -> f32"
                                   : "bf16 mode OpenBLAS sgemm on weights widened"),
              "%s", r.out);
    cr_assert(strstr(r.out, "prefill matmul: f32 mode OpenBLAS sgemm"), "%s", r.out);
    cr_assert(strstr(r.out, onednn ? "prefill attention: f32 mode OpenBLAS sgemm; bf16 mode oneDNN"
                                   : "prefill attention: f32 mode OpenBLAS sgemm; bf16 mode "
                                     "OpenBLAS sgemm"),
              "%s", r.out);
    tu_result_free(&r);

    setenv(KV_ISA_ENV, "avx2", 1);
    r = tu_kvbench("version", "--libraries", NULL);
    cr_assert(strstr(r.out, "kernels avx2 (CPU:"), "%s", r.out);
    cr_assert(strstr(r.out, "bf16 mode OpenBLAS sgemm on weights widened"), "%s", r.out);
    cr_assert(strstr(r.out, "attention: f32 mode OpenBLAS sgemm; bf16 mode OpenBLAS sgemm"), "%s",
              r.out);
    tu_result_free(&r);
    setenv(KV_ISA_ENV, "sse9", 1);
    r = tu_kvbench("generate", "--model", dir, "--tokens", "1", "--max-new-tokens", "1", NULL);
    cr_assert_eq(r.status, 1, "%s", r.err);
    cr_assert_str_eq(r.err, "kvbench: KVBENCH_ISA: unknown instruction-set level 'sse9' (want "
                            "avx2, avx512 or avx512bf16)\n");
    tu_result_free(&r);
    unsetenv(KV_ISA_ENV);
    free(dir);
}

/* The median a `bench machine --json` line reports for measure, or NAN when
 * the line is missing or its median is null. */
static double machine_median(const char *out, const char *measure, char *isa, size_t isa_size)
{
    char key[64];
    snprintf(key, sizeof key, "{\"measure\":\"%s\",\"isa\":\"", measure);
    const char *p = strstr(out, key);
    if (!p)
        return NAN;
    p += strlen(key);
    snprintf(isa, isa_size, "%.*s", (int)strcspn(p, "\""), p);
    const char *m = strstr(p, "\"median\":");
    double v;
    return m && sscanf(m + 9, "%lf", &v) == 1 ? v : NAN;
}

/* `kvbench bench machine` measures at the kernels' level (the AVX-512 FMA
 * loop where the level has it, vdpbf16ps only at avx512bf16, none below),
 * follows KVBENCH_ISA, and refuses a nonsense buffer size. What it measures
 * is not asserted beyond being a rate: performance is not a unit test; the
 * loops check their own sums against a scalar recurrence on every run. */
Test(generate_cli, bench_machine_measures_at_the_kernel_level)
{
    kv_isa best = kv_isa_detected();
    for (int forced = 0; forced < 2; forced++) {
        if (forced)
            setenv(KV_ISA_ENV, "avx2", 1);
        kv_isa level = forced ? KV_ISA_AVX2 : best;
        tu_result r = tu_kvbench("bench", "machine", "--threads", "2", "--repeats", "2",
                                 "--buffer-mib", "8", "--json", NULL);
        cr_assert_eq(r.status, 0, "%s", r.err);
        char isa[32];
        double fp32 = machine_median(r.out, "fp32", isa, sizeof isa);
        cr_expect_gt(fp32, 0, "%s", r.out);
        cr_expect_str_eq(isa, level >= KV_ISA_AVX512 ? "avx512" : "avx2");
        double bf16 = machine_median(r.out, "bf16", isa, sizeof isa);
        if (level >= KV_ISA_AVX512BF16)
            cr_expect_gt(bf16, 0, "%s", r.out);
        else
            cr_expect(strstr(r.out, "\"measure\":\"bf16\"") && isnan(bf16), "%s", r.out);
        cr_expect_gt(machine_median(r.out, "read", isa, sizeof isa), 0, "%s", r.out);
        cr_expect(strstr(r.err, "read buffer 8 MiB"), "%s", r.err);
        tu_result_free(&r);
    }
    unsetenv(KV_ISA_ENV);
    tu_result r = tu_kvbench("bench", "machine", "--buffer-mib", "0", NULL);
    cr_expect_eq(r.status, 2);
    cr_expect(strstr(r.err, "kvbench: --buffer-mib"), "%s", r.err);
    tu_result_free(&r);
}

/* A decode grows its cache one slot a step. A fork that kept its whole
 * prompt starts full (len + 1 slots), and doubling would then hold twice its
 * tokens for the rest of the answer: growth stays within max(64, cap / 8)
 * slots of what the layer holds, and never copies a slot's contents wrong. */
Test(kvcache, one_slot_a_step_grows_by_an_eighth_not_a_doubling)
{
    kv_error err;
    int prompt = 2048;
    kv_cache *c = kv_cache_new(2, 1, 4, prompt + 1, &err);
    cr_assert_not_null(c, "%s", err.msg);
    for (int l = 0; l < 2; l++) { /* the prompt, and the room for its first token */
        c->layers[l].len = prompt;
        for (int at = 0; at < prompt * 4; at++)
            c->layers[l].k[at] = (float)at;
    }
    for (int step = 0; step < 600; step++) {
        cr_assert_eq(kv_cache_reserve(c, 1, &err), 0, "%s", err.msg);
        for (int l = 0; l < 2; l++) {
            kv_cache_layer *L = &c->layers[l];
            int at = L->len++;
            for (int d = 0; d < 4; d++)
                L->k[(size_t)at * 4 + (size_t)d] = (float)(at * 4 + d);
            int slack = L->len / 8 > 64 ? L->len / 8 : 64;
            cr_assert_leq(L->cap, L->len + slack, "step %d: cap %d for %d slots", step, L->cap,
                          L->len);
        }
    }
    for (int at = 0; at < c->layers[1].len; at++)
        cr_assert_eq(c->layers[1].k[(size_t)at * 4 + 3], (float)(at * 4 + 3));
    kv_cache_free(c);
}

/* Token t's keys and values in the test below: channel d of slot row. */
static float key_of(int t, int d) { return (float)(t * 16 + d); }
static float value_of(int t, int d) { return -(float)(t * 16 + d) - 0.5f; }

/* Every slot of layer 0 holds the keys, values and position of token
 * tokens[slot]. */
static void expect_tokens(const kv_cache *c, const int *tokens, int n, int step)
{
    const kv_cache_layer *l = &c->layers[0];
    cr_assert_eq(l->len, n, "step %d", step);
    int row = kv_cache_row(c);
    for (int s = 0; s < n; s++) {
        cr_assert_eq(kv_cache_pos(c, 0, s, 1), tokens[s], "step %d slot %d", step, s);
        for (int d = 0; d < row; d++) {
            cr_assert_eq(kv_cache_full_row(c, l, KV_KEYS, s)[d], key_of(tokens[s], d),
                         "step %d slot %d", step, s);
            cr_assert_eq(kv_cache_full_row(c, l, KV_VALUES, s)[d], value_of(tokens[s], d),
                         "step %d slot %d", step, s);
        }
    }
}

/* Appends token t to layer 0 (room reserved). */
static void append_token(kv_cache *c, int t)
{
    kv_error err;
    cr_assert_eq(kv_cache_reserve(c, 1, &err), 0, "%s", err.msg);
    kv_cache_layer *l = &c->layers[0];
    int s = l->len++;
    for (int d = 0; d < kv_cache_row(c); d++) {
        kv_cache_full_row(c, l, KV_KEYS, s)[d] = key_of(t, d);
        kv_cache_full_row(c, l, KV_VALUES, s)[d] = value_of(t, d);
    }
    kv_cache_set_pos(c, 0, s, t);
}

/* Decode-time eviction drops one slot a step; an F32 layer moves whichever
 * side of it is shorter (its front up when the slot is near the start).
 * Through hundreds of such steps, near both ends, past the room its
 * blocks keep for a moving front, through growth, a fork and a shrink,
 * every slot keeps its token's keys, values and position. */
Test(kvcache, compaction_in_place_moves_the_shorter_side_and_keeps_every_row)
{
    kv_error err;
    enum { N = 200 };
    kv_cache *c = kv_cache_new(1, 2, 8, N + 1, &err);
    cr_assert_not_null(c, "%s", err.msg);
    int tokens[4 * N], n = 0, next = 0;
    for (; next < N; next++)
        append_token(c, tokens[n++] = next);
    bool front_moved = false;
    uint32_t rng = 12345;
    for (int step = 0; step < 500; step++) {
        if (step == 300) /* growth: rows move to a new block, front and all */
            for (int i = 0; i < 150; i++)
                append_token(c, tokens[n++] = next++);
        append_token(c, tokens[n++] = next++);
        rng = rng * 1664525u + 1013904223u;
        int victim = (int)(rng >> 8) % n, keep[4 * N], k = 0;
        if (step % 3 == 0) /* two at once now and then */
            victim = victim > n - 2 ? n - 2 : victim;
        for (int s = 0; s < n; s++)
            if (s != victim && !(step % 3 == 0 && s == victim + 1))
                keep[k++] = s;
        cr_assert_eq(kv_cache_compact(c, 0, keep, k, &err), 0, "%s", err.msg);
        for (int j = 0; j < k; j++)
            tokens[j] = tokens[keep[j]];
        n = k;
        front_moved = front_moved || c->layers[0].k_front > 0;
        expect_tokens(c, tokens, n, step);
    }
    cr_expect(front_moved, "no compaction moved the front");
    kv_cache *f = kv_cache_fork(c, 0, &err);
    cr_assert_not_null(f, "%s", err.msg);
    expect_tokens(f, tokens, n, -1);
    cr_assert_eq(kv_cache_shrink(c, 1, &err), 0, "%s", err.msg);
    expect_tokens(c, tokens, n, -2);
    kv_cache_free(f);
    kv_cache_free(c);
}
