/* kvbench tokenize: a model's tokenizer (and chat template) on the command
 * line, one JSON line out per input, so that ids can be compared with any
 * other implementation line by line. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/chat.h"
#include "cli/cli.h"
#include "util/file.h"
#include "longbench/jsonl.h"
#include "util/jsonstr.h"
#include "tokenizer/tokenizer.h"
#include "util/vec.h"

static const kb_option options[] = {
    {"model", "DIR", "model folder with tokenizer.json (and tokenizer_config.json)"},
    {"text", "T", "one input given on the command line"},
    {"file", "F", "one input: the whole file"},
    {"jsonl", "F", "one input per JSON line ('-' reads stdin); \"id\" is copied to the output"},
    {"field", "NAME",
     "the field of each JSON line to read (default \"text\"; \"ids\" with --decode)"},
    {"add-special", NULL,
     "add the tokens of tokenizer.json's post-processor (BOS...), as HF's "
     "add_special_tokens=True"},
    {"decode", NULL, "decode ids (a JSON array or comma-separated list) into text"},
    {"skip-special", NULL, "with --decode: drop special tokens (<|im_end|>...) from the text"},
    {"chat", NULL,
     "render the chat template first: the input is a user message, or with --jsonl "
     "a line's \"messages\" array when it has one"},
    {"system", "TEXT", "with --chat: a system message before the user message"},
    {"no-think", NULL, "with --chat: enable_thinking=false (Qwen3: empty <think> block)"},
    {"no-generation-prompt", NULL, "with --chat: do not append the assistant header"},
    {NULL, NULL, NULL},
};

/* The command's settings and the input at hand (named in messages). */
typedef struct job {
    const kb_args *a;
    const kv_tokenizer *t;
    const char *where; /* "FILE:LINE" or "--text" for messages */
} job;

static void print_ids(const int32_t *ids, size_t n)
{
    fputs("\"ids\": [", stdout);
    for (size_t i = 0; i < n; i++)
        printf(i ? ", %d" : "%d", ids[i]);
    fputc(']', stdout);
}

/* "key": "s", for text of n bytes that may hold NULs (as \u0000). */
static void print_json_string(const char *key, const char *s, size_t n)
{
    kv_strbuf b = {0};
    if (kv_json_quote(&b, s, n) == 0)
        printf("\"%s\": %s", key, b.s);
    kv_strbuf_free(&b);
}

/* Opens the output object, with the input's id when it has one. */
static void begin_line(const json_t *id)
{
    fputc('{', stdout);
    if (id) {
        char *p = json_dumps(id, JSON_ENCODE_ANY | JSON_COMPACT);
        printf("\"id\": %s, ", p ? p : "null");
        free(p);
    }
}

/* Parses "[1, 2]" or "1,2" into ids. */
static int parse_id_list(const char *s, int32_t **ids, size_t *n, const char *where)
{
    size_t cap = 0;
    *n = 0;
    *ids = NULL;
    if (KV_VEC_RESERVE(*ids, cap, 16, 16) < 0)
        return -1;
    const char *p = s;
    while (*p == ' ' || *p == '[' || *p == '\n')
        p++;
    while (*p && *p != ']') {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < INT32_MIN || v > INT32_MAX) {
            kb_error("%s: ids must be integers separated by commas, got \"%.20s\"", where, p);
            return -1;
        }
        if (KV_VEC_RESERVE(*ids, cap, *n + 1, 16) < 0)
            return -1;
        (*ids)[(*n)++] = (int32_t)v;
        p = end;
        while (*p == ' ' || *p == ',' || *p == '\n' || *p == '\t' || *p == '\r')
            p++;
    }
    return 0;
}

static int json_id_array(const json_t *arr, int32_t **ids, size_t *n, const char *where)
{
    *n = json_array_size(arr);
    *ids = malloc((*n + 1) * sizeof **ids);
    if (!*ids)
        return -1;
    for (size_t i = 0; i < *n; i++) {
        const json_t *e = json_array_get(arr, i);
        json_int_t v = json_is_integer(e) ? json_integer_value(e) : -1;
        if (!json_is_integer(e) || v < INT32_MIN || v > INT32_MAX) {
            kb_error("%s: ids must be integers", where);
            return -1;
        }
        (*ids)[i] = (int32_t)v;
    }
    return 0;
}

static int decode_ids(const job *j, const json_t *id, const int32_t *ids, size_t n)
{
    size_t len;
    char *text = kv_tokenizer_decode_len(j->t, ids, n, kb_flag(j->a, "skip-special"), &len);
    if (!text) {
        kb_error("%s: out of memory", j->where);
        return -1;
    }
    begin_line(id);
    print_json_string("text", text, len);
    fputs("}\n", stdout);
    free(text);
    return 0;
}

/* Renders messages (or one user message) with the chat template. */
static char *chat_text(const job *j, const kv_chat_message *msgs, size_t n, bool gen, bool think,
                       size_t *len)
{
    kv_error err;
    char *text = kv_chat_render_len(j->t, msgs, n, gen, think, len, &err);
    if (!text)
        kb_error("%s: %s", j->where, err.msg);
    return text;
}

/* Encodes text[0..len); with `rendered` (the chat text, the same bytes) the
 * output carries the text too. */
static int encode_text(const job *j, const json_t *id, const char *text, size_t len, bool rendered)
{
    int32_t *ids;
    size_t n;
    kv_error err;
    int rc = kb_flag(j->a, "add-special")
                 ? kv_tokenizer_encode_special(j->t, text, len, &ids, &n, &err)
                 : kv_tokenizer_encode(j->t, text, len, &ids, &n, &err);
    if (rc != 0) {
        kb_error("%s: %s", j->where, err.msg);
        return -1;
    }
    begin_line(id);
    if (rendered) {
        print_json_string("text", text, len);
        fputs(", ", stdout);
    }
    print_ids(ids, n);
    fputs("}\n", stdout);
    free(ids);
    return 0;
}

/* One user message (after the --system one, if given) through the template. */
static int encode_chat(const job *j, const json_t *id, const char *content, size_t content_len)
{
    kv_chat_message m[2];
    size_t n = 0, len;
    const char *system = kb_arg(j->a, "system");
    if (system)
        m[n++] = (kv_chat_message){.role = "system", .content = system};
    m[n++] = (kv_chat_message){.role = "user", .content = content, .content_len = content_len};
    char *text = chat_text(j, m, n, !kb_flag(j->a, "no-generation-prompt"),
                           !kb_flag(j->a, "no-think"), &len);
    if (!text)
        return -1;
    int rc = encode_text(j, id, text, len, true);
    free(text);
    return rc;
}

/* A JSON line's "messages": [{"role", "content"}...], with its own
 * add_generation_prompt / enable_thinking when present. */
static int encode_messages(const job *j, const json_t *line, const json_t *msgs)
{
    size_t n = json_array_size(msgs), len;
    kv_chat_message *m = calloc(n ? n : 1, sizeof *m);
    if (!m)
        return -1;
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_array_get(msgs, i);
        const json_t *role = json_object_get(e, "role");
        const json_t *content = json_object_get(e, "content");
        if (!json_is_string(role) || !json_is_string(content)) {
            kb_error("%s: messages[%zu] needs string \"role\" and \"content\"", j->where, i);
            free(m);
            return -1;
        }
        m[i] = (kv_chat_message){.role = json_string_value(role),
                                 .content = json_string_value(content),
                                 .content_len = json_string_length(content)};
    }
    const json_t *gen = json_object_get(line, "add_generation_prompt");
    const json_t *think = json_object_get(line, "enable_thinking");
    bool g = gen ? json_is_true(gen) : !kb_flag(j->a, "no-generation-prompt");
    bool th = think ? json_is_true(think) : !kb_flag(j->a, "no-think");
    char *text = chat_text(j, m, n, g, th, &len);
    free(m);
    if (!text)
        return -1;
    int rc = encode_text(j, json_object_get(line, "id"), text, len, true);
    free(text);
    return rc;
}

/* One input that is not a JSON line: --text or --file. */
static int run_plain(const job *j, const char *s, size_t len)
{
    if (kb_flag(j->a, "decode")) {
        int32_t *ids;
        size_t n;
        int rc = parse_id_list(s, &ids, &n, j->where);
        if (rc == 0)
            rc = decode_ids(j, NULL, ids, n);
        free(ids);
        return rc;
    }
    if (kb_flag(j->a, "chat"))
        return encode_chat(j, NULL, s, len);
    return encode_text(j, NULL, s, len, false);
}

static int run_line(const job *j, const json_t *line)
{
    const json_t *id = json_object_get(line, "id");
    bool decode = kb_flag(j->a, "decode");
    const char *name = kb_arg(j->a, "field") ? kb_arg(j->a, "field") : decode ? "ids" : "text";
    if (kb_flag(j->a, "chat") && !decode) {
        const json_t *msgs = json_object_get(line, "messages");
        if (json_is_array(msgs))
            return encode_messages(j, line, msgs);
    }
    const json_t *field = json_object_get(line, name);
    if (decode) {
        int32_t *ids = NULL;
        size_t n;
        int rc = -1;
        if (json_is_array(field))
            rc = json_id_array(field, &ids, &n, j->where);
        else if (json_is_string(field))
            rc = parse_id_list(json_string_value(field), &ids, &n, j->where);
        else
            kb_error("%s: no \"%s\" array of ids", j->where, name);
        if (rc == 0)
            rc = decode_ids(j, id, ids, n);
        free(ids);
        return rc;
    }
    if (!json_is_string(field)) {
        kb_error("%s: no string field \"%s\" (choose one with --field)", j->where, name);
        return -1;
    }
    const char *text = json_string_value(field);
    size_t len = json_string_length(field);
    if (kb_flag(j->a, "chat"))
        return encode_chat(j, id, text, len);
    return encode_text(j, id, text, len, false);
}

static int run_jsonl(job *j, const char *path)
{
    lb_jsonl *r = lb_jsonl_open(path);
    if (!r) {
        kb_error("%s: cannot open: %s", path, strerror(errno));
        return KB_EXIT_FAIL;
    }
    int rc = 0, more;
    char where[1024];
    while (rc == 0 && (more = lb_jsonl_next(r)) == 1) {
        snprintf(where, sizeof where, "%s:%ld", path, r->lineno);
        j->where = where;
        kv_error err;
        json_t *line = kv_json_load(r->line, r->len, &err);
        if (!line) {
            kb_error("%s: %s", where, err.msg);
            rc = -1;
        } else if (!json_is_object(line)) {
            kb_error("%s: not a JSON object", where);
            rc = -1;
        } else {
            rc = run_line(j, line);
        }
        json_decref(line);
    }
    if (rc == 0 && more < 0) {
        kb_error("%s: read error: %s", path, strerror(errno));
        rc = -1;
    }
    lb_jsonl_close(r);
    return rc == 0 ? KB_EXIT_OK : KB_EXIT_FAIL;
}

static int run(const kb_args *a)
{
    const char *model = kb_arg(a, "model"), *text = kb_arg(a, "text"), *file = kb_arg(a, "file"),
               *jsonl = kb_arg(a, "jsonl");
    if (!model) {
        kb_error("tokenize: --model DIR is required");
        return KB_EXIT_USAGE;
    }
    if (!!text + !!file + !!jsonl != 1) {
        kb_error("tokenize: give exactly one of --text, --file, --jsonl");
        return KB_EXIT_USAGE;
    }
    kv_error err;
    kv_tokenizer *t = kv_tokenizer_load(model, &err);
    if (!t) {
        kb_error("%s", err.msg);
        return KB_EXIT_FAIL;
    }
    job j = {a, t, text ? "--text" : file};
    int rc;
    if (jsonl) {
        rc = run_jsonl(&j, jsonl);
    } else if (text) {
        rc = run_plain(&j, text, strlen(text)) == 0 ? KB_EXIT_OK : KB_EXIT_FAIL;
    } else {
        char *data = NULL;
        size_t len = 0;
        bool ok = kv_file_read(file, &data, &len, &err) == 0;
        if (!ok)
            kb_error("%s", err.msg);
        rc = ok && run_plain(&j, data, len) == 0 ? KB_EXIT_OK : KB_EXIT_FAIL;
        free(data);
    }
    kv_tokenizer_free(t);
    return rc; /* main checks that stdout got it all */
}

const kb_command kb_cmd_tokenize = {
    .name = "tokenize",
    .summary = "encode or decode text with a model's tokenizer",
    .usage = "kvbench tokenize --model DIR (--text T | --file F | --jsonl F) [options]",
    .description =
        "Prints one JSON line per input: {\"id\": ..., \"ids\": [...]} (the id is copied "
        "from a --jsonl line that has one), or with --decode {\"id\": ..., \"text\": "
        "...}. With --chat the line also carries the rendered \"text\".",
    .options = options,
    .run = run,
};
