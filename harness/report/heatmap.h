/* report.html's per-task heatmap, as inline SVG: configs x (tasks, then the
 * headline average), each cell coloured by its difference to the full
 * cache (red below, blue above), its score printed (bold with ▼ / ▲ when
 * the paired interval of the difference excludes 0), outlined when it
 * regressed against the baseline, and its numbers in a tooltip.
 */
#ifndef KB_REPORT_HEATMAP_H
#define KB_REPORT_HEATMAP_H

#include <stddef.h>
#include <stdio.h>

#include "report/pivot.h"
#include "report/report.h"

/* ch: the changes against the baseline (NULL, 0 without one). */
void kb_svg_heatmap(FILE *f, const kb_pivot *p, const kb_change *ch, size_t n_ch);

#endif
