/* Python's view of Unicode text, for scorers that must agree with CPython.
 *
 * LongBench's metrics are Python string code: str.lower(), str.isspace(),
 * str.split(), and the `re` classes \w and \d. These helpers reproduce them on
 * code points, using utf8proc for the character database:
 *   - whitespace: kvcore's kv_utf8_py_isspace (CPython's isspace());
 *   - \w: letters (L*), numbers (Nd Nl No) and '_' (CPython: isalnum() or '_');
 *   - \d: General_Category Nd;
 *   - lower: the full lowercase mapping (U+0130 becomes two code points) with
 *     the Final_Sigma rule for U+03A3.
 * Text comes in as UTF-8 and is walked with kvcore's kv_utf8_next: an
 * ill-formed sequence decodes as U+FFFD, so every function accepts arbitrary
 * bytes.
 */
#ifndef KB_UNICODE_H
#define KB_UNICODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/utf8.h"

/* Number of code points in s[0..n), as Python's len() counts them. */
size_t kb_utf8_length(const char *s, size_t n);

bool kb_py_isword(uint32_t cp);  /* re \w */
bool kb_py_isdigit(uint32_t cp); /* re \d */

/* A growable UTF-8 byte buffer. */
typedef struct kb_text {
    char *data;
    size_t len, cap;
} kb_text;

/* Make room for `more` bytes (plus a NUL). Returns -1 when out of memory. */
int kb_text_reserve(kb_text *t, size_t more);
int kb_text_append(kb_text *t, const char *s, size_t n);
void kb_text_free(kb_text *t);

/* Appends Python's s.lower() of s[0..n) to out. Returns -1 when out of memory. */
int kb_py_lower(const char *s, size_t n, kb_text *out);

/* Replaces invalid UTF-8 in s[0..n) by U+FFFD, into out (which is reset). */
int kb_utf8_sanitize(const char *s, size_t n, kb_text *out);

#endif
