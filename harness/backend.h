/* The runner's real backend: LongBench samples from datasets/, prompts built
 * as pred.py builds them, one prefill per sample on the kvcore engine shared
 * by every eviction config, a compressed fork per config, greedy decoding of
 * all configs together (one batched forward per step),
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

/* LongBench's scorers alone, without a model (what `kvbench report` needs
 * to rebuild scores.json from predictions). Close ctx with kb_scorer_close. */
int kb_scorer_open(kb_task_scorer *fn, void **ctx, kv_error *err);
void kb_scorer_close(void *ctx);

/* The number of samples of a task in a data folder, as a run reads them
 * (what merge checks line counts against), or -1 with err set. */
long kb_task_size(const char *data, const char *task, kv_error *err);

/* How many prefills the backend ran (the shared-prefill check). */
long kb_engine_backend_prefills(const kb_runner_backend *b);

#endif
