/* kvbench's memory from glibc's malloc: kept once freed, on huge pages.
 *
 * A run allocates and frees the same large buffers for every sample (the
 * prompt's cache and statistics, each config's compressed fork) and every
 * decode step (the forward's scratch). glibc serves blocks above its mmap
 * threshold as fresh mappings and hands a freed heap top back to the
 * kernel, so each sample paid for the same memory again in page faults and
 * in the kernel zeroing fresh pages (a quarter of a sweep's profile with
 * memset and memmove, on an AVX512_BF16 machine). Every block now comes
 * from the heap, and the heap keeps what is freed, for the next sample
 * (keep_freed_memory). The peak is what the largest sample held; it only
 * stays resident.
 *
 * Huge pages: decode attention streams every cache's keys and values once a
 * step, and a slot's keys in one layer are 4 KiB at Qwen3-0.6B, one 4 KiB
 * page each: on 4 KiB pages every slot was a TLB miss, and a sweep's 16
 * forks (most of them below kvcore's own 2 MiB huge-page blocks,
 * kv_mem_alloc_huge) read at ~4 GB per CPU-second. glibc 2.35's
 * glibc.malloc.hugetlb=1 advises transparent huge pages on all of malloc's
 * memory, heap included: `kvbench run` of full + 16 H2O/SnapKV configs on a
 * 2,048-token sample (tests/bench/run_sweep.sh) went 124.7 -> 67 CPU-s,
 * 490 k -> 4.5 k minor faults, peak RSS unchanged. kvcore then takes its
 * huge blocks from the heap as they are (kv_mem_set_heap_huge): aligned to
 * 2 MiB each, they left a resident huge page between each two. */
#include "cli/memory.h"

#include <malloc.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/mem.h"

#define HUGETLB_TUNABLE "glibc.malloc.hugetlb"

/* Never mmap: glibc's largest mmap threshold is 32 MB, and a block above it
 * (a prefill's widened layer weights, 63 MB in f32 mode at the 0.6B shapes)
 * was a fresh mapping every call. Never trim: a sweep's sample frees its
 * forks together at its end (3.8 GB with 16 F32 configs at 2,048 tokens),
 * more than any threshold mallopt's int can name, and glibc gave all of it
 * back to the kernel: the next sample faulted it in and had it zeroed again
 * (strace: one brk down by 3.8 GB between the samples). One arena: a
 * sample's forks are written on the pool's threads, and another thread's
 * arena cannot grow past 64 MB without mmap, nor hand what it frees to
 * the main thread's next sample. */
static void keep_freed_memory(void)
{
    mallopt(M_MMAP_MAX, 0);
    mallopt(M_TRIM_THRESHOLD, -1); /* -1: trimming off (mallopt(3)) */
    mallopt(M_ARENA_MAX, 1);
}

void kb_thp_mode(char *out, size_t n)
{
    snprintf(out, n, "none");
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (!f)
        return;
    char line[128];
    if (fgets(line, sizeof line, f)) {
        char *a = strchr(line, '['), *b = a ? strchr(a, ']') : NULL;
        if (a && b)
            snprintf(out, n, "%.*s", (int)(b - a - 1), a + 1);
    }
    fclose(f);
}

static bool glibc_has_hugetlb(void)
{
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
    return true;
#else
    return false;
#endif
}

static bool thp_takes_advice(const char *mode)
{
    return strcmp(mode, "madvise") == 0 || strcmp(mode, "always") == 0;
}

/* Whether glibc's malloc advises its heap (all of it, with every block from
 * the heap: keep_freed_memory) for transparent huge pages in this process,
 * given the GLIBC_TUNABLES it started with: hugetlb=1 does; 0 does not, and
 * 2 asks for hugetlbfs pages, mmapped (and 4 KiB pages where none are
 * reserved, the usual case), no heap at all. */
static bool heap_on_huge_pages(const char *tunables, const char *mode)
{
    const char *h = tunables ? strstr(tunables, HUGETLB_TUNABLE "=") : NULL;
    const char *v = h ? h + sizeof HUGETLB_TUNABLE : NULL; /* its value, after the '=' */
    return glibc_has_hugetlb() && v && v[0] == '1' && (v[1] == '\0' || v[1] == ':') &&
           thp_takes_advice(mode);
}

void kb_memory_setup(char **argv)
{
    keep_freed_memory();
    const char *t = getenv("GLIBC_TUNABLES");
    char mode[16];
    kb_thp_mode(mode, sizeof mode);
    /* The user's own setting (either way) stands, and so does a kernel or a
     * libc that has no use for it; glibc read the tunables as they are now
     * (this process started with them). */
    if (!glibc_has_hugetlb() || (t && strstr(t, HUGETLB_TUNABLE)) || !thp_takes_advice(mode)) {
        kv_mem_set_heap_huge(heap_on_huge_pages(t, mode));
        return;
    }
    char value[4096];
    int len = snprintf(value, sizeof value, "%s%s" HUGETLB_TUNABLE "=1", t ? t : "", t ? ":" : "");
    if (len < 0 || (size_t)len >= sizeof value)
        return;
    setenv("GLIBC_TUNABLES", value, 1);
    execv("/proc/self/exe", argv);
    /* No restart (no /proc): run on with 4 KiB pages (kvcore's heap flag
     * stays unset); the variable stays set, so a child kvbench does not try
     * again. */
}

void kb_memory_describe(char *out, size_t n)
{
    const char *t = getenv("GLIBC_TUNABLES");
    const char *h = t ? strstr(t, HUGETLB_TUNABLE "=") : NULL;
    char mode[16];
    kb_thp_mode(mode, sizeof mode);
    /* what kb_memory_setup found (a failed restart leaves the variable set
     * on a heap of 4 KiB pages) */
    snprintf(out, n, "memory: malloc on %s (transparent huge pages: %s; GLIBC_TUNABLES %s%.*s)",
             kv_mem_heap_huge() ? "huge pages" : "4 KiB pages", mode,
             h ? "" : "without " HUGETLB_TUNABLE,
             h ? (int)strcspn(h, ":") : 0, h ? h : "");
}
