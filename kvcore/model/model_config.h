/* model_config: what config.json and generation_config.json say about a model.
 *
 * Supported: Qwen3ForCausalLM (per-head q/k RMSNorm before RoPE),
 * Qwen2ForCausalLM (q/k/v biases) and LlamaForCausalLM; plain RoPE and
 * Llama 3's "llama3" rope scaling; rope settings at the top level or nested
 * under "rope_parameters" (newer transformers). Anything else is refused with
 * an error that names what is supported.
 */
#ifndef KV_MODEL_CONFIG_H
#define KV_MODEL_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/error.h"

typedef enum kv_arch { KV_ARCH_QWEN3, KV_ARCH_QWEN2, KV_ARCH_LLAMA } kv_arch;

typedef struct kv_rope_config {
    double theta;
    bool llama3; /* Llama 3 frequency scaling */
    double factor, low_freq_factor, high_freq_factor, original_max_pos;
} kv_rope_config;

typedef struct kv_model_config {
    kv_arch arch;
    int hidden, n_layers, n_heads, n_kv_heads, head_dim, ffn, vocab;
    int max_positions; /* max_position_embeddings; 0 when config.json has none */
    double rms_eps;
    kv_rope_config rope;
    bool tied_embeddings;
    bool qkv_bias, o_bias, mlp_bias, qk_norm;
    int32_t *eos_ids; /* config.json's and generation_config.json's, deduplicated */
    int n_eos;
} kv_model_config;

/* Parses config.json text (json[0..len)); `path` names the file in errors. */
int kv_model_config_parse(const char *json, size_t len, const char *path, kv_model_config *cfg,
                          kv_error *err);

/* Adds the eos ids of generation_config.json text to cfg->eos_ids. */
int kv_generation_config_parse(const char *json, size_t len, const char *path, kv_model_config *cfg,
                               kv_error *err);

/* Reads DIR/config.json and, when present, DIR/generation_config.json. */
int kv_model_config_load(const char *dir, kv_model_config *cfg, kv_error *err);

void kv_model_config_free(kv_model_config *cfg);

/* "qwen3", "qwen2", "llama". */
const char *kv_arch_name(kv_arch arch);

#endif
