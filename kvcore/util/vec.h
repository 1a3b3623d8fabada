/* Growable arrays: the one place that doubles a buffer's capacity.
 *
 * A growable array is a plain pointer and a size_t capacity (in elements)
 * that the caller keeps beside its count:
 *
 *     T *v = NULL; size_t n = 0, cap = 0;
 *     if (KV_VEC_RESERVE(v, cap, n + 1, 64) < 0)
 *         return kv_fail(err, "out of memory");
 *     v[n++] = x;
 *
 * Capacity doubles from `first`, so n appends cost O(n) copying in all.
 */
#ifndef KV_VEC_H
#define KV_VEC_H

#include <stddef.h>

/* Makes room for `need` elements of `elem` bytes in the array whose pointer
 * is at `array` (a T **), doubling *cap from `first` (when 0) until it is
 * enough. 0, or -1 when out of memory or the size would overflow: then the
 * array and *cap are as they were. */
int kv_vec_reserve(void *array, size_t *cap, size_t need, size_t elem, size_t first);

#define KV_VEC_RESERVE(v, cap, need, first)                                                        \
    kv_vec_reserve(&(v), &(cap), (need), sizeof *(v), (first))

#endif
