/* The runner's real backend: LongBench samples from datasets/, prompts built
 * as pred.py builds them, one prefill per sample on the kvcore engine shared
 * by every eviction config, a compressed fork per config, greedy decoding,
 * and LongBench's scorers. kb_runner_run drives it (runner.h).
 */
#ifndef KB_BACKEND_H
#define KB_BACKEND_H

#include "error.h"
#include "matrix.h"
#include "runner.h"

/* Loads the model and tokenizer of model_dir once and parses every config's
 * eviction parameters. m must outlive the backend. */
int kb_engine_backend_open(const kb_matrix *m, const char *model_dir, kb_runner_backend *b,
                           kv_error *err);
void kb_engine_backend_close(kb_runner_backend *b);

/* The matrix hooks backed by the eviction parser and the task registry. */
const kb_matrix_hooks *kb_engine_matrix_hooks(void);

/* How many prefills the backend ran (the shared-prefill check). */
long kb_engine_backend_prefills(const kb_runner_backend *b);

#endif
