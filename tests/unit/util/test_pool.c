/* kvcore/pool: every task of every job runs exactly once, on a worker index
 * within the pool, whatever the thread count. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

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

/* Phases of one job: each task checks that the phase before it has
 * finished every task (its counter is full) and that the phase after it has
 * not started. */
typedef struct phased {
    atomic_int ran[KV_POOL_MAX_PHASES];
    int n_tasks[KV_POOL_MAX_PHASES];
    int n_phases;
    atomic_int out_of_order;
} phased;

typedef struct phase_ctx {
    phased *s;
    int phase;
} phase_ctx;

static void phase_task(void *ctx, int task, int worker)
{
    (void)task;
    (void)worker;
    const phase_ctx *c = ctx;
    phased *s = c->s;
    int k = c->phase;
    for (int before = 0; before < k; before++)
        if (atomic_load(&s->ran[before]) != s->n_tasks[before])
            atomic_fetch_add(&s->out_of_order, 1);
    for (int after = k + 1; after < s->n_phases; after++)
        if (atomic_load(&s->ran[after]) != 0)
            atomic_fetch_add(&s->out_of_order, 1);
    atomic_fetch_add(&s->ran[k], 1);
}

Test(pool, phases_run_in_order)
{
    for (int threads = 1; threads <= 4; threads++) {
        kv_error err;
        kv_pool *p = kv_pool_new(threads, &err);
        cr_assert_not_null(p, "%s", err.msg);
        for (int job = 0; job < 500; job++) {
            phased s = {.n_phases = 1 + job % KV_POOL_MAX_PHASES};
            atomic_init(&s.out_of_order, 0);
            phase_ctx ctx[KV_POOL_MAX_PHASES];
            kv_pool_phase ph[KV_POOL_MAX_PHASES];
            for (int k = 0; k < s.n_phases; k++) {
                atomic_init(&s.ran[k], 0);
                s.n_tasks[k] = (job * 7 + k * 3) % 9; /* 0..8 tasks, some phases empty */
                ctx[k] = (phase_ctx){.s = &s, .phase = k};
                ph[k] = (kv_pool_phase){.n_tasks = s.n_tasks[k], .fn = phase_task, .ctx = &ctx[k]};
            }
            kv_pool_run_phases(p, s.n_phases, ph);
            for (int k = 0; k < s.n_phases; k++)
                cr_assert_eq(atomic_load(&s.ran[k]), s.n_tasks[k], "job %d phase %d", job, k);
            cr_assert_eq(atomic_load(&s.out_of_order), 0, "job %d: a phase overlapped another",
                         job);
        }
        kv_pool_free(p);
    }
}

/* A job started inside a task runs on that task's thread, as worker 0, and
 * every nested task runs once: nested jobs on the same pool and on another
 * pool, while the outer job's tasks run on several threads. */
typedef struct nested {
    kv_pool *outer, *other;
    atomic_int hits[8][3];
    atomic_int wrong_thread, wrong_worker;
} nested;

typedef struct inner_ctx {
    nested *n;
    int outer_task;
    pthread_t self;
} inner_ctx;

/* Long enough (50 us) that an idle thread of a pool would claim some. */
static void busy_wait(void)
{
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do
        clock_gettime(CLOCK_MONOTONIC, &b);
    while ((b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec) < 50000);
}

static void inner_task(void *ctx, int task, int worker)
{
    inner_ctx *c = ctx;
    busy_wait();
    atomic_fetch_add(&c->n->hits[c->outer_task][task], 1);
    if (!pthread_equal(pthread_self(), c->self))
        atomic_fetch_add(&c->n->wrong_thread, 1);
    if (worker != 0)
        atomic_fetch_add(&c->n->wrong_worker, 1);
}

/* Two nested jobs: one on this pool or the other, then two phases on this
 * pool; each counts tasks 0..2 once, so every count ends at 2. */
/* inner_task for tasks 1..2 of a second phase. */
static void shifted_task(void *ctx, int task, int worker)
{
    inner_task(ctx, task + 1, worker);
}

static void outer_task(void *ctx, int task, int worker)
{
    (void)worker;
    nested *n = ctx;
    inner_ctx c = {.n = n, .outer_task = task, .self = pthread_self()};
    kv_pool_run(task % 2 ? n->other : n->outer, 3, inner_task, &c);
    kv_pool_phase ph[2] = {{1, inner_task, &c}, {2, shifted_task, &c}};
    kv_pool_run_phases(n->outer, 2, ph);
}

Test(pool, a_job_inside_a_task_runs_on_its_thread, .timeout = 30)
{
    kv_error err;
    nested *n = calloc(1, sizeof *n);
    n->outer = kv_pool_new(2, &err);
    n->other = kv_pool_new(2, &err);
    cr_assert(n->outer && n->other, "%s", err.msg);
    for (int round = 0; round < 50; round++) {
        for (int i = 0; i < 8; i++)
            for (int t = 0; t < 3; t++)
                atomic_init(&n->hits[i][t], 0);
        kv_pool_run(n->outer, 8, outer_task, n);
        for (int i = 0; i < 8; i++)
            for (int t = 0; t < 3; t++)
                cr_assert_eq(atomic_load(&n->hits[i][t]), 2, "round %d task %d.%d", round, i, t);
    }
    cr_assert_eq(atomic_load(&n->wrong_thread), 0, "a nested task ran on another thread");
    cr_assert_eq(atomic_load(&n->wrong_worker), 0, "a nested task was not worker 0");
    kv_pool_free(n->outer);
    kv_pool_free(n->other);
    free(n);
}
