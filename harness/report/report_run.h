/* A run as the report reads it (kb_report_run_load, report.h: run.json and
 * scores.json), and what its tables print of each config: the run.json
 * entry, the budget and the query_aware setting.
 */
#ifndef KB_REPORT_RUN_H
#define KB_REPORT_RUN_H

#include <cjson/cJSON.h>

#include "report/report.h"

/* The run.json entry (matrix.configs) of the config named name; NULL when none. */
const cJSON *kb_report_config(const kb_report_run *run, const char *name);

/* The config's budget in entries per layer; negative for the full cache
 * (kb_budget_label names it) and when run.json does not say. */
long kb_report_budget(const kb_report_run *run, const char *name);

/* The config table's query_aware column: "true" (also when the key is
 * absent: the default), "false", or "-" for the full cache. */
const char *kb_report_query_aware(const cJSON *params);

#endif
