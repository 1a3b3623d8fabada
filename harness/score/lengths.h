/* The length groups of a per-length view: which samples a "score vs context
 * length" chart puts together.
 *
 * LongBench-E's buckets (0-4k, 4-8k, 8k+ words or characters, score.h) when a
 * run's samples span more than one of them. A run whose samples all fall in
 * one bucket, like the synthetic demo (prompts generated at 1,024, 1,536 and
 * 2,048 tokens, each a few tokens short of its target), is grouped by the
 * nearest multiple of 512 instead, when that gives at most KB_MAX_LENGTH_GROUPS
 * groups. Otherwise there is no per-length view.
 */
#ifndef KB_LENGTHS_H
#define KB_LENGTHS_H

#include <stdbool.h>
#include <stddef.h>

enum { KB_MAX_LENGTH_GROUPS = 8, KB_LENGTH_STEP = 512 };

typedef struct kb_length_groups {
    bool buckets;                  /* LongBench-E's buckets; else multiples of KB_LENGTH_STEP */
    size_t n;                      /* 0: no per-length view */
    long at[KB_MAX_LENGTH_GROUPS]; /* the multiples, ascending (when !buckets) */
    char names[KB_MAX_LENGTH_GROUPS][24];
} kb_length_groups;

/* Chooses the groups for these lengths (negative ones, unknown, are ignored). */
void kb_length_groups_choose(kb_length_groups *g, const long *lengths, size_t n);

/* The group of a length, or -1 (unknown length, or no group). */
int kb_length_group_of(const kb_length_groups *g, long length);

#endif
