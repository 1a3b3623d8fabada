#include "run/runner.h"

#include <cjson/cJSON.h>

#include <stdlib.h>
#include <string.h>

#include "util/clock.h"
#include "longbench/prompt.h"
#include "score/score.h"
#include "run/taskdata.h"

int kb_runner_apply_options(kb_matrix *m, const kb_runner_options *o)
{
    if (o->output) {
        char *s = strdup(o->output);
        if (!s)
            return -1;
        free(m->output);
        m->output = s;
    }
    if (o->name) {
        char *s = strdup(o->name);
        if (!s)
            return -1;
        free(m->run_name);
        m->run_name = s;
    }
    if (o->threads > 0)
        m->threads = o->threads;
    m->empty_tasks_missing = o->empty_tasks_missing;
    for (size_t i = 0; o->limit > 0 && i < m->n_tasks; i++)
        m->tasks[i].limit = o->limit;
    return 0;
}

static void print_setting(FILE *f, const char *what, long v, const char *zero)
{
    if (v > 0)
        fprintf(f, " %s %ld", what, v);
    else
        fprintf(f, " %s %s", what, zero);
}

void kb_runner_plan_print(FILE *f, const kb_matrix *m, const kb_runner_options *o)
{
    char *dir = kb_run_dir(m->output, m->run_name, &o->shard);
    fprintf(f, "run %s -> %s\nmodel %s%s%s\nprotocol %s, compute %s, data %s, threads ",
            m->run_name, dir ? dir : "?", m->model, m->model_revision ? " @ " : "",
            m->model_revision ? m->model_revision : "", m->protocol, m->compute, m->data);
    if (m->threads > 0)
        fprintf(f, "%ld\n", m->threads);
    else
        fputs("all\n", f);
    free(dir);
    if (o->shard.count > 1)
        fprintf(f, "shard %ld/%ld: samples whose index %% %ld == %ld\n", o->shard.index,
                o->shard.count, o->shard.count, o->shard.index);
    fprintf(f, "\n%zu tasks:\n", m->n_tasks);
    for (size_t i = 0; i < m->n_tasks; i++) {
        const kb_task_spec *t = &m->tasks[i];
        fprintf(f, "  %-22s", t->name);
        print_setting(f, "limit", t->limit, "all");
        print_setting(f, "max_length", t->max_length, "model default");
        print_setting(f, "max_new_tokens", t->max_new_tokens, "task default");
        fputc('\n', f);
    }
    size_t agnostic = 0;
    for (size_t i = 0; i < m->n_configs; i++)
        agnostic += !kb_config_is_full(m->configs[i].params) && !m->configs[i].evict.query_aware;
    if (agnostic)
        fprintf(f,
                "\n%zu configs (one prefill of the context per sample, shared by all; then the "
                "question on the full cache, and batched on the %zu query-agnostic caches):\n",
                m->n_configs, agnostic);
    else
        fprintf(f, "\n%zu configs (one prefill per sample, shared by all):\n", m->n_configs);
    bool budgets = false;
    for (size_t i = 0; i < m->n_configs; i++) {
        const kb_config *c = &m->configs[i];
        budgets |= c->budget_asked > 0;
        char *canon = c->params ? kb_json_canonical(c->params) : NULL;
        fprintf(f, "  %-40s %s  ", c->name, c->hash);
        if (c->budget >= 0)
            fprintf(f, "budget %-6ld", c->budget);
        else
            fprintf(f, "%-13s", c->budget == KB_BUDGET_PER_PROMPT ? "per prompt" : "full cache");
        fprintf(f, " %s\n", canon ? canon : "");
        free(canon);
    }
    if (budgets)
        fputs("\nbudget N: every algorithm keeps start_size + intermediate_size + recent_size\n"
              "tokens, so intermediate_size = N - start_size - recent_size (with per_group\n"
              "rounded down to a multiple of group_size), shown in the parameters above.\n",
              f);
}

size_t kb_runner_warn(FILE *f, const kb_matrix *m)
{
    size_t n = 0;
    const char *why = NULL;
    for (size_t i = 0; i < m->n_configs; i++) {
        const kb_config *c = &m->configs[i];
        const char *w = kb_config_is_full(c->params) ? NULL : kv_evict_params_warning(&c->evict);
        if (!w)
            continue;
        if (n == 0)
            fputs("kvbench: warning: config", f);
        if (n < 8)
            fprintf(f, "%s %s", n ? "," : "", m->configs[i].name);
        why = w;
        n++;
    }
    if (n > 8)
        fprintf(f, " and %zu more", n - 8);
    if (n)
        fprintf(f, ": %s\n", why);
    return n;
}

int kb_runner_check_data(const kb_matrix *m, long *samples, kv_error *err)
{
    *samples = 0;
    for (size_t t = 0; t < m->n_tasks; t++) {
        kb_idset ids = {0};
        int rc = kb_taskdata_ids(m->data, m->tasks[t].name, m->empty_tasks_missing, &ids, err);
        *samples += (long)kb_idset_size(&ids);
        kb_idset_free(&ids);
        if (rc < 0)
            return kv_fail_prefix(err, m->tasks[t].name);
    }
    return 0;
}

/* ---- the driver loop --------------------------------------------------- */

/* Samples of a task this process handles: the first `limit`, then its shard. */
static long selected_count(long n, long limit, const kb_shard *sh)
{
    if (n < 0)
        return 0;
    if (limit > 0 && n > limit)
        n = limit;
    if (sh->count <= 1)
        return n;
    return n > sh->index ? (n - sh->index + sh->count - 1) / sh->count : 0;
}

typedef struct loop {
    const kb_matrix *m;
    const kb_runner_options *o;
    const kb_runner_backend *b;
    volatile sig_atomic_t *stop;
    kb_progress *progress;
    kb_runner_stats *stats;
    lb_protocol protocol;
    kb_run run;
    kb_pred_file *pf;          /* one per config, for the current task */
    size_t *pending;           /* configs (indices) still to do for the current sample */
    kb_decode_result *results; /* [n_configs]: what decoding them gave */
    long done_before;          /* samples found done, counted before any task; not yet met */
    kv_error *err;
} loop;

/* One sample and what the run made of it. */
typedef struct sample_run {
    const kb_task_spec *spec;
    const kb_taskdata *it;
    long prompt_tokens;
    long context_tokens;
    double prefill_s;
} sample_run;

static int write_prediction(loop *L, const sample_run *r, size_t c, const kb_decode_result *d)
{
    const lb_sample *s = &r->it->s;
    bool v2 = r->it->task->family == LB_FAMILY_V2;
    /* text_len 0: the text is a C string */
    kv_str pred = !d->text      ? kv_str_c("")
                  : d->text_len ? (kv_str){d->text, d->text_len}
                                : kv_str_c(d->text);
    kb_prediction p = {.id = s->id,
                       .index = r->it->index - 1,
                       .task = r->spec->name,
                       .config = L->m->configs[c].name,
                       .config_hash = L->m->configs[c].hash,
                       .pred = pred,
                       .answers = s->answers,
                       .n_answers = s->n_answers,
                       .all_classes = s->all_classes,
                       .n_classes = s->n_classes,
                       .length = s->length,
                       .difficulty = v2 ? s->difficulty : NULL,
                       .length_class = v2 ? s->length_class : NULL,
                       .prompt_tokens = (double)r->prompt_tokens,
                       .kept_tokens = (double)d->kept_tokens,
                       .context_tokens = (double)r->context_tokens,
                       .kept_context_tokens = (double)d->kept_context_tokens,
                       .generated_tokens = (double)d->generated_tokens,
                       .prefill_s = r->prefill_s,
                       .decode_s = d->decode_s};
    return kb_pred_file_append(&L->pf[c], &p, L->err);
}

/* Decodes the pending configs one after the other into L->results. */
static int decode_each(loop *L, void *state, size_t n_pending)
{
    for (size_t k = 0; k < n_pending; k++) {
        double t1 = kv_clock_s();
        if (L->b->decode(L->b->ctx, state, L->pending[k], &L->results[k], L->err) < 0)
            return -1;
        L->results[k].decode_s = kv_clock_s() - t1;
    }
    return 0;
}

/* Decodes the pending configs as one batch into L->results. */
static int decode_together(loop *L, void *state, size_t n_pending)
{
    kb_forward_counts n = {0};
    if (L->b->decode_batch(L->b->ctx, state, L->pending, n_pending, L->results, &n, L->err) < 0)
        return -1;
    L->stats->decode_steps += n.decode_steps;
    L->stats->question_prefills += n.question_prefills;
    L->stats->question_batches += n.question_batches;
    return 0;
}

/* The prompt budget when the task does not set one: the model's context,
 * less room for the answer (pred.py's model2maxlen plays this role). */
static long prompt_budget(const loop *L, const kb_task_spec *spec, int max_new)
{
    if (spec->max_length > 0)
        return spec->max_length;
    long ctx = L->b->max_positions;
    return ctx > max_new ? ctx - max_new : 0;
}

/* Builds the sample's prompt as pred.py does and prefills it once for the
 * pending configs. */
static int prefill(loop *L, sample_run *r, size_t n_pending, void **state)
{
    const lb_task *task = r->it->task;
    int32_t stop[2];
    kb_gen_limits g = {
        .max_new_tokens =
            r->spec->max_new_tokens > 0 ? (int)r->spec->max_new_tokens : task->max_new_tokens,
        .stop_ids = stop,
    };
    g.n_stop_ids = (int)lb_stop_tokens(L->b->tok, task, L->protocol, stop);
    lb_prompt_options po = {.protocol = L->protocol,
                            .max_length = prompt_budget(L, r->spec, g.max_new_tokens)};
    lb_prompt p = {0};
    double t0 = kv_clock_s();
    int rc = lb_prompt_build(task, &r->it->s, L->b->tok, &po, &p, L->err);
    if (rc == 0)
        rc = L->b->prefill(L->b->ctx, p.ids, p.n_ids, p.n_context, &g, L->pending, n_pending,
                           state, L->err);
    r->prompt_tokens = (long)p.n_ids;
    r->context_tokens = (long)p.n_context;
    r->prefill_s = kv_clock_s() - t0;
    lb_prompt_free(&p);
    return rc;
}

/* One sample: one prefill shared by every config that still lacks it; the
 * predictions are written, in matrix order, once all of them are decoded. */
static int run_sample(loop *L, const kb_task_spec *spec, const kb_taskdata *it)
{
    size_t n_pending = 0;
    for (size_t c = 0; c < L->m->n_configs; c++)
        if (!kb_pred_file_done(&L->pf[c], it->s.id))
            L->pending[n_pending++] = c;
    if (n_pending == 0) {
        L->stats->samples_skipped++;
        if (L->done_before > 0)
            L->done_before--; /* on the progress bar from the start */
        else
            kb_progress_skip(L->progress, 1);
        return 0;
    }
    sample_run r = {.spec = spec, .it = it};
    void *state = NULL;
    long tokens = 0;
    if (prefill(L, &r, n_pending, &state) < 0)
        return -1;
    L->stats->prefills++;
    memset(L->results, 0, n_pending * sizeof *L->results);
    int rc = L->b->decode_batch ? decode_together(L, state, n_pending)
                                : decode_each(L, state, n_pending);
    for (size_t k = 0; k < n_pending && rc == 0; k++) {
        L->stats->decodes++;
        tokens += L->results[k].generated_tokens;
        rc = write_prediction(L, &r, L->pending[k], &L->results[k]);
    }
    for (size_t k = 0; k < n_pending; k++)
        free(L->results[k].text);
    if (L->b->prefill_free)
        L->b->prefill_free(L->b->ctx, state);
    if (rc == 0) {
        L->stats->samples_done++;
        kb_progress_sample(L->progress, r.prompt_tokens + tokens);
    }
    return rc;
}

static int run_samples(loop *L, const kb_task_spec *t, kb_taskdata *it)
{
    for (;;) {
        int got = kb_taskdata_next(it, L->err);
        if (got <= 0)
            return got;
        long index = it->index - 1;
        if (t->limit > 0 && index >= t->limit)
            return 0;
        if (!kb_shard_selects(&L->o->shard, index))
            continue;
        if (L->stop && *L->stop) {
            L->stats->stopped = true;
            return 0;
        }
        if (run_sample(L, t, it) < 0)
            return -1;
    }
}

/* Every line a resume keeps, checked before run.json is rewritten (see
 * kb_run_info.verify): a refused resume changes nothing. */
static int verify_kept_lines(const kb_run *run, const void *ctx, kv_error *err)
{
    const kb_matrix *m = ctx;
    int rc = 0;
    for (size_t t = 0; t < m->n_tasks && rc == 0; t++) {
        kb_idset ids = {0};
        rc = kb_taskdata_ids(m->data, m->tasks[t].name, m->empty_tasks_missing, &ids, err);
        for (size_t c = 0; c < m->n_configs && rc == 0; c++)
            rc = kb_pred_file_verify(run, m->configs[c].name, m->tasks[t].name, &ids, err);
        kb_idset_free(&ids);
        if (rc < 0)
            kv_fail_prefix(err, m->tasks[t].name);
    }
    return rc;
}

static int run_task(loop *L, const kb_task_spec *t, long task_no)
{
    size_t nc = L->m->n_configs, opened = 0;
    kb_idset ids = {0};
    int rc = kb_taskdata_ids(L->m->data, t->name, L->m->empty_tasks_missing, &ids, L->err);
    for (; opened < nc && rc == 0; opened++)
        rc = kb_pred_file_open(&L->run, L->m->configs[opened].name, t->name, &ids, &L->pf[opened],
                               L->err);
    if (rc < 0 && opened > 0)
        opened--;
    kb_idset_free(&ids);
    kb_taskdata it;
    if (rc == 0 && (rc = kb_taskdata_open(L->m->data, t->name, L->m->empty_tasks_missing, &it, L->err)) == 0) {
        kb_progress_task(L->progress, t->name, task_no);
        rc = run_samples(L, t, &it);
        kb_taskdata_close(&it);
    }
    for (size_t c = 0; c < opened; c++)
        kb_pred_file_close(&L->pf[c]);
    if (rc < 0)
        kv_fail_prefix(L->err, t->name);
    return rc;
}

/* Samples of task t a resume finds done: the fewest lines any config's
 * file holds, at most the selected count (a sample's configs are written
 * together, so each file holds the same first samples). */
static long done_before(const loop *L, const kb_task_spec *t, long selected)
{
    long done = selected;
    for (size_t c = 0; c < L->m->n_configs && done > 0; c++) {
        long lines = kb_pred_file_lines(&L->run, L->m->configs[c].name, t->name);
        done = lines < done ? lines : done;
    }
    return done;
}

/* Counts what this process will handle, for the progress bar's total, and
 * what a resume finds done (*done), so that the first progress line shows
 * the share already done. */
static int count_samples(loop *L, long *total, long *done)
{
    *total = *done = 0;
    for (size_t i = 0; i < L->m->n_tasks; i++) {
        kb_taskdata it;
        if (kb_taskdata_open(L->m->data, L->m->tasks[i].name, L->m->empty_tasks_missing, &it,
                              L->err) < 0)
            return kv_fail_prefix(L->err, L->m->tasks[i].name);
        if (it.empty) /* opened only under --empty-tasks missing */
            fprintf(stderr, "kvbench: run: %s: no samples, reported as missing\n",
                    L->m->tasks[i].name);
        long selected = selected_count(it.empty ? 0 : it.n, L->m->tasks[i].limit, &L->o->shard);
        *total += selected;
        *done += done_before(L, &L->m->tasks[i], selected);
        kb_taskdata_close(&it);
    }
    return 0;
}

static bool in_matrix(const kb_score_row *r, const void *matrix)
{
    const kb_matrix *m = matrix;
    for (size_t t = 0; t < m->n_tasks; t++)
        if (strcmp(m->tasks[t].name, r->task) == 0)
            return kb_matrix_find_config(m, r->config) >= 0;
    return false;
}

/* A scorer ready for every task of the matrix: jieba's data is loaded now,
 * so that a run that could not score a Chinese task fails before its
 * inference. */
static int scorer_for(const kb_matrix *m, kb_scorer **s, kv_error *err)
{
    if (kb_scorer_open(s, err) < 0)
        return -1;
    for (size_t i = 0; i < m->n_tasks; i++)
        if (kb_scorer_prepare(*s, m->tasks[i].name, err) < 0)
            return -1;
    return 0;
}

static int score_and_report(loop *L, kb_scorer *scorer)
{
    kb_score_row *rows = NULL;
    size_t n = 0;
    if (kb_scores_from_predictions(L->run.dir, kb_scorer_task, scorer, &rows, &n, L->err) < 0)
        return -1;
    /* scores.json keeps every config ever run in the folder (`kvbench report`
     * on it shows them all); the report written now is of this matrix */
    int rc = kb_scores_save(L->run.dir, rows, n, L->err);
    kb_score_rows_free(rows, n);
    kb_report_run r;
    if (rc == 0 && (rc = kb_report_run_load(L->run.dir, &r, L->err)) == 0) {
        if (kb_report_run_select(&r, in_matrix, L->m) < 0)
            rc = kv_fail(L->err, "out of memory");
        kb_report_options opt = {.baseline = NULL, .threshold = 1.0};
        if (rc == 0)
            rc = kb_report_write(L->run.dir, &r, 1, &opt, L->err);
        if (rc == 0 && L->o->table)
            rc = kb_report_write_table(L->o->table, &r) < 0
                     ? kv_fail(L->err, "cannot print the score table")
                     : 0;
        kb_report_run_free(&r);
    }
    return rc;
}

int kb_runner_run(const kb_matrix *m, const kb_runner_options *o, const char *version,
                  const char *model_hash, const kb_runner_backend *b, volatile sig_atomic_t *stop,
                  kb_progress *progress, kb_runner_stats *stats, kv_error *err)
{
    memset(stats, 0, sizeof *stats);
    loop L = {
        .m = m, .o = o, .b = b, .stop = stop, .progress = progress, .stats = stats, .err = err};
    L.pf = calloc(m->n_configs, sizeof *L.pf);
    L.pending = calloc(m->n_configs, sizeof *L.pending);
    L.results = calloc(m->n_configs, sizeof *L.results);
    char *dir = kb_run_dir(m->output, m->run_name, &o->shard);
    bool scored = o->shard.count <= 1; /* shards are scored once merged */
    kb_scorer *scorer = NULL;
    int rc = 0;
    if (!L.pf || !L.pending || !L.results || !dir)
        rc = kv_fail(err, "out of memory");
    if (rc == 0)
        rc = lb_protocol_parse(m->protocol, &L.protocol, err);
    if (rc == 0 && scored)
        rc = scorer_for(m, &scorer, err);
    double *bytes = b->kv_bytes_per_token ? calloc(m->n_configs, sizeof *bytes) : NULL;
    if (b->kv_bytes_per_token && !bytes)
        rc = kv_fail(err, "out of memory");
    for (size_t i = 0; bytes && i < m->n_configs; i++)
        bytes[i] = b->kv_bytes_per_token(b->ctx, i);
    kb_run_info info = {.kvbench_version = version,
                        .model_hash = model_hash,
                        .matrix = m,
                        .shard = o->shard,
                        .kv_bytes_per_token = bytes,
                        .verify = verify_kept_lines,
                        .verify_ctx = m};
    if (rc == 0)
        rc = kb_run_open(dir, &info, &L.run, err);
    long total = 0;
    if (rc == 0 && progress && (rc = count_samples(&L, &total, &L.done_before)) == 0) {
        kb_progress_set_total(progress, (long)m->n_tasks, total);
        kb_progress_skip(progress, L.done_before);
    }
    for (size_t i = 0; rc == 0 && i < m->n_tasks && !stats->stopped; i++)
        rc = run_task(&L, &m->tasks[i], (long)i + 1);
    if (rc == 0 && !stats->stopped) {
        kb_progress_finish(progress);
        rc = kb_run_mark_finished(&L.run, err);
    }
    if (rc == 0 && !stats->stopped && scored)
        rc = score_and_report(&L, scorer);
    kb_scorer_close(scorer);
    kb_run_close(&L.run);
    free(dir);
    free(bytes);
    free(L.pf);
    free(L.pending);
    free(L.results);
    return rc;
}
