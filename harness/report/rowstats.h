/* Uncertainty of report rows: the bootstrap interval of each (config, task)
 * score, paired differences to the full cache and between runs, and the
 * intervals of averages over tasks. The resampling itself is bootstrap.h.
 */
#ifndef KB_ROWSTATS_H
#define KB_ROWSTATS_H

#include <stdbool.h>
#include <stddef.h>

#include "report/bootstrap.h"
#include "util/error.h"
#include "report/report.h"

/* Fills ci, boot, delta_full, delta_ci, boot_delta and n_paired of every
 * row. A row pairs with the "full" row of its task on the samples both hold;
 * when those are the same samples in the same order, delta_full is the
 * difference of the two scores (so it agrees with the table), otherwise the
 * mean difference on the shared samples. Rows without per-sample scores get
 * delta_full = score - full score and NaN intervals. */
int kb_rows_resample(kb_score_row *rows, size_t n, kv_error *err);

/* a - b on the samples both rows hold (matched by id). */
typedef struct kb_pairing {
    double delta;   /* percent; NaN when nothing is shared */
    kb_interval ci; /* paired 95 % interval; NaN without per-sample scores */
    size_t n_shared;
    bool same_samples; /* both rows hold exactly the same sample ids */
} kb_pairing;

/* boot (may be NULL) receives the KB_BOOT_RESAMPLES resampled differences
 * (NaN-filled when there are none). Rows must have been through
 * kb_rows_resample. Returns 0, or -1 on OOM. */
int kb_rows_pair(const kb_score_row *a, const kb_score_row *b, const char *task, double *boot,
                 kb_pairing *out);

/* A point estimate and its interval. */
typedef struct kb_estimate {
    double value;
    kb_interval ci;
} kb_estimate;

/* The mean over rows (one per task) of score (delta false) or delta_full
 * (delta true). Every task weighs the same, as in LongBench's category and
 * overall averages (plain means of task scores, not weighted by samples);
 * the interval resamples within each task (independently, one stream per
 * task) and averages the resampled task scores the same way. NaN interval
 * unless every row has resampled scores (or with_ci is false: the interval
 * costs a sort of the resamples); NaN value for n == 0. */
kb_estimate kb_rows_mean(const kb_score_row *const *rows, size_t n, bool delta, bool with_ci);

#endif
