/* A standalone driver for libFuzzer-style targets, so every fuzz target also
 * runs as an ordinary test (and under ASan/UBSan in CI) without clang.
 *
 *   fuzz_X [SEED_FILE_OR_DIR...]     env FUZZ_ITERS (default 3000), FUZZ_SEED
 *
 * It runs the target on each seed, then on deterministic mutations of the
 * seeds (bit flips, truncations, insertions, splices). With clang the same
 * target file links against -fsanitize=fuzzer for coverage-guided runs
 * (meson -Dfuzz=true). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct {
    uint8_t *data;
    size_t size;
} blob;

static blob *seeds;
static size_t n_seeds, cap_seeds;

static void add_seed(const char *path)
{
    FILE *f = fopen(path, "rb");
    long n = -1;
    if (f && fseek(f, 0, SEEK_END) == 0)
        n = ftell(f);
    blob b = {NULL, 0};
    if (n >= 0 && n <= (64L << 20) && fseek(f, 0, SEEK_SET) == 0) {
        b = (blob){malloc((size_t)n + 1), (size_t)n};
        if (fread(b.data, 1, (size_t)n, f) != (size_t)n)
            n = -1;
    }
    if (f)
        fclose(f);
    if (n < 0 || n > (64L << 20)) {
        /* every seed is replayed, or the test fails */
        fprintf(stderr, "fuzz driver: %s: cannot read it (or over 64 MiB)\n", path);
        exit(1);
    }
    if (n_seeds == cap_seeds)
        seeds = realloc(seeds, (cap_seeds = cap_seeds ? cap_seeds * 2 : 16) * sizeof *seeds);
    seeds[n_seeds++] = b;
}

static void add_path(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        /* a seed folder that is not there would replay nothing, silently */
        fprintf(stderr, "fuzz driver: %s: no such seed file or folder\n", path);
        exit(1);
    }
    if (!S_ISDIR(st.st_mode)) {
        add_seed(path);
        return;
    }
    char **names;
    size_t n;
    kv_error err;
    if (kv_dir_list(path, NULL, &names, &n, &err) < 0)
        return;
    for (size_t i = 0; i < n; i++) {
        char *p = kv_path_join(path, names[i]);
        if (p)
            add_path(p); /* a sub-folder's files too */
        free(p);
    }
    kv_names_free(names, n);
}

static uint64_t rng_state;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static void mutate(blob *out, const blob *in, const blob *other)
{
    size_t cap = in->size + 64;
    out->data = malloc(cap);
    memcpy(out->data, in->data, in->size);
    out->size = in->size;
    int steps = 1 + (int)(rnd() % 4);
    for (int s = 0; s < steps; s++) {
        switch (rnd() % 6) {
        case 0: /* flip a bit */
            if (out->size)
                out->data[rnd() % out->size] ^= (uint8_t)(1u << (rnd() % 8));
            break;
        case 1: /* truncate */
            if (out->size)
                out->size = rnd() % out->size;
            break;
        case 2: /* set a byte to an interesting value */
            if (out->size) {
                static const uint8_t vals[] = {0, 0xff, 0x7f, 0x80, '"', '\\', '{', '}', '[',
                                               ']', ',', ':', '\n', 0xc3, 0xe4, 0xf0};
                out->data[rnd() % out->size] = vals[rnd() % sizeof vals];
            }
            break;
        case 3: /* insert random bytes */
            if (out->size + 8 <= cap) {
                size_t at = out->size ? rnd() % (out->size + 1) : 0, k = 1 + rnd() % 8;
                memmove(out->data + at + k, out->data + at, out->size - at);
                for (size_t i = 0; i < k; i++)
                    out->data[at + i] = (uint8_t)rnd();
                out->size += k;
            }
            break;
        case 4: /* splice the tail of another seed */
            if (other && other->size && out->size) {
                size_t at = rnd() % out->size, from = rnd() % other->size;
                size_t k = other->size - from;
                if (at + k > cap)
                    k = cap - at;
                memcpy(out->data + at, other->data + from, k);
                out->size = at + k;
            }
            break;
        default: /* duplicate a chunk */
            if (out->size > 1) {
                size_t a = rnd() % out->size, k = 1 + rnd() % (out->size - a);
                if (k > cap - out->size)
                    k = cap - out->size;
                memmove(out->data + a + k, out->data + a, out->size - a);
                out->size += k;
            }
            break;
        }
    }
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        add_path(argv[i]);
    const char *it = getenv("FUZZ_ITERS");
    const char *sd = getenv("FUZZ_SEED");
    long iters = it ? atol(it) : 3000;
    rng_state = sd ? strtoull(sd, NULL, 10) | 1 : 0x9e3779b97f4a7c15ull;
    static const uint8_t empty[1];
    LLVMFuzzerTestOneInput(empty, 0);
    for (size_t i = 0; i < n_seeds; i++)
        LLVMFuzzerTestOneInput(seeds[i].data, seeds[i].size);
    for (long i = 0; i < iters && n_seeds; i++) {
        blob m;
        mutate(&m, &seeds[rnd() % n_seeds], &seeds[rnd() % n_seeds]);
        LLVMFuzzerTestOneInput(m.data, m.size);
        free(m.data);
    }
    printf("1..1\nok 1 - %ld inputs from %zu seeds without a crash\n", iters + (long)n_seeds + 1,
           n_seeds);
    for (size_t i = 0; i < n_seeds; i++)
        free(seeds[i].data);
    free(seeds);
    return 0;
}
