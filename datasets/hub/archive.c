#include "hub/archive.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>

#include "util/file.h"

/* A name is safe when it is relative, has no "." or ".." component and no
 * backslash (which some unzip tools treat as a separator). */
static bool safe_name(const char *name)
{
    if (!*name || name[0] == '/' || strchr(name, '\\'))
        return false;
    for (const char *p = name; *p;) {
        size_t n = strcspn(p, "/");
        if ((n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
            return false;
        p += n;
        if (*p == '/')
            p++;
    }
    return true;
}

/* Creates dir/rel's folders one by one, refusing to pass through anything that
 * is not a real folder (a symbolic link planted in the target would lead out). */
static int make_dirs(const char *dir, const char *rel, bool last_is_dir, kv_error *err)
{
    char *path = NULL;
    if (asprintf(&path, "%s/%s", dir, rel) < 0)
        return kv_fail(err, "out of memory");
    size_t base = strlen(dir) + 1;
    for (char *s = path + base;; s++) {
        bool end = *s == '\0';
        if (*s != '/' && !end)
            continue;
        if (end && !last_is_dir)
            break;
        char keep = *s;
        *s = '\0';
        struct stat st;
        if (mkdir(path, 0777) != 0 && errno != EEXIST) {
            kv_fail(err, "cannot create folder %s: %s", path, strerror(errno));
            free(path);
            return -1;
        }
        if (lstat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
            kv_fail(err, "%s is not a folder (a link?): refusing to extract through it", path);
            free(path);
            return -1;
        }
        *s = keep;
        if (end)
            break;
    }
    free(path);
    return 0;
}

/* Writes one entry through a temporary name, then renames it. */
static int extract_file(zip_t *z, zip_int64_t i, const char *dir, const char *name, kv_error *err)
{
    char *path = NULL, *tmp = NULL;
    if (asprintf(&path, "%s/%s", dir, name) < 0 || asprintf(&tmp, "%s.kvbtmp", path) < 0) {
        free(path);
        return kv_fail(err, "out of memory");
    }
    int rc = -1;
    zip_file_t *zf = zip_fopen_index(z, (zip_uint64_t)i, 0);
    int fd = zf ? open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0666) : -1;
    if (!zf) {
        kv_fail(err, "%s: %s", name, zip_strerror(z));
    } else if (fd < 0) {
        kv_fail(err, "cannot write %s: %s", tmp, strerror(errno));
    } else {
        char buf[1 << 16];
        zip_int64_t n;
        rc = 0;
        while (rc == 0 && (n = zip_fread(zf, buf, sizeof buf)) > 0)
            if (kv_write_all(fd, buf, (size_t)n) < 0)
                rc = kv_fail(err, "cannot write %s: %s", tmp, strerror(errno));
        if (rc == 0 && n < 0)
            rc = kv_fail(err, "%s: corrupt entry: %s", name, zip_file_strerror(zf));
        if (close(fd) != 0 && rc == 0)
            rc = kv_fail(err, "cannot write %s: %s", tmp, strerror(errno));
        fd = -1;
        if (rc == 0 && rename(tmp, path) != 0)
            rc = kv_fail(err, "cannot rename %s: %s", tmp, strerror(errno));
        if (rc != 0)
            unlink(tmp);
    }
    if (zf)
        zip_fclose(zf);
    free(path);
    free(tmp);
    return rc;
}

int lb_unzip(const char *zip_path, const char *dest_dir, size_t *n_files, kv_error *err)
{
    int zerr = 0;
    zip_t *z = zip_open(zip_path, ZIP_RDONLY | ZIP_CHECKCONS, &zerr);
    if (!z) {
        zip_error_t ze;
        zip_error_init_with_code(&ze, zerr);
        kv_fail(err, "%s: not a readable zip archive: %s", zip_path, zip_error_strerror(&ze));
        zip_error_fini(&ze);
        return -1;
    }
    zip_int64_t n = zip_get_num_entries(z, 0);
    int rc = 0;
    for (zip_int64_t i = 0; i < n && rc == 0; i++) { /* check every name first */
        const char *name = zip_get_name(z, (zip_uint64_t)i, ZIP_FL_ENC_GUESS);
        if (!name || !safe_name(name))
            rc = kv_fail(err,
                         "%s: entry \"%s\" would be written outside %s; nothing was "
                         "extracted",
                         zip_path, name ? name : "?", dest_dir);
    }
    if (rc == 0 && mkdir(dest_dir, 0777) != 0 && errno != EEXIST)
        rc = kv_fail(err, "cannot create folder %s: %s", dest_dir, strerror(errno));
    size_t files = 0;
    for (zip_int64_t i = 0; i < n && rc == 0; i++) {
        const char *name = zip_get_name(z, (zip_uint64_t)i, ZIP_FL_ENC_GUESS);
        size_t len = strlen(name);
        bool is_dir = name[len - 1] == '/';
        rc = make_dirs(dest_dir, name, is_dir, err);
        if (rc == 0 && !is_dir) {
            rc = extract_file(z, i, dest_dir, name, err);
            files++;
        }
    }
    zip_discard(z);
    if (n_files)
        *n_files = files;
    return rc;
}
