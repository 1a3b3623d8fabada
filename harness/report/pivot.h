/* One run's rows as the tables show them: configs (run.json order) x tasks
 * (LongBench order), the category and headline averages of each config with
 * their intervals, and what a cell prints (score, interval, paired
 * difference to the full cache, significance mark). Every renderer (CSV,
 * Markdown, HTML, the SVG charts) reads a run through this.
 */
#ifndef KB_REPORT_PIVOT_H
#define KB_REPORT_PIVOT_H

#include <stdbool.h>
#include <stddef.h>

#include "report/report.h"
#include "report/rowstats.h"

typedef struct kb_pivot {
    const kb_report_run *run;
    const char **configs; /* run.json order; configs with rows only */
    size_t nc;
    const char **tasks; /* LongBench order */
    size_t nt;
    const kb_score_row **cell; /* [c * nt + t], NULL when missing */
    bool *scored;              /* [t]: some config has a score of task t */
    size_t n_scored;
    int full; /* row of the full cache, -1 when absent */
} kb_pivot;

/* -1 on OOM. The pivot points into run, which must outlive it. */
int kb_pivot_build(kb_pivot *p, const kb_report_run *run);
void kb_pivot_free(kb_pivot *p);

/* The score of config c on task t; NaN when the cell is empty. */
double kb_pivot_score(const kb_pivot *p, size_t c, size_t t);

/* Which tasks an average covers: a category, the EN16 tasks, or all. */
typedef struct kb_task_set {
    const char *category; /* NULL: any */
    bool en16;
} kb_task_set;

/* The average of config c over the tasks of `set` that it has (delta: of its
 * paired differences to the full cache, over the tasks both have), with the
 * interval of rowstats.h when with_ci. A task without any score is in no
 * average: its "–" column says so. */
kb_estimate kb_pivot_mean(const kb_pivot *p, size_t c, kb_task_set set, bool delta, bool with_ci);

/* How many scored tasks `set` covers. */
size_t kb_pivot_tasks_in(const kb_pivot *p, kb_task_set set);

/* Whether the run scored all 16 English tasks. */
bool kb_pivot_has_en16(const kb_pivot *p);

/* Runs with all 16 English tasks get more tasks too (e.g. zh): the "Avg"
 * column over everything is then printed beside the EN16 headline. */
bool kb_pivot_extra_avg(const kb_pivot *p);

/* The tasks of the headline number: the 16 English tasks when the run has
 * them (the number papers print), else all its tasks. */
kb_task_set kb_pivot_headline_set(const kb_pivot *p);

/* Config c's headline number, without its interval. */
double kb_pivot_headline(const kb_pivot *p, size_t c);

/* The headline's name: "EN16" or "Avg". */
const char *kb_pivot_avg_label(const kb_pivot *p);

/* Whether some task of the pivot is of category cat. */
bool kb_pivot_has_category(const kb_pivot *p, const char *cat);

/* What a table cell shows: a score with its interval, and its paired
 * difference to the full cache with that interval. */
typedef struct kb_cell_est {
    kb_estimate score, delta;
} kb_cell_est;

kb_cell_est kb_pivot_task_est(const kb_pivot *p, size_t c, size_t t);
kb_cell_est kb_pivot_avg_est(const kb_pivot *p, size_t c, kb_task_set set);

/* "▼" / "▲" when the paired interval of the difference to the full cache
 * lies wholly below / above 0, else "". */
const char *kb_sig_mark(kb_estimate delta);

/* Half the width of an interval: the "±" of a cell. */
double kb_half_width(kb_interval ci);

#endif
