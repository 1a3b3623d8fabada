/* `kvbench report A B`: the runs side by side. Every config (by name) gets
 * one row with each run's mean over the tasks all the runs scored and the
 * difference to the first run; then every (task, config) with each run's
 * score and the paired difference to the first run, on the samples both
 * scored, with its 95 % interval and a mark when that interval excludes 0.
 */
#ifndef KB_SIDE_BY_SIDE_H
#define KB_SIDE_BY_SIDE_H

#include <stdbool.h>
#include <stdio.h>

#include "report/report.h"

/* Writes the comparison as Markdown (html false) or as HTML tables. -1 on
 * OOM. Nothing for fewer than two runs. */
int kb_report_side_by_side(FILE *f, const kb_report_run *runs, size_t n, bool html);

#endif
