/* JSON strings of any bytes, both ways.
 *
 * cJSON keeps strings as C strings, so a "\u0000" inside one cuts it. Data
 * documents (prediction lines, scores.json, tokenize --jsonl) are therefore
 * parsed with jansson, whose JSON_ALLOW_NUL strings carry their length
 * (LongBench records, megabytes each, are read with kv_jscan in
 * datasets/longbench/sample.c, which keeps NULs too); docs/ARCHITECTURE.md
 * ("JSON") gives the rule. Sample ids are byte strings (kv_str) from the
 * data to the reports, and strings are written with kv_json_quote, which
 * escapes every control byte
 * (NUL as \u0000) and repairs ill-formed UTF-8, so that what kvbench writes
 * is always valid UTF-8 JSON.
 */
#ifndef KV_JSONSTR_H
#define KV_JSONSTR_H

#include <cjson/cJSON.h>
#include <jansson.h>
#include <stddef.h>

#include "util/error.h"
#include "util/str.h"
#include "util/strbuf.h"

/* Parses one JSON text of n bytes (any value at the top) with NULs kept in
 * strings. Text that is not valid UTF-8 is refused naming the byte (1-based)
 * where the ill-formed sequence starts; a syntax error names its byte too.
 * err gets "what is wrong" (the caller adds file:line). */
json_t *kv_json_load(const char *text, size_t n, kv_error *err);
/* How many texts kv_json_load has parsed in this process: a test counts
 * them to show that each prediction line is parsed once when scored. */
long kv_json_loads(void);

/* The bytes of a jansson string, copied (NUL-terminated as well) into *out. */
int kv_json_take(const json_t *v, kv_str *out);

/* For JSON that is read with cJSON because every string in it is a name
 * (config files): refuses, with "path:line: ...", what cJSON would silently
 * cut or pass on: a NUL byte, ill-formed UTF-8, a "\u0000" in a string. */
int kv_json_check_names(const char *path, const char *text, size_t n, kv_error *err);

/* Appends s[0..n) as a JSON string literal: quotes, escapes for '"', '\\'
 * and every byte below 0x20 (\n \t ... as Python's json.dumps writes them,
 * others as \u00XX: NUL is \u0000), ill-formed UTF-8 replaced by U+FFFD. Returns 0, or -1 when out
 * of memory. */
int kv_json_quote(kv_strbuf *b, const char *s, size_t n);

/* The same as a cJSON item, to put into a tree that cJSON prints: a raw
 * node holding the quoted literal. NULL when out of memory. */
cJSON *kv_json_text(const char *s, size_t n);

/* s as a JSON string literal in buf (cut to fit), for messages that name a
 * sample: an id "a\u0000b" shows its NUL. Returns buf. */
const char *kv_json_quote_to(char *buf, size_t size, const char *s, size_t n);

/* An id as a person types it (a command-line argument cannot hold a NUL),
 * in place: every "\u0000" becomes a NUL byte, so the id names the one the
 * data spells with that escape. Returns the id with its new length. */
kv_str kv_unescape_nul(char *id);

#endif
