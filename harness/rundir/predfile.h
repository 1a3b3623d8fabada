/* The prediction files of a run folder, predictions/<config>/<task>.jsonl:
 * one JSON line per sample, and the one place that writes or reads one.
 *
 * Predictions are the source of truth. Each line is written with one write(2)
 * and fsync'd before the next sample starts, so an interruption (Ctrl-C, kill,
 * power loss) can leave at most one cut-short last line. Opening a prediction
 * file for appending drops such a line (rewriting the file atomically without
 * it) and returns the set of sample ids already done, so a rerun neither
 * duplicates nor drops a sample. A line counts only when its '\n' is on disk.
 *
 * Every line carries "id" (the sample's _id) and "index" (its position in the
 * task's sample order), which is what sharding selects on and what merging
 * sorts by: merged shards equal, line for line, an unsharded run.
 */
#ifndef KB_PREDFILE_H
#define KB_PREDFILE_H

#include <stdbool.h>
#include <stddef.h>

#include "rundir/idset.h"
#include "rundir/run.h"
#include "util/error.h"
#include "util/str.h"
#include "util/strbuf.h"

/* <run_dir>/predictions/<config> (config NULL: <run_dir>/predictions), and
 * the file of a task in it. Caller frees; NULL when out of memory. */
char *kb_pred_dir(const char *run_dir, const char *config);
char *kb_pred_path(const char *run_dir, const char *config, const char *task);

/* One prediction line: what the runner writes per (config, sample), and
 * what resume, scoring, merge and reports read back. The fields `kvbench
 * score` reads (pred, answers, all_classes, length, dataset) plus the
 * bookkeeping reports need; a LongBench v2 line also carries what `kvbench
 * score --v2` reads: "answer" (its answers[0]), "difficulty" and "length" as
 * its class. Every text is a view: into the sample when the runner writes
 * the line, into the parsed line when one is read (kb_pred_lines). Texts
 * keep every byte; a NUL is "\u0000" in the file. */
typedef struct kb_prediction {
    kv_str id; /* the sample's _id */
    long index;
    const char *task;        /* "dataset" */
    const char *config;      /* NULL when read from a line without one */
    const char *config_hash; /* the config's kb_config_hash; NULL: not written */
    kv_str pred;             /* {NULL, 0} when read from a line without one */
    const kv_str *answers;
    size_t n_answers;
    const kv_str *all_classes; /* NULL: null */
    size_t n_classes;
    long length;              /* the sample's "length" field; -1 when read without one */
    const char *difficulty;   /* v2: "easy" | "hard"; NULL for LongBench lines */
    const char *length_class; /* v2: "short" | "medium" | "long", written as "length" */
    /* Counts and times: NAN when read from a line without them. */
    double prompt_tokens;       /* after truncation and chat template */
    double kept_tokens;         /* KV entries per layer after the prefill eviction */
    double context_tokens;      /* of prompt_tokens, the context part (before the question) */
    double kept_context_tokens; /* of kept_tokens, the context part's */
    double generated_tokens;
    double prefill_s; /* the shared prefill of this sample */
    double decode_s;  /* compress + decode of this config */
    /* When read: why the line cannot be scored (no "pred", "answers" not a
     * list of strings...), NULL when it can. */
    const char *unscorable;
} kb_prediction;

/* Appends p's JSON line (without its '\n') to b. Returns 0, or -1 when out
 * of memory. */
int kb_prediction_format(const kb_prediction *p, kv_strbuf *b);

/* The complete lines of a prediction file, in order, each parsed once. A
 * cut-short last line is skipped and counted; a damaged line elsewhere is an
 * error. A line is valid when it is a JSON object with a string "id" and an
 * "index" that is a whole number >= 0; the other fields are what they are
 * (kb_prediction says what stands for a missing one). */
typedef struct kb_pred_lines {
    char **text;         /* each line verbatim, without its '\n' (merge, recovery) */
    kb_prediction *line; /* each parsed: views into held */
    struct kb_pred_held *held;
    size_t n;
    long n_dropped;
} kb_pred_lines;

int kb_pred_lines_read(const char *path, kb_pred_lines *out, kv_error *err);
void kb_pred_lines_free(kb_pred_lines *l);

/* One predictions/<config>/<task>.jsonl opened for appending. */
typedef struct kb_pred_file {
    char *path;
    int fd;
    kb_idset done;  /* ids already in the file */
    long n_lines;   /* complete lines in the file */
    long n_dropped; /* cut-short lines dropped when opening (0 or 1) */
} kb_pred_file;

/* What every line of predictions/<config>/<task>.jsonl must say; NULL
 * members are not checked. */
typedef struct kb_pred_expect {
    const char *task;        /* "dataset" */
    const char *config;      /* "config" */
    const char *config_hash; /* "config_hash" (present and equal) */
    const kb_idset *ids;     /* the task data's sample ids: "id" is one of them, and
                              * "index" its position there when the set knows it */
    kb_shard shard;          /* the folder's shard ({0, 0}: any): "index" is one it runs */
} kb_pred_expect;

/* Checks every line against x: a line of another task, config or data set
 * does not belong in the file. The error names file:line and what to do. */
int kb_pred_lines_check(const kb_pred_lines *l, const char *path, const kb_pred_expect *x,
                        kv_error *err);

/* Opens (creating folders as needed) and recovers the file as described at
 * the top. A damaged line that is not the last one is an error: something
 * other than an interruption happened, and guessing would hide it. Every
 * line kept must be of this task and config, carry the config's hash as
 * run.json records it, and (ids not NULL) name a sample of the data at the
 * index it gives. The lines may come in any order (shards merged, lines
 * written by hand): a sample is done when its id has a line. */
int kb_pred_file_open(const kb_run *run, const char *config, const char *task, const kb_idset *ids,
                      kb_pred_file *pf, kv_error *err);
bool kb_pred_file_done(const kb_pred_file *pf, kv_str id);
/* The complete lines of predictions/<config>/<task>.jsonl (0: no file). */
long kb_pred_file_lines(const kb_run *run, const char *config, const char *task);
/* The checks of kb_pred_file_open on the file as it is (a missing file
 * passes), changing nothing. */
int kb_pred_file_verify(const kb_run *run, const char *config, const char *task,
                        const kb_idset *ids, kv_error *err);

/* Appends one prediction as one line, then fsyncs. A second line for an id
 * already in the file is refused. */
int kb_pred_file_append(kb_pred_file *pf, const kb_prediction *p, kv_error *err);
void kb_pred_file_close(kb_pred_file *pf);

#endif
