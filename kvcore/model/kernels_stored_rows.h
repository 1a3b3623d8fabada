/* kernels_stored_rows: how kv_dot_stored cuts its query vectors and rows
 * into tiles, the same at every vector width. Included by kernels_stored.c
 * and kernels_stored_avx512.c once each has defined, for its own vectors,
 *   dot_tile(p, q, qs, NQ, x, xs, NX, ahead, n, out, os, e): NQ query
 *     vectors against NX rows (kernels.h's kv_dot_stored for one tile, or
 *     with e kv_dot_stored_groups), asking for the rows `ahead` bytes on as
 *     it reads them (kv_stored_ask);
 *   DOT_ROWS_4, DOT_ROWS_2, DOT_ROWS_1: the rows of a tile of four, two and
 *     one query vectors (NQ NX accumulators, as many as its registers hold).
 * No include guard: each file compiles its own copy. */

/* The nx rows against NQ query vectors in tiles of NX rows, the rest one
 * by one; the nx rows after them are asked for on the way. */
static inline __attribute__((always_inline)) void dot_rows(const kv_precision p, const float *q,
                                                           size_t qs, const int NQ, const int NX,
                                                           const uint8_t *x, size_t xs, int nx,
                                                           int n, float *out, size_t os,
                                                           const kv_stored_groups *e)
{
    int t = 0;
    size_t ahead = (size_t)nx * xs;
    kv_stored_groups et = e ? *e : (kv_stored_groups){0}; /* the tile's rows' groups */
    for (; t + NX <= nx; t += NX) {
        if (e)
            et.g = e->g + (size_t)t * e->stride;
        dot_tile(p, q, qs, NQ, x + (size_t)t * xs, xs, NX, ahead, n, out + t, os, e ? &et : NULL);
    }
    for (; t < nx; t++) {
        if (e)
            et.g = e->g + (size_t)t * e->stride;
        dot_tile(p, q, qs, NQ, x + (size_t)t * xs, xs, 1, ahead, n, out + t, os, e ? &et : NULL);
    }
}

/* kv_dot_stored (e NULL) or kv_dot_stored_groups at a constant p: the
 * query vectors four, two or one at a time. */
static inline __attribute__((always_inline)) void dot_p(const kv_precision p, const float *q,
                                                        size_t qs, int nq, const uint8_t *x,
                                                        size_t xs, int nx, int n,
                                                        const kv_stored_groups *e, float *out,
                                                        size_t os)
{
    for (int i = 0; i < nq;) {
        int c = nq - i >= 4 ? 4 : nq - i >= 2 ? 2 : 1;
        const float *qi = q + (size_t)i * qs;
        float *oi = out + (size_t)i * os;
        kv_stored_groups ei = e ? *e : (kv_stored_groups){0}; /* query vectors i on */
        ei.qsum = e ? e->qsum + i : NULL;
        if (c == 4)
            dot_rows(p, qi, qs, 4, DOT_ROWS_4, x, xs, nx, n, oi, os, e ? &ei : NULL);
        else if (c == 2)
            dot_rows(p, qi, qs, 2, DOT_ROWS_2, x, xs, nx, n, oi, os, e ? &ei : NULL);
        else
            dot_rows(p, qi, qs, 1, DOT_ROWS_1, x, xs, nx, n, oi, os, e ? &ei : NULL);
        i += c;
    }
}
