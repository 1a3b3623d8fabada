/* scores.json: the rows of a run folder as the runner saves them after
 * scoring (kb_scores_save, report.h), with the per-sample scores that
 * intervals resample and the LongBench-E buckets. Loading checks each row
 * against itself (counts, ranges, the sample scores' mean against the
 * score), so a hand-edited or truncated file fails with its path and row.
 */
#ifndef KB_REPORT_SCORES_FILE_H
#define KB_REPORT_SCORES_FILE_H

#include "report/report.h"
#include "util/error.h"

/* Reads <dir>/scores.json into run->rows and run->n_rows. */
int kb_scores_load(const char *dir, kb_report_run *run, kv_error *err);

#endif
