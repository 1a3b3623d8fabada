/* Whole-file reads into process memory.
 *
 * Models and tokenizers are read, not mmap'd: on the machines kvbench runs on
 * the kernel pages out idle file-backed pages, and a mapped model gets re-read
 * from disk in the middle of a run.
 */
#ifndef KV_FILE_H
#define KV_FILE_H

#include <stddef.h>

#include "error.h"

/* Reads all of path into a malloc'd buffer with a NUL byte after the data
 * (so text files can be used as C strings). *len excludes the NUL. */
int kv_file_read(const char *path, char **data, size_t *len, kv_error *err);

/* Reads exactly n bytes at offset off of an open file descriptor. */
int kv_file_pread(int fd, void *buf, size_t n, size_t off, const char *path, kv_error *err);

/* Joins dir and name with one '/' into a malloc'd string. */
char *kv_path_join(const char *dir, const char *name);

/* 1 if path names an existing regular file, else 0. */
int kv_file_exists(const char *path);

#endif
