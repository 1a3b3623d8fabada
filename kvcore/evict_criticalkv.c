/* CriticalKV refined selection (EVICTION.md §2.8, decision 5): among the
 * candidates the coarse top-k left, keep those whose attention score times
 * the size of their contribution to the attention output is largest:
 * (score + 1e-4) * vnorm_t, vnorm_t = sum over query heads h of
 * ||V_{kv(h),t} . Wo_h^T||_1 with Wo_h the head's columns of o_proj. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>

#include "evict_impl.h"

enum { CHUNK = 256 }; /* slots per matrix product: bounds the scratch */

int kv_criticalkv_vnorm(const kv_evict_model *m, int layer, const float *v, int n, double *out,
                        kv_error *err)
{
    int H = m->n_heads, D = m->head_dim, hid = m->hidden, row = m->n_kv_heads * D;
    int per_kv = H / m->n_kv_heads;
    const float *w = m->o_proj[layer];
    float *prod = malloc((size_t)CHUNK * (size_t)hid * sizeof *prod);
    if (!prod)
        return kv_fail(err, "CriticalKV: out of memory");
    for (int t = 0; t < n; t++)
        out[t] = 0.0;
    for (int t0 = 0; t0 < n; t0 += CHUNK) {
        int rows = n - t0 < CHUNK ? n - t0 : CHUNK;
        for (int h = 0; h < H; h++) {
            /* prod[rows][hid] = V_kv(h)[rows][D] . (Wo[:, h*D:(h+1)*D])^T */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, hid, D, 1.0f,
                        v + (size_t)t0 * row + (size_t)(h / per_kv) * D, row, w + (size_t)h * D,
                        H * D, 0.0f, prod, hid);
            for (int r = 0; r < rows; r++) {
                double l1 = 0.0;
                for (int i = 0; i < hid; i++)
                    l1 += fabs((double)prod[(size_t)r * hid + i]);
                out[t0 + r] += l1;
            }
        }
    }
    free(prod);
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
