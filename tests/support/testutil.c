#include "support/testutil.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

char *tu_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "tu_slurp: cannot open %s\n", path);
        abort();
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (cap - n - 1 == 0)
            buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    buf[n] = '\0';
    if (len)
        *len = n;
    return buf;
}

char *tu_slurp_in(const char *dir, const char *rel)
{
    char *path = NULL;
    if (asprintf(&path, "%s/%s", dir, rel) < 0)
        abort();
    char *text = tu_slurp(path, NULL);
    free(path);
    return text;
}

tu_result tu_run_argv(char *const argv[])
{
    tu_result r = {0};
    char out_path[] = "/tmp/kvbtest-out-XXXXXX";
    char err_path[] = "/tmp/kvbtest-err-XXXXXX";
    int out_fd = mkstemp(out_path), err_fd = mkstemp(err_path);
    pid_t pid = fork();
    if (pid == 0) {
        int in = open("/dev/null", O_RDONLY);
        dup2(in, 0);
        dup2(out_fd, 1);
        dup2(err_fd, 2);
        execv(argv[0], argv);
        _exit(127);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    close(out_fd);
    close(err_fd);
    r.out = tu_slurp(out_path, NULL);
    r.err = tu_slurp(err_path, NULL);
    unlink(out_path);
    unlink(err_path);
    return r;
}

static tu_result kvbench_v(const char *arg0, va_list ap)
{
    char *argv[128];
    int n = 0;
    const char *bin = getenv("KVBENCH");
    argv[n++] = (char *)(bin ? bin : "./kvbench");
    for (const char *s = arg0; s && n < 127; s = va_arg(ap, const char *))
        argv[n++] = (char *)s;
    argv[n] = NULL;
    return tu_run_argv(argv);
}

tu_result tu_kvbench(const char *arg0, ...)
{
    va_list ap;
    va_start(ap, arg0);
    tu_result r = kvbench_v(arg0, ap);
    va_end(ap);
    return r;
}

void tu_kvbench_ok(const char *arg0, ...)
{
    va_list ap;
    va_start(ap, arg0);
    tu_result r = kvbench_v(arg0, ap);
    va_end(ap);
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_result_free(&r);
}

void tu_result_free(tu_result *r)
{
    free(r->out);
    free(r->err);
    r->out = r->err = NULL;
}

int tu_kill_at_random_points(int (*work)(void *ctx, int report_fd), void *ctx, long lines,
                             int max_kills, unsigned seed, int *status)
{
    srand(seed);
    long left = lines;
    int kills = 0;
    *status = 0;
    while (left > 1 && kills < max_kills) {
        int fds[2];
        if (pipe(fds) != 0) {
            perror("tu_kill_at_random_points: pipe");
            abort();
        }
        pid_t pid = fork();
        if (pid == 0) {
            close(fds[0]);
            _exit(work(ctx, fds[1]));
        }
        close(fds[1]);
        long let = rand() % (left / 2 + 1);
        char c;
        for (long i = 0; i < let && read(fds[0], &c, 1) == 1; i++)
            left--;
        usleep((useconds_t)(rand() % 300));
        kill(pid, SIGKILL);
        int st;
        waitpid(pid, &st, 0);
        while (read(fds[0], &c, 1) == 1) /* lines committed before the kill landed */
            left--;
        close(fds[0]);
        if (WIFEXITED(st)) { /* it finished the rest before the kill landed */
            *status = WEXITSTATUS(st);
            break;
        }
        kills++;
    }
    return kills;
}

char *tu_mkdtemp(void)
{
    const char *base = getenv("TMPDIR");
    char tmpl[512];
    snprintf(tmpl, sizeof tmpl, "%s/kvbtest-XXXXXX", base ? base : "/tmp");
    char *d = mkdtemp(tmpl);
    return d ? strdup(d) : NULL;
}

void tu_rmtree(const char *path)
{
    char *argv[] = {"/bin/rm", "-rf", (char *)path, NULL};
    tu_result r = tu_run_argv(argv);
    tu_result_free(&r);
}

char *tu_dir;

void tu_dir_make(void)
{
    tu_dir = tu_mkdtemp();
    if (!tu_dir) {
        fprintf(stderr, "tu_dir_make: cannot make a temporary folder\n");
        abort();
    }
}

void tu_dir_remove(void)
{
    tu_rmtree(tu_dir);
    free(tu_dir);
    tu_dir = NULL;
}

char *tu_at(const char *rel)
{
    char *p = NULL;
    if (asprintf(&p, "%s/%s", tu_dir, rel) < 0)
        abort();
    return p;
}

char *tu_write_demo_matrix(const char *name, const char *data, const char *members_fmt, ...)
{
    char *members;
    va_list ap;
    va_start(ap, members_fmt);
    int n = vasprintf(&members, members_fmt, ap);
    va_end(ap);
    if (n < 0)
        abort();
    char *model = tu_source("models/kvbench-retrieval");
    char *shipped = tu_source("datasets/synthetic");
    char *path = NULL;
    if (asprintf(&path, "%s/%s.json", tu_dir, name) < 0)
        abort();
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "tu_write_demo_matrix: cannot write %s\n", path);
        abort();
    }
    fprintf(f, "{\"model\": \"%s\", \"data\": \"%s\", \"output\": \"%s/runs\", %s}\n", model,
            data ? data : shipped, tu_dir, members);
    fclose(f);
    free(members);
    free(model);
    free(shipped);
    return path;
}

static char *join_env(const char *var, const char *rel)
{
    const char *base = getenv(var);
    if (!base)
        return NULL;
    size_t n = strlen(base) + strlen(rel) + 2;
    char *p = malloc(n);
    snprintf(p, n, "%s/%s", base, rel);
    return p;
}

char *tu_source(const char *rel)
{
    char *p = join_env("KVB_SOURCE", rel);
    if (!p) {
        fprintf(stderr, "tu_source: KVB_SOURCE is not set\n");
        abort();
    }
    return p;
}

char *tu_data(const char *rel)
{
    char *p = NULL;
    if (asprintf(&p, "tests/data/%s", rel) < 0)
        abort();
    char *abs = tu_source(p);
    free(p);
    return abs;
}
