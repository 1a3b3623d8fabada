/* The nearest known key, for a "did you mean" hint on an unknown one. */
#include <ctype.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "matrix/parse.h"

/* Edit distance of two keys, '-' and '_' alike and case ignored, so that
 * the CLI's "intermediate-size" is at distance 0 from intermediate_size. */
static size_t key_distance(const char *a, const char *b)
{
    size_t n = strlen(b), row[64];
    if (n >= 64 || strlen(a) >= 64)
        return SIZE_MAX;
    for (size_t j = 0; j <= n; j++)
        row[j] = j;
    for (size_t i = 1; a[i - 1]; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= n; j++) {
            char x = (char)tolower((unsigned char)a[i - 1]),
                 y = (char)tolower((unsigned char)b[j - 1]);
            bool same = x == y || (strchr("-_", x) && strchr("-_", y));
            size_t best = diag + !same;
            best = row[j] + 1 < best ? row[j] + 1 : best;
            best = row[j - 1] + 1 < best ? row[j - 1] + 1 : best;
            diag = row[j];
            row[j] = best;
        }
    }
    return row[n];
}

kb_nearest kb_nearest_start(const char *key)
{
    return (kb_nearest){.key = key, .distance = SIZE_MAX};
}

void kb_nearest_consider(kb_nearest *nr, const char *candidate)
{
    size_t d = key_distance(nr->key, candidate);
    if (d < nr->distance) {
        nr->distance = d;
        nr->best = candidate;
    }
}

const char *kb_nearest_hint(const kb_nearest *nr, char *buf, size_t n)
{
    size_t len = strlen(nr->key), most = len / 3 > 2 ? len / 3 : 2;
    if (!nr->best || nr->distance > most) {
        buf[0] = '\0';
        return buf;
    }
    snprintf(buf, n, " (did you mean \"%s\"?)", nr->best);
    return buf;
}
