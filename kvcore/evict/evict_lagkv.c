/* kvpress's LagKVPress scores, for parity tests only. LagKV does not map
 * onto kvbench's areas (its protected tail is ℓ..2ℓ-1 tokens long, its
 * partitions keep equal quotas instead of a top-I, and decode would
 * re-partition at every step: docs/eviction.md), so it is not a policy;
 * this is its scoring, written from the method, to pin down what a port
 * would have to reproduce. */
#include <math.h>
#include <stdlib.h>

#include "evict/evict_impl.h"

/* Unbiased standard deviation over the D channels of token t, each channel
 * min-max normalised by the reference partition's range (a constant
 * reference channel divides by zero, as kvpress does). */
static double normalised_std(const double *x, int D, const double *lo, const double *hi)
{
    double mean = 0.0;
    for (int d = 0; d < D; d++)
        mean += (x[d] - lo[d]) / (hi[d] - lo[d]);
    mean /= D;
    double ss = 0.0;
    for (int d = 0; d < D; d++) {
        double z = (x[d] - lo[d]) / (hi[d] - lo[d]) - mean;
        ss += z * z;
    }
    return sqrt(ss / (D - 1));
}

/* The softmax over the lag tokens of partition `first`.. of each token's
 * normalised std against partition `ref`.., added (times 1/2) to out. */
static void add_half_softmax(const double *x, int D, int first, int ref, int lag, double *out)
{
    double lo[D], hi[D], s[lag];
    for (int d = 0; d < D; d++) {
        lo[d] = hi[d] = x[(size_t)ref * D + d];
        for (int t = ref + 1; t < ref + lag; t++) {
            lo[d] = fmin(lo[d], x[(size_t)t * D + d]);
            hi[d] = fmax(hi[d], x[(size_t)t * D + d]);
        }
    }
    double top = -INFINITY, sum = 0.0;
    for (int i = 0; i < lag; i++) {
        s[i] = normalised_std(x + (size_t)(first + i) * D, D, lo, hi);
        top = fmax(top, s[i]);
    }
    for (int i = 0; i < lag; i++)
        sum += s[i] = exp(s[i] - top);
    for (int i = 0; i < lag; i++)
        out[i] += 0.5 * s[i] / sum;
}

void kv_lagkv_scores_kvpress(const double *k, const double *v, int L, int D, int n_sink, int lag,
                             double *score)
{
    for (int t = 0; t < L; t++) /* sinks, and the "no compression" ramp */
        score[t] = t < n_sink ? 1.0 : (double)(t - n_sink) / (L - n_sink);
    if (L < n_sink + 2 * lag)
        return;
    int m = (L - n_sink) / lag;
    double both[lag];
    for (int p = 0; p < m - 1; p++) {
        int first = n_sink + p * lag;
        for (int i = 0; i < lag; i++)
            both[i] = 0.0;
        add_half_softmax(k, D, first, first + lag, lag, both);
        add_half_softmax(v, D, first, first + lag, lag, both);
        /* the score is the rank within the partition / lag, so every
         * partition keeps the same count (equal scores: the earlier ranks
         * lower) */
        for (int i = 0; i < lag; i++) {
            int rank = 0;
            for (int j = 0; j < lag; j++)
                rank += both[j] < both[i] || (both[j] == both[i] && j < i);
            score[first + i] = (double)rank / lag;
        }
    }
    for (int t = n_sink + (m - 1) * lag; t < L; t++) /* the tail: its last partition and the rest */
        score[t] = 1.0;
}
