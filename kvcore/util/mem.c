#include "util/mem.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#define HUGE_PAGE ((uintptr_t)2 << 20)

bool kv_mem_advise_huge(void *p, size_t bytes)
{
#ifdef MADV_HUGEPAGE
    /* only whole huge pages: the advice applies to page-aligned ranges, and
     * a partial one at either end would be backed by 4 KiB pages anyway */
    uintptr_t from = ((uintptr_t)p + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    uintptr_t to = ((uintptr_t)p + bytes) & ~(HUGE_PAGE - 1);
    return p && to > from && madvise((void *)from, to - from, MADV_HUGEPAGE) == 0;
#else
    (void)p;
    (void)bytes;
    return false;
#endif
}

static bool heap_huge;

void kv_mem_set_heap_huge(bool on)
{
    heap_huge = on;
}

bool kv_mem_heap_huge(void)
{
    return heap_huge;
}

void *kv_mem_alloc_huge(size_t bytes)
{
    if (bytes < HUGE_PAGE || heap_huge)
        return aligned_alloc(64, (bytes + 63) / 64 * 64);
    size_t size = (bytes + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    void *p = aligned_alloc(HUGE_PAGE, size);
    if (p)
        kv_mem_advise_huge(p, size);
    return p;
}
