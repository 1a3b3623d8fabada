/* The rows of a run (one per config x task): made from the run folder's
 * prediction files (kb_scores_from_predictions, report.h), freed, found,
 * and ordered as every table lists them.
 */
#ifndef KB_REPORT_ROWS_H
#define KB_REPORT_ROWS_H

#include <stdbool.h>

#include "report/report.h"

void kb_score_row_free(kb_score_row *r);

/* Whether the row has LongBench-E length buckets (some bucket holds samples). */
bool kb_row_has_buckets(const kb_score_row *r);

/* The row of (config, task) in run; NULL when the run has none. */
const kb_score_row *kb_report_row(const kb_report_run *run, const char *config, const char *task);

/* Tasks in LongBench's order, then by name (tasks LongBench does not list):
 * the column order of every table. */
int kb_task_cmp(const char *x, const char *y);

#endif
