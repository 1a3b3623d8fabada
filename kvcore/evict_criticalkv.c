/* CriticalKV refined selection (EVICTION.md §2.8, decision 5): among the
 * candidates the coarse top-k left, keep those whose attention score times
 * the size of their contribution to the attention output is largest:
 * (score + 1e-4) * vnorm_t, vnorm_t = sum over query heads h of
 * ||V_{kv(h),t} . Wo_h^T||_1 with Wo_h the head's columns of o_proj. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>

#include "evict_impl.h"
#include "pool.h"

enum { CHUNK = 128 }; /* slots per matrix product: bounds the scratch */

typedef struct vnorm_job {
    const kv_evict_model *m;
    const float *w, *v;
    int n;
    int h0, h1; /* query heads [h0, h1) */
    double *out;
    float *prod; /* [workers][CHUNK][hidden] */
} vnorm_job;

/* One chunk of slots: out[t] = sum_h ||V_kv(h),t . Wo_h^T||_1. */
static void vnorm_chunk(void *ctx, int task, int worker)
{
    const vnorm_job *j = ctx;
    const kv_evict_model *m = j->m;
    int H = m->n_heads, D = m->head_dim, hid = m->hidden, row = m->n_kv_heads * D;
    int per_kv = H / m->n_kv_heads, t0 = task * CHUNK;
    int rows = j->n - t0 < CHUNK ? j->n - t0 : CHUNK;
    float *prod = j->prod + (size_t)worker * CHUNK * (size_t)hid;
    for (int r = 0; r < rows; r++)
        j->out[t0 + r] = 0.0;
    for (int h = j->h0; h < j->h1; h++) {
        /* prod[rows][hid] = V_kv(h)[rows][D] . (Wo[:, h*D:(h+1)*D])^T */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, hid, D, 1.0f,
                    j->v + (size_t)t0 * row + (size_t)(h / per_kv) * D, row, j->w + (size_t)h * D,
                    H * D, 0.0f, prod, hid);
        for (int r = 0; r < rows; r++) {
            double l1 = 0.0;
            for (int i = 0; i < hid; i++)
                l1 += fabs((double)prod[(size_t)r * hid + i]);
            j->out[t0 + r] += l1;
        }
    }
}

int kv_criticalkv_vnorm(const kv_evict_model *m, int layer, int kv_head, const float *v, int n,
                        double *out, kv_error *err)
{
    int tasks = (n + CHUNK - 1) / CHUNK;
    int workers = m->pool ? kv_pool_threads(m->pool) : 1;
    int per_kv = m->n_heads / m->n_kv_heads;
    vnorm_job j = {m, m->o_proj[layer], v, n, 0, m->n_heads, out, NULL};
    if (kv_head >= 0) {
        j.h0 = kv_head * per_kv;
        j.h1 = j.h0 + per_kv;
    }
    j.prod = malloc((size_t)workers * CHUNK * (size_t)m->hidden * sizeof *j.prod);
    if (!j.prod)
        return kv_fail(err, "CriticalKV: out of memory");
    if (m->pool && tasks > 1)
        kv_pool_run(m->pool, tasks, vnorm_chunk, &j);
    else
        for (int t = 0; t < tasks; t++)
            vnorm_chunk(&j, t, 0);
    free(j.prod);
    return 0;
}

static int criticalkv_pick(const kv_refine_call *c, int *picks, kv_error *err)
{
    int G = c->unit, n_units = c->n_tokens / G;
    double *adj = malloc((size_t)(n_units + 1) * sizeof *adj);
    int *order = malloc((size_t)(n_units + 1) * sizeof *order);
    if (!adj || !order) {
        free(adj);
        free(order);
        return kv_fail(err, "CriticalKV: out of memory");
    }
    for (int u = 0; u < n_units; u++) {
        double sum = 0.0;
        for (int r = 0; r < G; r++) {
            int t = u * G + r;
            sum += (c->scores[t] + 1e-4) * c->vnorm[c->first_slot + t]; /* -inf stays */
        }
        adj[u] = sum;
    }
    kv_evict_top(adj, n_units, c->n_pick, order);
    for (int i = 0; i < c->n_pick; i++)
        picks[i] = order[i];
    free(adj);
    free(order);
    return 0;
}

const kv_refiner kv_refiner_criticalkv = {
    .name = "criticalkv",
    .needs_vnorm = true,
    .pick = criticalkv_pick,
};
