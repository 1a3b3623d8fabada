/* Fuzz inputs as the parsers under test want them: files (they read paths)
 * or NUL-terminated text (the bytes may hold NULs of their own). */
#ifndef KB_FUZZ_FILE_H
#define KB_FUZZ_FILE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A NUL-terminated copy of the input (free it), or NULL when out of memory. */
static inline char *fuzz_text(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (text) {
        memcpy(text, data, size);
        text[size] = '\0';
    }
    return text;
}

/* Writes data to a new temporary file named after tag; path receives its
 * name (the caller unlinks it). Returns 0, or -1 when no file could be made. */
static inline int fuzz_write_temp(const uint8_t *data, size_t size, const char *tag, char path[96])
{
    snprintf(path, 96, "/tmp/kvbfuzz-%s-XXXXXX", tag);
    int fd = mkstemp(path);
    if (fd < 0)
        return -1;
    int ok = write(fd, data, size) == (ssize_t)size;
    close(fd);
    if (!ok) {
        unlink(path);
        return -1;
    }
    return 0;
}

#endif
