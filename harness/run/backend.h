/* The runner's model: one prefill per sample on the kvcore engine shared
 * by every eviction config, a compressed fork per config, and greedy
 * decoding of all configs together (one batched forward per step). It sees
 * token ids, never samples, prompts or scores (the runner owns those);
 * kb_runner_run drives it (runner.h).
 */
#ifndef KB_BACKEND_H
#define KB_BACKEND_H

#include "util/error.h"
#include "matrix/matrix.h"
#include "run/runner.h"

/* Loads the model and tokenizer of model_dir once and parses every config's
 * eviction parameters. m must outlive the backend. */
int kb_engine_backend_open(const kb_matrix *m, const char *model_dir, kb_runner_backend *b,
                           kv_error *err);
void kb_engine_backend_close(kb_runner_backend *b);

/* What `run --dry-run` can check of a model folder without loading its
 * weights: config.json names an architecture the engine runs, and the
 * tokenizer loads. *arch receives the architecture's name. */
int kb_engine_model_check(const char *model_dir, const char **arch, kv_error *err);

#endif
