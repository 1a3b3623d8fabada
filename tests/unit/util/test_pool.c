/* kvcore/pool: every task of every job runs exactly once, on a worker index
 * within the pool, whatever the thread count. */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "util/pool.h"

typedef struct counts {
    atomic_int *hits;
    int threads;
    atomic_int bad_worker;
} counts;

static void count(void *ctx, int task, int worker)
{
    counts *c = ctx;
    atomic_fetch_add(&c->hits[task], 1);
    if (worker < 0 || worker >= c->threads)
        atomic_fetch_add(&c->bad_worker, 1);
}

Test(pool, every_task_runs_once)
{
    for (int threads = 1; threads <= 4; threads++) {
        kv_error err;
        kv_pool *p = kv_pool_new(threads, &err);
        cr_assert_not_null(p, "%s", err.msg);
        cr_assert_eq(kv_pool_threads(p), threads);
        for (int job = 0; job < 2000; job++) {
            int n = job % 37; /* 0..36 tasks, jobs back to back */
            atomic_int hits[37];
            for (int i = 0; i < 37; i++)
                atomic_init(&hits[i], 0);
            counts c = {.hits = hits, .threads = threads};
            atomic_init(&c.bad_worker, 0);
            kv_pool_run(p, n, count, &c);
            for (int i = 0; i < 37; i++)
                cr_assert_eq(atomic_load(&hits[i]), i < n ? 1 : 0, "job %d task %d", job, i);
            cr_assert_eq(atomic_load(&c.bad_worker), 0);
        }
        kv_pool_free(p);
    }
}

Test(pool, null_pool_runs_on_the_caller)
{
    atomic_int hits[5];
    for (int i = 0; i < 5; i++)
        atomic_init(&hits[i], 0);
    counts c = {.hits = hits, .threads = 1};
    atomic_init(&c.bad_worker, 0);
    kv_pool_run(NULL, 5, count, &c);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(atomic_load(&hits[i]), 1);
}
