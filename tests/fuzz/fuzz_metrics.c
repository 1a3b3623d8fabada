/* Fuzz target: every LongBench metric over arbitrary bytes. The input is cut
 * into a prediction and an answer at the first 0xFF byte (or in the middle;
 * NULs stay in both, as "\\u0000" puts them there); each
 * metric must return a score in [0, 1] or a clean error, never crash. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "score/jieba.h"
#include "score/metrics.h"
#include "score/score.h"

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
    /* prediction = the bytes before the first 0xFF (or the first half), answer = the
     * rest: NUL bytes stay inside both, as JSON's "\u0000" puts them there */
    const uint8_t *sep = memchr(data, 0xFF, size);
    size_t cut = sep ? (size_t)(sep - data) : size / 2, rest = sep ? cut + 1 : cut;
    kv_str pred = {(const char *)data, cut}, gt = {(const char *)data + rest, size - rest};
    kv_str names[] = {pred, gt, kv_str_c("Food"), kv_str_c("a")};
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
    kv_str answers[] = {gt, pred};
    if (kb_score_prediction(metrics, "trec", pred, answers, 2, &classes, &s, &err) == 0 &&
        !(s >= 0.0 && s <= 1.0))
        abort();
    return 0;
}
