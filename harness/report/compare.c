#include "report/compare.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "report/rows.h"
#include "report/rowstats.h"

static int cmp_change(const void *a, const void *b)
{
    const kb_change *x = a, *y = b;
    /* regressions first, then improvements, then moves within noise */
    static const int rank[3] = {0, 2, 1}; /* by verdict + 1 */
    if (x->verdict != y->verdict)
        return rank[x->verdict + 1] < rank[y->verdict + 1] ? -1 : 1;
    double kx = fabs(x->delta), ky = fabs(y->delta);
    if (kx != ky)
        return kx > ky ? -1 : 1;
    int c = strcmp(x->config, y->config);
    return c ? c : strcmp(x->task, y->task);
}

int kb_report_compare(const kb_report_run *run, const kb_report_run *baseline, double threshold,
                      kb_change **out, size_t *n, size_t *n_partial)
{
    *out = NULL;
    *n = 0;
    size_t partial = 0;
    kb_change *ch = calloc(run->n_rows + 1, sizeof *ch);
    if (!ch)
        return -1;
    for (size_t i = 0; i < run->n_rows; i++) {
        const kb_score_row *r = &run->rows[i];
        const kb_score_row *b = kb_report_row(baseline, r->config, r->task);
        kb_pairing p;
        if (!b)
            continue;
        if (kb_rows_pair(r, b, r->task, NULL, &p) < 0) {
            free(ch);
            return -1;
        }
        bool paired = r->n_samples && b->n_samples;
        partial += paired && !p.same_samples;
        if (isnan(p.delta) || fabs(p.delta) < threshold || p.delta == 0)
            continue;
        int sign = p.delta < 0 ? -1 : 1;
        bool beyond_noise =
            !paired || (kb_interval_excludes_zero(p.ci) && (p.ci.hi < 0) == (sign < 0));
        ch[(*n)++] = (kb_change){.config = r->config,
                                 .task = r->task,
                                 .before = b->score,
                                 .after = r->score,
                                 .delta = p.delta,
                                 .ci = p.ci,
                                 .n_shared = p.n_shared,
                                 .n_before = b->n_samples,
                                 .n_after = r->n_samples,
                                 .paired = paired,
                                 .verdict = beyond_noise ? sign : 0};
    }
    qsort(ch, *n, sizeof *ch, cmp_change);
    *out = ch;
    if (n_partial)
        *n_partial = partial;
    return 0;
}

const char *kb_verdict_name(int verdict)
{
    return verdict < 0 ? "regression" : verdict > 0 ? "improvement" : "within noise";
}

size_t kb_count_verdict(const kb_change *ch, size_t n, int verdict)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += ch[i].verdict == verdict;
    return k;
}

void kb_compare_notes(FILE *f, const kb_change *ch, size_t n, size_t n_partial, double threshold)
{
    size_t reg = kb_count_verdict(ch, n, -1), imp = kb_count_verdict(ch, n, 1);
    fprintf(f,
            "%zu regression%s and %zu improvement%s: a move of at least %.2f points whose "
            "paired 95 %% interval (new - baseline, on the samples both runs scored) excludes 0",
            reg, reg == 1 ? "" : "s", imp, imp == 1 ? "" : "s", threshold);
    size_t noise = n - reg - imp, unpaired = 0;
    for (size_t i = 0; i < n; i++)
        unpaired += !ch[i].paired;
    if (noise)
        fprintf(f, "; %zu move%s of that size within noise", noise, noise == 1 ? "" : "s");
    fputs(".", f);
    if (n_partial)
        fprintf(f,
                " %zu (config, task) pair%s of the two runs cover different samples: each is "
                "compared on the samples both runs share.",
                n_partial, n_partial == 1 ? "" : "s");
    if (unpaired)
        fprintf(f,
                " %zu move%s could not be paired (a scores.json without per-sample scores): "
                "the threshold alone decides those.",
                unpaired, unpaired == 1 ? "" : "s");
}

bool kb_is_regression(const kb_change *ch, size_t n, const char *config, const char *task)
{
    for (size_t i = 0; i < n; i++)
        if (ch[i].verdict < 0 && strcmp(ch[i].config, config) == 0 && strcmp(ch[i].task, task) == 0)
            return true;
    return false;
}
