#include "cluster/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/strbuf.h"

extern char **environ;

/* Reads both pipes to their ends; poll keeps a chatty stderr from
 * blocking the child while stdout is being read. */
static int drain(int fds[2], kv_strbuf bufs[2])
{
    struct pollfd p[2] = {{.fd = fds[0], .events = POLLIN}, {.fd = fds[1], .events = POLLIN}};
    int open_fds = 2;
    while (open_fds > 0) {
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        for (int k = 0; k < 2; k++) {
            if (p[k].fd < 0 || !p[k].revents)
                continue;
            char chunk[4096];
            ssize_t got = read(p[k].fd, chunk, sizeof chunk);
            if (got < 0 && errno == EINTR)
                continue;
            if (got <= 0) {
                p[k].fd = -1;
                open_fds--;
            } else if (kv_strbuf_add(&bufs[k], chunk, (size_t)got) < 0) {
                return -1;
            }
        }
    }
    return 0;
}

static char *take(kv_strbuf *b)
{
    char *s = b->s ? b->s : strdup("");
    b->s = NULL;
    return s;
}

int kb_proc_run(const char *const *argv, kb_proc_output *o, kv_error *err)
{
    memset(o, 0, sizeof *o);
    int out[2] = {-1, -1}, errp[2] = {-1, -1};
    if (pipe2(out, O_CLOEXEC) < 0 || pipe2(errp, O_CLOEXEC) < 0) {
        kv_fail(err, "cannot create a pipe: %s", strerror(errno));
        goto fail;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_adddup2(&fa, errp[1], 2);
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(out[1]);
    close(errp[1]);
    out[1] = errp[1] = -1;
    if (rc != 0) {
        if (rc == ENOENT) {
            close(out[0]);
            close(errp[0]);
            return 1;
        }
        kv_fail(err, "cannot run %s: %s", argv[0], strerror(rc));
        goto fail;
    }
    kv_strbuf bufs[2] = {{0}};
    int fds[2] = {out[0], errp[0]};
    int drained = drain(fds, bufs);
    int ws;
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR)
        ;
    o->status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
    o->out = take(&bufs[0]);
    o->errs = take(&bufs[1]);
    kv_strbuf_free(&bufs[0]);
    kv_strbuf_free(&bufs[1]);
    close(out[0]);
    close(errp[0]);
    if (drained < 0 || !o->out || !o->errs) {
        kb_proc_output_free(o);
        return kv_fail(err, "%s: cannot read its output", argv[0]);
    }
    return 0;
fail:
    for (int k = 0; k < 2; k++) {
        if (out[k] >= 0)
            close(out[k]);
        if (errp[k] >= 0)
            close(errp[k]);
    }
    return -1;
}

void kb_proc_output_free(kb_proc_output *o)
{
    free(o->out);
    free(o->errs);
    o->out = o->errs = NULL;
}
