/* UTF-8 checks and repair shared by the tokenizer and its callers.
 *
 * "Lossy" follows the Unicode recommendation that Rust's from_utf8_lossy and
 * the WHATWG decoder implement: each maximal subpart of an ill-formed sequence
 * becomes one U+FFFD, so the tokenizer's decode matches Hugging Face's.
 */
#ifndef KV_UTF8_H
#define KV_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Length of the well-formed sequence at s[0..n) (1 to 4), or 0 when s starts
 * an ill-formed one; then *bad receives the length of its maximal subpart
 * (at least 1), the number of bytes one U+FFFD replaces. */
size_t kv_utf8_seq(const unsigned char *s, size_t n, size_t *bad);

/* Whether s[0..n) starts with the UTF-8 byte order mark EF BB BF, which
 * JSON forbids (RFC 8259 section 8.1) and some Windows editors write: a
 * parser would only say "unexpected character", so callers name it with
 * KV_UTF8_BOM_ERROR. */
bool kv_utf8_has_bom(const char *s, size_t n);
#define KV_UTF8_BOM_ERROR                                                                          \
    "starts with a UTF-8 byte order mark (BOM, bytes EF BB BF), which JSON does not allow: save "  \
    "the file as UTF-8 without BOM"

/* Length of the longest well-formed prefix of s[0..n). */
size_t kv_utf8_valid_prefix(const char *s, size_t n);

/* Copy of s[0..n) with every ill-formed subpart replaced by U+FFFD, malloc'd
 * and NUL-terminated; *out_len receives its length. NULL when out of memory. */
char *kv_utf8_lossy(const char *s, size_t n, size_t *out_len);

/* Decodes the well-formed sequence at s (as measured by kv_utf8_seq). */
uint32_t kv_utf8_decode(const unsigned char *s, size_t len);

/* Decodes the code point at s[*i] (n bytes in all) and advances *i past it.
 * An ill-formed sequence reads as U+FFFD and advances past its maximal
 * subpart, as kv_utf8_lossy replaces it, so any bytes can be walked. */
uint32_t kv_utf8_next(const char *s, size_t n, size_t *i);

/* Python's str.isspace() for one code point: the 29 code points CPython
 * counts as whitespace. */
bool kv_utf8_py_isspace(uint32_t cp);

/* Python's str.strip() of s[0..n): the text left is s[*a..*b). */
void kv_utf8_py_strip(const char *s, size_t n, size_t *a, size_t *b);

/* Writes the UTF-8 form of code point c to out (room for 4 bytes); returns
 * its length. */
size_t kv_utf8_encode(uint32_t c, char *out);

/* The n hex digits at s (an escape's code point: \\xHH, \\uHHHH), or -1 when
 * one is not a hex digit. */
int kv_hex_value(const char *s, size_t n, uint32_t *out);

#endif
