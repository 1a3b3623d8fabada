#include "score/lengths.h"

#include <stdio.h>
#include <string.h>

#include "score/score.h"

static long nearest_step(long length)
{
    return (length + KB_LENGTH_STEP / 2) / KB_LENGTH_STEP * KB_LENGTH_STEP;
}

void kb_length_groups_choose(kb_length_groups *g, const long *lengths, size_t n)
{
    memset(g, 0, sizeof *g);
    bool bucket_seen[KB_N_BUCKETS] = {false};
    size_t n_buckets = 0;
    for (size_t i = 0; i < n; i++)
        if (lengths[i] >= 0 && !bucket_seen[kb_bucket_of(lengths[i])]) {
            bucket_seen[kb_bucket_of(lengths[i])] = true;
            n_buckets++;
        }
    if (n_buckets > 1) {
        g->buckets = true;
        g->n = KB_N_BUCKETS;
        for (int b = 0; b < KB_N_BUCKETS; b++)
            snprintf(g->names[b], sizeof g->names[b], "%s", kb_bucket_names[b]);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if (lengths[i] < 0)
            continue;
        long at = nearest_step(lengths[i]);
        size_t k = 0;
        while (k < g->n && g->at[k] < at)
            k++;
        if (k < g->n && g->at[k] == at)
            continue;
        if (g->n == KB_MAX_LENGTH_GROUPS) { /* too many lengths to draw as groups */
            g->n = 0;
            return;
        }
        memmove(&g->at[k + 1], &g->at[k], (g->n - k) * sizeof *g->at);
        g->at[k] = at;
        g->n++;
    }
    if (g->n < 2) { /* one length: nothing to compare */
        g->n = 0;
        return;
    }
    for (size_t k = 0; k < g->n; k++)
        snprintf(g->names[k], sizeof g->names[k], "%ld", g->at[k]);
}

int kb_length_group_of(const kb_length_groups *g, long length)
{
    if (length < 0 || g->n == 0)
        return -1;
    if (g->buckets)
        return kb_bucket_of(length);
    long at = nearest_step(length);
    for (size_t k = 0; k < g->n; k++)
        if (g->at[k] == at)
            return (int)k;
    return -1;
}
