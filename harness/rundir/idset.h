/* A set of sample ids, each with the sample's position in its task's data
 * when known: what resume checks kept lines against, and the ids a
 * prediction file already holds. A kb_strmap (score/strmap.h) that owns
 * copies of its keys. */
#ifndef KB_IDSET_H
#define KB_IDSET_H

#include <stdbool.h>
#include <stddef.h>

#include "score/strmap.h"
#include "util/str.h"

typedef struct kb_idset {
    kb_strmap map; /* id -> position in the data, -1 when not known */
} kb_idset;

/* Ids are byte strings: LongBench's _id may hold a NUL ("\u0000"). */
bool kb_idset_has(const kb_idset *s, kv_str id);
int kb_idset_add(kb_idset *s, kv_str id); /* 1 added, 0 present, -1 OOM */
/* Adds id at position pos of the data. An id the set holds already loses
 * its position (-1): a duplicated id has no single place. */
int kb_idset_add_at(kb_idset *s, kv_str id, long pos);
/* The position recorded for id: -1 when unknown, -2 when id is not there. */
long kb_idset_pos(const kb_idset *s, kv_str id);
size_t kb_idset_size(const kb_idset *s);
void kb_idset_free(kb_idset *s);

#endif
