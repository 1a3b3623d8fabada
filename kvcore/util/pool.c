#include "util/pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

/* Spins (checking for a new job) before a worker sleeps: decode issues a
 * job every few microseconds, and a sleeping worker costs a wake-up. */
#define SPIN_ITERS 20000

typedef struct job {
    kv_task_fn fn;
    void *ctx;
    int n_tasks;
    atomic_int next; /* next task to claim */
    atomic_int done; /* tasks finished */
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

static void run_tasks(job *j, int worker)
{
    int t;
    while ((t = atomic_fetch_add(&j->next, 1)) < j->n_tasks) {
        j->fn(j->ctx, t, worker);
        atomic_fetch_add(&j->done, 1);
    }
}

/* Waits until the generation differs from seen (or the pool stops). */
static unsigned wait_for_job(kv_pool *p, unsigned seen)
{
    for (int i = 0; i < SPIN_ITERS; i++) {
        unsigned g = atomic_load(&p->generation);
        if (g != seen || atomic_load(&p->stop))
            return g;
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
    if (n_tasks <= 0)
        return;
    if (!p || p->n_threads == 1 || n_tasks == 1) {
        for (int t = 0; t < n_tasks; t++)
            fn(ctx, t, 0);
        return;
    }
    job j = {.fn = fn, .ctx = ctx, .n_tasks = n_tasks};
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
    while (atomic_load(&j.done) < n_tasks)
        sched_yield();
    atomic_store(&p->current, NULL);
    while (atomic_load(&p->busy) > 0)
        ;
}
