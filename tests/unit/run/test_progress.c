/* The progress reporter, driven by a fake clock: rates, ETA after a resume,
 * plain periodic lines for logs and an in-place bar for terminals. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run/progress.h"

static double fake_now(void *ctx)
{
    return *(double *)ctx;
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

Test(progress, durations)
{
    char b[32];
    kb_format_duration(45, b, sizeof b);
    cr_assert_str_eq(b, "45s");
    kb_format_duration(725, b, sizeof b);
    cr_assert_str_eq(b, "12m05s");
    kb_format_duration(3720, b, sizeof b);
    cr_assert_str_eq(b, "1h02m");
    kb_format_duration(3 * 86400 + 4 * 3600 + 59, b, sizeof b);
    cr_assert_str_eq(b, "3d04h");
}

Test(progress, rate_and_eta_ignore_resumed_samples)
{
    double t = 100;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    kb_progress_opts o = {.out = f, .tty = 0, .interval_s = 60, .now = fake_now, .now_ctx = &t};
    kb_progress *p = kb_progress_new(&o, 2, 100);
    kb_progress_task(p, "qasper", 1);
    t += 500;                /* time spent loading: must not count */
    kb_progress_skip(p, 40); /* on disk already */
    for (int i = 0; i < 10; i++) {
        t += 2;
        kb_progress_sample(p, 1000);
    }
    char s[256];
    kb_progress_format(p, s, sizeof s);
    /* 10 samples in 20 s: 500 tok/s; 50 left at 2 s each: 100 s */
    cr_assert_str_eq(s, "1/2 qasper  50/100 samples 50.0%  500 tok/s  ETA 1m40s");
    kb_progress_task(p, "trec", 2);
    for (int i = 0; i < 50; i++) {
        t += 2;
        kb_progress_sample(p, 1000);
    }
    kb_progress_finish(p);
    kb_progress_format(p, s, sizeof s);
    cr_assert_str_eq(s, "2/2 trec  100/100 samples 100.0%  500 tok/s  done in 2m00s");
    kb_progress_free(p);
    fclose(f);
    /* plain mode: task lines, then one line per 60 s of work, and the closing line */
    cr_assert(strstr(buf, "task 1/2: qasper\n"), "%s", buf);
    cr_assert(strstr(buf, "task 2/2: trec\n"), "%s", buf);
    cr_assert_null(strchr(buf, '\r'), "no terminal control in logs");
    int lines = count(buf, "progress: ");
    /* first draw, then every >= 60 s over 120 s of samples (+ the final line) */
    cr_assert(lines >= 3 && lines <= 5, "%d progress lines:\n%s", lines, buf);
    cr_assert(strstr(buf, "progress: 2/2 trec  100/100 samples 100.0%  500 tok/s  done in "
                          "2m00s\n"),
              "%s", buf);
    free(buf);
}

Test(progress, terminal_bar_redraws_in_place)
{
    double t = 0;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    kb_progress_opts o = {.out = f, .tty = 1, .now = fake_now, .now_ctx = &t};
    kb_progress *p = kb_progress_new(&o, 1, 4);
    kb_progress_task(p, "trec", 1);
    for (int i = 0; i < 4; i++) {
        t += 1;
        kb_progress_sample(p, 10);
    }
    kb_progress_finish(p);
    kb_progress_free(p);
    fclose(f);
    cr_assert_gt(count(buf, "\r\033[K["), 2, "%s", buf);
    cr_assert(strstr(buf, "[============>           ] 1/1 trec  2/4 samples 50.0%"), "%s", buf);
    cr_assert(strstr(buf, "[========================] 1/1 trec  4/4 samples 100.0%"), "%s", buf);
    cr_assert_eq(buf[len - 1], '\n');
    cr_assert_null(strstr(buf, "task 1/1"), "no log lines on a terminal");
    free(buf);
}
