/* kvcore/util/mem.h: the advice covers the whole huge pages inside a block
 * (the kernel marks their mapping "hg" in /proc/self/smaps) and nothing of
 * a block too small to hold one; a huge allocation lies wholly on advised
 * 2 MiB pages, a small one is plain; on a heap of huge pages, huge
 * allocations are packed. */
#include <criterion/criterion.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/mem.h"

#define MIB ((uintptr_t)1 << 20)

/* The VmFlags line of the mapping that holds address a, or "" when none. */
static void vm_flags(uintptr_t a, char *out, size_t n)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    cr_assert_not_null(f, "/proc/self/smaps: Linux only");
    char line[512];
    bool inside = false;
    out[0] = '\0';
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
            inside = a >= lo && a < hi;
        else if (inside && strncmp(line, "VmFlags:", 8) == 0) {
            snprintf(out, n, "%s", line + 8);
            break;
        }
    }
    fclose(f);
}

static bool has_flag(const char *flags, const char *flag)
{
    char padded[8];
    snprintf(padded, sizeof padded, " %s", flag);
    for (const char *p = strstr(flags, padded); p; p = strstr(p + 1, padded))
        if (p[3] == ' ' || p[3] == '\n' || p[3] == '\0')
            return true;
    return false;
}

Test(mem, whole_huge_pages_inside_a_block_are_advised)
{
    size_t bytes = 9 * MIB; /* holds at least three whole 2 MiB pages, wherever it starts */
    char *p = malloc(bytes);
    cr_assert_not_null(p);
    if (!kv_mem_advise_huge(p, bytes)) {
        free(p);
        cr_skip_test("the kernel has no transparent huge pages");
    }
    uintptr_t first = ((uintptr_t)p + 2 * MIB - 1) & ~(2 * MIB - 1);
    char flags[512];
    vm_flags(first + MIB, flags, sizeof flags);
    cr_expect(has_flag(flags, "hg"), "a whole huge page inside the block: VmFlags%s", flags);
    if (first > (uintptr_t)p) { /* the block's part of a huge page before it */
        vm_flags(first - 1, flags, sizeof flags);
        cr_expect_not(has_flag(flags, "hg"), "the part before the first whole page: VmFlags%s",
                      flags);
    }
    free(p);
}

Test(mem, a_block_smaller_than_a_huge_page_is_left_alone)
{
    char *p = malloc(MIB);
    cr_assert_not_null(p);
    cr_expect_not(kv_mem_advise_huge(p, MIB));
    cr_expect_not(kv_mem_advise_huge(NULL, 64 * MIB));
    free(p);
}

Test(mem, a_huge_allocation_is_aligned_advised_and_usable_to_its_last_byte)
{
    size_t sizes[] = {2 * MIB, 2 * MIB + 1, 5 * MIB + 12345};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        unsigned char *p = kv_mem_alloc_huge(sizes[i]);
        cr_assert_not_null(p);
        cr_expect_eq((uintptr_t)p % (2 * MIB), 0, "%zu bytes at %p", sizes[i], (void *)p);
        char flags[512];
        vm_flags((uintptr_t)p, flags, sizeof flags);
        if (kv_mem_advise_huge(p, sizes[i])) /* the kernel has transparent huge pages */
            cr_expect(has_flag(flags, "hg"), "its first byte: VmFlags%s", flags);
        memset(p, 0x5a, sizes[i]);
        cr_expect_eq(p[sizes[i] - 1], 0x5a);
        free(p);
    }
}

Test(mem, a_small_allocation_is_cache_line_aligned)
{
    size_t sizes[] = {1, 63, 4096, 2 * MIB - 1};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        unsigned char *p = kv_mem_alloc_huge(sizes[i]);
        cr_assert_not_null(p);
        cr_expect_eq((uintptr_t)p % 64, 0, "%zu bytes at %p", sizes[i], (void *)p);
        memset(p, 0x5a, sizes[i]);
        free(p);
    }
}

/* kvbench's heap (harness/cli/memory.c): every block from the heap, which
 * lies on huge pages, so kv_mem_alloc_huge packs its blocks there. Aligned
 * to 2 MiB, 16 blocks of 4 MiB took 96 MiB of heap: each left a hole of
 * almost 2 MiB, resident as one huge page. */
#ifndef __SANITIZE_ADDRESS__ /* ASan's allocator replaces glibc's heap */
Test(mem, on_a_heap_of_huge_pages_huge_allocations_leave_no_holes)
{
    mallopt(M_MMAP_MAX, 0); /* as kvbench: every block from the heap */
    kv_mem_set_heap_huge(true);
    cr_expect(kv_mem_heap_huge());
    enum { BLOCKS = 16 };
    size_t block = 4 * MIB; /* a whole number of huge pages, as a layer's matrices */
    unsigned char *p[BLOCKS];
    size_t before = mallinfo2().arena;
    for (int i = 0; i < BLOCKS; i++) {
        cr_assert_not_null(p[i] = kv_mem_alloc_huge(block));
        cr_expect_eq((uintptr_t)p[i] % 64, 0, "block %d at %p", i, (void *)p[i]);
        memset(p[i], 0x5a, block);
    }
    size_t grown = mallinfo2().arena - before;
    /* the blocks, their headers, and the top of the heap's last extension */
    cr_expect_leq(grown, BLOCKS * block + 4 * MIB, "%d blocks of %zu bytes grew the heap by %zu",
                  BLOCKS, block, grown);
    for (int i = 0; i < BLOCKS; i++)
        free(p[i]);
    kv_mem_set_heap_huge(false);
}
#endif
