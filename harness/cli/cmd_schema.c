/* kvbench schema: the eviction parameters of configs/schema.json, generated
 * from the parameter table (kvcore/evict/evict_table.h), so the schema editors
 * read cannot drift from what kvbench accepts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/eviction.h"
#include "util/file.h"

static const kb_option options[] = {
    {"write", "FILE", "rewrite the eviction properties in FILE (configs/schema.json) in place"},
    {NULL, NULL, NULL},
};

/* The span of $defs.eviction's "properties" member as written by
 * kb_eviction_schema_text (it ends at the first line "      }"). */
static const char *find_block(const char *text, size_t *len)
{
    const char *ev = strstr(text, "\"eviction\": {");
    const char *start = ev ? strstr(ev, "\"properties\": {") : NULL;
    const char *end = start ? strstr(start, "\n      }") : NULL;
    if (!end)
        return NULL;
    *len = (size_t)(end + strlen("\n      }") - start);
    return start;
}

static int write_schema(const char *path, const char *block)
{
    char *text = NULL;
    size_t n = 0, len;
    kv_error err;
    if (kv_file_read(path, &text, &n, &err) != 0) {
        kb_error("%s", err.msg);
        return KB_EXIT_FAIL;
    }
    const char *at = find_block(text, &len);
    if (!at) {
        kb_error("%s: no \"eviction\": {... \"properties\": {...} block to replace", path);
        free(text);
        return KB_EXIT_FAIL;
    }
    size_t head = (size_t)(at - text), tail = n - head - len, blen = strlen(block);
    char *out = malloc(head + blen + tail);
    int rc = KB_EXIT_OK;
    if (!out) {
        kb_error("out of memory");
        rc = KB_EXIT_FAIL;
    } else {
        memcpy(out, text, head);
        memcpy(out + head, block, blen);
        memcpy(out + head + blen, at + len, tail);
        if (kv_write_atomic(path, out, head + blen + tail, &err) != 0) {
            kb_error("%s", err.msg);
            rc = KB_EXIT_FAIL;
        }
    }
    free(out);
    free(text);
    return rc;
}

static int run(const kb_args *a)
{
    char *block = kb_eviction_schema_text();
    if (!block) {
        kb_error("out of memory");
        return KB_EXIT_FAIL;
    }
    const char *path = kb_arg(a, "write");
    int rc = KB_EXIT_OK;
    if (path)
        rc = write_schema(path, block);
    else
        printf("%s\n", block);
    free(block);
    return rc;
}

const kb_command kb_cmd_schema = {
    .name = "schema",
    .summary = "print (or --write into configs/schema.json) the eviction parameters' JSON schema",
    .usage = "kvbench schema [--write configs/schema.json]",
    .options = options,
    .run = run,
};
