#include "util/pool.h"

#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

/* How long a thread spins before it gives its core up. An idle worker
 * checks for a new job for IDLE_SPIN_NS before it sleeps: decode issues a
 * job every few tens of microseconds, and a sleeping worker costs a
 * wake-up. A thread waiting for tasks that others hold (a phase's end, the
 * job's last task) spins WAIT_SPIN_NS, then yields on every check. Both are
 * short because the machines kvbench runs on are shared: a peer the OS has
 * descheduled only runs again once a spinning thread lets go of the core,
 * and the scheduler charges spinning to the process's fair share (on a
 * shared 2-core machine, interleaved runs of decode after 512 tokens: waits
 * of 100 us cost about a quarter of its tokens per CPU-second at load 16;
 * idle spins of 10 us did at least as well as 50 us at load 5-13). */
#define IDLE_SPIN_NS 10000
#define WAIT_SPIN_NS 5000

typedef struct job {
    const kv_pool_phase *phases;
    int n_phases;
    int first[KV_POOL_MAX_PHASES + 1]; /* first task of each phase; first[n] = all */
    atomic_int next;                   /* next task to claim, across the phases */
    atomic_int done;                   /* tasks finished */
} job;

struct kv_pool {
    int n_threads;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_uint generation; /* bumped for every job */
    _Atomic(job *) current; /* the running job, NULL between jobs */
    atomic_int busy;        /* workers that may be reading current */
    atomic_int sleepers;
    atomic_int stop;
};

typedef struct worker_arg {
    kv_pool *p;
    int index;
} worker_arg;

static long long now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* A wait loop's pause: spins for WAIT_SPIN_NS from the first call
 * (*since = 0), then yields the core on every call. */
static void spin_pause(long long *since, int *iter)
{
    if (*since < 0) {
        sched_yield();
        return;
    }
    if ((++*iter & 63) == 0) {
        long long t = now_ns();
        if (!*since)
            *since = t;
        else if (t - *since > WAIT_SPIN_NS) {
            *since = -1;
            sched_yield();
            return;
        }
    }
    _mm_pause();
}

/* Waits until at least n tasks of j have finished. */
static void wait_done(job *j, int n)
{
    long long since = 0;
    int iter = 0;
    while (atomic_load_explicit(&j->done, memory_order_acquire) < n)
        spin_pause(&since, &iter);
}

/* Claims and runs tasks until none is left; a task of a later phase waits
 * for the phases before it. Tasks are claimed in order, so every task of an
 * earlier phase is already held by a running thread: the wait ends. */
/* Set while this thread runs a task: a job it starts then runs inline. */
static _Thread_local bool in_task;

static void run_tasks(job *j, int worker)
{
    int t, ph = 0;
    bool outer = in_task;
    in_task = true;
    while ((t = atomic_fetch_add(&j->next, 1)) < j->first[j->n_phases]) {
        while (t >= j->first[ph + 1])
            ph++;
        if (ph > 0)
            wait_done(j, j->first[ph]);
        const kv_pool_phase *f = &j->phases[ph];
        f->fn(f->ctx, t - j->first[ph], worker);
        atomic_fetch_add_explicit(&j->done, 1, memory_order_release);
    }
    in_task = outer;
}

/* Waits until the generation differs from seen (or the pool stops). */
static unsigned wait_for_job(kv_pool *p, unsigned seen)
{
    long long start = now_ns();
    for (int i = 1;; i++) {
        unsigned g = atomic_load(&p->generation);
        if (g != seen || atomic_load(&p->stop))
            return g;
        if ((i & 255) == 0 && now_ns() - start > IDLE_SPIN_NS)
            break;
        _mm_pause();
    }
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->sleepers, 1);
    unsigned g;
    while ((g = atomic_load(&p->generation)) == seen && !atomic_load(&p->stop))
        pthread_cond_wait(&p->cv, &p->mu);
    atomic_fetch_sub(&p->sleepers, 1);
    pthread_mutex_unlock(&p->mu);
    return g;
}

static void *worker_main(void *arg)
{
    worker_arg a = *(worker_arg *)arg;
    free(arg);
    kv_pool *p = a.p;
    unsigned seen = atomic_load(&p->generation);
    for (;;) {
        seen = wait_for_job(p, seen);
        if (atomic_load(&p->stop))
            break;
        /* Announce before looking: the caller clears `current` and then
         * waits for busy == 0, so a job seen here is still alive. */
        atomic_fetch_add(&p->busy, 1);
        job *j = atomic_load(&p->current);
        if (j)
            run_tasks(j, a.index);
        atomic_fetch_sub(&p->busy, 1);
    }
    return NULL;
}

kv_pool *kv_pool_new(int threads, kv_error *err)
{
    kv_pool *p = calloc(1, sizeof *p);
    if (!p) {
        kv_fail(err, "out of memory for the thread pool");
        return NULL;
    }
    p->n_threads = threads > 0 ? threads : 1;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->threads = calloc((size_t)p->n_threads, sizeof *p->threads);
    if (!p->threads) {
        kv_pool_free(p);
        kv_fail(err, "out of memory for the thread pool");
        return NULL;
    }
    for (int i = 1; i < p->n_threads; i++) {
        worker_arg *a = malloc(sizeof *a);
        if (!a || (a->p = p, a->index = i, pthread_create(&p->threads[i], NULL, worker_main, a))) {
            free(a);
            p->n_threads = i; /* the ones started are joined by free */
            kv_pool_free(p);
            kv_fail(err, "cannot start worker thread %d", i);
            return NULL;
        }
    }
    return p;
}

void kv_pool_free(kv_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; p->threads && i < p->n_threads; i++)
        pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->threads);
    free(p);
}

int kv_pool_threads(const kv_pool *p)
{
    return p ? p->n_threads : 1;
}

void kv_pool_run(kv_pool *p, int n_tasks, kv_task_fn fn, void *ctx)
{
    kv_pool_run_phases(p, 1, &(kv_pool_phase){.n_tasks = n_tasks, .fn = fn, .ctx = ctx});
}

void kv_pool_run_phases(kv_pool *p, int n, const kv_pool_phase *phases)
{
    job j = {.phases = phases, .n_phases = n};
    for (int i = 0; i < n; i++)
        j.first[i + 1] = j.first[i] + (phases[i].n_tasks > 0 ? phases[i].n_tasks : 0);
    int total = j.first[n];
    if (total <= 0)
        return;
    if (!p || p->n_threads == 1 || total == 1 || in_task) {
        for (int i = 0; i < n; i++)
            for (int t = 0; t < phases[i].n_tasks; t++)
                phases[i].fn(phases[i].ctx, t, 0);
        return;
    }
    atomic_init(&j.next, 0);
    atomic_init(&j.done, 0);
    atomic_store(&p->current, &j);
    atomic_fetch_add(&p->generation, 1);
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    run_tasks(&j, 0);
    /* Tasks claimed by workers may still run; then no worker may keep a
     * pointer to this stack frame's job. */
    wait_done(&j, total);
    atomic_store(&p->current, NULL);
    long long since = 0;
    int iter = 0;
    while (atomic_load(&p->busy) > 0)
        spin_pause(&since, &iter);
}
