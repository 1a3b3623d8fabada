/* Unpacking zip archives (libzip), such as LongBench's data.zip.
 *
 * Every entry name is checked before anything is written: an absolute name,
 * a ".." component, a backslash or an existing symbolic link on the way
 * would put a file outside the target folder, and the whole archive is then
 * refused.
 */
#ifndef LB_ARCHIVE_H
#define LB_ARCHIVE_H

#include <stddef.h>

#include "util/error.h"

/* Extracts zip_path into dest_dir (created if missing). Existing files with
 * the same names are replaced. *n_files (may be NULL) receives the number of
 * files written. */
int lb_unzip(const char *zip_path, const char *dest_dir, size_t *n_files, kv_error *err);

#endif
