/* kvbench bench tokenizer: how long a tokenizer takes to load, and how fast
 * it encodes and decodes a file, on one thread. Each phase repeats for a
 * while and reports its best run, the figure least disturbed by other work
 * on the machine. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/bench.h"
#include "util/clock.h"
#include "util/file.h"
#include "tokenizer/tokenizer.h"

typedef struct timing {
    double best, total;
    int runs;
} timing;

/* One more run of dt seconds. */
static void timing_add(timing *tm, double dt)
{
    tm->best = dt < tm->best ? dt : tm->best;
    tm->total += dt;
    tm->runs++;
}

/* Median load time over 5 loads (a load allocates much; the median is
 * steadier than the best), wall clock and CPU. */
static int time_load(const char *model, double *median, double *cpu_median)
{
    double t[5], c[5];
    for (int i = 0; i < 5; i++) {
        kv_error err;
        double t0 = kv_clock_s(), c0 = kv_clock_cpu_s();
        kv_tokenizer *tok = kv_tokenizer_load(model, &err);
        t[i] = kv_clock_s() - t0;
        c[i] = kv_clock_cpu_s() - c0;
        if (!tok) {
            kb_error("%s", err.msg);
            return -1;
        }
        kv_tokenizer_free(tok);
    }
    *median = kb_median(t, 5);
    *cpu_median = kb_median(c, 5);
    return 0;
}

static int time_encode(const kv_tokenizer *t, const char *text, size_t len, double seconds,
                       timing *tm, size_t *n_tokens)
{
    *tm = (timing){1e30, 0, 0};
    while (tm->runs < 3 || tm->total < seconds) {
        int32_t *ids;
        kv_error err;
        double t0 = kv_clock_s();
        int rc = kv_tokenizer_encode(t, text, len, &ids, n_tokens, &err);
        double dt = kv_clock_s() - t0;
        free(ids);
        if (rc != 0) {
            kb_error("%s", err.msg);
            return -1;
        }
        timing_add(tm, dt);
    }
    return 0;
}

static int time_decode(const kv_tokenizer *t, const char *text, size_t len, double seconds,
                       timing *tm)
{
    int32_t *ids;
    size_t n;
    kv_error err;
    if (kv_tokenizer_encode(t, text, len, &ids, &n, &err) != 0) {
        kb_error("%s", err.msg);
        return -1;
    }
    *tm = (timing){1e30, 0, 0};
    while (tm->runs < 3 || tm->total < seconds) {
        double t0 = kv_clock_s();
        char *s = kv_tokenizer_decode(t, ids, n, false);
        double dt = kv_clock_s() - t0;
        if (!s) {
            free(ids);
            kb_error("bench tokenizer: out of memory");
            return -1;
        }
        free(s);
        timing_add(tm, dt);
    }
    free(ids);
    return 0;
}

static int run(const kb_args *a)
{
    const char *model = kb_arg(a, "model"), *file = kb_arg(a, "file");
    if (!model || !file) {
        kb_error("bench tokenizer: --model DIR and --file F are required");
        return KB_EXIT_USAGE;
    }
    double seconds = 2;
    if (kb_arg_double(a, "seconds", 0, 3600, &seconds) != 0)
        return KB_EXIT_USAGE;
    char *text;
    size_t len;
    kv_error err;
    if (kv_file_read(file, &text, &len, &err) != 0) {
        kb_error("%s", err.msg);
        return KB_EXIT_FAIL;
    }
    double load, load_cpu;
    kv_tokenizer *t = NULL;
    timing enc, dec;
    size_t n = 0;
    int rc = time_load(model, &load, &load_cpu);
    if (rc == 0 && !(t = kv_tokenizer_load(model, &err))) {
        kb_error("%s", err.msg);
        rc = -1;
    }
    if (rc == 0)
        rc = time_encode(t, text, len, seconds, &enc, &n);
    if (rc == 0)
        rc = time_decode(t, text, len, seconds, &dec);
    kv_tokenizer_free(t);
    free(text);
    if (rc != 0)
        return KB_EXIT_FAIL;
    double mib = (double)len / (1024.0 * 1024.0);
    if (kb_flag(a, "json")) {
        printf("{\"bench\": \"tokenizer\", \"bytes\": %zu, \"tokens\": %zu, \"load_s\": %.4f, "
               "\"load_cpu_s\": %.4f, "
               "\"encode_tokens_per_s\": %.0f, \"encode_mib_per_s\": %.3f, "
               "\"decode_tokens_per_s\": %.0f, \"threads\": 1}\n",
               len, n, load, load_cpu, (double)n / enc.best, mib / enc.best, (double)n / dec.best);
        return KB_EXIT_OK;
    }
    printf("tokenizer  %s\n", model);
    printf("file       %s: %.2f MiB, %zu tokens (%.2f bytes/token)\n", file, mib, n,
           n ? (double)len / (double)n : 0.0);
    printf("load       %.3f s, %.3f s of CPU (medians of 5)\n", load, load_cpu);
    printf("encode     %.0f tokens/s, %.2f MiB/s (best of %d runs, one thread)\n",
           (double)n / enc.best, mib / enc.best, enc.runs);
    printf("decode     %.0f tokens/s (best of %d runs, one thread)\n", (double)n / dec.best,
           dec.runs);
    return KB_EXIT_OK;
}

static const kb_option options[] = {
    {"model", "DIR", "model folder (its tokenizer)"},
    {"file", "F", "the text to encode (UTF-8)"},
    {"seconds", "S", "measure each phase for at least S seconds (default 2)"},
    {"json", NULL, "print the measurements as one JSON line"},
    {NULL, NULL, NULL},
};

const kb_command kb_bench_tokenizer_cmd = {
    .name = "bench tokenizer",
    .summary = "load time, encode and decode speed of --model's tokenizer on --file",
    .usage = "kvbench bench tokenizer --model DIR --file F [options]",
    .description = "Load time (median of 5, wall and CPU), then encode and decode tokens/s of "
                   "F on one thread (the best run of each phase).",
    .options = options,
    .run = run,
};
