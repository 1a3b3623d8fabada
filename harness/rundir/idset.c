#include "rundir/idset.h"

#include <stdlib.h>
#include <string.h>

long kb_idset_pos(const kb_idset *s, kv_str id)
{
    const kb_strmap_entry *e = kb_strmap_find(&s->map, id.p, id.n);
    return e ? (long)e->value : -2;
}

bool kb_idset_has(const kb_idset *s, kv_str id)
{
    return kb_idset_pos(s, id) != -2;
}

int kb_idset_add_at(kb_idset *s, kv_str id, long pos)
{
    char *copy = malloc(id.n + 1);
    if (!copy)
        return -1;
    if (id.n)
        memcpy(copy, id.p, id.n);
    int added;
    kb_strmap_entry *e = kb_strmap_upsert(&s->map, copy, id.n, pos, &added);
    /* kept unless the map holds its own: the id was there, or is "" */
    if (!e || !added || id.n == 0)
        free(copy);
    if (!e)
        return -1;
    if (!added)
        e->value = -1;
    return added;
}

int kb_idset_add(kb_idset *s, kv_str id)
{
    return kb_idset_has(s, id) ? 0 : kb_idset_add_at(s, id, -1);
}

size_t kb_idset_size(const kb_idset *s)
{
    return s->map.count;
}

void kb_idset_free(kb_idset *s)
{
    for (size_t i = 0; i < s->map.cap; i++)
        if (s->map.slots[i].key && s->map.slots[i].len) /* "" is the map's, not a copy */
            free((char *)s->map.slots[i].key);
    kb_strmap_free(&s->map);
}
