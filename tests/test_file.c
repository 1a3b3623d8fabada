/* kvcore/file and kvcore/error. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "file.h"
#include "testutil.h"

Test(file, read_whole_file_nul_terminated)
{
    char *dir = tu_mkdtemp();
    char *path = kv_path_join(dir, "a.txt");
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
    tu_rmtree(dir);
    free(path);
    free(dir);
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
