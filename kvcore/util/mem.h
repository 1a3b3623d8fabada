/* Memory that is written in bulk right after it is allocated (a KV cache,
 * a fork of one, the model's weights). */
#ifndef KV_MEM_H
#define KV_MEM_H

#include <stdbool.h>
#include <stddef.h>

/* Asks the kernel to back the whole 2 MiB pages inside [p, p + bytes) with
 * transparent huge pages (Linux's "madvise" mode, the usual default, backs
 * only what is asked for). Fresh memory then costs one page fault per
 * 2 MiB instead of per 4 KiB. That matters most on a virtual machine,
 * where a fault exits to the hypervisor: on the 2-core AVX512_BF16 VM,
 * 512 MB written in 4 KiB pages right after malloc went at 0.10-0.16 GB/s
 * (the faults), with this advice at 1.9-2.5 GB/s once the VM's memory had
 * been used before; a `kvbench run` of one 2,048-token sample, full cache
 * alone, took 451,220 faults and 8.5 s of system time without it.
 * Blocks smaller than 2 MiB are left alone. Returns whether the advice was
 * given (false: too small, or the kernel has no transparent huge pages). */
bool kv_mem_advise_huge(void *p, size_t bytes);

/* bytes of fresh memory for free(), uninitialised, NULL when out of
 * memory: 64-byte aligned, and when bytes >= 2 MiB aligned to 2 MiB and
 * advised as above, so that all of it lies on huge pages (a block from
 * malloc keeps 4 KiB pages at both ends, and one of 2-4 MiB, a layer's
 * weights or a prefill's buffer, may hold no whole huge page at all).
 * Where malloc's heap is on huge pages itself (kv_mem_set_heap_huge), every
 * block is a plain 64-byte aligned one: it lies on huge pages as it is. */
void *kv_mem_alloc_huge(size_t bytes);

/* Tells kv_mem_alloc_huge whether malloc takes every block from a heap that
 * lies wholly on transparent huge pages (kvbench: glibc.malloc.hugetlb=1 and
 * no mmapped blocks, harness/cli/memory.c); false until set. There a 2 MiB
 * alignment costs memory and buys nothing: an aligned block is a whole
 * number of 2 MiB pages, and the next one's 16-byte header cannot go in
 * front of the next boundary (the last one's end), so it goes 2 MiB on:
 * every aligned block left a free hole of almost 2 MiB behind the last, and
 * on a heap of huge pages the hole's own header made it a resident huge
 * page. The 0.6B model's ~200 weight matrices alone held 0.4 GB of
 * `kvbench run`'s peak that way. Set it before the first allocation. */
void kv_mem_set_heap_huge(bool on);

/* What kv_mem_set_heap_huge said last. */
bool kv_mem_heap_huge(void);

#endif
