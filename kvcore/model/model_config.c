#include "model/model_config.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/file.h"

static const struct {
    const char *architecture, *model_type;
    kv_arch arch;
} archs[] = {
    {"Qwen3ForCausalLM", "qwen3", KV_ARCH_QWEN3},
    {"Qwen2ForCausalLM", "qwen2", KV_ARCH_QWEN2},
    {"LlamaForCausalLM", "llama", KV_ARCH_LLAMA},
};
#define N_ARCHS   (sizeof archs / sizeof archs[0])
#define SUPPORTED "Qwen3ForCausalLM, Qwen2ForCausalLM, LlamaForCausalLM"

/* Sizes beyond these are not models this engine can hold; refusing them keeps
 * every later size computation far from integer overflow. */
#define MAX_DIM    (1 << 20)
#define MAX_VOCAB  (1 << 24)
#define MAX_LAYERS 4096

const char *kv_arch_name(kv_arch arch)
{
    for (size_t i = 0; i < N_ARCHS; i++)
        if (archs[i].arch == arch)
            return archs[i].model_type;
    return "?";
}

static int find_arch(const cJSON *root, const char *path, kv_arch *out, kv_error *err)
{
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(root, "architectures");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    const char *name = NULL;
    bool by_type = false;
    if (cJSON_IsArray(list) && cJSON_IsString(cJSON_GetArrayItem(list, 0)))
        name = cJSON_GetArrayItem(list, 0)->valuestring;
    else if (cJSON_IsString(type)) {
        name = type->valuestring;
        by_type = true;
    } else
        return kv_fail(err, "%s: no \"architectures\" or \"model_type\" (supported: " SUPPORTED ")",
                       path);
    for (size_t i = 0; i < N_ARCHS; i++)
        if (strcmp(name, by_type ? archs[i].model_type : archs[i].architecture) == 0) {
            *out = archs[i].arch;
            return 0;
        }
    return kv_fail(err, "%s: unsupported architecture '%.100s' (supported: " SUPPORTED ")", path,
                   name);
}

/* A required positive integer field no larger than max. */
static int get_int(const cJSON *root, const char *key, int max, int dflt, const char *path,
                   int *out, kv_error *err)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!j || cJSON_IsNull(j)) {
        if (dflt > 0) {
            *out = dflt;
            return 0;
        }
        return kv_fail(err, "%s: \"%s\" is missing", path, key);
    }
    double d = cJSON_IsNumber(j) ? j->valuedouble : -1;
    if (!(d >= 1 && d <= max) || d != floor(d))
        return kv_fail(err, "%s: \"%s\" must be an integer in 1..%d", path, key, max);
    *out = (int)d;
    return 0;
}

/* An optional positive number; absent keeps *out. */
static int get_num(const cJSON *obj, const char *key, const char *path, double *out, kv_error *err)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!j || cJSON_IsNull(j))
        return 0;
    if (!cJSON_IsNumber(j) || !(j->valuedouble > 0) || !isfinite(j->valuedouble))
        return kv_fail(err, "%s: \"%s\" must be a positive number", path, key);
    *out = j->valuedouble;
    return 0;
}

static bool get_bool(const cJSON *root, const char *key)
{
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, key));
}

static int parse_llama3(const cJSON *sc, const char *path, kv_rope_config *r, kv_error *err)
{
    r->llama3 = true;
    r->factor = 0;
    r->low_freq_factor = 1.0;
    r->high_freq_factor = 4.0;
    r->original_max_pos = 8192;
    if (get_num(sc, "factor", path, &r->factor, err) != 0 ||
        get_num(sc, "low_freq_factor", path, &r->low_freq_factor, err) != 0 ||
        get_num(sc, "high_freq_factor", path, &r->high_freq_factor, err) != 0 ||
        get_num(sc, "original_max_position_embeddings", path, &r->original_max_pos, err) != 0)
        return -1;
    if (r->factor <= 0)
        return kv_fail(err, "%s: llama3 rope scaling needs a positive \"factor\"", path);
    if (r->high_freq_factor <= r->low_freq_factor)
        return kv_fail(err, "%s: llama3 rope scaling needs high_freq_factor > low_freq_factor",
                       path);
    return 0;
}

/* rope_theta and rope scaling: top-level keys, or nested in rope_parameters. */
static int parse_rope(const cJSON *root, const char *path, kv_rope_config *r, kv_error *err)
{
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(root, "rope_parameters");
    if (params && !cJSON_IsObject(params) && !cJSON_IsNull(params))
        return kv_fail(err, "%s: \"rope_parameters\" is not an object", path);
    r->theta = 10000.0;
    if ((params && get_num(params, "rope_theta", path, &r->theta, err) != 0) ||
        get_num(root, "rope_theta", path, &r->theta, err) != 0)
        return -1;
    const cJSON *sc = cJSON_GetObjectItemCaseSensitive(root, "rope_scaling");
    if (!sc || cJSON_IsNull(sc))
        sc = params;
    if (!sc || cJSON_IsNull(sc))
        return 0;
    if (!cJSON_IsObject(sc))
        return kv_fail(err, "%s: \"rope_scaling\" is not an object", path);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(sc, "rope_type");
    if (!type)
        type = cJSON_GetObjectItemCaseSensitive(sc, "type");
    if (!type || cJSON_IsNull(type))
        return 0;
    if (!cJSON_IsString(type))
        return kv_fail(err, "%s: rope type is not a string", path);
    if (strcmp(type->valuestring, "default") == 0)
        return 0;
    if (strcmp(type->valuestring, "llama3") == 0)
        return parse_llama3(sc, path, r, err);
    return kv_fail(err,
                   "%s: rope scaling type '%.60s' is not supported (supported: default, llama3)",
                   path, type->valuestring);
}

static int add_eos(kv_model_config *cfg, double d, const char *path, kv_error *err)
{
    if (!(d >= 0 && d < MAX_VOCAB) || d != floor(d))
        return kv_fail(err, "%s: \"eos_token_id\" must be a token id", path);
    for (int i = 0; i < cfg->n_eos; i++)
        if (cfg->eos_ids[i] == (int32_t)d)
            return 0;
    int32_t *ids = realloc(cfg->eos_ids, (size_t)(cfg->n_eos + 1) * sizeof *ids);
    if (!ids)
        return kv_fail(err, "out of memory");
    cfg->eos_ids = ids;
    cfg->eos_ids[cfg->n_eos++] = (int32_t)d;
    return 0;
}

/* eos_token_id: absent, null, one id or a list of ids. */
static int parse_eos(const cJSON *root, const char *path, kv_model_config *cfg, kv_error *err)
{
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, "eos_token_id");
    if (!e || cJSON_IsNull(e))
        return 0;
    if (cJSON_IsNumber(e))
        return add_eos(cfg, e->valuedouble, path, err);
    if (!cJSON_IsArray(e))
        return kv_fail(err, "%s: \"eos_token_id\" must be an id or a list of ids", path);
    for (const cJSON *x = e->child; x; x = x->next)
        if (add_eos(cfg, cJSON_IsNumber(x) ? x->valuedouble : -1, path, err) != 0)
            return -1;
    return 0;
}

static int check_shapes(const char *path, kv_model_config *c, kv_error *err)
{
    if (c->n_heads % c->n_kv_heads != 0)
        return kv_fail(err,
                       "%s: num_attention_heads (%d) is not a multiple of num_key_value_heads (%d)",
                       path, c->n_heads, c->n_kv_heads);
    if (c->head_dim % 2 != 0)
        return kv_fail(err, "%s: head_dim %d is odd (RoPE rotates pairs)", path, c->head_dim);
    if ((long long)c->n_heads * c->head_dim > MAX_DIM)
        return kv_fail(err, "%s: num_attention_heads * head_dim is too large", path);
    return 0;
}

static int parse_fields(const cJSON *root, const char *path, kv_model_config *c, kv_error *err)
{
    if (find_arch(root, path, &c->arch, err) != 0)
        return -1;
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(root, "hidden_act");
    if (act && !(cJSON_IsString(act) && strcmp(act->valuestring, "silu") == 0))
        return kv_fail(err, "%s: hidden_act must be \"silu\"", path);
    if (get_int(root, "hidden_size", MAX_DIM, 0, path, &c->hidden, err) != 0 ||
        get_int(root, "num_hidden_layers", MAX_LAYERS, 0, path, &c->n_layers, err) != 0 ||
        get_int(root, "num_attention_heads", 65536, 0, path, &c->n_heads, err) != 0 ||
        get_int(root, "num_key_value_heads", 65536, c->n_heads, path, &c->n_kv_heads, err) != 0 ||
        get_int(root, "intermediate_size", MAX_DIM, 0, path, &c->ffn, err) != 0 ||
        get_int(root, "vocab_size", MAX_VOCAB, 0, path, &c->vocab, err) != 0)
        return -1;
    if (c->hidden % c->n_heads != 0 && !cJSON_GetObjectItemCaseSensitive(root, "head_dim"))
        return kv_fail(err, "%s: no \"head_dim\" and hidden_size is not a multiple of heads", path);
    if (get_int(root, "head_dim", 65536, c->hidden / c->n_heads, path, &c->head_dim, err) != 0)
        return -1;
    /* The trained context length: the default prompt budget of a run. */
    if (cJSON_GetObjectItemCaseSensitive(root, "max_position_embeddings") &&
        get_int(root, "max_position_embeddings", 1 << 30, 0, path, &c->max_positions, err) != 0)
        return -1;
    c->rms_eps = 1e-6;
    if (get_num(root, "rms_norm_eps", path, &c->rms_eps, err) != 0 ||
        parse_rope(root, path, &c->rope, err) != 0 || check_shapes(path, c, err) != 0)
        return -1;
    c->tied_embeddings = get_bool(root, "tie_word_embeddings");
    bool attention_bias = get_bool(root, "attention_bias");
    c->qkv_bias = c->arch == KV_ARCH_QWEN2 || attention_bias;
    c->o_bias = attention_bias && c->arch != KV_ARCH_QWEN2;
    c->mlp_bias = get_bool(root, "mlp_bias");
    c->qk_norm = c->arch == KV_ARCH_QWEN3;
    return parse_eos(root, path, c, err);
}

int kv_model_config_parse(const char *json, size_t len, const char *path, kv_model_config *cfg,
                          kv_error *err)
{
    memset(cfg, 0, sizeof *cfg);
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return kv_fail(err, "%s: not a JSON object", path);
    }
    int rc = parse_fields(root, path, cfg, err);
    cJSON_Delete(root);
    if (rc != 0)
        kv_model_config_free(cfg);
    return rc;
}

int kv_generation_config_parse(const char *json, size_t len, const char *path, kv_model_config *cfg,
                               kv_error *err)
{
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return kv_fail(err, "%s: not a JSON object", path);
    }
    int rc = parse_eos(root, path, cfg, err);
    cJSON_Delete(root);
    return rc;
}

static int parse_file(const char *dir, const char *name, bool required, kv_model_config *cfg,
                      int (*parse)(const char *, size_t, const char *, kv_model_config *,
                                   kv_error *),
                      kv_error *err)
{
    char *path = kv_path_join(dir, name);
    if (!path)
        return kv_fail(err, "out of memory");
    int rc = 0;
    if (required || kv_file_exists(path)) {
        char *text;
        size_t len;
        rc = kv_file_read(path, &text, &len, err);
        if (rc == 0) {
            rc = parse(text, len, path, cfg, err);
            free(text);
        }
    }
    free(path);
    return rc;
}

int kv_model_config_load(const char *dir, kv_model_config *cfg, kv_error *err)
{
    memset(cfg, 0, sizeof *cfg);
    if (parse_file(dir, "config.json", true, cfg, kv_model_config_parse, err) != 0)
        return -1;
    if (parse_file(dir, "generation_config.json", false, cfg, kv_generation_config_parse, err) !=
        0) {
        kv_model_config_free(cfg);
        return -1;
    }
    return 0;
}

void kv_model_config_free(kv_model_config *cfg)
{
    free(cfg->eos_ids);
    cfg->eos_ids = NULL;
    cfg->n_eos = 0;
}
