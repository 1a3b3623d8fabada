/* Scores by context length (score/lengths.h chooses the groups): for each
 * config and length group, the mean over the tasks with samples in the
 * group of the task's score on those samples (tasks weigh the same, as in
 * the averages), with its bootstrap interval. Built once when a run is
 * loaded (run->lengths), for summary.md's table and report.html's chart.
 */
#ifndef KB_REPORT_LENGTH_VIEW_H
#define KB_REPORT_LENGTH_VIEW_H

#include <stddef.h>

#include "report/report.h"
#include "report/rowstats.h"
#include "score/lengths.h"

typedef struct kb_length_view {
    kb_length_groups g;
    kb_estimate *est; /* [c * g.n + k], c in pivot order (report/pivot.h) */
    size_t *n;        /* samples behind est */
} kb_length_view;

/* Sets run->lengths; it stays NULL when the run has no per-length view
 * (no sample lengths, or all in one group). -1 on OOM. */
int kb_length_view_attach(kb_report_run *run);

/* Frees run->lengths and sets it to NULL. */
void kb_length_view_detach(kb_report_run *run);

/* The charts' and tables' name for the view's axis. */
const char *kb_length_axis(const kb_length_view *v);

#endif
