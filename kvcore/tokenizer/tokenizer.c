#include "tokenizer/tokenizer.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer/bpe.h"
#include "tokenizer/bytelevel.h"
#include "util/file.h"
#include "tokenizer/pretok.h"
#include "util/utf8.h"

/* An added token ("<|im_start|>", "<think>"): matched in the raw text before
 * anything else happens to it. */
typedef struct added_token {
    char *content;
    size_t len;
    char *dec; /* its bytes in decoded output (see decoded_form) */
    size_t dec_len;
    int32_t id;
    bool special;
} added_token;

struct kv_tokenizer {
    kv_bpe *bpe;
    kv_pretok *pretok;
    bool nfc;              /* normalizer: NFC */
    bool add_prefix_space; /* ByteLevel pre-tokenizer's add_prefix_space */
    added_token *added;    /* sorted by first byte, then longest first */
    size_t n_added;
    size_t first[257];    /* added[first[b] .. first[b+1]) start with byte b */
    int32_t *added_of_id; /* id -> index in added, or -1; id_end entries */
    int32_t id_end;
    int64_t id_limit; /* vocab entries + added tokens: every id is below it */
    int32_t bos, eos;
    int32_t *prefix, *suffix; /* post_processor's tokens around one sequence */
    size_t n_prefix, n_suffix;
    bool has_template;
    bool clean_up_spaces; /* tokenizer_config.json's clean_up_tokenization_spaces */
    char *chat_template;  /* tokenizer_config.json, or NULL */
    char *bos_token, *eos_token;
};

/* ---- loading ----------------------------------------------------------- */

static const char *type_of(const cJSON *o)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "type");
    return cJSON_IsString(t) ? t->valuestring : "(no type)";
}

static bool is_null(const cJSON *o)
{
    return o == NULL || cJSON_IsNull(o);
}

static bool flag(const cJSON *o, const char *key)
{
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, key));
}

static bool empty_string(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return is_null(v) || (cJSON_IsString(v) && v->valuestring[0] == '\0');
}

static int load_normalizer(kv_tokenizer *t, const cJSON *n, kv_error *err)
{
    if (is_null(n))
        return 0;
    const char *type = type_of(n);
    if (strcmp(type, "NFC") == 0) {
        t->nfc = true;
        return 0;
    }
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *item;
        cJSON_ArrayForEach(item, cJSON_GetObjectItemCaseSensitive(n, "normalizers"))
        {
            if (load_normalizer(t, item, err) != 0)
                return -1;
        }
        return 0;
    }
    return kv_fail(err, "normalizer \"%s\" is not supported (only NFC)", type);
}

static int load_split(kv_tokenizer *t, const cJSON *p, kv_error *err)
{
    const cJSON *behavior = cJSON_GetObjectItemCaseSensitive(p, "behavior");
    if (!cJSON_IsString(behavior) || strcmp(behavior->valuestring, "Isolated") != 0)
        return kv_fail(err, "pre_tokenizer Split: behavior \"%s\" is not supported (only Isolated)",
                       cJSON_IsString(behavior) ? behavior->valuestring : "?");
    if (flag(p, "invert"))
        return kv_fail(err, "pre_tokenizer Split: invert true is not supported");
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(p, "pattern");
    const cJSON *re = cJSON_GetObjectItemCaseSensitive(pat, "Regex");
    const cJSON *str = cJSON_GetObjectItemCaseSensitive(pat, "String");
    if (cJSON_IsString(re))
        return kv_pretok_add(t->pretok, re->valuestring, false, err);
    if (cJSON_IsString(str))
        return kv_pretok_add(t->pretok, str->valuestring, true, err);
    return kv_fail(err, "pre_tokenizer Split: pattern needs a \"Regex\" or \"String\"");
}

/* Pre-tokenizers: Split and ByteLevel, alone or in a Sequence. *byte_level
 * records that a ByteLevel step maps bytes (the model is byte-level). */
static int load_pre_tokenizer(kv_tokenizer *t, const cJSON *p, bool first, bool *byte_level,
                              kv_error *err)
{
    if (is_null(p))
        return 0;
    const char *type = type_of(p);
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *item;
        bool is_first = first;
        cJSON_ArrayForEach(item, cJSON_GetObjectItemCaseSensitive(p, "pretokenizers"))
        {
            if (load_pre_tokenizer(t, item, is_first, byte_level, err) != 0)
                return -1;
            is_first = false;
        }
        return 0;
    }
    /* After ByteLevel the text is in the byte alphabet ("Ġ" for " "): a later
     * step would see that, and this pipeline splits raw text only. */
    if (*byte_level)
        return kv_fail(err, "pre_tokenizer: a %s step after ByteLevel is not supported", type);
    if (strcmp(type, "Split") == 0)
        return load_split(t, p, err);
    if (strcmp(type, "ByteLevel") == 0) {
        *byte_level = true;
        if (flag(p, "add_prefix_space")) {
            /* After another step it would prefix every piece; not implemented. */
            if (!first)
                return kv_fail(err, "pre_tokenizer ByteLevel: add_prefix_space after another "
                                    "pre-tokenizer is not supported");
            t->add_prefix_space = true;
        }
        const cJSON *use_regex = cJSON_GetObjectItemCaseSensitive(p, "use_regex");
        if (use_regex == NULL || cJSON_IsTrue(use_regex)) /* HF's default is true */
            return kv_pretok_add(t->pretok, kv_pretok_gpt2_regex, false, err);
        return 0;
    }
    return kv_fail(err, "pre_tokenizer \"%s\" is not supported (only Split, ByteLevel, Sequence)",
                   type);
}

/* The ids a TemplateProcessing special token stands for
 * (special_tokens: {"<s>": {"ids": [1], ...}}), appended to *v. */
static int template_ids(const cJSON *specials, const char *name, int32_t **v, size_t *n,
                        kv_error *err)
{
    const cJSON *tok = cJSON_GetObjectItemCaseSensitive(specials, name);
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(tok, "ids"), *e;
    if (!cJSON_IsArray(ids))
        return kv_fail(err, "post_processor TemplateProcessing: special token \"%s\" has no ids",
                       name);
    cJSON_ArrayForEach(e, ids)
    {
        int32_t *m = realloc(*v, (*n + 1) * sizeof *m);
        if (!m)
            return kv_fail(err, "out of memory");
        *v = m;
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble > INT32_MAX)
            return kv_fail(err, "post_processor TemplateProcessing: bad id for \"%s\"", name);
        (*v)[(*n)++] = (int32_t)e->valueint;
    }
    return 0;
}

/* TemplateProcessing's "single" template: special tokens, then the sequence
 * ($A), then special tokens; they are what add_special_tokens=True adds. */
static int load_template(kv_tokenizer *t, const cJSON *p, kv_error *err)
{
    if (t->has_template)
        return kv_fail(err, "post_processor: two TemplateProcessing steps are not supported");
    t->has_template = true;
    const cJSON *specials = cJSON_GetObjectItemCaseSensitive(p, "special_tokens"), *item;
    bool seen_a = false;
    cJSON_ArrayForEach(item, cJSON_GetObjectItemCaseSensitive(p, "single"))
    {
        const cJSON *seq = cJSON_GetObjectItemCaseSensitive(item, "Sequence");
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(item, "SpecialToken");
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(seq ? seq : sp, "id");
        if (seq && cJSON_IsString(id) && strcmp(id->valuestring, "A") == 0 && !seen_a) {
            seen_a = true;
        } else if (sp && cJSON_IsString(id)) {
            int rc = seen_a
                         ? template_ids(specials, id->valuestring, &t->suffix, &t->n_suffix, err)
                         : template_ids(specials, id->valuestring, &t->prefix, &t->n_prefix, err);
            if (rc != 0)
                return -1;
        } else {
            return kv_fail(err, "post_processor TemplateProcessing: \"single\" must be special "
                                "tokens around one $A");
        }
    }
    if (!seen_a)
        return kv_fail(err, "post_processor TemplateProcessing: \"single\" has no $A");
    return 0;
}

/* Post-processors add tokens around a sequence (TemplateProcessing: BOS/EOS,
 * applied by kv_tokenizer_encode_special); ByteLevel's offset trimming does
 * not change ids. Anything else is refused. */
static int load_post_processor(kv_tokenizer *t, const cJSON *p, kv_error *err)
{
    if (is_null(p))
        return 0;
    const char *type = type_of(p);
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *item;
        cJSON_ArrayForEach(item, cJSON_GetObjectItemCaseSensitive(p, "processors"))
        {
            if (load_post_processor(t, item, err) != 0)
                return -1;
        }
        return 0;
    }
    if (strcmp(type, "ByteLevel") == 0)
        return 0;
    if (strcmp(type, "TemplateProcessing") == 0)
        return load_template(t, p, err);
    return kv_fail(err,
                   "post_processor \"%s\" is not supported (only ByteLevel, "
                   "TemplateProcessing)",
                   type);
}

static int check_decoder(const cJSON *d, kv_error *err)
{
    const char *type = is_null(d) ? "null" : type_of(d);
    if (strcmp(type, "ByteLevel") == 0)
        return 0;
    return kv_fail(err, "decoder \"%s\" is not supported (only ByteLevel)", type);
}

static int check_model_options(const cJSON *m, kv_error *err)
{
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(m, "type");
    if (type && (!cJSON_IsString(type) || strcmp(type->valuestring, "BPE") != 0))
        return kv_fail(err, "model type \"%s\" is not supported (only BPE)", type_of(m));
    const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(m, "dropout");
    if (!is_null(dropout) && !(cJSON_IsNumber(dropout) && dropout->valuedouble == 0))
        return kv_fail(err, "model: BPE dropout is not supported");
    if (!empty_string(m, "continuing_subword_prefix"))
        return kv_fail(err, "model: continuing_subword_prefix is not supported");
    if (!empty_string(m, "end_of_word_suffix"))
        return kv_fail(err, "model: end_of_word_suffix is not supported");
    /* unk_token, fuse_unk and byte_fallback only act on a symbol missing from
     * the vocabulary; kv_bpe_finish checks that all 256 bytes are present, so
     * they can never act. */
    return 0;
}

static int load_model(kv_tokenizer *t, const cJSON *m, const char *text, const kv_bpe_json *where,
                      kv_error *err)
{
    if (!cJSON_IsObject(m))
        return kv_fail(err, "\"model\" is missing");
    if (check_model_options(m, err) != 0)
        return -1;
    t->bpe = kv_bpe_json_load(text, where, flag(m, "ignore_merges"), t->id_limit, err);
    return t->bpe ? 0 : -1;
}

/* The bytes HF's ByteLevel decoder gives for a token string: every character
 * mapped back through the byte alphabet, or, when one is outside it, the
 * string's own UTF-8. */
static char *decoded_form(const char *s, size_t n, size_t *out_len)
{
    char *out = malloc(n + 1);
    if (!out)
        return NULL;
    long k = kv_bytelevel_to_bytes(s, n, out);
    if (k < 0) {
        memcpy(out, s, n);
        k = (long)n;
    }
    *out_len = (size_t)k;
    return out;
}

static int added_cmp(const void *pa, const void *pb)
{
    const added_token *a = pa, *b = pb;
    unsigned char fa = (unsigned char)a->content[0], fb = (unsigned char)b->content[0];
    if (fa != fb)
        return fa < fb ? -1 : 1;
    return a->len > b->len ? -1 : a->len < b->len; /* longest first: leftmost-longest */
}

static int load_added_token(kv_tokenizer *t, const cJSON *a, size_t i, kv_error *err)
{
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(a, "id");
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(a, "content");
    if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble > INT32_MAX - 1 ||
        !cJSON_IsString(content) || content->valuestring[0] == '\0')
        return kv_fail(err, "added_tokens[%zu] needs an \"id\" and a non-empty \"content\"", i);
    const char *c = content->valuestring;
    if (flag(a, "single_word") || flag(a, "lstrip") || flag(a, "rstrip"))
        return kv_fail(err,
                       "added token \"%s\": single_word, lstrip and rstrip are not "
                       "supported",
                       c);
    if (flag(a, "normalized") && t->nfc)
        return kv_fail(err,
                       "added token \"%s\": matching on normalized text (normalized: true) "
                       "is not supported",
                       c);
    if (id->valuedouble >= (double)t->id_limit)
        return kv_fail(err,
                       "added token \"%s\" has id %.0f, but the vocabulary has %lld tokens "
                       "(vocab and added_tokens), so ids must be below %lld",
                       c, id->valuedouble, (long long)t->id_limit, (long long)t->id_limit);
    size_t n = strlen(c);
    if (kv_utf8_valid_prefix(c, n) != n)
        return kv_fail(err, "added token %zu is not valid UTF-8", i);
    added_token *tok = &t->added[i];
    tok->content = strdup(c);
    tok->len = n;
    tok->dec = decoded_form(c, n, &tok->dec_len);
    tok->id = (int32_t)id->valueint;
    tok->special = flag(a, "special");
    if (!tok->content || !tok->dec)
        return kv_fail(err, "out of memory");
    return 0;
}

/* Indexes the added tokens by first byte and by id. */
static int index_added(kv_tokenizer *t, kv_error *err)
{
    qsort(t->added, t->n_added, sizeof *t->added, added_cmp);
    size_t i = 0;
    for (int b = 0; b <= 256; b++) {
        t->first[b] = i;
        while (b < 256 && i < t->n_added && (unsigned char)t->added[i].content[0] == b)
            i++;
    }
    t->id_end = kv_bpe_id_end(t->bpe);
    for (size_t k = 0; k < t->n_added; k++)
        if (t->added[k].id >= t->id_end)
            t->id_end = t->added[k].id + 1;
    t->added_of_id = malloc((size_t)t->id_end * sizeof *t->added_of_id);
    if (!t->added_of_id)
        return kv_fail(err, "out of memory");
    for (int32_t k = 0; k < t->id_end; k++)
        t->added_of_id[k] = -1;
    for (size_t k = 0; k < t->n_added; k++) {
        if (t->added_of_id[t->added[k].id] >= 0)
            return kv_fail(err, "added_tokens: id %d is given twice", t->added[k].id);
        t->added_of_id[t->added[k].id] = (int32_t)k;
    }
    for (size_t k = 1; k < t->n_added; k++)
        if (t->added[k].len == t->added[k - 1].len &&
            memcmp(t->added[k].content, t->added[k - 1].content, t->added[k].len) == 0)
            return kv_fail(err, "added_tokens: \"%s\" is listed twice", t->added[k].content);
    return 0;
}

static int load_added(kv_tokenizer *t, const cJSON *list, kv_error *err)
{
    if (!is_null(list) && !cJSON_IsArray(list))
        return kv_fail(err, "added_tokens must be an array");
    size_t n = (size_t)cJSON_GetArraySize(list);
    t->added = calloc(n ? n : 1, sizeof *t->added);
    if (!t->added)
        return kv_fail(err, "out of memory");
    const cJSON *a;
    cJSON_ArrayForEach(a, list)
    {
        if (load_added_token(t, a, t->n_added, err) != 0)
            return -1;
        t->n_added++;
    }
    return index_added(t, err);
}

/* The post-processor's ids must be tokens, or encode_special would emit ids
 * the model has no row for. */
static int check_template_ids(const kv_tokenizer *t, kv_error *err)
{
    size_t len;
    for (size_t i = 0; i < t->n_prefix + t->n_suffix; i++) {
        int32_t id = i < t->n_prefix ? t->prefix[i] : t->suffix[i - t->n_prefix];
        if (!kv_tokenizer_token_bytes(t, id, &len))
            return kv_fail(err, "post_processor TemplateProcessing: id %d is not a token", id);
    }
    return 0;
}

static int load_tokenizer_json(kv_tokenizer *t, const cJSON *root, const char *text,
                               const kv_bpe_json *where, kv_error *err)
{
    if (!cJSON_IsObject(root))
        return kv_fail(err, "not a JSON object");
    if (!is_null(cJSON_GetObjectItemCaseSensitive(root, "truncation")))
        return kv_fail(err, "\"truncation\" is set; truncation inside the tokenizer is not "
                            "supported");
    if (!is_null(cJSON_GetObjectItemCaseSensitive(root, "padding")))
        return kv_fail(err, "\"padding\" is set; padding inside the tokenizer is not supported");
    bool byte_level = false;
    t->pretok = kv_pretok_new(err);
    if (!t->pretok ||
        load_normalizer(t, cJSON_GetObjectItemCaseSensitive(root, "normalizer"), err) != 0 ||
        load_pre_tokenizer(t, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), true,
                           &byte_level, err) != 0 ||
        load_post_processor(t, cJSON_GetObjectItemCaseSensitive(root, "post_processor"), err) !=
            0 ||
        check_decoder(cJSON_GetObjectItemCaseSensitive(root, "decoder"), err) != 0)
        return -1;
    if (!byte_level)
        return kv_fail(err, "pre_tokenizer has no ByteLevel step (only byte-level BPE is "
                            "supported)");
    /* The vocabulary's size bounds every id (memory follows the largest id). */
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    t->id_limit =
        (int64_t)where->vocab_count + (cJSON_IsArray(added) ? cJSON_GetArraySize(added) : 0);
    if (load_model(t, cJSON_GetObjectItemCaseSensitive(root, "model"), text, where, err) != 0)
        return -1;
    if (load_added(t, cJSON_GetObjectItemCaseSensitive(root, "added_tokens"), err) != 0)
        return -1;
    return check_template_ids(t, err);
}

/* tokenizer.json: the big parts by scanning, the rest by cJSON. */
static int parse_tokenizer_json(kv_tokenizer *t, const char *data, size_t len, kv_error *err)
{
    kv_bpe_json where;
    if (kv_bpe_json_find(data, len, &where, err) != 0)
        return -1;
    size_t small_len;
    char *small = kv_bpe_json_strip(data, len, &where, &small_len);
    if (!small)
        return kv_fail(err, "out of memory");
    cJSON *root = cJSON_ParseWithLength(small, small_len);
    free(small);
    int rc =
        root ? load_tokenizer_json(t, root, data, &where, err) : kv_fail(err, "not valid JSON");
    cJSON_Delete(root);
    return rc;
}

/* "bos_token": "<s>" or {"content": "<s>", ...} or null. */
static int config_token(const cJSON *cfg, const char *key, char **out, kv_error *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (cJSON_IsObject(v))
        v = cJSON_GetObjectItemCaseSensitive(v, "content");
    if (!cJSON_IsString(v))
        return 0;
    *out = strdup(v->valuestring);
    return *out ? 0 : kv_fail(err, "out of memory");
}

/* chat_template: a string, or a list of {"name", "template"} where "default"
 * is the one transformers uses. */
static int config_template(kv_tokenizer *t, const cJSON *cfg, kv_error *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
    if (cJSON_IsArray(v)) {
        const cJSON *e, *found = NULL;
        cJSON_ArrayForEach(e, v)
        {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
            if (cJSON_IsString(name) && strcmp(name->valuestring, "default") == 0)
                found = cJSON_GetObjectItemCaseSensitive(e, "template");
        }
        v = found;
    }
    if (!cJSON_IsString(v))
        return 0;
    t->chat_template = strdup(v->valuestring);
    return t->chat_template ? 0 : kv_fail(err, "out of memory");
}

static int load_config(kv_tokenizer *t, const char *dir, kv_error *err)
{
    char *path = kv_path_join(dir, "tokenizer_config.json");
    if (!path)
        return kv_fail(err, "out of memory");
    if (!kv_file_exists(path)) {
        free(path);
        return 0;
    }
    char *data;
    size_t len;
    int rc = kv_file_read(path, &data, &len, err);
    cJSON *cfg = rc == 0 ? cJSON_ParseWithLength(data, len) : NULL;
    if (rc == 0 && !cJSON_IsObject(cfg))
        rc = kv_fail(err, "%s: not valid JSON", path);
    if (rc == 0 && flag(cfg, "split_special_tokens"))
        rc = kv_fail(err, "%s: split_special_tokens true is not supported", path);
    /* absent: false, the default of transformers since 4.45 */
    t->clean_up_spaces = flag(cfg, "clean_up_tokenization_spaces");
    if (rc == 0)
        rc = config_template(t, cfg, err);
    if (rc == 0)
        rc = config_token(cfg, "bos_token", &t->bos_token, err);
    if (rc == 0)
        rc = config_token(cfg, "eos_token", &t->eos_token, err);
    cJSON_Delete(cfg);
    if (rc == 0) {
        free(data);
        free(path);
        t->bos = t->bos_token ? kv_tokenizer_token_id(t, t->bos_token) : -1;
        t->eos = t->eos_token ? kv_tokenizer_token_id(t, t->eos_token) : -1;
        return 0;
    }
    free(data);
    free(path);
    return -1;
}

kv_tokenizer *kv_tokenizer_load(const char *model_dir, kv_error *err)
{
    kv_tokenizer *t = calloc(1, sizeof *t);
    char *path = kv_path_join(model_dir, "tokenizer.json");
    if (!t || !path) {
        free(t);
        free(path);
        kv_fail(err, "out of memory");
        return NULL;
    }
    t->bos = t->eos = -1;
    char *data = NULL;
    size_t len;
    int rc = kv_file_read(path, &data, &len, err);
    if (rc == 0)
        rc = parse_tokenizer_json(t, data, len, err);
    if (rc != 0)
        kv_fail_prefix(err, path);
    free(data);
    free(path);
    if (rc == 0)
        rc = load_config(t, model_dir, err);
    if (rc != 0) {
        kv_tokenizer_free(t);
        return NULL;
    }
    return t;
}

void kv_tokenizer_free(kv_tokenizer *t)
{
    if (!t)
        return;
    kv_bpe_free(t->bpe);
    kv_pretok_free(t->pretok);
    for (size_t i = 0; i < t->n_added; i++) {
        free(t->added[i].content);
        free(t->added[i].dec);
    }
    free(t->added);
    free(t->added_of_id);
    free(t->prefix);
    free(t->suffix);
    free(t->chat_template);
    free(t->bos_token);
    free(t->eos_token);
    free(t);
}

/* ---- encoding ---------------------------------------------------------- */

typedef struct encoder {
    const kv_tokenizer *t;
    kv_ids ids;
    kv_bpe_scratch scratch;
    kv_pretok_state *st;
    kv_error *err;
} encoder;

static int on_piece(void *ctx, const char *s, size_t n)
{
    encoder *e = ctx;
    return kv_bpe_word(e->t->bpe, (const unsigned char *)s, n, &e->scratch, &e->ids, e->err);
}

static bool has_non_ascii(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] >= 0x80)
            return true;
    return false;
}

/* One stretch of text between added tokens: normalise, pre-tokenise, merge. */
static int encode_segment(encoder *e, const char *s, size_t n)
{
    const kv_tokenizer *t = e->t;
    utf8proc_uint8_t *nfc = NULL;
    if (t->nfc && has_non_ascii(s, n)) {
        utf8proc_ssize_t k = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &nfc,
                                          UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        if (k < 0)
            return kv_fail(e->err, "NFC normalisation failed: %s", utf8proc_errmsg(k));
        s = (const char *)nfc;
        n = (size_t)k;
    }
    char *prefixed = NULL;
    if (t->add_prefix_space && n > 0 && s[0] != ' ') {
        prefixed = malloc(n + 1);
        if (!prefixed) {
            free(nfc);
            return kv_fail(e->err, "out of memory");
        }
        prefixed[0] = ' ';
        memcpy(prefixed + 1, s, n);
        s = prefixed;
        n++;
    }
    int rc = kv_pretok_split(t->pretok, e->st, s, n, on_piece, e, e->err);
    free(prefixed);
    free(nfc);
    return rc;
}

/* The leftmost, then longest, added token at or after pos: its index, with
 * *at its offset; -1 when none. */
static long next_added(const kv_tokenizer *t, const char *s, size_t n, size_t pos, size_t *at)
{
    for (size_t i = pos; i < n; i++) {
        unsigned char b = (unsigned char)s[i];
        for (size_t k = t->first[b]; k < t->first[b + 1]; k++) {
            const added_token *a = &t->added[k];
            if (a->len <= n - i && memcmp(s + i, a->content, a->len) == 0) {
                *at = i;
                return (long)k;
            }
        }
    }
    return -1;
}

static int encode_text(encoder *e, const char *s, size_t n)
{
    size_t pos = 0;
    while (pos < n) {
        size_t at = n;
        long k = e->t->n_added ? next_added(e->t, s, n, pos, &at) : -1;
        if (encode_segment(e, s + pos, at - pos) != 0)
            return -1;
        if (k < 0)
            break;
        if (kv_ids_push(&e->ids, e->t->added[k].id) != 0)
            return kv_fail(e->err, "out of memory");
        pos = at + e->t->added[k].len;
    }
    return 0;
}

static int push_all(kv_ids *ids, const int32_t *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (kv_ids_push(ids, v[i]) != 0)
            return -1;
    return 0;
}

static int encode(const kv_tokenizer *t, const char *text, size_t len, bool special, int32_t **ids,
                  size_t *n_ids, kv_error *err)
{
    *ids = NULL;
    *n_ids = 0;
    char *fixed = NULL;
    if (kv_utf8_valid_prefix(text, len) != len) {
        fixed = kv_utf8_lossy(text, len, &len);
        if (!fixed)
            return kv_fail(err, "out of memory");
        text = fixed;
    }
    encoder e = {.t = t, .err = err, .st = kv_pretok_state_new(t->pretok)};
    int rc = e.st ? 0 : kv_fail(err, "out of memory");
    if (rc == 0 && special && push_all(&e.ids, t->prefix, t->n_prefix) != 0)
        rc = kv_fail(err, "out of memory");
    if (rc == 0)
        rc = encode_text(&e, text, len);
    if (rc == 0 && special && push_all(&e.ids, t->suffix, t->n_suffix) != 0)
        rc = kv_fail(err, "out of memory");
    kv_pretok_state_free(e.st);
    kv_bpe_scratch_free(&e.scratch);
    free(fixed);
    if (rc != 0) {
        free(e.ids.v);
        return -1;
    }
    *ids = e.ids.v;
    *n_ids = e.ids.n;
    return 0;
}

int kv_tokenizer_encode(const kv_tokenizer *t, const char *text, size_t len, int32_t **ids,
                        size_t *n_ids, kv_error *err)
{
    return encode(t, text, len, false, ids, n_ids, err);
}

int kv_tokenizer_encode_special(const kv_tokenizer *t, const char *text, size_t len, int32_t **ids,
                                size_t *n_ids, kv_error *err)
{
    return encode(t, text, len, true, ids, n_ids, err);
}

/* ---- decoding and lookups ---------------------------------------------- */

const char *kv_tokenizer_token_bytes(const kv_tokenizer *t, int32_t id, size_t *len)
{
    if (id < 0 || id >= t->id_end)
        return NULL;
    if (t->added_of_id[id] >= 0) {
        const added_token *a = &t->added[t->added_of_id[id]];
        *len = a->dec_len;
        return a->dec;
    }
    return kv_bpe_token(t->bpe, id, len);
}

bool kv_tokenizer_is_special(const kv_tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->id_end && t->added_of_id[id] >= 0 &&
           t->added[t->added_of_id[id]].special;
}

/* Replaces every `from` in s[0..*n) by the shorter `to`, in place. */
static void replace_shorter(char *s, size_t *n, const char *from, const char *to)
{
    size_t lf = strlen(from), lt = strlen(to), o = 0;
    for (size_t i = 0; i < *n;) {
        if (i + lf <= *n && memcmp(s + i, from, lf) == 0) {
            memcpy(s + o, to, lt);
            o += lt;
            i += lf;
        } else {
            s[o++] = s[i++];
        }
    }
    *n = o;
    s[o] = '\0';
}

/* transformers' clean_up_tokenization: these replacements, in this order. */
static void clean_up_spaces(char *s, size_t *n)
{
    static const char *const pairs[][2] = {
        {" .", "."},     {" ?", "?"},   {" !", "!"},   {" ,", ","},     {" ' ", "'"},
        {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof *pairs; i++)
        replace_shorter(s, n, pairs[i][0], pairs[i][1]);
}

static char *decode_bytes(const kv_tokenizer *t, const int32_t *ids, size_t n, bool skip_special,
                          size_t *out_len)
{
    size_t total = 0, len;
    for (size_t i = 0; i < n; i++)
        if (kv_tokenizer_token_bytes(t, ids[i], &len))
            total += len;
    char *raw = malloc(total + 1);
    if (!raw)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (skip_special && kv_tokenizer_is_special(t, ids[i]))
            continue;
        const char *b = kv_tokenizer_token_bytes(t, ids[i], &len);
        if (b) {
            memcpy(raw + o, b, len);
            o += len;
        }
    }
    raw[o] = '\0';
    if (kv_utf8_valid_prefix(raw, o) == o) { /* the usual case: nothing to repair */
        *out_len = o;
        return raw;
    }
    char *out = kv_utf8_lossy(raw, o, out_len);
    free(raw);
    return out;
}

char *kv_tokenizer_decode_len(const kv_tokenizer *t, const int32_t *ids, size_t n,
                              bool skip_special, size_t *len)
{
    char *s = decode_bytes(t, ids, n, skip_special, len);
    if (s && t->clean_up_spaces)
        clean_up_spaces(s, len);
    return s;
}

char *kv_tokenizer_decode(const kv_tokenizer *t, const int32_t *ids, size_t n, bool skip_special)
{
    size_t len;
    return kv_tokenizer_decode_len(t, ids, n, skip_special, &len);
}

int32_t kv_tokenizer_token_id(const kv_tokenizer *t, const char *token)
{
    size_t n = strlen(token);
    if (n == 0)
        return -1;
    unsigned char b = (unsigned char)token[0];
    for (size_t k = t->first[b]; k < t->first[b + 1]; k++)
        if (t->added[k].len == n && memcmp(t->added[k].content, token, n) == 0)
            return t->added[k].id;
    char *buf = malloc(n);
    if (!buf)
        return -1;
    long bytes = kv_bytelevel_to_bytes(token, n, buf);
    int32_t id = bytes > 0 ? kv_bpe_lookup(t->bpe, buf, (size_t)bytes) : -1;
    free(buf);
    return id;
}

int kv_tokenizer_vocab_size(const kv_tokenizer *t)
{
    return t->id_end;
}

int32_t kv_tokenizer_bos_id(const kv_tokenizer *t)
{
    return t->bos;
}

int32_t kv_tokenizer_eos_id(const kv_tokenizer *t)
{
    return t->eos;
}

const char *kv_tokenizer_chat_template(const kv_tokenizer *t)
{
    return t->chat_template;
}

const char *kv_tokenizer_bos_token(const kv_tokenizer *t)
{
    return t->bos_token;
}
