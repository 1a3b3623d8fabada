/* How the charts tell series apart: a style per series (a colour, then a
 * dash pattern once the colours are used up, so 40 series stay distinct),
 * and a legend label that names what distinguishes a series from the
 * others (the parameters whose values differ between the series, defaults
 * included: "snapkv window_size=32" beside "snapkv window_size=8").
 */
#ifndef KB_SERIES_H
#define KB_SERIES_H

#include <cjson/cJSON.h>
#include <stddef.h>

typedef struct kb_series_style {
    const char *colour; /* "#0072b2" */
    const char *dash;   /* an SVG stroke-dasharray, "" for a solid line */
} kb_series_style;

/* The style of series i (0, 1, ...): distinct for i below
 * KB_SERIES_STYLES, then repeating. */
kb_series_style kb_series_style_of(size_t i);
enum { KB_SERIES_COLOURS = 10, KB_SERIES_STYLES = 40 };

/* What a config contributes to a series: its parameters with every default
 * applied, without the sizes (a series is drawn along the budget) and
 * without a refiner's settings when it has none (null). NULL for
 * the full cache or params that do not parse. Caller frees. */
cJSON *kb_series_params(const cJSON *params);

/* Labels for n series (their kb_series_params; NULL entries are labelled
 * "full cache"): the algorithm, then key=value for every parameter whose
 * value differs between the series. labels[i] is malloc'd (NULL on OOM). */
void kb_series_labels(cJSON *const *params, size_t n, char **labels);

#endif
