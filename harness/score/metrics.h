/* LongBench's metrics (LongBench/metrics.py), reproduced to the last bit.
 *
 * Every quirk of the Python code is kept on purpose, because published numbers
 * were computed with it (docs/longbench.md): Rouge-L over unique words with its
 * tie rule, +1e-8 and recursion-limit zero; difflib's ratio with autojunk and
 * banker's rounding for code; the classification list-removal skip; Python's
 * str.lower / isspace / \w over Unicode. Inputs are UTF-8 (invalid bytes are
 * read as U+FFFD) with their length: a NUL byte is a character like any other,
 * as in Python; scores are in [0, 1].
 */
#ifndef KB_METRICS_H
#define KB_METRICS_H

#include <stdbool.h>
#include <stddef.h>

#include "util/error.h"
#include "score/jieba.h"
#include "util/str.h"

typedef enum kb_metric {
    KB_QA_F1,          /* qa_f1_score */
    KB_QA_F1_ZH,       /* qa_f1_zh_score (jieba) */
    KB_ROUGE,          /* rouge_score */
    KB_ROUGE_ZH,       /* rouge_zh_score (jieba) */
    KB_CLASSIFICATION, /* classification_score (needs the class list) */
    KB_RETRIEVAL,      /* retrieval_score */
    KB_RETRIEVAL_ZH,   /* retrieval_zh_score */
    KB_COUNT,          /* count_score */
    KB_CODE_SIM,       /* code_sim_score */
    KB_ACCURACY,       /* LongBench v2: the chosen letter equals the answer (result.py) */
    KB_N_METRICS
} kb_metric;

/* metrics.py's function name ("qa_f1_score"); NULL for a bad value. */
const char *kb_metric_name(kb_metric m);
/* The metric named like metrics.py's function; -1 when unknown. */
int kb_metric_from_name(const char *name, kb_metric *out);
bool kb_metric_needs_jieba(kb_metric m);

/* The class list of trec / lsht (`all_classes`). */
typedef struct kb_classes {
    const kv_str *names;
    size_t n;
} kb_classes;

/* Scratch memory, compiled regexes and (borrowed) jieba data for scoring.
 * One per thread; `jieba` may be NULL, then the Chinese metrics fail. */
typedef struct kb_metrics kb_metrics;

int kb_metrics_new(const kb_jieba *jieba, kb_metrics **out, kv_error *err);
void kb_metrics_free(kb_metrics *m);
/* true when the Chinese metrics can run. */
bool kb_metrics_has_jieba(const kb_metrics *m);

/* metric(pred, gt, all_classes=classes), as metrics.py computes it, into
 * *score. Fails (-1, err filled) where metrics.py raises: a Chinese metric
 * without jieba data, classification without classes, a retrieval answer
 * without "Paragraph N" / "段落N"; and when out of memory. */
int kb_metric_score(kb_metrics *m, kb_metric metric, kv_str pred, kv_str gt,
                    const kb_classes *classes, double *score, kv_error *err);

/* LongBench v2: the letter in "The correct answer is (X)" / "... is X" after
 * removing '*', or 0 when there is none. */
char kb_v2_extract_answer(kv_str response);
/* The letter a v2 prediction chooses: itself when it is one of A-D, else
 * the one kb_v2_extract_answer finds (0: none). */
char kb_v2_letter(kv_str pred);

/* Building blocks, exposed for tests. */

/* difflib.SequenceMatcher(None, a, b).ratio() on code points (autojunk on). */
double kb_difflib_ratio(kb_metrics *m, const char *a, const char *b);
/* fuzzywuzzy's fuzz.ratio on difflib: an integer 0..100; -1 when out of memory. */
int kb_fuzz_ratio(kb_metrics *m, const char *a, const char *b);
/* Rouge-L F of rouge 1.0.1 with Python's recursion limit reached at
 * `frames` frames already on the stack (9 under eval.py's rouge_score). */
double kb_rouge_l(kb_metrics *m, const char *pred, const char *gt, int frames);

#endif
