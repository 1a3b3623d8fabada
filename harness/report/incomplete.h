/* What a report of an unfinished run says: a run stopped before its end
 * (run.json "finished": null) has scores over the samples done so far, so
 * its report says "unfinished" in its titles and marks each (config, task)
 * cell that holds fewer samples than the run will have ("2/5 done").
 */
#ifndef KB_INCOMPLETE_H
#define KB_INCOMPLETE_H

#include <stdbool.h>
#include <stdio.h>

#include "rundir/predfile.h"
#include "report/report.h"

/* Sets n_expected on the rows of an unfinished run: the task's samples as
 * the data and the task's limit give them (sizes may be NULL, or answer -1
 * where the data is not here: then the most samples any config of the task
 * has). Returns how many rows are incomplete; 0 for a finished run. */
size_t kb_report_expect(kb_report_run *run, const kb_task_sizes *sizes);

/* Whether a row holds fewer samples than its run will have. */
bool kb_row_incomplete(const kb_score_row *r);

/* How many rows of the run are incomplete. */
size_t kb_report_n_incomplete(const kb_report_run *run);

/* Whether any of the runs has not finished (the report's title says so). */
bool kb_reports_unfinished(const kb_report_run *runs, size_t n);

/* What a run's section title adds when the run has not finished:
 * " — unfinished: ...; N cells marked \"done/all\" hold only the samples done". */
void kb_report_unfinished_note(FILE *f, const kb_report_run *run);

#endif
