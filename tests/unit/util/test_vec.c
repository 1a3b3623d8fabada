/* kvcore/util/vec.h: growth keeps the elements, doubles from the first
 * capacity, and a request that cannot be met leaves the array as it was. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>

#include "util/vec.h"

Test(vec, appends_keep_every_element_and_capacity_doubles)
{
    uint64_t *v = NULL;
    size_t n = 0, cap = 0;
    size_t caps_seen[32], n_caps = 0;
    for (uint64_t i = 0; i < 5000; i++) {
        size_t before = cap;
        cr_assert_eq(KV_VEC_RESERVE(v, cap, n + 1, 8), 0);
        if (cap != before)
            caps_seen[n_caps++] = cap;
        v[n++] = i * i;
    }
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(v[i], (uint64_t)i * i, "element %zu", i);
    cr_assert_eq(caps_seen[0], 8);
    for (size_t k = 1; k < n_caps; k++)
        cr_assert_eq(caps_seen[k], 2 * caps_seen[k - 1]);
    cr_assert_eq(cap, 8192, "8 doubled to the first power of two >= 5000");
    free(v);
}

Test(vec, a_large_request_jumps_and_a_met_one_does_nothing)
{
    char *s = NULL;
    size_t cap = 0;
    cr_assert_eq(KV_VEC_RESERVE(s, cap, 1000, 64), 0);
    cr_assert_eq(cap, 1024);
    char *before = s;
    cr_assert_eq(KV_VEC_RESERVE(s, cap, 1024, 64), 0);
    cr_assert_eq(s, before);
    cr_assert_eq(cap, 1024);
    free(s);
}

Test(vec, an_impossible_size_fails_and_leaves_the_array)
{
    double *v = NULL;
    size_t cap = 0;
    cr_assert_eq(KV_VEC_RESERVE(v, cap, 4, 4), 0);
    v[3] = 2.5;
    double *before = v;
    cr_assert_lt(KV_VEC_RESERVE(v, cap, SIZE_MAX / 4, 4), 0, "the byte count overflows");
    cr_assert_lt(KV_VEC_RESERVE(v, cap, SIZE_MAX, 4), 0, "the doubling overflows");
    cr_assert_eq(v, before);
    cr_assert_eq(cap, 4);
    cr_assert_eq(v[3], 2.5);
    free(v);
}
