/* kvcore/model_config: config.json and generation_config.json. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_config.h"
#include "model/rope.h"

#define BASE                                                                                       \
    "\"hidden_size\":64,\"num_hidden_layers\":2,\"num_attention_heads\":4,"                        \
    "\"num_key_value_heads\":2,\"intermediate_size\":192,\"vocab_size\":512"

static int parse(const char *json, kv_model_config *c, kv_error *err)
{
    return kv_model_config_parse(json, strlen(json), "config.json", c, err);
}

static void expect_error(const char *json, const char *want)
{
    kv_model_config c;
    kv_error err;
    cr_assert_neq(parse(json, &c, &err), 0, "accepted: %s", json);
    cr_assert(!strchr(err.msg, '\n'), "%s", err.msg);
    cr_expect(strstr(err.msg, "config.json: "), "%s", err.msg);
    cr_expect(strstr(err.msg, want), "want '%s' in: %s", want, err.msg);
}

Test(model_config, qwen3_defaults_and_fields)
{
    kv_model_config c;
    kv_error err;
    cr_assert_eq(parse("{\"architectures\":[\"Qwen3ForCausalLM\"]," BASE
                       ",\"head_dim\":32,\"rope_theta\":1000000,\"rms_norm_eps\":1e-5,"
                       "\"tie_word_embeddings\":true,\"eos_token_id\":7}",
                       &c, &err),
                 0, "%s", err.msg);
    cr_assert_eq(c.arch, KV_ARCH_QWEN3);
    cr_assert(c.qk_norm && !c.qkv_bias && c.tied_embeddings);
    cr_assert_eq(c.head_dim, 32);
    cr_assert_eq(c.rope.theta, 1e6);
    cr_assert_eq(c.rms_eps, 1e-5);
    cr_assert(!c.rope.llama3);
    cr_assert_eq(c.n_eos, 1);
    cr_assert_eq(c.eos_ids[0], 7);
    kv_model_config_free(&c);
}

Test(model_config, qwen2_biases_llama_head_dim_and_model_type)
{
    kv_model_config c;
    kv_error err;
    cr_assert_eq(parse("{\"model_type\":\"qwen2\"," BASE "}", &c, &err), 0, "%s", err.msg);
    cr_assert_eq(c.arch, KV_ARCH_QWEN2);
    cr_assert(c.qkv_bias && !c.o_bias && !c.qk_norm);
    cr_assert_eq(c.head_dim, 16, "hidden / heads when head_dim is absent");
    cr_assert_eq(c.rope.theta, 10000.0);
    kv_model_config_free(&c);
    cr_assert_eq(parse("{\"architectures\":[\"LlamaForCausalLM\"]," BASE
                       ",\"attention_bias\":true,\"mlp_bias\":true}",
                       &c, &err),
                 0, "%s", err.msg);
    cr_assert(c.qkv_bias && c.o_bias && c.mlp_bias);
    kv_model_config_free(&c);
}

Test(model_config, rope_parameters_and_llama3_scaling)
{
    kv_model_config c;
    kv_error err;
    cr_assert_eq(parse("{\"model_type\":\"llama\"," BASE
                       ",\"rope_parameters\":{\"rope_theta\":500000.0,\"rope_type\":\"llama3\","
                       "\"factor\":32.0,\"original_max_position_embeddings\":8192}}",
                       &c, &err),
                 0, "%s", err.msg);
    cr_assert_eq(c.rope.theta, 500000.0);
    cr_assert(c.rope.llama3);
    cr_assert_eq(c.rope.factor, 32.0);
    cr_assert_eq(c.rope.low_freq_factor, 1.0);
    cr_assert_eq(c.rope.high_freq_factor, 4.0);
    /* Llama 3 keeps high frequencies and divides the lowest by factor. */
    kv_rope r;
    cr_assert_eq(kv_rope_init(&r, &c.rope, 128, &err), 0);
    cr_assert_float_eq(r.inv_freq[0], 1.0f, 1e-7);
    kv_model_config plain = c;
    plain.rope.llama3 = false;
    kv_rope p;
    kv_rope_init(&p, &plain.rope, 128, &err);
    cr_assert_float_eq(r.inv_freq[63], p.inv_freq[63] / 32.0f, 1e-12);
    kv_rope_free(&r);
    kv_rope_free(&p);
    kv_model_config_free(&c);
}

Test(model_config, rope_rotation_composes)
{
    kv_rope_config rc = {.theta = 10000.0};
    kv_rope r;
    kv_error err;
    cr_assert_eq(kv_rope_init(&r, &rc, 8, &err), 0);
    float a[8] = {1, 2, 3, 4, 5, 6, 7, 8}, b[8];
    memcpy(b, a, sizeof a);
    kv_rope_apply(&r, a, 1, 7);
    kv_rope_apply(&r, b, 1, 3);
    kv_rope_apply(&r, b, 1, 4);
    for (int i = 0; i < 8; i++)
        cr_assert_float_eq(a[i], b[i], 1e-5, "rotating by 3 then 4 equals rotating by 7");
    kv_rope_apply(&r, a, 1, -7);
    for (int i = 0; i < 8; i++)
        cr_assert_float_eq(a[i], (float)(i + 1), 1e-5, "rotating back restores the key");
    /* pair (0, 4) at position 1 turns by inv_freq[0] = 1 radian */
    float c[8] = {1, 0, 0, 0, 0, 0, 0, 0};
    kv_rope_apply(&r, c, 1, 1);
    cr_assert_float_eq(c[0], cosf(1.0f), 1e-6);
    cr_assert_float_eq(c[4], sinf(1.0f), 1e-6);
    kv_rope_free(&r);
}

Test(model_config, bad_configs_name_the_problem)
{
    expect_error("{\"architectures\":[\"MistralForCausalLM\"]," BASE "}",
                 "unsupported architecture 'MistralForCausalLM' (supported: Qwen3ForCausalLM, "
                 "Qwen2ForCausalLM, LlamaForCausalLM)");
    expect_error("{" BASE "}", "no \"architectures\" or \"model_type\"");
    expect_error("{\"model_type\":\"llama\"," BASE ",\"rope_scaling\":{\"rope_type\":\"yarn\"}}",
                 "rope scaling type 'yarn' is not supported (supported: default, llama3)");
    expect_error("{\"model_type\":\"llama\"," BASE ",\"rope_scaling\":{\"type\":\"llama3\"}}",
                 "factor");
    expect_error("{\"model_type\":\"llama\",\"num_hidden_layers\":2}",
                 "\"hidden_size\" is missing");
#define SHAPE(kv, vocab)                                                                           \
    "{\"model_type\":\"llama\",\"hidden_size\":64,\"num_hidden_layers\":2,"                        \
    "\"num_attention_heads\":4,\"intermediate_size\":192,\"num_key_value_heads\":" kv              \
    ",\"vocab_size\":" vocab "}"
    expect_error(SHAPE("3", "512"), "not a multiple");
    expect_error(SHAPE("2", "-5"), "\"vocab_size\" must be an integer");
    expect_error(SHAPE("2", "5.5"), "\"vocab_size\" must be an integer");
    expect_error(SHAPE("0", "512"), "\"num_key_value_heads\"");
    expect_error("{\"model_type\":\"llama\"," BASE ",\"head_dim\":33}", "odd");
    expect_error("{\"model_type\":\"llama\"," BASE ",\"hidden_act\":\"gelu\"}", "silu");
    expect_error("{\"model_type\":\"llama\"," BASE ",\"rope_theta\":\"big\"}", "rope_theta");
    expect_error("{\"model_type\":\"llama\"," BASE ",\"eos_token_id\":\"x\"}", "eos_token_id");
    expect_error("[]", "not a JSON object");
    expect_error("{", "not a JSON object");
}

Test(model_config, generation_config_adds_eos_ids)
{
    kv_model_config c;
    kv_error err;
    cr_assert_eq(parse("{\"model_type\":\"qwen3\"," BASE ",\"eos_token_id\":5}", &c, &err), 0);
    const char *gen = "{\"eos_token_id\":[6,5,7],\"do_sample\":false}";
    cr_assert_eq(kv_generation_config_parse(gen, strlen(gen), "generation_config.json", &c, &err),
                 0, "%s", err.msg);
    cr_assert_eq(c.n_eos, 3, "5 is not repeated");
    cr_assert_eq(c.eos_ids[1], 6);
    cr_assert_eq(c.eos_ids[2], 7);
    kv_model_config_free(&c);
}
