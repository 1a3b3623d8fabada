/* Files and folders: whole-file reads, atomic writes, folder listings and
 * creation, so that each is written once.
 *
 * Models and tokenizers are read, not mmap'd: on the machines kvbench runs on
 * the kernel pages out idle file-backed pages, and a mapped model gets re-read
 * from disk in the middle of a run.
 */
#ifndef KV_FILE_H
#define KV_FILE_H

#include <stdbool.h>
#include <stddef.h>

#include "util/error.h"

/* Reads all of path into a malloc'd buffer with a NUL byte after the data
 * (so text files can be used as C strings). *len excludes the NUL. */
int kv_file_read(const char *path, char **data, size_t *len, kv_error *err);

/* Reads exactly n bytes at offset off of an open file descriptor. */
int kv_file_pread(int fd, void *buf, size_t n, size_t off, const char *path, kv_error *err);

/* Joins dir and name with one '/' into a malloc'd string. */
char *kv_path_join(const char *dir, const char *name);

/* 1 if path names an existing regular file, else 0. */
int kv_file_exists(const char *path);

/* Writes all of data to fd, through short writes and EINTR; -1 with errno
 * set on failure. */
int kv_write_all(int fd, const char *data, size_t len);

/* Writes data to path through path.tmp + fsync + rename + fsync of the
 * folder: readers see the old file or the new one, never a mix. */
int kv_write_atomic(const char *path, const char *data, size_t len, kv_error *err);

/* mkdir -p: creates path and every missing folder above it. */
int kv_mkdirs(const char *path, kv_error *err);

/* The names in folder dir, sorted by strcmp, without hidden ones ("." first)
 * and, when suffix is not NULL, only those ending with it: a malloc'd array
 * of malloc'd strings, released with kv_names_free. On failure errno still
 * tells why the folder could not be opened (ENOENT: there is none). */
int kv_dir_list(const char *dir, const char *suffix, char ***names, size_t *n, kv_error *err);
void kv_names_free(char **names, size_t n);

/* true when s ends with suffix. */
bool kv_ends_with(const char *s, const char *suffix);

#endif
