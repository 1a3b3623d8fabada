/* datasets/jsonl: streaming lines of any length, blank lines skipped, line
 * numbers kept for error messages. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "longbench/jsonl.h"
#include "support/testutil.h"

static char *write_temp(const char *dir, const char *data, size_t n)
{
    char *path = malloc(strlen(dir) + 16);
    sprintf(path, "%s/x.jsonl", dir);
    FILE *f = fopen(path, "wb");
    fwrite(data, 1, n, f);
    fclose(f);
    return path;
}

Test(jsonl, lines_numbers_and_blank_lines)
{
    char *dir = tu_mkdtemp();
    const char data[] = "{\"a\":1}\n\n  \n{\"b\":2}\r\n{\"c\":3}";
    char *path = write_temp(dir, data, sizeof data - 1);
    lb_jsonl *r = lb_jsonl_open(path);
    cr_assert(r);
    cr_assert_eq(lb_jsonl_next(r), 1);
    cr_assert_str_eq(r->line, "{\"a\":1}");
    cr_assert_eq(r->lineno, 1);
    cr_assert(r->complete);
    cr_assert_eq(lb_jsonl_next(r), 1);
    cr_assert_str_eq(r->line, "{\"b\":2}");
    cr_assert_eq(r->lineno, 4);
    cr_assert_eq(lb_jsonl_next(r), 1);
    cr_assert_str_eq(r->line, "{\"c\":3}");
    cr_assert_eq(r->lineno, 5);
    cr_assert_not(r->complete, "a last line without newline is reported as cut short");
    cr_assert_eq(lb_jsonl_next(r), 0);
    lb_jsonl_close(r);
    tu_rmtree(dir);
    free(path);
    free(dir);
}

Test(jsonl, very_long_line)
{
    char *dir = tu_mkdtemp();
    size_t n = 9u << 20; /* 9 MiB, longer than any fixed buffer would be */
    char *data = malloc(n + 2);
    memset(data, 'x', n);
    data[0] = '"';
    data[n - 1] = '"';
    data[n] = '\n';
    char *path = write_temp(dir, data, n + 1);
    lb_jsonl *r = lb_jsonl_open(path);
    cr_assert_eq(lb_jsonl_next(r), 1);
    cr_assert_eq(r->len, n);
    cr_assert_eq(memcmp(r->line, data, n), 0);
    cr_assert_eq(lb_jsonl_next(r), 0);
    lb_jsonl_close(r);
    tu_rmtree(dir);
    free(data);
    free(path);
    free(dir);
}

Test(jsonl, missing_file)
{
    cr_assert_null(lb_jsonl_open("/nonexistent/kvbench/x.jsonl"));
}
