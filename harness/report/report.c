/* kvbench report: the four files of a report, each written whole in memory
 * and then atomically, so that a failed write leaves the last good report;
 * then the per-task pages of wrong answers that report.html links to.
 * Each file's renderer is its own module: csv.c, markdown.c, html.c.
 */
#include "report/report.h"

#include <stdio.h>
#include <stdlib.h>

#include "report/wrong.h"
#include "util/file.h"

int kb_report_write(const char *dir, const kb_report_run *runs, size_t n,
                    const kb_report_options *opt, kv_error *err)
{
    static const char *const names[] = {"scores.csv", "averages.csv", "summary.md", "report.html"};
    if (kv_mkdirs(dir, err) < 0)
        return -1;
    for (int i = 0; i < 4; i++) {
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        if (!f)
            return kv_fail(err, "out of memory");
        int rc = i == 0   ? kb_report_write_csv(f, runs, n)
                 : i == 1 ? kb_report_write_averages_csv(f, runs, n)
                 : i == 2 ? kb_report_write_markdown(f, runs, n, opt)
                          : kb_report_write_html(f, runs, n, opt);
        fclose(f);
        char *path = kv_path_join(dir, names[i]);
        if (rc < 0 || !path)
            rc = kv_fail(err, "%s: out of memory while writing", names[i]);
        else
            rc = kv_write_atomic(path, buf, len, err);
        free(path);
        free(buf);
        if (rc < 0)
            return -1;
    }
    for (size_t k = 0; k < n; k++) /* the pages report.html links to */
        if (kb_wrong_write(dir, &runs[k], n > 1, err) < 0)
            return -1;
    return 0;
}
