#include "util/vec.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int kv_vec_reserve(void *array, size_t *cap, size_t need, size_t elem, size_t first)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : (first ? first : 1);
    while (c < need) {
        if (c > SIZE_MAX / 2)
            return -1;
        c *= 2;
    }
    if (c > SIZE_MAX / elem)
        return -1;
    /* the T * is read and written as bytes: any object pointer type fits */
    void *old;
    memcpy(&old, array, sizeof old);
    void *grown = realloc(old, c * elem);
    if (!grown)
        return -1;
    memcpy(array, &grown, sizeof grown);
    *cap = c;
    return 0;
}
