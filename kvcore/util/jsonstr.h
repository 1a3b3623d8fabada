/* JSON strings of any bytes, both ways.
 *
 * cJSON keeps strings as C strings, so a "\u0000" inside one cuts it. Small
 * data-path lines (prediction files, tokenize --jsonl) are therefore parsed
 * with jansson, whose JSON_ALLOW_NUL strings carry their length (LongBench
 * records, megabytes each, are read with kv_jscan in datasets/longbench/sample.c), and
 * strings are written with kv_json_quote, which escapes every control byte
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

/* Ids are keys (resume, selection, pairing of samples), kept as C strings.
 * A NUL in an id (LongBench's "_id" may hold "\u0000") is carried as the
 * two bytes C0 80 (Java's "modified UTF-8"): they never occur in valid
 * UTF-8, which every data line is checked to be, so the mapping is
 * lossless and two ids stay two keys. In JSON it is always "\u0000":
 * kv_json_ids_in turns the escape into C0 80 before cJSON reads a line,
 * kv_json_ids_out turns C0 80 back after cJSON prints one. */
#define KV_ID_NUL "\xC0\x80"

/* The id of the n bytes s (NULs as KV_ID_NUL), malloc'd; NULL when out of
 * memory. */
char *kv_id_from_bytes(const char *s, size_t n);

/* An id as a person types it (a command-line argument), in place: every
 * "\u0000" becomes KV_ID_NUL, so the id names the one the data spells with
 * that escape. Returns id. */
char *kv_id_unescape_nul(char *id);

/* In JSON text of n bytes: every "\u0000" inside a string becomes
 * KV_ID_NUL, in place. Returns the new length (text stays NUL-terminated
 * when it was). */
size_t kv_json_ids_in(char *text, size_t n);

/* Printed JSON (malloc'd, NUL-terminated): every KV_ID_NUL becomes
 * "\u0000". Returns the text (reallocated when it grew), or NULL when out of
 * memory (text is then freed). */
char *kv_json_ids_out(char *text);

#endif
