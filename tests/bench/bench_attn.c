/* `build/tests/bench_attn [SLOTS] [LAYERS] [PRECISION] [REPS]`: decode attention of
 * one query row over caches of SLOTS tokens in Qwen3-0.6B's shapes (16 query
 * heads on 8 KV heads of 128 channels), one layer after another as a decode
 * step reads them, on one thread: kv_decode_attention, as the forward runs
 * it, over the F32 cache and over the cache stored at PRECISION (default u8),
 * in turns; prints each one's time per step, bytes read per second and the
 * ratio. Both include the softmax (the same work for both) and the passes'
 * prefetches (calling the F32 kernels alone, without them, measured 13 GB/s
 * of F32 keys and values per CPU-second against 22-26 through
 * kv_decode_attention, 2026-12-02). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/attn_stored.h"
#include "model/forward.h"
#include "model/kernels.h"
#include "model/kvcache.h"
#include "util/clock.h"

enum { KV = 8, D = 128, HEADS = 16, ROW = KV * D, PER = HEADS / KV };
static const kv_model_config cfg = {.n_heads = HEADS, .n_kv_heads = KV, .head_dim = D};

static kv_cache *filled(int slots, const kv_cache_quant *q)
{
    kv_error err;
    kv_cache *c = kv_cache_new(1, KV, D, slots + 1, &err);
    if (!c || kv_cache_set_quant(c, q, &err) != 0 || kv_cache_reserve(c, slots, &err) != 0) {
        fprintf(stderr, "bench_attn: %s\n", err.msg);
        exit(1);
    }
    kv_cache_layer *l = &c->layers[0];
    for (int t = 0; t < slots; t++) {
        for (int i = 0; i < ROW; i++) {
            kv_cache_full_row(c, l, KV_KEYS, t)[i] = (float)rand() / RAND_MAX - 0.5f;
            kv_cache_full_row(c, l, KV_VALUES, t)[i] = (float)rand() / RAND_MAX - 0.5f;
        }
        l->len = t + 1;
    }
    kv_cache_commit(c, 0);
    return c;
}

/* One decode step's attention over cache c (one layer) on this thread. */
static void step(const kv_cache *c, const float *q, float *scores, float *partial, float *o)
{
    const kv_cache_layer *l = &c->layers[0];
    fwd f = {.max_keys = l->len, .key_block = kv_decode_key_block(&cfg)};
    decode_job j = {.cfg = &cfg, .c = c, .cl = l, .f = &f, .q = q, .keys = l->len, .n = 1,
                    .scale = 0.088f, .scores = scores, .partial = partial};
    kv_decode_attention(&j, NULL, o);
}

int main(int argc, char **argv)
{
    int slots = argc > 1 ? atoi(argv[1]) : 8192, layers = argc > 2 ? atoi(argv[2]) : 28;
    kv_cache_quant q = {.precision = KV_PREC_U8};
    if (argc > 3 && (int)(q.precision = (kv_precision)kv_precision_parse(argv[3])) < 0) {
        fprintf(stderr, "bench_attn: unknown precision %s\n", argv[3]);
        return 2;
    }
    int reps = argc > 4 ? atoi(argv[4]) : 6; /* the first pair warms up */
    if (reps < 2) {
        fprintf(stderr, "bench_attn: REPS must be at least 2\n");
        return 2;
    }
    kv_cache_quant f32 = {0};
    kv_cache **a = malloc((size_t)layers * sizeof *a), **b = malloc((size_t)layers * sizeof *b);
    for (int i = 0; i < layers; i++) {
        a[i] = filled(slots, &f32);
        b[i] = filled(slots, &q);
    }
    float *query = malloc(HEADS * D * sizeof *query), *o = calloc(HEADS * D, sizeof *o);
    float *scores = malloc((size_t)HEADS * slots * sizeof *scores);
    /* a partial output per block of slots: F32's blocks are the smallest
     * (kv_decode_phases) */
    size_t blocks = (size_t)(slots / kv_decode_key_block(&cfg) + 1);
    float *partial = malloc(blocks * HEADS * D * sizeof *partial);
    for (int i = 0; i < HEADS * D; i++)
        query[i] = (float)rand() / RAND_MAX - 0.5f;
    double ta = 0, tb = 0, ca = 0, cb = 0;
    for (int rep = 0; rep < reps; rep++) { /* in turns: each pair shares the machine's state */
        double t0 = kv_clock_s(), c0 = kv_clock_cpu_s();
        for (int i = 0; i < layers; i++)
            step(a[i], query, scores, partial, o);
        double t1 = kv_clock_s(), c1 = kv_clock_cpu_s();
        for (int i = 0; i < layers; i++)
            step(b[i], query, scores, partial, o);
        double t2 = kv_clock_s(), c2 = kv_clock_cpu_s();
        if (rep > 0) { /* the first pair warms up */
            ta += t1 - t0;
            tb += t2 - t1;
            ca += c1 - c0;
            cb += c2 - c1;
        }
    }
    double bytes_a = kv_cache_bytes_per_token(&f32, layers, KV, D) * slots,
           bytes_b = kv_cache_bytes_per_token(&b[0]->quant, layers, KV, D) * slots;
    double sa = ta / (reps - 1), sb = tb / (reps - 1); /* seconds a step */
    const char *name = kv_precision_name(q.precision);
    printf("%d slots x %d layers, one thread: f32 %.4f ms/step (%.2f GB/s), %s %.4f ms/step "
           "(%.2f GB/s); %s is %.2fx f32's speed\n",
           slots, layers, sa * 1e3, bytes_a / sa / 1e9, name, sb * 1e3, bytes_b / sb / 1e9, name,
           ta / tb);
    /* under load the wall clock counts other processes' turns; the CPU
     * clock (one thread: this one) does not */
    printf("CPU time: f32 %.4f ms/step, %s %.4f ms/step, %.2fx\n", ca / (reps - 1) * 1e3, name,
           cb / (reps - 1) * 1e3, ca / cb);
    for (int i = 0; i < layers; i++) {
        kv_cache_free(a[i]);
        kv_cache_free(b[i]);
    }
    free(a);
    free(b);
    free(query);
    free(o);
    free(scores);
    free(partial);
    return 0;
}
