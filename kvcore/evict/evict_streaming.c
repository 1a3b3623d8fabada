/* StreamingLLM: attention sinks (start_size) + the most recent tokens. The
 * intermediate area keeps the newest candidates, so the cache holds the
 * start slots and the last intermediate_size + recent_size tokens. */
#include "evict/evict_impl.h"

static int streaming_rank(const kv_scorer_rank *r, double *scores, kv_error *err)
{
    (void)err;
    for (int i = 0; i < r->n; i++)
        scores[i] = (double)i; /* later slot, higher score */
    return 0;
}

const kv_scorer kv_scorer_streaming = {
    .name = "streaming",
    .request = NULL,
    .observe = NULL,
    .rank = streaming_rank,
};
