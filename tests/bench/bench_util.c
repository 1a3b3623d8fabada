#include "bench_util.h"

#include <stdlib.h>

#include "util/clock.h"

int bench_parse_list(const char *s, int *out, int max, int pairs, void (*usage)(void))
{
    int n = 0;
    while (*s && n + pairs < max) {
        char *end;
        out[n++] = (int)strtol(s, &end, 10);
        if (pairs) {
            if (*end != 'x')
                usage();
            out[n++] = (int)strtol(end + 1, &end, 10);
        }
        if (*end && *end != ',')
            usage();
        s = *end ? end + 1 : end;
    }
    for (int i = 0; i < n; i++)
        if (out[i] <= 0)
            usage();
    return n;
}

float bench_near_one(void)
{
    return 0.5f + (float)rand() / (float)RAND_MAX;
}

/* The CPU clock is read outside the wall-clock interval: it is a system
 * call, the monotonic clock is not. */
bench_timer bench_start(bool with_cpu)
{
    bench_timer t = {.cpu = with_cpu ? kv_clock_cpu_s() : -1};
    t.wall = kv_clock_s();
    return t;
}

void bench_stop(const bench_timer *t, bench_best *best)
{
    double wall = kv_clock_s() - t->wall;
    best->wall = wall < best->wall ? wall : best->wall;
    if (t->cpu >= 0) {
        double cpu = kv_clock_cpu_s() - t->cpu;
        best->cpu = cpu < best->cpu ? cpu : best->cpu;
    }
}

double bench_gflop(size_t weights, int rows)
{
    return 2.0 * (double)weights * rows / 1e9;
}
