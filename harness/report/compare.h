/* A run against a baseline run (kb_report_compare, report.h: the moves of
 * each (config, task) and their verdicts), and what both renderers say of
 * the comparison.
 */
#ifndef KB_REPORT_COMPARE_H
#define KB_REPORT_COMPARE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "report/report.h"

/* "regression", "improvement" or "within noise". */
const char *kb_verdict_name(int verdict);

/* How many of the changes have this verdict. */
size_t kb_count_verdict(const kb_change *ch, size_t n, int verdict);

/* The rule, and what the comparison could not pair, in one sentence each
 * (plain text: Markdown and HTML print it alike). */
void kb_compare_notes(FILE *f, const kb_change *ch, size_t n, size_t n_partial, double threshold);

/* Whether (config, task) is among the regressions of ch. */
bool kb_is_regression(const kb_change *ch, size_t n, const char *config, const char *task);

#endif
