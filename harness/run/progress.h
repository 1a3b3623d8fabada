/* Progress of a run: a redrawn bar on a terminal, plain periodic lines in logs.
 *
 *   [=========>          ] 3/16 qasper  1234/3200 samples 38.6%  1520 tok/s  ETA 1h02m
 *
 * Samples skipped on resume count as done but not into the speed, so the ETA
 * of a resumed run is about the work left, not the work already on disk.
 * The clock is injectable so tests can drive time.
 */
#ifndef KB_PROGRESS_H
#define KB_PROGRESS_H

#include <stddef.h>
#include <stdio.h>

typedef struct kb_progress kb_progress;

typedef struct kb_progress_opts {
    FILE *out;                /* usually stderr */
    int tty;                  /* 1 bar, 0 plain lines, -1 decide with isatty(out) */
    double interval_s;        /* plain mode: seconds between lines (default 30) */
    double (*now)(void *ctx); /* seconds; NULL: CLOCK_MONOTONIC */
    void *now_ctx;
} kb_progress_opts;

/* NULL on OOM (progress is optional: callers may run without). */
kb_progress *kb_progress_new(const kb_progress_opts *o, long total_tasks, long total_samples);
void kb_progress_free(kb_progress *p);

/* Sets the totals once they are known (the runner counts before it starts). */
void kb_progress_set_total(kb_progress *p, long total_tasks, long total_samples);

/* A task starts (index is 1-based). */
void kb_progress_task(kb_progress *p, const char *task, long index);
/* n samples were already done on disk (resume). */
void kb_progress_skip(kb_progress *p, long n);
/* One sample finished (all its configs); tokens = prompt + generated tokens processed. */
void kb_progress_sample(kb_progress *p, long tokens);
/* The closing line. */
void kb_progress_finish(kb_progress *p);

/* The status text without the bar, e.g. "3/16 qasper  1234/3200 samples
 * 38.6%  1520 tok/s  ETA 1h02m". Returns the length written. */
int kb_progress_format(const kb_progress *p, char *buf, size_t n);

/* "45s", "12m05s", "1h02m", "3d04h". */
void kb_format_duration(double seconds, char *buf, size_t n);

#endif
