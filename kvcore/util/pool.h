/* pool: the engine's worker threads.
 *
 * kv_pool_run(p, n, fn, ctx) calls fn(ctx, task, worker) for every task in
 * [0, n) and returns when all are done. Tasks are claimed one at a time from
 * a shared counter by the caller and by whichever workers are awake, so a
 * thread the OS has not scheduled yet (the machines kvbench runs on are
 * shared) does not hold the others up: the tasks it would have had are taken
 * by the threads that run. With OpenMP's fixed partition and barrier, one
 * late thread delayed every parallel loop by a scheduler time slice.
 *
 * kv_pool_run_phases runs several such loops, one after another, as one
 * job: a task of a phase starts only once every task of the phase before
 * has finished. Decode issues a parallel loop every few microseconds per
 * layer; as phases of one job they cost a wait on a counter each instead of
 * a wake-up and a join, and a phase of one task is the serial step between
 * two loops (it runs on whichever thread gets there first).
 *
 * worker is in [0, threads): 0 is the caller. Per-worker scratch can be
 * indexed by it. A pool runs one job at a time (calls from one thread).
 *
 * A job started from inside a task (of any pool) runs on that task's thread
 * alone, as worker 0: tasks may call code that parallelises itself (a row's
 * eviction hook, run beside the other rows', ranking on the eviction pool)
 * without two jobs claiming one pool.
 */
#ifndef KV_POOL_H
#define KV_POOL_H

#include "util/error.h"

typedef struct kv_pool kv_pool;

typedef void (*kv_task_fn)(void *ctx, int task, int worker);

/* One parallel loop of a phased job: fn(ctx, t, worker) for t < n_tasks. */
typedef struct kv_pool_phase {
    int n_tasks;
    kv_task_fn fn;
    void *ctx;
} kv_pool_phase;

/* The most phases one job may have. */
#define KV_POOL_MAX_PHASES 16

/* A pool of `threads` threads in all (the caller counts as one). */
kv_pool *kv_pool_new(int threads, kv_error *err);
void kv_pool_free(kv_pool *p);

int kv_pool_threads(const kv_pool *p);

void kv_pool_run(kv_pool *p, int n_tasks, kv_task_fn fn, void *ctx);

/* The n phases (1 <= n <= KV_POOL_MAX_PHASES) in order, as one job; p may
 * be NULL (the calling thread runs them all). */
void kv_pool_run_phases(kv_pool *p, int n, const kv_pool_phase *phases);

#endif
