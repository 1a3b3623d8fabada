/* kvbench tokenize: a model's tokenizer (and chat template) on the command
 * line, one JSON line out per input, so that ids can be compared with any
 * other implementation line by line. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "cli.h"
#include "file.h"
#include "jsonl.h"
#include "tokenizer.h"

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

/* What one input line asks for, and where to write the answer. */
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

/* "key": "s" with JSON escapes; s is valid UTF-8 of n bytes, NULs included
 * (decoded text can hold them, which cJSON strings cannot). */
static void print_json_string(const char *key, const char *s, size_t n)
{
    printf("\"%s\": \"", key);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = c == '"'    ? "\\\""
                          : c == '\\' ? "\\\\"
                          : c == '\n' ? "\\n"
                          : c == '\r' ? "\\r"
                          : c == '\t' ? "\\t"
                                      : NULL;
        if (esc)
            fputs(esc, stdout);
        else if (c < 0x20)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

/* Opens the output object, with the input's id when it has one. */
static void begin_line(const cJSON *id)
{
    fputc('{', stdout);
    if (id) {
        char *p = cJSON_PrintUnformatted(id);
        printf("\"id\": %s, ", p ? p : "null");
        free(p);
    }
}

/* Parses "[1, 2]" or "1,2" into ids. */
static int parse_id_list(const char *s, int32_t **ids, size_t *n, const char *where)
{
    size_t cap = 16;
    *n = 0;
    *ids = malloc(cap * sizeof **ids);
    if (!*ids)
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
        if (*n == cap) {
            int32_t *m = realloc(*ids, (cap *= 2) * sizeof *m);
            if (!m)
                return -1;
            *ids = m;
        }
        (*ids)[(*n)++] = (int32_t)v;
        p = end;
        while (*p == ' ' || *p == ',' || *p == '\n' || *p == '\t' || *p == '\r')
            p++;
    }
    return 0;
}

static int json_id_array(const cJSON *arr, int32_t **ids, size_t *n, const char *where)
{
    *n = (size_t)cJSON_GetArraySize(arr);
    *ids = malloc((*n + 1) * sizeof **ids);
    if (!*ids)
        return -1;
    size_t i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, arr)
    {
        if (!cJSON_IsNumber(e)) {
            kb_error("%s: ids must be integers", where);
            return -1;
        }
        (*ids)[i++] = (int32_t)e->valueint;
    }
    return 0;
}

static int decode_ids(const job *j, const cJSON *id, const int32_t *ids, size_t n)
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
static char *chat_text(const job *j, const kv_chat_message *msgs, size_t n, bool gen, bool think)
{
    kv_error err;
    char *text = kv_chat_render(j->t, msgs, n, gen, think, &err);
    if (!text)
        kb_error("%s: %s", j->where, err.msg);
    return text;
}

static int encode_text(const job *j, const cJSON *id, const char *text, size_t len,
                       const char *rendered)
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
        print_json_string("text", rendered, strlen(rendered));
        fputs(", ", stdout);
    }
    print_ids(ids, n);
    fputs("}\n", stdout);
    free(ids);
    return 0;
}

/* One user message (after the --system one, if given) through the template. */
static int encode_chat(const job *j, const cJSON *id, const char *content)
{
    kv_chat_message m[2];
    size_t n = 0;
    const char *system = kb_arg(j->a, "system");
    if (system)
        m[n++] = (kv_chat_message){"system", system};
    m[n++] = (kv_chat_message){"user", content};
    char *text =
        chat_text(j, m, n, !kb_flag(j->a, "no-generation-prompt"), !kb_flag(j->a, "no-think"));
    if (!text)
        return -1;
    int rc = encode_text(j, id, text, strlen(text), text);
    free(text);
    return rc;
}

/* A JSON line's "messages": [{"role", "content"}...], with its own
 * add_generation_prompt / enable_thinking when present. */
static int encode_messages(const job *j, const cJSON *line, const cJSON *msgs)
{
    size_t n = (size_t)cJSON_GetArraySize(msgs), i = 0;
    kv_chat_message *m = calloc(n ? n : 1, sizeof *m);
    if (!m)
        return -1;
    const cJSON *e;
    cJSON_ArrayForEach(e, msgs)
    {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(e, "role");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(e, "content");
        if (!cJSON_IsString(role) || !cJSON_IsString(content)) {
            kb_error("%s: messages[%zu] needs string \"role\" and \"content\"", j->where, i);
            free(m);
            return -1;
        }
        m[i++] = (kv_chat_message){role->valuestring, content->valuestring};
    }
    const cJSON *gen = cJSON_GetObjectItemCaseSensitive(line, "add_generation_prompt");
    const cJSON *think = cJSON_GetObjectItemCaseSensitive(line, "enable_thinking");
    bool g = gen ? cJSON_IsTrue(gen) : !kb_flag(j->a, "no-generation-prompt");
    bool th = think ? cJSON_IsTrue(think) : !kb_flag(j->a, "no-think");
    char *text = chat_text(j, m, n, g, th);
    free(m);
    if (!text)
        return -1;
    int rc = encode_text(j, cJSON_GetObjectItemCaseSensitive(line, "id"), text, strlen(text), text);
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
        return encode_chat(j, NULL, s);
    return encode_text(j, NULL, s, len, NULL);
}

static int run_line(const job *j, const cJSON *line)
{
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(line, "id");
    bool decode = kb_flag(j->a, "decode");
    const char *name = kb_arg(j->a, "field") ? kb_arg(j->a, "field") : decode ? "ids" : "text";
    if (kb_flag(j->a, "chat") && !decode) {
        const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(line, "messages");
        if (cJSON_IsArray(msgs))
            return encode_messages(j, line, msgs);
    }
    const cJSON *field = cJSON_GetObjectItemCaseSensitive(line, name);
    if (decode) {
        int32_t *ids = NULL;
        size_t n;
        int rc = -1;
        if (cJSON_IsArray(field))
            rc = json_id_array(field, &ids, &n, j->where);
        else if (cJSON_IsString(field))
            rc = parse_id_list(field->valuestring, &ids, &n, j->where);
        else
            kb_error("%s: no \"%s\" array of ids", j->where, name);
        if (rc == 0)
            rc = decode_ids(j, id, ids, n);
        free(ids);
        return rc;
    }
    if (!cJSON_IsString(field)) {
        kb_error("%s: no string field \"%s\" (choose one with --field)", j->where, name);
        return -1;
    }
    if (kb_flag(j->a, "chat"))
        return encode_chat(j, id, field->valuestring);
    return encode_text(j, id, field->valuestring, strlen(field->valuestring), NULL);
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
        cJSON *line = cJSON_ParseWithLength(r->line, r->len);
        if (!cJSON_IsObject(line)) {
            kb_error("%s: not a JSON object", where);
            rc = -1;
        } else {
            rc = run_line(j, line);
        }
        cJSON_Delete(line);
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
    if (fflush(stdout) != 0) {
        kb_error("tokenize: cannot write the output: %s", strerror(errno));
        return KB_EXIT_FAIL;
    }
    return rc;
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
