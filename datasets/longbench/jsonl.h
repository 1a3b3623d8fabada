/* Streaming JSON Lines reader: one record at a time, lines of any length.
 *
 * LongBench lines carry whole documents (several MB each), so nothing here
 * has a fixed limit; the buffer grows to the longest line seen.
 */
#ifndef LB_JSONL_H
#define LB_JSONL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef struct lb_jsonl {
    FILE *fp;
    char *path;
    char *line;        /* current line, NUL-terminated, newline stripped */
    size_t cap;
    size_t len;        /* length of the current line */
    long lineno;       /* 1-based number of the current line */
    bool complete;     /* the current line ended with '\n' (false: cut short) */
} lb_jsonl;

/* Opens path for reading ("-" is stdin). Returns NULL and sets errno on failure. */
lb_jsonl *lb_jsonl_open(const char *path);

/* Advances to the next non-blank line. Returns 1 when a line is available,
 * 0 at end of file, -1 on a read error (errno set). */
int lb_jsonl_next(lb_jsonl *r);

void lb_jsonl_close(lb_jsonl *r);

#endif
