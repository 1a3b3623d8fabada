/* Text inside report.html and its charts: element text and attribute
 * values alike.
 */
#ifndef KB_REPORT_HTML_ESCAPE_H
#define KB_REPORT_HTML_ESCAPE_H

#include <stdio.h>

/* Writes s with &, <, > and " as entities. */
void kb_html_esc(FILE *f, const char *s);

#endif
