/* One prompt's statistics gathered over two forwards (attn_stats.h,
 * rows_before): the context, then the question. */
#include "model/attn_stats.h"

#include <string.h>

void kv_attn_stats_request_head(const kv_attn_stats_request *whole, int n_tail,
                                kv_attn_stats_request *head)
{
    *head = *whole;
    head->n_windows = 0;
    for (int w = 0; w < whole->n_windows; w++)
        if (whole->windows[w] > n_tail) /* the rest of the window is in the tail */
            head->windows[head->n_windows++] = whole->windows[w] - n_tail;
}

void kv_attn_stats_request_tail(kv_attn_stats_request *whole, const kv_attn_stats_request *head,
                                int rows_before)
{
    whole->rows_before = rows_before;
    if (whole->q_moments) { /* the query rows the first forward kept one by one */
        whole->q_from = head->q_from;
        whole->q_rows = head->q_rows;
    }
}

static int window_index(const kv_attn_stats_request *r, int w)
{
    for (int i = 0; i < r->n_windows; i++)
        if (r->windows[i] == w)
            return i;
    return -1;
}

/* src [heads][src_keys] into the first src_keys columns of dst [heads][dst_keys]. */
static void copy_columns(double *dst, int dst_keys, const double *src, int src_keys, int heads)
{
    for (int h = 0; h < heads; h++)
        memcpy(dst + (size_t)h * (size_t)dst_keys, src + (size_t)h * (size_t)src_keys,
               (size_t)src_keys * sizeof *dst);
}

void kv_attn_stats_carry(const kv_attn_stats *head, const kv_attn_stats_request *head_req,
                         kv_attn_stats *tail, const kv_attn_stats_request *tail_req, int n_tail,
                         int n_layers)
{
    for (int l = 0; l < n_layers; l++) {
        const kv_attn_stats *a = &head[l];
        kv_attn_stats *b = &tail[l];
        if (tail_req->col_sums)
            copy_columns(b->col_sums, b->n_keys, a->col_sums, a->n_keys, a->n_heads);
        for (int w = 0; w < tail_req->n_windows; w++) {
            size_t cells = (size_t)b->n_heads * (size_t)b->n_keys;
            memset(b->win_sums[w], 0, cells * sizeof(double));
            int from = tail_req->windows[w] > n_tail
                           ? window_index(head_req, tail_req->windows[w] - n_tail)
                           : -1;
            if (from >= 0)
                copy_columns(b->win_sums[w], b->n_keys, a->win_sums[from], a->n_keys, a->n_heads);
        }
        if (tail_req->q_moments) {
            size_t hd = (size_t)a->n_heads * (size_t)a->head_dim;
            memcpy(b->q_sum, a->q_sum, hd * sizeof(double));
            memcpy(b->q_outer, a->q_outer, hd * (size_t)a->head_dim * sizeof(double));
            memcpy(b->q_first, a->q_first, hd * (size_t)tail_req->q_rows * sizeof(float));
            b->q_count = a->q_count;
        }
    }
}
