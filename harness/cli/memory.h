/* How kvbench asks glibc's malloc for its memory (memory.c). */
#ifndef KB_CLI_MEMORY_H
#define KB_CLI_MEMORY_H

#include <stddef.h>

/* Called first in main: keeps freed memory in the process and, where glibc
 * can back the heap with transparent huge pages but the environment does not
 * say so yet, restarts kvbench with GLIBC_TUNABLES asking for them (glibc
 * reads its tunables only when a process starts). Returns only if kvbench
 * runs on as it is. */
void kb_memory_setup(char **argv);

/* The kernel's transparent huge page mode: "always", "madvise" or "never"
 * (the bracketed word of /sys/kernel/mm/transparent_hugepage/enabled);
 * "none" where the file is missing (no THP in this kernel). */
void kb_thp_mode(char *out, size_t n);

/* One line for `kvbench version --libraries`: which pages malloc's memory is
 * on, and why. */
void kb_memory_describe(char *out, size_t n);

#endif
