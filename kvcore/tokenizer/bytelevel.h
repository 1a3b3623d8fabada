/* The alphabet of byte-level BPE: GPT-2's map from the 256 byte values to
 * printable code points (printable Latin-1 bytes stand for themselves, the 68
 * others take U+0100 onwards), in which tokenizer.json writes its tokens
 * ("Ġthe" is " the"). */
#ifndef KV_BYTELEVEL_H
#define KV_BYTELEVEL_H

#include <stddef.h>

/* Byte-level string s[0..n) (UTF-8 of mapped code points) -> raw bytes in out
 * (room for n bytes). Returns the byte count, or -1 when a character is not
 * in the alphabet. */
long kv_bytelevel_to_bytes(const char *s, size_t n, char *out);

#endif
