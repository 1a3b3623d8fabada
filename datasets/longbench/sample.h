/* LongBench samples: a validating, streaming loader over JSONL files.
 *
 * One record is parsed at a time (kv_jscan over the line, NULs kept), so memory stays at the
 * size of the longest line whatever the file size. Every record is checked
 * against the LongBench schema (docs/longbench.md); a malformed
 * line (invalid UTF-8 included, with its byte) is reported as
 * "file:line: what is wrong". Unknown keys are ignored,
 * because third-party copies of LongBench add their own.
 */
#ifndef LB_SAMPLE_H
#define LB_SAMPLE_H

#include <stdbool.h>
#include <stddef.h>

#include "util/error.h"
#include "util/str.h"
#include "longbench/tasks.h"

/* One LongBench record, owned by the sample. Text fields are kv_str: JSON's
 * "\u0000" is data, and every byte of a context reaches the prompt. The id
 * is one too: a key (resume, selection) that a cut at a NUL would merge with
 * another. Metadata are C strings: a NUL in them (dataset, language...) is
 * refused. */
typedef struct lb_sample {
    kv_str id;    /* "_id" ({NULL, 0} until read) */
    kv_str input; /* may be "" */
    kv_str context;
    kv_str *answers; /* n_answers >= 1 */
    size_t n_answers;
    kv_str *all_classes; /* NULL when the record has null (every task but trec/lsht) */
    size_t n_classes;
    long length; /* words (en/code) or characters (zh); LongBench-E buckets */
    char *dataset;
    char *language;
    long lineno; /* where the record is in its file */
    /* LongBench v2 only ({NULL, 0} for v1 records); question -> input, answer -> answers[0]: */
    kv_str choices[4]; /* choice_A .. choice_D */
    char *domain;
    char *difficulty;   /* "easy" | "hard" */
    char *length_class; /* "short" | "medium" | "long" */
    kv_str cot;         /* v2_cot_ans: the first step's output, set by the caller */
} lb_sample;

/* The record layout of a file: LongBench (v1 and -E) JSONL lines, or LongBench
 * v2 objects (data.json: one JSON array; JSON lines are read too). */
typedef enum lb_schema {
    LB_SCHEMA_V1,
    LB_SCHEMA_V2,
} lb_schema;

void lb_sample_free(lb_sample *s);

/* Where a task's samples are under dir: dir/T.jsonl, else dir/data/T.jsonl (the
 * layout of LongBench's data.zip); LongBench v2: dir/data.json; a user task:
 * its own file, whatever dir is. malloc'd; the
 * file may not exist (the loader then says so). NULL when out of memory. */
char *lb_sample_path(const char *dir, const lb_task *task);

/* Parses one JSON line into *s (zeroed first). On failure returns -1 with
 * "what is wrong" in err (the caller adds file:line) and *s left empty. */
int lb_sample_parse(const char *line, size_t len, lb_sample *s, kv_error *err);
int lb_sample_parse_v2(const char *text, size_t len, lb_sample *s, kv_error *err);

typedef enum lb_on_error {
    LB_ON_ERROR_STOP, /* the first malformed line is an error (default) */
    LB_ON_ERROR_SKIP, /* malformed lines are counted and skipped */
} lb_on_error;

typedef struct lb_loader_options {
    lb_schema schema;
    lb_on_error on_error;
    long limit;             /* at most this many samples; 0: all */
    const kv_str *ids;      /* only these _id values (file order is kept); NULL: all */
    size_t n_ids;
} lb_loader_options;

typedef struct lb_loader lb_loader;

/* Opens a LongBench .jsonl file ("-" is stdin), or a JSON array of records
 * (LongBench v2's data.json: a file whose first character is '['), read one
 * element at a time; errors then name "file:line" where the element starts.
 * opts may be NULL (defaults). */
lb_loader *lb_loader_open(const char *path, const lb_loader_options *opts, kv_error *err);

/* Reads the next selected sample into *s (the caller frees it with
 * lb_sample_free). Returns 1 for a sample, 0 at the end, -1 on an error:
 * a malformed line under LB_ON_ERROR_STOP, a read error, or, at the end of
 * the file, requested ids that the file does not contain. */
int lb_loader_next(lb_loader *l, lb_sample *s, kv_error *err);

/* Malformed lines skipped so far, and the message of the last one ("" if none),
 * so that a caller can report them. */
long lb_loader_skipped(const lb_loader *l);
const char *lb_loader_last_skip(const lb_loader *l);

/* Records read so far (selected or not, malformed ones included). */
long lb_loader_records(const lb_loader *l);

void lb_loader_close(lb_loader *l);

#endif
