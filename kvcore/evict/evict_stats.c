/* Statistics requests: what a scorer asks the forward pass to measure
 * (column sums, window sums, query moments), merged over the configs of
 * a batch so that one forward serves them all. */
#include "evict/evict_impl.h"

const double *kv_attn_stats_window(const kv_attn_stats_request *req, const kv_attn_stats *st, int w)
{
    for (int i = 0; i < req->n_windows; i++)
        if (req->windows[i] == w)
            return st->win_sums[i];
    return NULL;
}

int kv_attn_stats_request_window(kv_attn_stats_request *req, int w)
{
    for (int i = 0; i < req->n_windows; i++)
        if (req->windows[i] == w)
            return 0;
    if (req->n_windows >= KV_MAX_WINDOWS)
        return -1;
    req->windows[req->n_windows++] = w;
    return 0;
}

/* The query moments two requests need: from the lower first row, with the
 * rows one by one up to the higher. */
static void merge_q_moments(kv_attn_stats_request *dst, const kv_attn_stats_request *src)
{
    if (!src->q_moments)
        return;
    if (!dst->q_moments) {
        dst->q_moments = true;
        dst->q_from = src->q_from;
        dst->q_rows = src->q_rows;
        return;
    }
    int lo = dst->q_from < src->q_from ? dst->q_from : src->q_from;
    int hi_d = dst->q_from + dst->q_rows, hi_s = src->q_from + src->q_rows;
    dst->q_from = lo;
    dst->q_rows = (hi_d > hi_s ? hi_d : hi_s) - lo;
}

int kv_attn_stats_request_merge(kv_attn_stats_request *dst, const kv_attn_stats_request *src)
{
    dst->col_sums = dst->col_sums || src->col_sums;
    merge_q_moments(dst, src);
    for (int w = 0; w < src->n_windows; w++)
        if (kv_attn_stats_request_window(dst, src->windows[w]) != 0)
            return -1;
    return 0;
}
