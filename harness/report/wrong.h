/* Per-task pages of the answers a config got wrong against the full cache:
 * for every task, every config's samples that scored below the full cache's
 * score of the same sample, with the prompt's head and tail (the task's
 * template filled from the data, when the data is where the report runs),
 * the config's prediction, the full cache's and the answers. report.html
 * links to them, so a drop in a heatmap cell can be read sample by sample.
 */
#ifndef KB_WRONG_H
#define KB_WRONG_H

#include <stdbool.h>

#include "report/report.h"
#include "util/error.h"

/* The page of task for run, relative to the report's folder:
 * "wrong/<task>.html", or with several runs "wrong/<run>/<task>.html".
 * Caller frees. */
char *kb_wrong_page(const kb_report_run *run, const char *task, bool several_runs);

/* Whether a task of the run has a page: the full cache and another config
 * scored it with per-sample scores. */
bool kb_wrong_has_page(const kb_report_run *run, const char *task);

/* Writes the pages of every task of run under dir (atomically each). */
int kb_wrong_write(const char *dir, const kb_report_run *run, bool several_runs, kv_error *err);

#endif
