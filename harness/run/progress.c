#include "run/progress.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util/clock.h"

struct kb_progress {
    kb_progress_opts o;
    bool tty;
    long total_tasks, total_samples;
    long task_index;
    char *task;
    long done, skipped; /* samples: done includes skipped */
    long tokens;        /* processed in this process */
    double t_first;     /* when the first processed sample started counting; <0 none */
    double t_last_print;
};

static double mono_now(void *ctx)
{
    (void)ctx;
    return kv_clock_s();
}

static double now(const kb_progress *p)
{
    return p->o.now(p->o.now_ctx);
}

kb_progress *kb_progress_new(const kb_progress_opts *o, long total_tasks, long total_samples)
{
    kb_progress *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->o = *o;
    if (!p->o.out)
        p->o.out = stderr;
    if (!p->o.now)
        p->o.now = mono_now;
    if (p->o.interval_s <= 0)
        p->o.interval_s = 30;
    p->tty = o->tty < 0 ? isatty(fileno(p->o.out)) : o->tty;
    p->total_tasks = total_tasks;
    p->total_samples = total_samples;
    p->t_first = now(p);
    p->t_last_print = -INFINITY;
    return p;
}

void kb_progress_free(kb_progress *p)
{
    if (!p)
        return;
    free(p->task);
    free(p);
}

void kb_format_duration(double s, char *buf, size_t n)
{
    if (!isfinite(s) || s < 0) {
        snprintf(buf, n, "?");
        return;
    }
    long t = lround(s);
    if (t < 60)
        snprintf(buf, n, "%lds", t);
    else if (t < 3600)
        snprintf(buf, n, "%ldm%02lds", t / 60, t % 60);
    else if (t < 86400)
        snprintf(buf, n, "%ldh%02ldm", t / 3600, t % 3600 / 60);
    else
        snprintf(buf, n, "%ldd%02ldh", t / 86400, t % 86400 / 3600);
}

int kb_progress_format(const kb_progress *p, char *buf, size_t n)
{
    double elapsed = now(p) - p->t_first;
    long processed = p->done - p->skipped;
    double pct = p->total_samples ? 100.0 * (double)p->done / (double)p->total_samples : 0;
    char speed[32] = "– tok/s", eta[32] = "?";
    if (processed > 0 && elapsed > 0) {
        snprintf(speed, sizeof speed, "%.0f tok/s", (double)p->tokens / elapsed);
        double per_sample = elapsed / (double)processed;
        kb_format_duration(per_sample * (double)(p->total_samples - p->done), eta, sizeof eta);
    }
    if (p->done >= p->total_samples)
        snprintf(eta, sizeof eta, "done in ");
    char took[32] = "";
    if (p->done >= p->total_samples)
        kb_format_duration(elapsed, took, sizeof took);
    return snprintf(buf, n, "%ld/%ld %s  %ld/%ld samples %.1f%%  %s  %s%s%s", p->task_index,
                    p->total_tasks, p->task ? p->task : "-", p->done, p->total_samples, pct, speed,
                    p->done >= p->total_samples ? "" : "ETA ", eta, took);
}

static void draw(kb_progress *p, bool force)
{
    double t = now(p);
    double every = p->tty ? 0.2 : p->o.interval_s;
    if (!force && t - p->t_last_print < every)
        return;
    p->t_last_print = t;
    char text[512];
    kb_progress_format(p, text, sizeof text);
    if (!p->tty) {
        fprintf(p->o.out, "progress: %s\n", text);
        fflush(p->o.out);
        return;
    }
    enum { BAR = 24 };
    char bar[BAR + 1];
    int fill =
        p->total_samples ? (int)((double)BAR * (double)p->done / (double)p->total_samples) : 0;
    for (int i = 0; i < BAR; i++)
        bar[i] = i < fill ? '=' : i == fill ? '>' : ' ';
    bar[BAR] = '\0';
    /* \r + erase-line: redraw in place, whatever was there */
    fprintf(p->o.out, "\r\033[K[%s] %s", bar, text);
    fflush(p->o.out);
}

void kb_progress_set_total(kb_progress *p, long total_tasks, long total_samples)
{
    if (!p)
        return;
    p->total_tasks = total_tasks;
    p->total_samples = total_samples;
}

void kb_progress_task(kb_progress *p, const char *task, long index)
{
    if (!p)
        return;
    free(p->task);
    p->task = strdup(task);
    p->task_index = index;
    if (!p->tty) {
        fprintf(p->o.out, "task %ld/%ld: %s\n", index, p->total_tasks, task);
        fflush(p->o.out);
    }
    draw(p, p->tty);
}

void kb_progress_skip(kb_progress *p, long n)
{
    if (!p || n <= 0)
        return;
    p->done += n;
    p->skipped += n;
    /* speed and ETA count from here: resumed samples took no time now */
    if (p->done == p->skipped)
        p->t_first = now(p);
    draw(p, false);
}

void kb_progress_sample(kb_progress *p, long tokens)
{
    if (!p)
        return;
    p->done++;
    p->tokens += tokens;
    draw(p, false);
}

void kb_progress_finish(kb_progress *p)
{
    if (!p)
        return;
    draw(p, true);
    if (p->tty)
        fputc('\n', p->o.out);
    fflush(p->o.out);
}
