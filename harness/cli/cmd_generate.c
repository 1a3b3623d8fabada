/* kvbench generate: greedy generation from one prompt.
 *
 * The prompt is text (--prompt, --prompt-file; encoded with the model's
 * tokenizer) or token ids (--tokens). The continuation streams to stdout as
 * text (or as ids when the model folder has no tokenizer); --json prints one
 * object instead. --dump-logits writes the logits of every fed position as a
 * float32 .npy [P + N - 1, vocab]: row P - 1 + k chose generated token k + 1.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/chat.h"
#include "cli/cli.h"
#include "longbench/prompt.h"
#include "util/clock.h"
#include "cli/eviction.h"
#include "util/file.h"
#include "model/generate.h"
#include "util/jsonstr.h"
#include "model/kernels.h"
#include "model/model.h"
#include "util/npy.h"
#include "tokenizer/tokenizer.h"
#include "util/vec.h"

static const kb_option options[] = {
    {"model", "DIR", "Hugging Face model folder (config.json, safetensors, tokenizer.json)"},
    {"prompt", "TEXT", "the prompt text"},
    {"prompt-file", "FILE", "read the prompt text from FILE"},
    {"tokens", "IDS", "the prompt as comma-separated token ids"},
    {"question", "TEXT", "a question after the prompt (then its context): the two are split there"},
    {"question-file", "FILE", "read the question from FILE"},
    {"question-tokens", "IDS", "with --tokens: the question as comma-separated token ids"},
    {"chat", NULL, "wrap the prompt in the model's chat template (one user message)"},
    {"no-think", NULL, "with --chat: disable thinking (Qwen3 enable_thinking=false)"},
    {"max-new-tokens", "N", "generate at most N tokens (default 128)"},
    {"ignore-eos", NULL, "do not stop at the model's end-of-sequence tokens"},
    {"threads", "N", "threads for the forward (default: all cores)"},
    {"compute", "f32|bf16", "compute mode: f32 (default) or bf16 (BF16 matmul inputs, FP32 sums)"},
    {"dump-logits", "FILE.npy", "write the logits of every fed position (float32 [P+N-1, vocab])"},
    {"json", NULL, "print one JSON object: prompt ids, generated ids, text, timing"},
    KB_EVICTION_OPTIONS,
    {NULL, NULL, NULL},
};

typedef struct gen_ctx {
    kv_tokenizer *tok; /* NULL: print ids */
    kv_npy_writer npy; /* open when dumping logits */
    bool dump, stream;
    int vocab;
    int32_t *ids; /* generated so far, for incremental decoding */
    int n;
    size_t cap;
    size_t printed;  /* bytes of decoded text already printed */
    kb_eviction *ev; /* NULL: full cache */
} gen_ctx;

static int parse_ids(const char *flag, const char *s, int32_t **out, int *n)
{
    *out = NULL;
    *n = 0;
    size_t cap = 0;
    while (*s) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || errno || v < 0 || v > INT32_MAX) {
            kb_error("--%s: '%s' is not a comma-separated list of token ids", flag, s);
            free(*out);
            *out = NULL;
            return -1;
        }
        if (KV_VEC_RESERVE(*out, cap, (size_t)*n + 1, 64) < 0) {
            free(*out);
            *out = NULL;
            kb_error("out of memory");
            return -1;
        }
        (*out)[(*n)++] = (int32_t)v;
        s = end;
        while (*s == ',' || *s == ' ')
            s++;
    }
    if (*n == 0)
        kb_error("--%s: no token ids", flag);
    return *n ? 0 : -1;
}

static int on_logits(void *user, const float *logits, int n_rows, kv_error *err)
{
    gen_ctx *g = user;
    return g->dump ? kv_npy_append(&g->npy, logits, (size_t)n_rows, err) : 0;
}

static int on_step(void *user, kv_cache *c, const kv_attn_stats *stats, int step, kv_error *err)
{
    gen_ctx *g = user;
    return kb_eviction_step(g->ev, c, stats, step, err);
}

/* Prints the text the new token completes. Byte-level BPE tokens can end
 * inside a UTF-8 character; such a tail decodes to U+FFFD and is held back
 * until the next token completes it. */
static int on_token(void *user, int32_t id)
{
    gen_ctx *g = user;
    if (KV_VEC_RESERVE(g->ids, g->cap, (size_t)g->n + 1, 64) < 0)
        return 1;
    g->ids[g->n++] = id;
    if (!g->stream)
        return 0;
    if (!g->tok) {
        printf("%s%d", g->n > 1 ? "," : "", id);
        fflush(stdout);
        return 0;
    }
    size_t len;
    char *text = kv_tokenizer_decode_len(g->tok, g->ids, (size_t)g->n, true, &len);
    if (!text)
        return 1;
    bool partial = len >= 3 && memcmp(text + len - 3, "\xEF\xBF\xBD", 3) == 0;
    if (!partial && len > g->printed) {
        fwrite(text + g->printed, 1, len - g->printed, stdout);
        fflush(stdout);
        g->printed = len;
    }
    free(text);
    return 0;
}

/* The text of --NAME or --NAME-file (malloc'd), or NULL when neither was
 * given (*rc 0) or on error (*rc an exit code). */
static char *text_arg(const kb_args *a, const char *name, size_t *len, int *rc)
{
    char file[32];
    snprintf(file, sizeof file, "%s-file", name);
    const char *text = kb_arg(a, name), *path = kb_arg(a, file);
    *rc = 0;
    if (text && path) {
        kb_error("generate: give --%s or --%s, not both", name, file);
        *rc = KB_EXIT_USAGE;
        return NULL;
    }
    if (!path) {
        *len = text ? strlen(text) : 0;
        return text ? strdup(text) : NULL;
    }
    char *data = NULL;
    kv_error err;
    if (kv_file_read(path, &data, len, &err) != 0) {
        kb_error("%s", err.msg);
        *rc = KB_EXIT_FAIL;
    }
    return data;
}

/* The ids of text through the tokenizer, in the chat template with --chat;
 * with a question after it, *n_context receives the tokens before the
 * question's first one (the split the runner makes, lb_split_encode). */
static int encode_text(const kb_args *a, kv_tokenizer *tok, const char *text, size_t len,
                       size_t cut, int32_t **ids, int *n, int *n_context)
{
    bool chat = kb_flag(a, "chat");
    size_t n_ids = 0, n_ctx = 0;
    kv_error err;
    int rc;
    if (cut < len) {
        rc = lb_split_encode(tok, text, len, cut, chat, !kb_flag(a, "no-think"), ids, &n_ids,
                             &n_ctx, &err);
    } else {
        char *rendered = NULL;
        kv_chat_message msg = {.role = "user", .content = text, .content_len = len};
        if (chat && !(rendered = kv_chat_render_len(tok, &msg, 1, true, !kb_flag(a, "no-think"),
                                                    &len, &err))) {
            kb_error("%s", err.msg);
            return KB_EXIT_FAIL;
        }
        rc = kv_tokenizer_encode(tok, rendered ? rendered : text, len, ids, &n_ids, &err);
        free(rendered);
    }
    if (rc != 0) {
        kb_error("%s", err.msg);
        return KB_EXIT_FAIL;
    }
    if (n_ids == 0 || n_ids > INT32_MAX) {
        kb_error("generate: the prompt encodes to no tokens");
        return KB_EXIT_USAGE;
    }
    *n = (int)n_ids;
    *n_context = cut < len ? (int)n_ctx : -1;
    return 0;
}

/* The prompt as ids: --tokens (+ --question-tokens), or text (+ --question)
 * through the tokenizer. *n_context: the context's tokens when a question
 * follows it, else -1. */
static int prompt_ids(const kb_args *a, kv_tokenizer *tok, int32_t **ids, int *n, int *n_context)
{
    const char *tokens = kb_arg(a, "tokens"), *text = kb_arg(a, "prompt");
    const char *file = kb_arg(a, "prompt-file"), *q_tokens = kb_arg(a, "question-tokens");
    bool q_text = kb_arg(a, "question") || kb_arg(a, "question-file");
    *n_context = -1;
    if ((tokens != NULL) + (text != NULL) + (file != NULL) != 1) {
        kb_error("generate: give exactly one of --prompt, --prompt-file, --tokens");
        return KB_EXIT_USAGE;
    }
    bool chat = kb_flag(a, "chat");
    if (kb_flag(a, "no-think") && !chat) {
        kb_error("generate: --no-think needs --chat");
        return KB_EXIT_USAGE;
    }
    if (tokens && chat) {
        kb_error("generate: --chat renders text; it cannot wrap --tokens");
        return KB_EXIT_USAGE;
    }
    if ((q_tokens && !tokens) || (q_text && tokens)) {
        kb_error("generate: the question comes as the prompt does: --question-tokens with "
                 "--tokens, --question or --question-file with --prompt or --prompt-file");
        return KB_EXIT_USAGE;
    }
    if (tokens) {
        int32_t *q = NULL;
        int nq = 0;
        if (parse_ids("tokens", tokens, ids, n) != 0 ||
            (q_tokens && parse_ids("question-tokens", q_tokens, &q, &nq) != 0))
            return KB_EXIT_USAGE;
        if (q) {
            int32_t *all = realloc(*ids, (size_t)(*n + nq) * sizeof *all);
            if (!all) {
                free(q);
                kb_error("out of memory");
                return KB_EXIT_FAIL;
            }
            memcpy(all + *n, q, (size_t)nq * sizeof *q);
            *ids = all;
            *n_context = *n;
            *n += nq;
            free(q);
        }
        return 0;
    }
    if (!tok) {
        kb_error("generate: %s has no tokenizer.json; give the prompt with --tokens",
                 kb_arg(a, "model"));
        return KB_EXIT_FAIL;
    }
    size_t len = 0, q_len = 0;
    int rc;
    char *body = text_arg(a, "prompt", &len, &rc);
    char *question = rc == 0 ? text_arg(a, "question", &q_len, &rc) : NULL;
    char *all = rc == 0 && body ? malloc(len + q_len + 1) : NULL;
    if (rc == 0 && !all)
        rc = body ? (kb_error("out of memory"), KB_EXIT_FAIL) : KB_EXIT_FAIL;
    if (rc == 0) {
        memcpy(all, body, len);
        if (question)
            memcpy(all + len, question, q_len);
        all[len + q_len] = '\0';
        if (question && q_len == 0) {
            kb_error("generate: the question is empty");
            rc = KB_EXIT_USAGE;
        }
    }
    if (rc == 0)
        rc = encode_text(a, tok, all, len + q_len, question ? len : len + q_len, ids, n,
                         n_context);
    if (rc == 0 && *n_context >= *n) {
        kb_error("generate: the question encodes to no tokens of its own");
        rc = KB_EXIT_USAGE;
    }
    free(all);
    free(question);
    free(body);
    return rc;
}

static cJSON *ids_json(const int32_t *ids, int n)
{
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; arr && i < n; i++)
        cJSON_AddItemToArray(arr, cJSON_CreateNumber(ids[i]));
    return arr;
}

static const char *stop_name(kv_stop_reason r)
{
    static const char *const names[] = {"length", "eos", "stop_id", "stop_string", "callback"};
    return names[r];
}

static void print_json(const gen_ctx *g, const int32_t *prompt, int n_prompt,
                       const kv_generation *out)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "prompt_ids", ids_json(prompt, n_prompt));
    cJSON_AddItemToObject(o, "generated_ids", ids_json(out->ids, out->n));
    size_t len = 0;
    char *text =
        g->tok ? kv_tokenizer_decode_len(g->tok, out->ids, (size_t)out->n, true, &len) : NULL;
    if (text)
        cJSON_AddItemToObject(o, "text", kv_json_text(text, len));
    else
        cJSON_AddNullToObject(o, "text");
    free(text);
    cJSON_AddStringToObject(o, "stop", stop_name(out->stop));
    cJSON_AddNumberToObject(o, "prefill_seconds", out->prefill_seconds);
    cJSON_AddNumberToObject(o, "decode_seconds", out->decode_seconds);
    char *s = cJSON_PrintUnformatted(o);
    if (s)
        puts(s);
    free(s);
    cJSON_Delete(o);
}

static int load(const kb_args *a, kv_model **m, kv_tokenizer **tok)
{
    kv_error err;
    const char *dir = kb_arg(a, "model");
    if (!dir) {
        kb_error("generate: --model DIR is required");
        return KB_EXIT_USAGE;
    }
    kv_compute mode = KV_COMPUTE_F32;
    if (kb_arg(a, "compute") && kv_compute_parse(kb_arg(a, "compute"), &mode) != 0) {
        kb_error("--compute: want f32 or bf16, not '%s'", kb_arg(a, "compute"));
        return KB_EXIT_USAGE;
    }
    if (kv_model_load(dir, m, &err) != 0 || kv_model_set_compute(*m, mode, &err) != 0) {
        kb_error("%s", err.msg);
        return KB_EXIT_FAIL;
    }
    char *tj = kv_path_join(dir, "tokenizer.json");
    *tok = NULL;
    if (tj && kv_file_exists(tj) && !(*tok = kv_tokenizer_load(dir, &err))) {
        free(tj);
        kb_error("%s", err.msg);
        return KB_EXIT_FAIL;
    }
    free(tj);
    return 0;
}

/* --question: the context's tokens, then the question's. A query-agnostic
 * policy compresses the context once, before the question is read, and
 * never again (docs/eviction.md); without eviction the two parts are two
 * forwards on one cache. With a query-aware policy the caller feeds the
 * whole prompt as one (kv_generate). */
static int generate_split(kv_model *m, gen_ctx *g, kv_generate_opts *o, kv_cache *c,
                          const int32_t *ids, int n, int n_context, kv_generation *out,
                          kv_error *err)
{
    int nq = n - n_context, rows = g->dump ? (n_context > nq ? n_context : nq) : 1;
    kv_attn_stats_request req = g->ev ? kb_eviction_request(g->ev) : (kv_attn_stats_request){0};
    bool want = kv_attn_stats_wanted(&req);
    kv_attn_stats *stats = NULL;
    float *logits = malloc((size_t)rows * (size_t)g->vocab * sizeof *logits);
    double t0 = kv_clock_s();
    int rc = logits ? 0 : kv_fail(err, "out of memory for logits");
    if (rc == 0 && n_context > 0) {
        if (want && !(stats = kv_model_stats_new(m, c, n_context, &req, err)))
            rc = -1;
        if (rc == 0)
            rc = kv_model_forward(m, c, ids, n_context, want ? &req : NULL, stats,
                                  g->dump ? logits : NULL, g->dump, err);
        if (rc == 0 && g->dump)
            rc = on_logits(g, logits, n_context, err);
        if (rc == 0 && g->ev)
            rc = kb_eviction_step(g->ev, c, stats, 0, err);
    }
    /* on the compressed cache as the runner does it (one config of a batch) */
    if (rc == 0)
        rc = g->ev ? kv_model_forward_many(m, &c, 1, ids + n_context, nq, logits, g->dump, err)
                   : kv_model_forward(m, c, ids + n_context, nq, NULL, NULL, logits, g->dump, err);
    if (rc == 0 && g->dump)
        rc = on_logits(g, logits, nq, err);
    double prefill_s = kv_clock_s() - t0;
    o->on_step = NULL; /* no eviction after the question */
    if (rc == 0)
        rc = kv_generate_from(m, c, logits + (g->dump ? (size_t)(nq - 1) * (size_t)g->vocab : 0),
                              o, out, err);
    out->prefill_seconds = prefill_s;
    kv_model_stats_free(stats, kv_model_get_config(m)->n_layers);
    free(logits);
    return rc;
}

static int generate(const kb_args *a, kv_model *m, gen_ctx *g, const int32_t *prompt, int n_prompt,
                    int n_context, long max_new)
{
    kv_error err;
    const char *dump = kb_arg(a, "dump-logits");
    if (dump && kv_npy_open(&g->npy, dump, (size_t)g->vocab, &err) != 0) {
        kb_error("%s", err.msg);
        return KB_EXIT_FAIL;
    }
    g->dump = dump != NULL;
    kv_generate_opts o = {
        .max_new_tokens = (int)max_new,
        .ignore_eos = kb_flag(a, "ignore-eos"),
        .on_token = on_token,
        .on_logits = dump ? on_logits : NULL,
        .on_step = g->ev ? on_step : NULL,
        .user = g,
    };
    if (g->ev)
        o.stats_req = kb_eviction_request(g->ev);
    kv_cache_quant quant;
    if (kb_eviction_cache_quant(a, m, &quant) != KB_EXIT_OK)
        return KB_EXIT_USAGE;
    kv_cache *c = kv_model_cache_new(m, n_prompt + (int)max_new, &err);
    if (c && kv_cache_set_quant(c, &quant, &err) != 0) {
        kv_cache_free(c);
        c = NULL;
    }
    kv_generation out = {0};
    bool split = n_context >= 0 && (!g->ev || !kb_eviction_query_aware(g->ev));
    int rc = !c      ? -1
             : split ? generate_split(m, g, &o, c, prompt, n_prompt, n_context, &out, &err)
                     : kv_generate(m, c, prompt, n_prompt, &o, &out, &err);
    if (dump && kv_npy_close(&g->npy, rc == 0 ? &err : NULL) != 0)
        rc = -1;
    kv_cache_free(c);
    if (rc != 0) {
        kb_error("%s", err.msg);
        return KB_EXIT_FAIL;
    }
    if (kb_flag(a, "json"))
        print_json(g, prompt, n_prompt, &out);
    else
        putchar('\n');
    kv_generation_free(&out);
    return KB_EXIT_OK;
}

static int run(const kb_args *a)
{
    long max_new = 128, threads = 0;
    if (kb_arg_long(a, "max-new-tokens", 0, 1 << 20, &max_new) != 0 ||
        kb_arg_long(a, "threads", 1, 1024, &threads) != 0)
        return KB_EXIT_USAGE;
    kv_set_threads((int)threads);
    kv_model *m = NULL;
    kv_tokenizer *tok = NULL;
    int rc = load(a, &m, &tok);
    int32_t *prompt = NULL;
    int n_prompt = 0, n_context = -1;
    if (rc == 0)
        rc = prompt_ids(a, tok, &prompt, &n_prompt, &n_context);
    if (rc == 0) {
        gen_ctx g = {
            .tok = tok, .stream = !kb_flag(a, "json"), .vocab = kv_model_get_config(m)->vocab};
        rc = kb_eviction_open(a, m, n_prompt, n_context, &g.ev);
        if (rc == 0 && g.ev && !kb_eviction_query_aware(g.ev) && n_context < 0) {
            kb_error("generate: --query-aware false compresses the context before the question: "
                     "give the question with --question, --question-file or --question-tokens");
            rc = KB_EXIT_USAGE;
        }
        if (rc == 0 && g.ev && n_context >= 0)
            kb_eviction_set_phase(g.ev, kb_eviction_query_aware(g.ev) ? "question" : "context");
        if (rc == 0)
            rc = generate(a, m, &g, prompt, n_prompt, n_context, max_new);
        kb_eviction_close(g.ev);
        free(g.ids);
    }
    free(prompt);
    kv_tokenizer_free(tok);
    kv_model_free(m);
    return rc;
}

const kb_command kb_cmd_generate = {
    .name = "generate",
    .summary = "greedy generation from one prompt, with or without eviction",
    .usage = "kvbench generate --model DIR (--prompt TEXT | --prompt-file F | --tokens IDS) "
             "[--question TEXT | --question-file F | --question-tokens IDS] [options]",
    .description = "Prints the continuation as it is generated (as token ids when the model has "
                   "no tokenizer). --dump-logits writes the logits of every prompt position and "
                   "of every generated token fed back: row P-1+k chose generated token k+1.\n"
                   "With a question, the prompt is its context: --query-aware false compresses "
                   "the context alone, once, then reads the question (kvpress's protocol); "
                   "--trace lines then carry \"phase\" (context, question, decode).",
    .options = options,
    .run = run,
};
