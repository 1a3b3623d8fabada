/* Prompt building, as LongBench's pred.py does it (docs/longbench.md):
 *
 *   1. substitute the sample into the task's template;
 *   2. if the tokenised prompt is longer than max_length, keep the first and
 *      last max_length/2 tokens: decode both halves (skipping special tokens),
 *      join the texts and tokenise again;
 *   3. wrap the text in the model's chat template when the protocol says so.
 *
 * The tokens are then split into a context part and a question part at the
 * first token that starts at or after the task's cut (lb_task.question_from,
 * followed through steps 2 and 3): query-agnostic eviction compresses the
 * context before the question is read.
 *
 * Two protocols decide step 3 and where generation stops:
 *   longbench  pred.py: chat on every task but trec triviaqa samsum lsht lcc
 *              repobench-p; stop at EOS, samsum also at the single "\n" token.
 *   nncf       the NNCF LongBench script (docs/eviction.md): chat template on
 *              every task, stop at the first "\n" on every task.
 */
#ifndef LB_PROMPT_H
#define LB_PROMPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/error.h"
#include "longbench/sample.h"
#include "longbench/tasks.h"
#include "tokenizer/tokenizer.h"

typedef enum lb_protocol {
    LB_PROTOCOL_LONGBENCH,
    LB_PROTOCOL_NNCF,
} lb_protocol;

/* "longbench" / "nncf" -> protocol. */
int lb_protocol_parse(const char *name, lb_protocol *out, kv_error *err);
const char *lb_protocol_name(lb_protocol p);

/* Whether the protocol wraps this task's prompt in the chat template. */
bool lb_protocol_chat(lb_protocol p, const lb_task *task);
/* Whether generation also stops at the single "\n" token. */
bool lb_protocol_newline_stop(lb_protocol p, const lb_task *task);

/* The ids that end generation of this task under the protocol: EOS, and the
 * id of "\n" (pred.py: tokenizer.encode("\n", add_special_tokens=False)[-1])
 * when the protocol stops there. Only that single-"\n" token stops; merged
 * tokens such as "\n\n" do not. Returns how many ids were written to out. */
size_t lb_stop_tokens(const kv_tokenizer *t, const lb_task *task, lb_protocol p, int32_t out[2]);

/* Step 1: the template with {context} and {input} substituted (Python
 * str.format semantics: "{{" and "}}" are literal braces; the values are not
 * re-parsed). *text is malloc'd and NUL-terminated; *len excludes the NUL. */
int lb_prompt_format(const lb_task *task, const lb_sample *s, char **text, size_t *len,
                     kv_error *err);

/* Whether a {}-template (a user task's) is one lb_prompt_format can fill:
 * only {context} and {input} (and {{ }}), with {context} present. 0, or -1
 * with the problem in msg. */
int lb_template_check(const char *template, char *msg, size_t n);

typedef struct lb_prompt_options {
    lb_protocol protocol;
    long max_length;      /* token budget of the prompt before the chat template; 0: none */
    bool enable_thinking; /* Qwen3's chat switch; LongBench runs use false */
} lb_prompt_options;

typedef struct lb_prompt {
    char *text; /* exactly what the model sees (chat template included) */
    size_t len;
    int32_t *ids; /* text tokenised: with the tokenizer's special tokens (BOS) for a plain
                     prompt, as the rendered template writes them for a chat */
    size_t n_ids;
    size_t n_context; /* ids[0..n_context) are the context part, the rest the question part
                         (lb_task.question_from; docs/longbench.md) */
    size_t n_raw;   /* tokens of the substituted template before truncation */
    bool truncated; /* the middle was cut */
    bool chat;      /* the chat template was applied */
} lb_prompt;

/* Steps 1-3. The chat template is applied when the protocol asks for it and
 * the tokenizer has one (pred.py leaves the prompt alone for a model its
 * build_chat does not know). On failure *p is left empty. */
int lb_prompt_build(const lb_task *task, const lb_sample *s, const kv_tokenizer *t,
                    const lb_prompt_options *opts, lb_prompt *p, kv_error *err);
void lb_prompt_free(lb_prompt *p);

/* The same split of any text whose question part starts at byte cut
 * (`kvbench generate --prompt C --question Q`): its tokens, the chat
 * template around it when asked, and how many of them are the context. */
int lb_split_encode(const kv_tokenizer *t, const char *text, size_t len, size_t cut, bool chat,
                    bool enable_thinking, int32_t **ids, size_t *n_ids, size_t *n_context,
                    kv_error *err);

#endif
