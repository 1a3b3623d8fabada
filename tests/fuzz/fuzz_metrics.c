/* Fuzz target: every LongBench metric over arbitrary bytes. The input is cut
 * into a prediction and an answer at the first NUL (or in the middle); each
 * metric must return a score in [0, 1] or a clean error, never crash. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "jieba.h"
#include "metrics.h"
#include "score.h"

static kb_jieba *jieba;
static kb_metrics *metrics;

static void setup(void)
{
    kv_error err;
    if (kb_jieba_load(NULL, &jieba, &err) < 0)
        jieba = NULL; /* the Chinese metrics then fail cleanly, which is checked too */
    if (kb_metrics_new(jieba, &metrics, &err) < 0)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!metrics)
        setup();
    /* prediction = the bytes before the first NUL (or the first half), answer = the rest */
    const uint8_t *nul = memchr(data, 0, size);
    size_t cut = nul ? (size_t)(nul - data) : size / 2, rest = nul ? cut + 1 : cut;
    char *pred = strndup((const char *)data, cut);
    char *gt = strndup((const char *)data + rest, size - rest);
    if (!pred || !gt) {
        free(pred);
        free(gt);
        return 0;
    }
    const char *names[] = {pred, gt, "Food", "a"};
    kb_classes classes = {names, 4};
    for (int k = 0; k < KB_N_METRICS; k++) {
        double s = -1;
        kv_error err;
        if (kb_metric_score(metrics, (kb_metric)k, pred, gt, &classes, &s, &err) == 0 &&
            !(s >= 0.0 && s <= 1.0))
            abort(); /* a score outside [0, 1] */
    }
    double s;
    kv_error err;
    const char *answers[] = {gt, pred};
    if (kb_score_prediction(metrics, "trec", pred, answers, 2, &classes, &s, &err) == 0 &&
        !(s >= 0.0 && s <= 1.0))
        abort();
    free(pred);
    free(gt);
    return 0;
}
