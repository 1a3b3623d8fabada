/* Attention statistics: the only coupling between the model and eviction.
 *
 * When asked, each layer's attention reports the post-softmax probabilities
 * it computed, reduced the way eviction policies consume them: per query
 * head, the column sums over all query rows of the call, and over the last W
 * query rows for each requested window W (SnapKV's observation window). In a
 * decode step (one query row) both are that single row.
 *
 * Columns are cache slots after this call's tokens were appended (n_keys =
 * the layer's cache length during the attention). The caller owns the
 * buffers; the forward writes them. Sums are double: eviction ranks tokens
 * by them, and near-ties must not flip with summation order.
 */
#ifndef KV_ATTN_STATS_H
#define KV_ATTN_STATS_H

#include <stdbool.h>

#define KV_MAX_WINDOWS 8

typedef struct kv_attn_stats_request {
    bool col_sums;                  /* sums over all query rows of the call */
    int n_windows;                  /* distinct window sizes, each > 0 */
    int windows[KV_MAX_WINDOWS];    /* sums over the last windows[i] rows */
    /* The queries themselves as the model projects them (after q_norm,
     * before RoPE), for ExpectedAttention: their sum and sum of outer
     * products over the query rows q_from.. of the call, and the rows
     * q_from .. q_from + q_rows - 1 one by one, so that a policy that skips
     * more rows (a larger start area) subtracts them. Filled by
     * kv_model_forward; the batched decode step leaves them zero. */
    bool q_moments;
    int q_from, q_rows;
    /* Rows of the same prompt that earlier forwards fed into these very
     * buffers: the forward adds to their sums instead of starting afresh
     * (q_from counts from the prompt's first row). A prompt fed in two
     * calls, context then question, so gets the statistics of one call
     * whose windows end with the second. 0: a prompt of its own. */
    int rows_before;
} kv_attn_stats_request;

typedef struct kv_attn_stats {
    int n_heads;                    /* query heads */
    int n_keys;                     /* columns: cache slots during the attention */
    int cap_keys;                   /* columns the buffers have room for (kv_model_stats_renew;
                                       0: exactly n_keys) */
    double *col_sums;               /* [n_heads][n_keys], when requested */
    double *win_sums[KV_MAX_WINDOWS];/* [n_heads][n_keys] per requested window */
    /* q_moments: */
    int head_dim;
    int q_count;                    /* rows summed: those from q_from on */
    double *q_sum;                  /* [n_heads][head_dim] */
    double *q_outer;                /* [n_heads][head_dim][head_dim], upper triangle (j >= i) */
    float *q_first;                 /* [q_rows][n_heads][head_dim], rows past the call zero */
} kv_attn_stats;

/* Whether a request asks for anything at all. */
static inline bool kv_attn_stats_wanted(const kv_attn_stats_request *r)
{
    return r && (r->col_sums || r->n_windows > 0 || r->q_moments);
}

/* A prompt fed in two forwards, n_tail rows in the second, whose statistics
 * must be those of `whole` (the request of one forward):
 *   head  what the first forward collects: the same, each window W longer
 *         than the tail as its first W - n_tail rows;
 *   tail  `whole` adjusted for the second forward (rows_before; its query
 *         rows are those the first one kept);
 *   carry copies the first forward's sums into the second's buffers
 *         (kv_model_stats_new, [n_layers]), which then go on from them.
 * Column sums then add every row in the order one forward would. */
void kv_attn_stats_request_head(const kv_attn_stats_request *whole, int n_tail,
                                kv_attn_stats_request *head);
void kv_attn_stats_request_tail(kv_attn_stats_request *whole, const kv_attn_stats_request *head,
                                int rows_before);
void kv_attn_stats_carry(const kv_attn_stats *head, const kv_attn_stats_request *head_req,
                         kv_attn_stats *tail, const kv_attn_stats_request *tail_req, int n_tail,
                         int n_layers);

#endif
