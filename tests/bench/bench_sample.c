/* Loading throughput of the LongBench sample loader (parse + validate), one core.
 *
 *   bench_sample [FILE.jsonl...]
 *
 * Without files it writes a LongBench-like file to $TMPDIR first: 64 records
 * of 2 MB contexts in English and Chinese with the escapes real files have
 * (\n, \", \uXXXX as in data.zip's ensure_ascii=False lines: raw UTF-8). Each
 * file is read 3 times; the best pass is reported in MB/s of CPU time of the
 * loading thread (user + system), so that a busy machine does not lower the
 * number, and of wall time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "longbench/sample.h"

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static char *make_file(void)
{
    const char *tmp = getenv("TMPDIR");
    char *path = NULL;
    if (asprintf(&path, "%s/kvb-bench-XXXXXX", tmp ? tmp : "/tmp") < 0)
        abort();
    int fd = mkstemp(path);
    FILE *f = fdopen(fd, "wb");
    const char *en = "The committee met on Tuesday and \\\"agreed\\\" to the budget. NEWLINE_CHAR ";
    const char *zh = "北岬角的灯塔于1921年被漆成红白两色，灯光在20海里外可见。\\n";
    for (int r = 0; r < 64; r++) {
        fprintf(f, "{\"input\": \"What did the committee agree to?\", \"context\": \"");
        const char *piece = r % 2 ? zh : en;
        size_t n = strlen(piece);
        for (size_t w = 0; w < (2u << 20); w += n)
            fputs(piece, f);
        fprintf(f,
                "\", \"answers\": [\"the budget\"], \"length\": %d, \"dataset\": \"qasper\", "
                "\"language\": \"en\", \"all_classes\": null, \"_id\": "
                "\"%048d\"}\n",
                r * 1000, r);
    }
    fclose(f);
    return path;
}

/* Returns the thread CPU seconds of one pass; *wall receives the wall seconds. */
static double one_pass(const char *path, long *records, long *bytes, double *wall)
{
    kv_error err;
    double w0 = clock_s(CLOCK_MONOTONIC), t0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
    lb_loader *l = lb_loader_open(path, NULL, &err);
    if (!l) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
    lb_sample s;
    int rc;
    *records = 0;
    *bytes = 0;
    while ((rc = lb_loader_next(l, &s, &err)) == 1) {
        (*records)++;
        *bytes += (long)(s.context.n + s.input.n);
        lb_sample_free(&s);
    }
    lb_loader_close(l);
    if (rc < 0) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
    *wall = clock_s(CLOCK_MONOTONIC) - w0;
    return clock_s(CLOCK_THREAD_CPUTIME_ID) - t0;
}

int main(int argc, char **argv)
{
    char *made = argc < 2 ? make_file() : NULL;
    int n = argc < 2 ? 1 : argc - 1;
    for (int i = 0; i < n; i++) {
        const char *path = made ? made : argv[i + 1];
        FILE *f = fopen(path, "rb");
        fseek(f, 0, SEEK_END);
        double mb = (double)ftell(f) / 1e6;
        fclose(f);
        double best = 1e30, best_wall = 1e30;
        long records = 0, bytes = 0;
        for (int pass = 0; pass < 3; pass++) {
            double wall, t = one_pass(path, &records, &bytes, &wall);
            best = t < best ? t : best;
            best_wall = wall < best_wall ? wall : best_wall;
        }
        printf("%s: %ld records, %.1f MB: %.0f MB/s of CPU time (%.3f s), %.0f MB/s wall\n",
               made ? "generated" : path, records, mb, mb / best, best, mb / best_wall);
    }
    if (made) {
        unlink(made);
        free(made);
    }
    return 0;
}
