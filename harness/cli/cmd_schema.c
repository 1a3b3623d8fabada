/* kvbench schema: the JSON Schema of config files (configs/schema.json,
 * built in), whose eviction parameters are generated from the parameter
 * table (kvcore/evict/evict_table.h), so the schema editors read cannot
 * drift from what kvbench accepts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/eviction.h"
#include "util/file.h"
#include "cli/schema_text.h"

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

/* text with its eviction properties replaced by block; NULL after
 * reporting (no block in text, or out of memory). */
static char *splice(const char *text, const char *block, const char *what)
{
    size_t len;
    const char *at = find_block(text, &len);
    if (!at) {
        kb_error("%s: no \"eviction\": {... \"properties\": {...} block to replace", what);
        return NULL;
    }
    size_t head = (size_t)(at - text), blen = strlen(block), tail = strlen(at + len);
    char *out = malloc(head + blen + tail + 1);
    if (!out) {
        kb_error("out of memory");
        return NULL;
    }
    memcpy(out, text, head);
    memcpy(out + head, block, blen);
    memcpy(out + head + blen, at + len, tail + 1);
    return out;
}

static int write_schema(const char *path, const char *block)
{
    char *text = NULL;
    size_t n = 0;
    kv_error err;
    if (kv_file_read(path, &text, &n, &err) != 0) {
        kb_error("%s", err.msg);
        return KB_EXIT_FAIL;
    }
    char *out = splice(text, block, path);
    int rc = out ? KB_EXIT_OK : KB_EXIT_FAIL;
    if (out && kv_write_atomic(path, out, strlen(out), &err) != 0) {
        kb_error("%s", err.msg);
        rc = KB_EXIT_FAIL;
    }
    free(out);
    free(text);
    return rc;
}

/* The whole document: configs/schema.json as built in, with the table's
 * eviction properties (the same as the file's while the file is current). */
static int print_schema(const char *block)
{
    char *doc = splice(kb_schema_document, block, "the built-in schema");
    if (!doc)
        return KB_EXIT_FAIL;
    fputs(doc, stdout);
    free(doc);
    return KB_EXIT_OK;
}

static int run(const kb_args *a)
{
    char *block = kb_eviction_schema_text();
    if (!block) {
        kb_error("out of memory");
        return KB_EXIT_FAIL;
    }
    const char *path = kb_arg(a, "write");
    int rc = path ? write_schema(path, block) : print_schema(block);
    free(block);
    return rc;
}

const kb_command kb_cmd_schema = {
    .name = "schema",
    .summary = "print the config files' JSON Schema (--write: its eviction part into a file)",
    .usage = "kvbench schema [--write configs/schema.json]",
    .options = options,
    .run = run,
};
