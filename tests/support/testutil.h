/* Helpers shared by the Criterion tests: running the kvbench binary,
 * temporary folders, and locating files of the source tree. */
#ifndef KB_TESTUTIL_H
#define KB_TESTUTIL_H

#include <stddef.h>

typedef struct tu_result {
    int status;      /* exit code, or 128 + signal */
    char *out;       /* captured stdout, NUL-terminated */
    char *err;       /* captured stderr, NUL-terminated */
} tu_result;

/* Runs the kvbench binary under test with the given arguments (NULL-terminated),
 * stdin from /dev/null. */
tu_result tu_kvbench(const char *arg0, ...);
/* Runs an arbitrary argv. */
tu_result tu_run_argv(char *const argv[]);
void tu_result_free(tu_result *r);

/* A fresh empty folder under $TMPDIR, removed by tu_rmtree. */
char *tu_mkdtemp(void);
void tu_rmtree(const char *path);

/* Absolute path of a file in the source tree. */
char *tu_source(const char *rel);
/* Absolute path of a file under tests/data (see tests/data/README.md). */
char *tu_data(const char *rel);

/* Whole file as a NUL-terminated string (abort on failure). */
char *tu_slurp(const char *path, size_t *len);

#endif
