#include "longbench/jsonl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

lb_jsonl *lb_jsonl_open(const char *path)
{
    lb_jsonl *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->path = strdup(path);
    r->fp = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (!r->fp || !r->path) {
        int e = errno;
        free(r->path);
        free(r);
        errno = e;
        return NULL;
    }
    return r;
}

static bool is_blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
            return false;
    return true;
}

int lb_jsonl_next(lb_jsonl *r)
{
    for (;;) {
        errno = 0;
        ssize_t n = getline(&r->line, &r->cap, r->fp);
        if (n < 0)
            return ferror(r->fp) ? -1 : 0;
        r->lineno++;
        r->complete = n > 0 && r->line[n - 1] == '\n';
        if (r->complete)
            r->line[--n] = '\0';
        if (n > 0 && r->line[n - 1] == '\r')   /* files written on Windows */
            r->line[--n] = '\0';
        r->len = (size_t)n;
        if (!is_blank(r->line, r->len))
            return 1;
    }
}

void lb_jsonl_close(lb_jsonl *r)
{
    if (!r)
        return;
    if (r->fp && r->fp != stdin)
        fclose(r->fp);
    free(r->line);
    free(r->path);
    free(r);
}
