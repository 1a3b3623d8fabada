/* The run folder: where `kvbench run` writes, and what makes it resumable.
 *
 *   <output>/<run>/run.json                          what was run (see kb_run_open)
 *   <output>/<run>/predictions/<config>/<task>.jsonl one JSON line per sample
 *   <output>/<run>/shards/<i>-of-<n>/...             the same, for `--shard i/n`
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
#ifndef KB_RESULTS_H
#define KB_RESULTS_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "util/error.h"
#include "matrix/matrix.h"
#include "util/str.h"

/* `--shard i/n`: this process handles the samples whose index % n == i
 * (0 <= i < n, 0-based like SLURM_ARRAY_TASK_ID and JOB_COMPLETION_INDEX).
 * count == 1 is the whole run. */
typedef struct kb_shard {
    long index, count;
} kb_shard;

/* Parses "i/n". */
int kb_shard_parse(const char *s, kb_shard *out, kv_error *err);
bool kb_shard_selects(const kb_shard *s, long sample_index);

struct kb_run;

/* What run.json records about a run. */
typedef struct kb_run_info {
    const char *kvbench_version; /* e.g. "0.1.0 (95ea4ba)" */
    const char *model_hash;      /* kb_hash_model of the model folder */
    const kb_matrix *matrix;     /* model, protocol, tasks and configs */
    kb_shard shard;
    /* Called, when not NULL, with the folder locked and run->json as it
     * will be written, before it is: a resume it refuses (a kept line that
     * does not belong) leaves run.json as it was. */
    int (*verify)(const struct kb_run *run, const void *ctx, kv_error *err);
    const void *verify_ctx;
} kb_run_info;

typedef struct kb_run {
    char *dir;   /* the folder holding run.json and predictions/ */
    cJSON *json; /* run.json as written */
    int lock_fd; /* run.lock, flock'ed while kb_run_open's caller writes */
    bool locked;
} kb_run;

/* The folder a run (or one shard of it) writes to:
 * <output>/<run> or <output>/<run>/shards/<i>-of-<n>. Caller frees. */
char *kb_run_dir(const char *output, const char *run_name, const kb_shard *shard);
/* <run_dir>/shards/<i>-of-<n>. Caller frees. */
char *kb_shard_dir(const char *run_dir, const kb_shard *shard);

/* Creates dir (and predictions/) or resumes it, holding an exclusive flock
 * on dir/run.lock until kb_run_close: a second run into the same folder
 * fails at once, naming the holder's pid and host (which run.lock records).
 * Predictions without a run.json beside them are refused: nothing tells
 * what made them. A new run writes run.json:
 * {"kvbench_version", "model", "model_hash", "protocol", "shard", "matrix"}.
 * An existing run.json must agree on model hash, protocol and shard, on the
 * hash of every config name both know and on the settings of every task both
 * know; configs and tasks that are new are added (run.json is rewritten
 * atomically), so a matrix can grow between nights. */
int kb_run_open(const char *dir, const kb_run_info *info, kb_run *run, kv_error *err);

/* Whether a kvbench run is writing dir now: 1 with "pid P on host H" in
 * holder, 0 when nobody holds dir's lock (or dir has none), -1 on an error.
 * It takes the lock for no longer than the test. */
int kb_run_lock_holder(const char *dir, char *holder, size_t n, kv_error *err);

/* Records in run.json that the run (or shard) completed: "finished" is the
 * UTC time, null while it runs. kb_run_open resets it (a rerun may add work). */
int kb_run_mark_finished(kb_run *run, kv_error *err);

/* Reads run.json of a finished or running run, checking nothing. */
int kb_run_load(const char *dir, kb_run *run, kv_error *err);
void kb_run_close(kb_run *run);

/* Fields of run.json: NULL when absent. */
const char *kb_run_string(const kb_run *run, const char *key);
/* The "params" of config `name` in run.json (JSON null for the full cache),
 * or NULL when run.json does not list it. */
const cJSON *kb_run_config(const kb_run *run, const char *name);

/* A set of sample ids (open addressing; ids are LongBench's 48-hex _id),
 * each with the sample's position in its task's data when known. */
typedef struct kb_idset {
    char **slots;
    long *pos; /* [cap]: position of slots[i] in the data, -1 when not known */
    size_t cap, n;
} kb_idset;

bool kb_idset_has(const kb_idset *s, const char *id);
int kb_idset_add(kb_idset *s, const char *id); /* 1 added, 0 present, -1 OOM */
/* Adds id at position pos of the data. An id the set holds already loses
 * its position (-1): a duplicated id has no single place. */
int kb_idset_add_at(kb_idset *s, const char *id, long pos);
/* The position recorded for id: -1 when unknown, -2 when id is not there. */
long kb_idset_pos(const kb_idset *s, const char *id);
void kb_idset_free(kb_idset *s);

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

/* Opens (creating folders as needed) and recovers the file as described at
 * the top. A damaged line that is not the last one is an error: something
 * other than an interruption happened, and guessing would hide it. Every
 * line kept must be of this task and config, carry the config's hash as
 * run.json records it, and (ids not NULL) name a sample of the data at the
 * index it gives. The lines may come in any order (shards merged, lines
 * written by hand): a sample is done when its id has a line. */
int kb_pred_file_open(const kb_run *run, const char *config, const char *task, const kb_idset *ids,
                      kb_pred_file *pf, kv_error *err);
bool kb_pred_file_done(const kb_pred_file *pf, const char *id);
/* The complete lines of predictions/<config>/<task>.jsonl (0: no file). */
long kb_pred_file_lines(const kb_run *run, const char *config, const char *task);
/* The checks of kb_pred_file_open on the file as it is (a missing file
 * passes), changing nothing. */
int kb_pred_file_verify(const kb_run *run, const char *config, const char *task,
                        const kb_idset *ids, kv_error *err);

/* Appends one prediction: an object with at least "id" (string) and "index"
 * (integer). Written as one line, then fsync'd. A second line for an id
 * already in the file is refused. */
int kb_pred_file_append(kb_pred_file *pf, const cJSON *line, kv_error *err);
void kb_pred_file_close(kb_pred_file *pf);

/* What the runner writes per (config, sample): the fields `kvbench score`
 * reads (pred, answers, all_classes, length, dataset) plus the bookkeeping
 * reports need. A LongBench v2 line also carries what `kvbench score --v2`
 * reads: "answer", "difficulty" and "length" as its class. Pointers are
 * borrowed; the answers and classes are the sample's own texts. */
typedef struct kb_prediction {
    const char *id;
    long index;
    const char *task;
    const char *config;
    const char *config_hash; /* the config's kb_config_hash; NULL: not written */
    const char *pred;
    size_t pred_len; /* pred may hold NUL bytes (written as \u0000); 0: strlen(pred) */
    const kv_str *answers;
    size_t n_answers;
    const kv_str *all_classes; /* NULL: written as null */
    size_t n_classes;
    long length;              /* the sample's "length" field */
    const char *difficulty;   /* v2: "easy" | "hard"; NULL for LongBench lines */
    const char *length_class; /* v2: "short" | "medium" | "long", written as "length" */
    long prompt_tokens;       /* after truncation and chat template */
    long kept_tokens;         /* KV entries per layer after the prefill eviction */
    long context_tokens;      /* of prompt_tokens, the context part (before the question) */
    long kept_context_tokens; /* of kept_tokens, the context part's */
    long generated_tokens;
    double prefill_s; /* the shared prefill of this sample */
    double decode_s;  /* compress + decode of this config */
} kb_prediction;

/* The JSON line for p (caller frees), NULL on OOM. */
cJSON *kb_prediction_json(const kb_prediction *p);

/* The complete lines of a prediction file, in order, for readers (merge,
 * reports). A cut-short last line is skipped and counted; a damaged line
 * elsewhere is an error. Each line is kept verbatim. */
typedef struct kb_pred_lines {
    char **text;  /* each line without its '\n' */
    cJSON **json; /* parsed */
    size_t n;
    long n_dropped;
} kb_pred_lines;

int kb_pred_lines_read(const char *path, kb_pred_lines *out, kv_error *err);
void kb_pred_lines_free(kb_pred_lines *l);

/* Checks every line against x: a line of another task, config or data set
 * does not belong in the file. The error names file:line and what to do. */
int kb_pred_lines_check(const kb_pred_lines *l, const char *path, const kb_pred_expect *x,
                        kv_error *err);

/* How many samples a task's data holds (data: run.json's "data" folder);
 * -1 when that cannot be known here (the callback tells the user why; the
 * line count of that task goes unchecked); -2 when the data is one no run
 * could complete (a repeated _id): err says why and the merge fails. */
typedef struct kb_task_sizes {
    long (*count)(void *ctx, const char *data, const char *task, kv_error *err);
    void *ctx;
} kb_task_sizes;

/* Joins the shard folders (each with run.json and predictions/) into out_dir:
 * refuses shards of different models, protocols, shard counts or config
 * hashes, an incomplete or repeated shard set, a shard that has not finished
 * (unless allow_unfinished), a line in the wrong shard, and (sizes not NULL,
 * every shard finished) a (config, task) of the matrix whose merged lines
 * are not exactly the task's first `limit` samples in number;
 * writes each (config, task) file sorted by sample index, and a run.json
 * without the shard. Lines are copied verbatim. *n_files receives the number
 * of prediction files written. */
int kb_run_merge(const char *const *shard_dirs, size_t n_shards, const char *out_dir,
                 bool allow_unfinished, const kb_task_sizes *sizes, size_t *n_files, kv_error *err);

#endif
