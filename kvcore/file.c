#include "file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int kv_file_pread(int fd, void *buf, size_t n, size_t off, const char *path, kv_error *err)
{
    char *p = buf;
    while (n > 0) {
        ssize_t got = pread(fd, p, n, (off_t)off);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            return kv_fail(err, "%s: read failed: %s", path, strerror(errno));
        }
        if (got == 0)
            return kv_fail(err, "%s: file is truncated (wanted %zu more bytes at offset %zu)",
                           path, n, off);
        p += got;
        n -= (size_t)got;
        off += (size_t)got;
    }
    return 0;
}

int kv_file_read(const char *path, char **data, size_t *len, kv_error *err)
{
    *data = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return kv_fail(err, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return kv_fail(err, "%s: not a regular file", path);
    }
    size_t n = (size_t)st.st_size;
    char *buf = malloc(n + 1);
    if (!buf) {
        close(fd);
        return kv_fail(err, "%s: out of memory reading %zu bytes", path, n);
    }
    if (kv_file_pread(fd, buf, n, 0, path, err) != 0) {
        free(buf);
        close(fd);
        return -1;
    }
    close(fd);
    buf[n] = '\0';
    *data = buf;
    *len = n;
    return 0;
}

char *kv_path_join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    int slash = a > 0 && dir[a - 1] != '/';
    char *s = malloc(a + (size_t)slash + b + 1);
    if (!s)
        return NULL;
    memcpy(s, dir, a);
    if (slash)
        s[a] = '/';
    memcpy(s + a + (size_t)slash, name, b + 1);
    return s;
}

int kv_file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}
