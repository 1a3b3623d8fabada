/* report.html's line charts, as inline SVG: the headline score against the
 * KV cache budget (one line per series of configs, report/series.h; the
 * full cache as a dashed line over its interval's band) and the score
 * against context length (one line per config, report/length_view.h). Each
 * point carries its 95 % interval as a whisker and its numbers in a tooltip.
 */
#ifndef KB_REPORT_CHARTS_H
#define KB_REPORT_CHARTS_H

#include <stdio.h>

#include "report/length_view.h"
#include "report/pivot.h"

/* -1 on OOM. A run without budgeted configs gets a note instead. */
int kb_svg_budget_chart(FILE *f, const kb_pivot *p);

/* A run without scores by length gets a note instead. */
void kb_svg_length_chart(FILE *f, const kb_pivot *p, const kb_length_view *v);

#endif
