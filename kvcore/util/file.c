#include "util/file.h"
#include "util/vec.h"

#include <dirent.h>
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

int kv_write_all(int fd, const char *data, size_t len)
{
    while (len > 0) {
        ssize_t w = write(fd, data, len);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        data += w;
        len -= (size_t)w;
    }
    return 0;
}

/* A rename is durable only once the folder holding it is synced. */
static void sync_parent(const char *path)
{
    char *dir = strdup(path);
    if (!dir)
        return;
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    int fd = open(slash ? dir : ".", O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    free(dir);
}

int kv_write_atomic(const char *path, const char *data, size_t len, kv_error *err)
{
    size_t n = strlen(path) + 5;
    char *tmp = malloc(n);
    if (!tmp)
        return kv_fail(err, "out of memory");
    snprintf(tmp, n, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    int rc = 0;
    if (fd < 0 || kv_write_all(fd, data, len) < 0 || fsync(fd) < 0)
        rc = kv_fail(err, "%s: cannot write: %s", tmp, strerror(errno));
    if (fd >= 0 && close(fd) < 0 && rc == 0)
        rc = kv_fail(err, "%s: cannot write: %s", tmp, strerror(errno));
    if (rc == 0 && rename(tmp, path) < 0)
        rc = kv_fail(err, "%s: cannot rename to %s: %s", tmp, path, strerror(errno));
    if (rc < 0)
        unlink(tmp);
    else
        sync_parent(path);
    free(tmp);
    return rc;
}

int kv_mkdirs(const char *path, kv_error *err)
{
    char *p = strdup(path);
    if (!p)
        return kv_fail(err, "out of memory");
    for (char *s = p + 1;; s++) {
        char c = *s;
        if (c != '/' && c != '\0')
            continue;
        *s = '\0';
        if (mkdir(p, 0777) < 0 && errno != EEXIST) {
            kv_fail(err, "%s: cannot create the folder: %s", p, strerror(errno));
            free(p);
            return -1;
        }
        *s = c;
        if (!c)
            break;
    }
    free(p);
    return 0;
}

bool kv_ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && memcmp(s + n - k, suffix, k) == 0;
}

void kv_names_free(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int kv_dir_list(const char *dir, const char *suffix, char ***names, size_t *n, kv_error *err)
{
    *names = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) {
        int why = errno;
        kv_fail(err, "%s: cannot open the folder: %s", dir, strerror(why));
        errno = why;
        return -1;
    }
    size_t cap = 0;
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || (suffix && !kv_ends_with(e->d_name, suffix)))
            continue;
        if (KV_VEC_RESERVE(*names, cap, *n + 1, 16) < 0) {
            rc = kv_fail(err, "%s: out of memory listing the folder", dir);
            break;
        }
        if (!((*names)[*n] = strdup(e->d_name)))
            rc = kv_fail(err, "%s: out of memory listing the folder", dir);
        else
            (*n)++;
    }
    closedir(d);
    if (rc < 0) {
        kv_names_free(*names, *n);
        *names = NULL;
        *n = 0;
        return -1;
    }
    if (*n)
        qsort(*names, *n, sizeof **names, cmp_name);
    return 0;
}
