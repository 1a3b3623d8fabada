/* AdaKV's head-adaptive choice (head_budget "adaptive", docs/eviction.md):
 * the KV heads of a layer share one budget of intermediate tokens instead
 * of each keeping the same number. */
#include <stdlib.h>

#include "evict/evict_impl.h"

int kv_adaptive_pick(const double *score, const int *head, int n, int n_heads, int n_safe, int k,
                     char *take, kv_error *err)
{
    int *idx = malloc((size_t)(n > 0 ? n : 1) * sizeof *idx);
    if (!idx)
        return kv_fail(err, "eviction: out of memory for %d candidates", n);
    for (int i = 0; i < n; i++)
        take[i] = 0;
    int taken = 0;
    /* every head first keeps its own best n_safe: the safeguard */
    for (int h = 0; h < n_heads && n_safe > 0; h++) {
        int m = 0;
        for (int i = 0; i < n; i++)
            if (head[i] == h)
                idx[m++] = i;
        int safe = n_safe < m ? n_safe : m;
        kv_evict_top_among(score, idx, m, safe);
        for (int i = 0; i < safe; i++)
            take[idx[i]] = 1;
        taken += safe;
    }
    /* the rest of the budget goes to the best of all other entries
     * together; on equal scores the later entry wins, as everywhere */
    int m = 0;
    for (int i = 0; i < n; i++)
        if (!take[i])
            idx[m++] = i;
    int rest = k - taken < m ? k - taken : m;
    kv_evict_top_among(score, idx, m, rest);
    for (int i = 0; i < rest; i++)
        take[idx[i]] = 1;
    free(idx);
    return 0;
}
