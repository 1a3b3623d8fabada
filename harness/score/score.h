/* Scoring predictions the way LongBench's eval.py does (docs/longbench.md):
 * the metric of each task, the first-line rule, the maximum over answers,
 * per-task means with Python's round(x, 2), and LongBench-E's length buckets
 * with numpy's mean and rounding. Also LongBench v2's answer extraction and
 * accuracy (§7).
 */
#ifndef KB_SCORE_H
#define KB_SCORE_H

#include <stdbool.h>
#include <stddef.h>

#include "util/error.h"
#include "score/metrics.h"
#include "util/str.h"

/* eval.py's dataset2metric, and whether only the first line of the
 * prediction is scored. A trailing "_e" (LongBench-E) is ignored. -1 when
 * the dataset is not a LongBench task. */
int kb_task_metric(const char *dataset, kb_metric *metric, bool *first_line);

/* One prediction of `dataset`: first-line rule, then the best score over
 * the answers (0 when there are none). */
int kb_score_prediction(kb_metrics *m, const char *dataset, kv_str pred, const kv_str *answers,
                        size_t n_answers, const kb_classes *classes, double *score, kv_error *err);

/* Python's round(x, ndigits): the nearest decimal, ties to even on the exact
 * binary value. */
double kb_py_round(double x, int ndigits);
/* numpy's np.mean(v) (pairwise summation); NaN for n == 0. */
double kb_np_mean(const double *v, size_t n);
/* numpy's round(x, 2) on a float64: rint(x * 100) / 100. */
double kb_np_round2(double x);

enum { KB_BUCKET_0_4K, KB_BUCKET_4_8K, KB_BUCKET_8K_PLUS, KB_N_BUCKETS };
extern const char *const kb_bucket_names[KB_N_BUCKETS]; /* "0-4k", "4-8k", "8k+" */
/* LongBench-E's bucket of a sample of `length` words/characters. */
int kb_bucket_of(long length);

/* One prediction line, as read from a prediction file. Text keeps every
 * byte (JSON's "\u0000" included), as Python's json does. */
typedef struct kb_scored_line {
    kv_str id;     /* "id" or "_id", {NULL, 0} when absent */
    char *dataset; /* "dataset", else the file name up to its first '.' */
    kv_str pred;   /* "pred" (LongBench) or "prediction" */
    kv_str *answers;
    size_t n_answers;
    kv_str *classes; /* "all_classes"; NULL when null or absent */
    size_t n_classes;
    long length;  /* "length", -1 when absent */
    char *where;  /* "file:line" for messages */
    double score; /* filled by kb_score_predictions */
} kb_scored_line;

typedef struct kb_predictions {
    kb_scored_line *v;
    size_t n, cap;
} kb_predictions;

/* Parses one prediction line (text[0..len), from `path`, for the dataset
 * fallback) into *p, whose `where` the caller has set. On failure *p keeps
 * what it took; kb_scored_line_free frees it. */
int kb_scored_line_parse(const char *text, size_t len, const char *path, kb_scored_line *p,
                         kv_error *err);
void kb_scored_line_free(kb_scored_line *p);

/* Appends one prediction line (its JSON text), line `lineno` of path (the
 * dataset when the line names none). */
int kb_predictions_add(kb_predictions *p, const char *text, size_t len, const char *path,
                       long lineno, kv_error *err);
/* Appends the lines of a prediction file (JSON Lines). */
int kb_predictions_read(kb_predictions *p, const char *path, kv_error *err);
/* A file, or every *.jsonl file of a folder (in name order). */
int kb_predictions_read_path(kb_predictions *p, const char *path, kv_error *err);
void kb_predictions_free(kb_predictions *p);

/* The score of one task. */
typedef struct kb_task_score {
    const char *dataset; /* points into the predictions */
    kb_metric metric;
    size_t n;
    double score; /* round(100 * mean, 2) */
    size_t bucket_n[KB_N_BUCKETS];
    double bucket[KB_N_BUCKETS]; /* round(100 * np.mean, 2); NaN when empty */
    bool refused;                /* a Chinese task without jieba's data */
} kb_task_score;

typedef struct kb_task_scores {
    kb_task_score *v;
    size_t n;
} kb_task_scores;

/* Scores every prediction (filling ->score) and each task, tasks in name
 * order. Like eval.py, a task's class list is that of its last line.
 * Predictions of a Chinese task are refused (task->refused, scores NaN) when
 * `m` has no jieba data; other failures stop with -1. */
int kb_score_predictions(kb_metrics *m, kb_predictions *p, kb_task_scores *out, kv_error *err);
void kb_task_scores_free(kb_task_scores *t);

/* ---- the scorer of run folders ------------------------------------------
 *
 * What `kvbench run` and `kvbench report` score a run's prediction files
 * with: kb_score_predictions on each (config, task) file, so their numbers
 * are `kvbench score`'s on the same files. jieba's data is loaded on the
 * first Chinese task (kb_scorer_prepare loads it before a run's inference,
 * so a missing package fails the run before hours of work, not after). */
typedef struct kb_scorer kb_scorer;

int kb_scorer_open(kb_scorer **out, kv_error *err);
/* Loads jieba's data now when `task`'s metric needs it. */
int kb_scorer_prepare(kb_scorer *s, const char *task, kv_error *err);
void kb_scorer_close(kb_scorer *s);

/* What a scorer says of one task's lines. */
typedef struct kb_task_result {
    double score;          /* the task's score, in percent */
    const char *metric;    /* the metric's name (static) */
    double *sample_scores; /* [n], given: line i's metric, 0..1 (what intervals resample) */
    /* LongBench-E tasks: eval.py --e's scores by length (0-4k, 4-8k, 8k+;
     * NaN when empty); all bucket_n 0 for other tasks */
    size_t bucket_n[KB_N_BUCKETS];
    double bucket[KB_N_BUCKETS];
} kb_task_result;

/* Scores one task's prediction lines (file order, as the run folder's
 * reader parsed them: views the scorer reads and never frees) into *out.
 * Returns 0 or negative with a message in err. This is where the scorer
 * plugs in (kb_scorer_task below). */
typedef int (*kb_task_scorer)(const char *task, const kb_scored_line *lines, size_t n,
                              kb_task_result *out, char *err, size_t err_n, void *ctx);

/* kb_task_scorer over a kb_scorer (ctx): the task's score as
 * kb_score_predictions gives it (v2: accuracy), each line's score, the
 * metric's name and, for a LongBench-E task, its length buckets. The
 * scorer's result lives here, beside the scorers, so reports (which
 * read it) sit above scoring and scoring needs nothing of them. */
int kb_scorer_task(const char *task, const kb_scored_line *lines, size_t n, kb_task_result *out,
                   char *msg, size_t msg_n, void *ctx);

/* result.py's accuracies, in percent rounded to 1 decimal (NaN for an empty
 * group): overall, easy, hard, short, medium, long. */
typedef struct kb_v2_item {
    char pred;   /* extracted letter, 0 for none */
    char answer; /* 'A'..'D' */
    bool hard;   /* difficulty != "easy" */
    int length;  /* 0 short, 1 medium, 2 long */
} kb_v2_item;

typedef struct kb_v2_accuracy {
    double overall, easy, hard, short_, medium, long_;
} kb_v2_accuracy;

kb_v2_accuracy kb_v2_score(const kb_v2_item *items, size_t n);

/* Reads a LongBench v2 prediction file (JSON Lines, or one JSON array as
 * pred.py's result files may be): per item "answer", "difficulty", "length",
 * and the model's "response" (the letter is extracted from it) or "pred" (a
 * letter, or text to extract it from). */
int kb_v2_read(const char *path, kb_v2_item **items, size_t *n, kv_error *err);

#endif
