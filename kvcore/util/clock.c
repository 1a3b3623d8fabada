#include "util/clock.h"

#include <time.h>

static double seconds(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double kv_clock_s(void)
{
    return seconds(CLOCK_MONOTONIC);
}

double kv_clock_cpu_s(void)
{
    return seconds(CLOCK_PROCESS_CPUTIME_ID);
}
