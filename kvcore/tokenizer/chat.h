/* kv_chat: the chat template of a model, rendered as transformers renders the
 * Jinja template in tokenizer_config.json — for the template families kvbench
 * knows, without a Jinja engine.
 *
 * The family is recognised from the template's text:
 *   qwen3    ChatML with <think> rules (Qwen3): reasoning of earlier assistant
 *            turns is dropped; enable_thinking=false appends an empty
 *            "<think>\n\n</think>\n\n" to the generation prompt.
 *   chatml   ChatML, optionally with a default system prompt (Qwen2, Qwen2.5)
 *            and/or the empty think block on enable_thinking=false (the toy
 *            template of the tiny test models).
 *   llama3   Llama-3 headers (<|start_header_id|>), with Llama-3.1's
 *            "Cutting Knowledge Date" system block when the template has it.
 * Tool definitions and tool calls have no API here; Qwen tool results (role
 * "tool") are rendered, Llama-3 ones are an error. A template of another
 * family is an error that says so.
 */
#ifndef KV_CHAT_H
#define KV_CHAT_H

#include <stdbool.h>
#include <stddef.h>

#include "util/error.h"
#include "tokenizer/tokenizer.h"

typedef struct kv_chat_message {
    const char *role; /* "system", "user", "assistant", "tool" */
    const char *content;
    size_t content_len; /* bytes of content (it may hold NULs); 0: strlen(content) */
} kv_chat_message;

/* Renders msgs (n >= 1) into malloc'd text ready for kv_tokenizer_encode
 * (special tokens appear as text, e.g. "<|im_start|>"). add_generation_prompt
 * appends the assistant header; enable_thinking=false is transformers'
 * enable_thinking=False (true is the default, same as not passing it). */
char *kv_chat_render(const kv_tokenizer *t, const kv_chat_message *msgs, size_t n,
                     bool add_generation_prompt, bool enable_thinking, kv_error *err);

/* The same, with the length of the text: content with NUL bytes renders
 * into text with NUL bytes. */
char *kv_chat_render_len(const kv_tokenizer *t, const kv_chat_message *msgs, size_t n,
                         bool add_generation_prompt, bool enable_thinking, size_t *len,
                         kv_error *err);

/* The family name the tokenizer's template is recognised as ("qwen3",
 * "chatml", "llama3"), or NULL (with err set) when it has none or an unknown
 * one. */
const char *kv_chat_family(const kv_tokenizer *t, kv_error *err);

#endif
