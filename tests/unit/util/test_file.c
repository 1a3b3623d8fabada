/* kvcore/file and kvcore/error. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/error.h"
#include "util/file.h"
#include "support/testutil.h"

TestSuite(file, .init = tu_dir_make, .fini = tu_dir_remove);

Test(file, read_whole_file_nul_terminated)
{
    char *path = kv_path_join(tu_dir, "a.txt");
    FILE *f = fopen(path, "wb");
    fputs("hello\nworld", f);
    fclose(f);
    char *data;
    size_t len;
    kv_error err;
    cr_assert_eq(kv_file_read(path, &data, &len, &err), 0, "%s", err.msg);
    cr_assert_eq(len, 11);
    cr_assert_str_eq(data, "hello\nworld");
    free(data);
    free(path);
}

Test(file, missing_file_error_names_path)
{
    char *data;
    size_t len;
    kv_error err;
    cr_assert_lt(kv_file_read("/nonexistent/model/config.json", &data, &len, &err), 0);
    cr_assert(strstr(err.msg, "/nonexistent/model/config.json: cannot open"), "%s", err.msg);
}

Test(file, path_join)
{
    char *p = kv_path_join("models/x", "config.json");
    cr_assert_str_eq(p, "models/x/config.json");
    free(p);
    p = kv_path_join("models/x/", "config.json");
    cr_assert_str_eq(p, "models/x/config.json");
    free(p);
}

Test(error, prefix)
{
    kv_error err;
    cr_assert_eq(kv_fail(&err, "bad dtype '%s'", "Q4"), -1);
    kv_fail_prefix(&err, "model.safetensors");
    cr_assert_str_eq(err.msg, "model.safetensors: bad dtype 'Q4'");
}

static void touch(const char *dir, const char *name, const char *text)
{
    char *path = kv_path_join(dir, name);
    FILE *f = fopen(path, "wb");
    cr_assert(f, "%s", path);
    fputs(text, f);
    fclose(f);
    free(path);
}

/* Names sorted whatever order readdir gives, hidden ones and "."/".." left
 * out, the suffix filter applied; a missing folder keeps ENOENT in errno. */
Test(file, dir_list_sorted_without_hidden_names)
{
    const char *names[] = {"b.jsonl", "a.json", ".hidden.jsonl", "c.jsonl", "a.jsonl.tmp"};
    for (int i = 0; i < 5; i++)
        touch(tu_dir, names[i], "x");
    char **got;
    size_t n;
    kv_error err;
    cr_assert_eq(kv_dir_list(tu_dir, NULL, &got, &n, &err), 0, "%s", err.msg);
    cr_assert_eq(n, 4);
    const char *all[] = {"a.json", "a.jsonl.tmp", "b.jsonl", "c.jsonl"};
    for (size_t i = 0; i < n; i++)
        cr_expect_str_eq(got[i], all[i]);
    kv_names_free(got, n);
    cr_assert_eq(kv_dir_list(tu_dir, ".jsonl", &got, &n, &err), 0, "%s", err.msg);
    cr_assert_eq(n, 2);
    cr_expect_str_eq(got[0], "b.jsonl");
    cr_expect_str_eq(got[1], "c.jsonl");
    kv_names_free(got, n);
    char *missing = kv_path_join(tu_dir, "none");
    cr_assert_eq(kv_dir_list(missing, NULL, &got, &n, &err), -1);
    cr_expect_eq(errno, ENOENT);
    cr_expect(strstr(err.msg, "none: cannot open the folder"), "%s", err.msg);
    cr_expect_null(got);
    cr_expect_eq(n, 0);
    free(missing);
}

Test(file, mkdirs_creates_every_level_and_accepts_existing_ones)
{
    char *deep = kv_path_join(tu_dir, "a/b/c");
    kv_error err;
    cr_assert_eq(kv_mkdirs(deep, &err), 0, "%s", err.msg);
    cr_assert_eq(kv_mkdirs(deep, &err), 0, "%s", err.msg);
    struct stat st;
    cr_assert(stat(deep, &st) == 0 && S_ISDIR(st.st_mode));
    /* A file in the way is a clear error. */
    touch(tu_dir, "file", "x");
    char *blocked = kv_path_join(tu_dir, "file/sub");
    cr_assert_eq(kv_mkdirs(blocked, &err), -1);
    cr_expect(strstr(err.msg, "file/sub: cannot create the folder"), "%s", err.msg);
    free(blocked);
    free(deep);
}

/* The new content replaces the old in one step and no .tmp is left; a
 * failed write leaves the old file as it was. */
Test(file, write_atomic_replaces_or_leaves_the_old_file)
{
    char *path = kv_path_join(tu_dir, "scores.json");
    kv_error err;
    cr_assert_eq(kv_write_atomic(path, "old", 3, &err), 0, "%s", err.msg);
    cr_assert_eq(kv_write_atomic(path, "new!", 4, &err), 0, "%s", err.msg);
    char *data;
    size_t len;
    cr_assert_eq(kv_file_read(path, &data, &len, &err), 0, "%s", err.msg);
    cr_expect_str_eq(data, "new!");
    free(data);
    char *tmp = kv_path_join(tu_dir, "scores.json.tmp");
    cr_expect_neq(access(tmp, F_OK), 0, "the temporary file is left behind");
    /* A folder where the temporary file should go makes the write fail. */
    cr_assert_eq(mkdir(tmp, 0777), 0);
    cr_assert_eq(kv_write_atomic(path, "lost", 4, &err), -1);
    cr_expect(strstr(err.msg, "scores.json.tmp: cannot write"), "%s", err.msg);
    cr_assert_eq(kv_file_read(path, &data, &len, &err), 0, "%s", err.msg);
    cr_expect_str_eq(data, "new!");
    free(data);
    free(tmp);
    free(path);
}
