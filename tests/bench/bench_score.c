/* Scoring throughput: `bench_score PATH [REPEAT]` scores a LongBench
 * prediction file or folder REPEAT times (default 5) with the same code as
 * `kvbench score` and prints predictions per second per task and overall.
 * Reading the files and loading jieba's dictionary are timed separately. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/clock.h"
#include "score/jieba.h"
#include "score/metrics.h"
#include "score/score.h"

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_score FILE.jsonl|DIR [REPEAT]\n");
        return 2;
    }
    int repeat = argc > 2 ? atoi(argv[2]) : 5;
    kv_error err;
    kb_predictions p = {0};
    double t0 = kv_clock_s();
    if (kb_predictions_read_path(&p, argv[1], &err) < 0) {
        fprintf(stderr, "bench_score: %s\n", err.msg);
        return 1;
    }
    double t_read = kv_clock_s() - t0;
    kb_jieba *jieba = NULL;
    t0 = kv_clock_s();
    if (kb_jieba_load(NULL, &jieba, &err) < 0)
        fprintf(stderr, "bench_score: %s (Chinese tasks refused)\n", err.msg);
    double t_jieba = kv_clock_s() - t0;
    kb_metrics *m;
    if (kb_metrics_new(jieba, &m, &err) < 0)
        return 1;
    printf("read %zu predictions in %.3f s; jieba's dictionary loaded in %.3f s\n", p.n, t_read,
           t_jieba);
    /* Per task: score only that task's lines, REPEAT times. */
    kb_task_scores tasks;
    if (kb_score_predictions(m, &p, &tasks, &err) < 0) {
        fprintf(stderr, "bench_score: %s\n", err.msg);
        return 1;
    }
    printf("%-22s %6s %10s %12s\n", "task", "n", "ms/pass", "preds/s");
    double total_time = 0;
    size_t total_n = 0;
    for (size_t t = 0; t < tasks.n; t++) {
        kb_predictions sub = p;
        sub.n = 0;
        kb_scored_line *only = malloc(p.n * sizeof *only);
        for (size_t i = 0; i < p.n; i++)
            if (strcmp(p.v[i].dataset, tasks.v[t].dataset) == 0)
                only[sub.n++] = p.v[i];
        sub.v = only;
        double best = 1e30;
        for (int r = 0; r < repeat; r++) {
            kb_task_scores one;
            t0 = kv_clock_s();
            if (kb_score_predictions(m, &sub, &one, &err) < 0) {
                fprintf(stderr, "bench_score: %s\n", err.msg);
                return 1;
            }
            double dt = kv_clock_s() - t0;
            if (dt < best)
                best = dt;
            kb_task_scores_free(&one);
        }
        printf("%-22s %6zu %10.3f %12.0f\n", tasks.v[t].dataset, sub.n, best * 1e3,
               (double)sub.n / best);
        total_time += best;
        total_n += sub.n;
        free(only);
    }
    printf("%-22s %6zu %10.3f %12.0f\n", "all", total_n, total_time * 1e3,
           (double)total_n / total_time);
    kb_task_scores_free(&tasks);
    kb_metrics_free(m);
    kb_jieba_free(jieba);
    kb_predictions_free(&p);
    return 0;
}
