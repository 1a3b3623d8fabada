/* jieba's accurate-mode segmentation (jieba.cut(s, cut_all=False), HMM on),
 * reimplemented over jieba 0.42.1's own data files, for LongBench's Chinese
 * metrics (docs/longbench.md).
 *
 * The data is read at run time from a jieba package folder: dict.txt (word,
 * frequency, tag per line) and finalseg/prob_{start,trans,emit}.py (the HMM
 * tables as Python literals). Debian's python3-jieba installs them in
 * /usr/lib/python3/dist-packages/jieba; $KVBENCH_JIEBA_DIR overrides that.
 *
 * A loaded kb_jieba is read-only, so one can be shared by several threads.
 */
#ifndef KB_JIEBA_H
#define KB_JIEBA_H

#include <stddef.h>

#include "util/error.h"
#include "util/vec.h"

#define KB_JIEBA_DEBIAN_DIR "/usr/lib/python3/dist-packages/jieba"

typedef struct kb_jieba kb_jieba;

/* A token: a byte range of the segmented text. */
typedef struct kb_span {
    size_t off, len;
} kb_span;

typedef struct kb_spans {
    kb_span *v;
    size_t n, cap;
} kb_spans;

/* $KVBENCH_JIEBA_DIR when set and not empty, else the Debian location. */
const char *kb_jieba_default_dir(void);

/* Loads the dictionary and HMM tables from dir (NULL: the default). On
 * failure the message says how to install the data. */
int kb_jieba_load(const char *dir, kb_jieba **out, kv_error *err);
void kb_jieba_free(kb_jieba *j);

/* Appends the tokens of s[0..n) (valid UTF-8) to out, in order; together they
 * cover s exactly. Returns -1 when out of memory. */
int kb_jieba_cut(const kb_jieba *j, const char *s, size_t n, kb_spans *out);

/* Appends the span [off, off + len); -1 when out of memory. */
int kb_spans_push(kb_spans *s, size_t off, size_t len);
void kb_spans_free(kb_spans *s);

#endif
