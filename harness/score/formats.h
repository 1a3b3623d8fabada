/* Prediction files of other harnesses, scored as LongBench's eval.py
 * scores its own (`kvbench score --format`):
 *
 *   longbench  pred.py's <task>.jsonl ({"pred", "answers", "all_classes",
 *              "length"}), per model in pred/<model>/
 *   kvpress    kvpress's evaluation: <run>/predictions.csv, a pandas CSV with
 *              the columns predicted_answer, answers, task, all_classes and
 *              length (lists as Python or numpy print them)
 *   lm-eval    lm-evaluation-harness --log_samples: <model>/samples_<task>_
 *              <date>.jsonl, one {"doc", "filtered_resps", "target"} per line
 *
 * Each record becomes one LongBench prediction line, so the scores are
 * kvbench's eval.py-exact ones whichever tool wrote the file.
 */
#ifndef KB_FORMATS_H
#define KB_FORMATS_H

#include <stddef.h>

#include "score/score.h"
#include "util/error.h"
#include "util/strbuf.h"

typedef enum kb_pred_format {
    KB_FORMAT_LONGBENCH,
    KB_FORMAT_KVPRESS,
    KB_FORMAT_LM_EVAL,
} kb_pred_format;

/* "longbench", "kvpress", "lm-eval" -> format; -1 for another name. */
int kb_pred_format_parse(const char *name, kb_pred_format *out);

/* A set of prediction files scored as one table: one model's (a folder of
 * the format's files), or the one file given. */
typedef struct kb_pred_group {
    char *name; /* the folder's name under the parent; "" for the path itself */
    char **files;
    size_t n_files;
} kb_pred_group;

/* The groups of path: a file; a folder holding the format's files; or a
 * parent folder whose sub-folders hold them (LongBench's pred/, kvpress's
 * and lm-eval's output folders), one group per sub-folder, in name order. */
int kb_pred_groups(const char *path, kb_pred_format f, kb_pred_group **out, size_t *n,
                   kv_error *err);
void kb_pred_groups_free(kb_pred_group *g, size_t n);

/* Appends the predictions of one file in format f. */
int kb_predictions_read_format(kb_predictions *p, const char *file, kb_pred_format f,
                               kv_error *err);

/* The list a Python or numpy repr prints, ['a', "b's"] or ['a' 'b'], as a
 * JSON array (appended to out); "None" or "" is JSON null. -1 with err
 * naming what is wrong. */
int kb_py_list_to_json(const char *s, size_t n, kv_strbuf *out, kv_error *err);

#endif
