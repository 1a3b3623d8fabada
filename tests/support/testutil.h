/* Helpers shared by the Criterion tests: running the kvbench binary,
 * temporary folders (one per test with tu_dir), the demo matrix, and
 * locating files of the source tree. */
#ifndef KB_TESTUTIL_H
#define KB_TESTUTIL_H

#include <stdint.h>
#include <string.h>
#include <stddef.h>

typedef struct tu_result {
    int status;      /* exit code, or 128 + signal */
    char *out;       /* captured stdout, NUL-terminated */
    char *err;       /* captured stderr, NUL-terminated */
} tu_result;

/* Runs the kvbench binary under test with the given arguments (NULL-terminated),
 * stdin from /dev/null. */
tu_result tu_kvbench(const char *arg0, ...);
/* The same for a command that must succeed: a failed Criterion assertion,
 * with its stderr, where it exits with another status than 0. */
void tu_kvbench_ok(const char *arg0, ...);
/* Runs an arbitrary argv. */
tu_result tu_run_argv(char *const argv[]);
void tu_result_free(tu_result *r);

/* Crashes work(ctx, report_fd) again and again, as SIGKILL at a random
 * point would: each time in a child process, which reports each line it
 * commits with a byte on report_fd and returns its exit status. The parent
 * lets a random number of lines through (at most half of those left, so
 * that work is left), waits a random few microseconds (to also land inside
 * a write), then kills it. Until fewer than 2 of `lines` are left, a child
 * finishes before its kill lands (*status: its exit status, else 0), or
 * max_kills; random from srand(seed). Returns the number of kills. */
int tu_kill_at_random_points(int (*work)(void *ctx, int report_fd), void *ctx, long lines,
                             int max_kills, unsigned seed, int *status);

/* A fresh empty folder under $TMPDIR, removed by tu_rmtree. */
char *tu_mkdtemp(void);
void tu_rmtree(const char *path);

/* The folder of the running test, for a suite declared with
 * TestSuite(name, .init = tu_dir_make, .fini = tu_dir_remove): made empty
 * before each test and removed with all it holds after it, also when an
 * assertion failed (Criterion runs .fini then; a test that crashes on a
 * signal leaves its folder). */
extern char *tu_dir;
void tu_dir_make(void);
void tu_dir_remove(void);
/* The path rel inside tu_dir (free it). */
char *tu_at(const char *rel);

/* Writes tu_dir/NAME.json, the matrix of run NAME on the committed demo
 * model (models/kvbench-retrieval) and data (NULL: the shipped
 * datasets/synthetic), its runs under tu_dir/runs; its other top-level
 * members (JSON text without the braces) printf'ed from members_fmt and the
 * arguments. Returns the path. */
char *tu_write_demo_matrix(const char *name, const char *data, const char *members_fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Absolute path of a file in the source tree. */
char *tu_source(const char *rel);
/* Absolute path of a file under tests/data (see tests/data/README.md). */
char *tu_data(const char *rel);

/* Whole file as a NUL-terminated string (abort on failure). */
char *tu_slurp(const char *path, size_t *len);
/* The same of the file rel in the folder dir. */
char *tu_slurp_in(const char *dir, const char *rel);

/* The bits of an F32 value and back: tests that require results bit for bit. */
static inline uint32_t tu_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static inline float tu_f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

#endif
