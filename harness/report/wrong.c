#include "report/wrong.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "longbench/prompt.h"
#include "longbench/sample.h"
#include "longbench/tasks.h"
#include "report/rows.h"
#include "rundir/predfile.h"
#include "util/file.h"

/* How much of a prompt a page shows at each end, and how many samples of a
 * config at most (a page of 500 long prompts helps nobody). */
enum { PROMPT_END = 400, MAX_SAMPLES = 50 };

char *kb_wrong_page(const kb_report_run *run, const char *task, bool several_runs)
{
    char *page = NULL;
    int n = several_runs ? asprintf(&page, "wrong/%s/%s.html", run->name, task)
                         : asprintf(&page, "wrong/%s.html", task);
    return n < 0 ? NULL : page;
}

bool kb_wrong_has_page(const kb_report_run *run, const char *task)
{
    const kb_score_row *full = kb_report_row(run, "full", task);
    if (!full || !full->n_samples)
        return false;
    for (size_t i = 0; i < run->n_rows; i++)
        if (strcmp(run->rows[i].task, task) == 0 && strcmp(run->rows[i].config, "full") != 0 &&
            run->rows[i].n_samples)
            return true;
    return false;
}

/* Text as HTML; a NUL as \u0000. */
static void esc(FILE *f, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const char *as = s[i] == '&'   ? "&amp;"
                         : s[i] == '<' ? "&lt;"
                         : s[i] == '>' ? "&gt;"
                         : s[i] == 0   ? "\\u0000"
                                       : NULL;
        if (as)
            fputs(as, f);
        else
            fputc(s[i], f);
    }
}

static void esc_c(FILE *f, const char *s)
{
    esc(f, s, strlen(s));
}

static void esc_id(FILE *f, kv_str id)
{
    esc(f, id.p, id.n);
}

/* The full cache's per-sample scores sorted by id, for bsearch: every
 * sample of every config is looked up in it. */
typedef struct full_index {
    const kb_sample_score **v;
    size_t n;
} full_index;

static int cmp_sample_ids(const void *a, const void *b)
{
    return kv_str_cmp((*(const kb_sample_score *const *)a)->id,
                      (*(const kb_sample_score *const *)b)->id);
}

static int full_index_build(const kb_score_row *full, full_index *x)
{
    x->n = full->n_samples;
    if (!(x->v = calloc(x->n + 1, sizeof *x->v)))
        return -1;
    for (size_t i = 0; i < x->n; i++)
        x->v[i] = &full->samples[i];
    qsort(x->v, x->n, sizeof *x->v, cmp_sample_ids);
    return 0;
}

/* The full cache's score of sample id, or -1 when it lacks it. */
static double full_score(const full_index *x, kv_str id)
{
    kb_sample_score key = {.id = id};
    const kb_sample_score *k = &key;
    const kb_sample_score **hit = bsearch(&k, x->v, x->n, sizeof *x->v, cmp_sample_ids);
    return hit ? (*hit)->score : -1;
}

/* The score of sample id in row, or -1 when the row lacks it. */
static double sample_score(const kb_score_row *r, kv_str id)
{
    for (size_t i = 0; i < r->n_samples; i++)
        if (kv_str_eq(r->samples[i].id, id))
            return r->samples[i].score;
    return -1;
}

/* The prediction lines of a config's task file, or none (l->n == 0). */
static void read_predictions(const kb_report_run *run, const char *config, const char *task,
                             kb_pred_lines *l)
{
    memset(l, 0, sizeof *l);
    char *path = NULL;
    kv_error ignored; /* a report made from scores.json alone has no predictions */
    if (asprintf(&path, "%s/predictions/%s/%s.jsonl", run->dir, config, task) >= 0 &&
        kv_file_exists(path) && kb_pred_lines_read(path, l, &ignored) < 0)
        memset(l, 0, sizeof *l);
    free(path);
}

static const kb_prediction *line_of(const kb_pred_lines *l, kv_str id)
{
    for (size_t i = 0; i < l->n; i++)
        if (kv_str_eq(l->line[i].id, id))
            return &l->line[i];
    return NULL;
}

static void pred_cell(FILE *f, const kb_prediction *line)
{
    fputs("<td><pre>", f);
    if (line && line->pred.p)
        esc(f, line->pred.p, line->pred.n);
    else
        fputs("<i>not found</i>", f);
    fputs("</pre></td>", f);
}

static void answers_cell(FILE *f, const kb_prediction *line)
{
    fputs("<td>", f);
    for (size_t i = 0; line && i < line->n_answers; i++) {
        fputs("<pre>", f);
        esc(f, line->answers[i].p, line->answers[i].n);
        fputs("</pre>", f);
    }
    fputs("</td>", f);
}

/* Where a UTF-8 text may be cut near `at` without splitting a character. */
static size_t char_start(const char *s, size_t n, size_t at)
{
    while (at < n && ((unsigned char)s[at] & 0xC0) == 0x80)
        at++;
    return at;
}

/* The prompt's first and last PROMPT_END bytes, the middle elided. */
static void prompt_cell(FILE *f, const lb_task *t, const lb_sample *s)
{
    fputs("<td><pre class='prompt'>", f);
    char *text = NULL;
    size_t n = 0;
    kv_error err;
    if (!t || !s || lb_prompt_format(t, s, &text, &n, &err) < 0) {
        fputs("<i>the sample is not in the data here</i>", f);
    } else if (n <= 2 * PROMPT_END) {
        esc(f, text, n);
    } else {
        size_t head = char_start(text, n, PROMPT_END), tail = char_start(text, n, n - PROMPT_END);
        esc(f, text, head);
        fprintf(f, "</pre><p class='cut'>… %zu bytes …</p><pre class='prompt'>", tail - head);
        esc(f, text + tail, n - tail);
    }
    free(text);
    fputs("</pre></td>", f);
}

/* The data's samples of the task whose ids are listed; NULL entries where
 * the data is not here. */
static void load_samples(const kb_report_run *run, const lb_task *t, const kv_str *ids, size_t n,
                         lb_sample *out, bool *have)
{
    memset(have, 0, n * sizeof *have);
    if (!t || !run->data || !n)
        return;
    char *path = lb_sample_path(run->data, t);
    kv_error err;
    lb_loader_options o = {.schema = t->family == LB_FAMILY_V2 ? LB_SCHEMA_V2 : LB_SCHEMA_V1,
                           .on_error = LB_ON_ERROR_SKIP,
                           .ids = ids,
                           .n_ids = n};
    lb_loader *l = path && kv_file_exists(path) ? lb_loader_open(path, &o, &err) : NULL;
    lb_sample s;
    while (l && lb_loader_next(l, &s, &err) == 1) {
        size_t k = 0;
        while (k < n && (have[k] || !kv_str_eq(ids[k], s.id)))
            k++;
        if (k < n) {
            out[k] = s;
            have[k] = true;
        } else {
            lb_sample_free(&s);
        }
    }
    lb_loader_close(l);
    free(path);
}

/* The samples a page shows, loaded from the data once per task. */
typedef struct shown_samples {
    kv_str *ids;
    lb_sample *s;
    bool *have;
    size_t n;
} shown_samples;

static const lb_sample *shown(const shown_samples *d, kv_str id)
{
    for (size_t k = 0; k < d->n; k++)
        if (d->have[k] && kv_str_eq(d->ids[k], id))
            return &d->s[k];
    return NULL;
}

/* The first MAX_SAMPLES ids of r that scored below the full cache (into
 * ids, which has room for them); returns how many there are in all. */
static size_t wrong_ids(const kb_score_row *r, const full_index *full, kv_str *ids, size_t *n_ids)
{
    size_t n = 0;
    *n_ids = 0;
    for (size_t i = 0; i < r->n_samples; i++)
        if (full_score(full, r->samples[i].id) > r->samples[i].score && n++ < MAX_SAMPLES)
            ids[(*n_ids)++] = r->samples[i].id;
    return n;
}

/* One config's section: its samples below the full cache. */
static void config_section(FILE *f, const kb_report_run *run, const kb_score_row *r,
                           const full_index *full, const kb_pred_lines *full_lines,
                           const shown_samples *data)
{
    kv_str ids[MAX_SAMPLES];
    size_t n_ids, n = wrong_ids(r, full, ids, &n_ids);
    fprintf(f, "<h2 id='");
    esc_c(f, r->config);
    fputs("'>", f);
    esc_c(f, r->config);
    fprintf(f, ": %zu of %zu samples below the full cache%s</h2>\n", n, r->n_samples,
            n_ids < n ? " (the first 50 shown)" : "");
    if (!n_ids)
        return;
    kb_pred_lines mine;
    read_predictions(run, r->config, r->task, &mine);
    const lb_task *t = lb_task_find(r->task);
    fputs("<table><tr><th>sample</th><th>score (full cache)</th><th>prompt (head … "
          "tail)</th><th>prediction</th><th>full cache's</th><th>answers</th></tr>\n",
          f);
    for (size_t k = 0; k < n_ids; k++) {
        const kb_prediction *line = line_of(&mine, ids[k]);
        const kb_prediction *full_line = line_of(full_lines, ids[k]);
        fputs("<tr><td>", f);
        esc_id(f, ids[k]);
        fprintf(f, "</td><td class='num'>%.2f (%.2f)</td>", sample_score(r, ids[k]),
                full_score(full, ids[k]));
        prompt_cell(f, t, shown(data, ids[k]));
        pred_cell(f, line);
        pred_cell(f, full_line);
        answers_cell(f, line ? line : full_line);
        fputs("</tr>\n", f);
    }
    fputs("</table>\n", f);
    kb_pred_lines_free(&mine);
}

/* Every sample any config's section shows, read from the data in one pass. */
static int load_shown(const kb_report_run *run, const char *task, const kb_score_row *full,
                      const full_index *index, shown_samples *d)
{
    memset(d, 0, sizeof *d);
    size_t cap = 0;
    for (size_t i = 0; i < run->n_rows; i++)
        if (strcmp(run->rows[i].task, task) == 0 && &run->rows[i] != full)
            cap += MAX_SAMPLES;
    d->ids = calloc(cap + 1, sizeof *d->ids);
    if (!d->ids)
        return -1;
    for (size_t i = 0; i < run->n_rows; i++) {
        if (strcmp(run->rows[i].task, task) != 0 || &run->rows[i] == full)
            continue;
        kv_str ids[MAX_SAMPLES];
        size_t n_ids;
        wrong_ids(&run->rows[i], index, ids, &n_ids);
        for (size_t k = 0; k < n_ids; k++) {
            size_t j = 0;
            while (j < d->n && !kv_str_eq(d->ids[j], ids[k]))
                j++;
            if (j == d->n)
                d->ids[d->n++] = ids[k];
        }
    }
    d->s = calloc(d->n + 1, sizeof *d->s);
    d->have = calloc(d->n + 1, sizeof *d->have);
    if (!d->s || !d->have)
        return -1;
    load_samples(run, lb_task_find(task), d->ids, d->n, d->s, d->have);
    return 0;
}

static void shown_free(shown_samples *d)
{
    for (size_t k = 0; d->have && k < d->n; k++)
        if (d->have[k])
            lb_sample_free(&d->s[k]);
    free(d->ids);
    free(d->s);
    free(d->have);
}

static const char css[] =
    "body{font-family:system-ui,sans-serif;margin:2em;color:#111}table{border-collapse:"
    "collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;vertical-align:top;"
    "text-align:left}td.num{text-align:right}pre{white-space:pre-wrap;margin:0;max-width:40em}"
    "pre.prompt{font-size:11px;color:#444}p.cut{margin:2px 0;color:#a50026;font-size:11px}";

static int write_page(const char *dir, const kb_report_run *run, const char *task,
                      bool several_runs, kv_error *err)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return kv_fail(err, "out of memory");
    const kb_score_row *full = kb_report_row(run, "full", task);
    kb_pred_lines full_lines;
    read_predictions(run, "full", task, &full_lines);
    fprintf(f, "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'><title>");
    esc_c(f, task);
    fprintf(f, ": wrong against the full cache</title><style>%s</style></head><body>\n<h1>", css);
    esc_c(f, run->name);
    fputs(" — ", f);
    esc_c(f, task);
    fputs(": the samples each config got wrong against the full cache</h1>\n<p>A sample is "
          "listed when its score is below the full cache's score of the same sample. Prompts "
          "are the task's template filled from the data (before truncation and the chat "
          "template).</p>\n",
          f);
    if (!full_lines.n)
        fputs("<p><i>The run's prediction files are not here: scores only.</i></p>\n", f);
    shown_samples data = {0};
    full_index index = {0};
    int rc = full_index_build(full, &index) < 0 || load_shown(run, task, full, &index, &data) < 0
                 ? kv_fail(err, "out of memory")
                 : 0;
    for (size_t i = 0; rc == 0 && i < run->n_rows; i++)
        if (strcmp(run->rows[i].task, task) == 0 && &run->rows[i] != full)
            config_section(f, run, &run->rows[i], &index, &full_lines, &data);
    fputs("</body></html>\n", f);
    shown_free(&data);
    free(index.v);
    kb_pred_lines_free(&full_lines);
    if (fclose(f) != 0 && rc == 0)
        rc = kv_fail(err, "out of memory");
    char *page = kb_wrong_page(run, task, several_runs);
    char *path = page ? kv_path_join(dir, page) : NULL;
    char *slash = path ? strrchr(path, '/') : NULL;
    if (rc == 0 && !path)
        rc = kv_fail(err, "out of memory");
    if (rc == 0) {
        *slash = '\0';
        rc = kv_mkdirs(path, err);
        *slash = '/';
    }
    if (rc == 0)
        rc = kv_write_atomic(path, buf, len, err);
    free(page);
    free(path);
    free(buf);
    return rc;
}

int kb_wrong_write(const char *dir, const kb_report_run *run, bool several_runs, kv_error *err)
{
    for (size_t i = 0; i < run->n_rows; i++) {
        const char *task = run->rows[i].task;
        bool first = true; /* each task once */
        for (size_t j = 0; j < i && first; j++)
            first = strcmp(run->rows[j].task, task) != 0;
        if (first && kb_wrong_has_page(run, task) &&
            write_page(dir, run, task, several_runs, err) < 0)
            return -1;
    }
    return 0;
}
