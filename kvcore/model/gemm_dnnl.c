#include "model/gemm_dnnl.h"

#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/cpu.h"

/* Shapes kept at once: a prefill of one model has ~10 projections' (and
 * its last chunk's), attention's tiles up to 64 (attn_dnnl.h: blocks of 4
 * padded heights, tiles of 8 padded widths, two products); a new shape
 * beyond them replaces the one used longest ago. */
#define CACHE_SLOTS 128

typedef struct shape {
    kv_dtype dt;
    int m, n, k, threads;
    size_t lda, ldb, ldy;
    bool b_kn;
    float scale; /* 1: none */
} shape;

typedef struct slot {
    shape s;
    dnnl_primitive_t prim; /* NULL: empty */
    dnnl_memory_desc_t a, b, y, scratch;
    uint64_t used; /* tick of the last use */
    int users;     /* calls running it: it is not replaced while > 0 */
} slot;

/* One engine and cache for the process, under the lock; the calls run
 * outside it, concurrently (each thread has its own stream and scratchpad). */
static struct {
    pthread_mutex_t mu;
    bool tried, ok;
    dnnl_engine_t engine;
    slot slots[CACHE_SLOTS];
    uint64_t tick;
    pthread_key_t key; /* each thread's own: a per_thread */
} lib = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* What a thread needs to run primitives while others run theirs: its own
 * stream, and scratchpad memory (oneDNN's library-owned one is shared). */
typedef struct per_thread {
    dnnl_stream_t stream;
    void *scratch;
    size_t scratch_size;
} per_thread;

static void per_thread_free(void *arg)
{
    per_thread *t = arg;
    if (t->stream)
        dnnl_stream_destroy(t->stream);
    free(t->scratch);
    free(t);
}

/* The calling thread's stream and at least `scratch` bytes, or NULL. */
static per_thread *this_thread(size_t scratch)
{
    per_thread *t = pthread_getspecific(lib.key);
    if (!t) {
        if (!(t = calloc(1, sizeof *t)))
            return NULL;
        if (dnnl_stream_create(&t->stream, lib.engine, dnnl_stream_default_flags) != 0 ||
            pthread_setspecific(lib.key, t) != 0) {
            per_thread_free(t);
            return NULL;
        }
    }
    if (scratch > t->scratch_size) {
        void *grown = realloc(t->scratch, scratch);
        if (!grown)
            return NULL;
        t->scratch = grown;
        t->scratch_size = scratch;
    }
    return t;
}

/* Under lib.mu. */
static bool start(void)
{
    if (!lib.tried) {
        lib.tried = true;
        lib.ok = dnnl_engine_create(&lib.engine, dnnl_cpu, 0) == dnnl_success &&
                 pthread_key_create(&lib.key, per_thread_free) == 0;
    }
    return lib.ok;
}

bool kv_dnnl_usable(kv_dtype dt)
{
    /* F32 products stay with OpenBLAS: oneDNN's f32 prefill measured
     * slower (Qwen3-0.6B shapes, prefill 512, AVX512_BF16 machine: 70-72
     * tokens per CPU-second against OpenBLAS's 76-79). */
    return dt == KV_DTYPE_BF16 && kv_isa_active() >= KV_ISA_AVX512BF16;
}

static bool same_shape(const shape *x, const shape *y)
{
    return x->dt == y->dt && x->m == y->m && x->n == y->n && x->k == y->k &&
           x->threads == y->threads && x->lda == y->lda && x->ldb == y->ldb && x->ldy == y->ldy &&
           x->b_kn == y->b_kn && x->scale == y->scale;
}

static dnnl_data_type_t dnnl_type(kv_dtype dt)
{
    return dt == KV_DTYPE_BF16 ? dnnl_bf16 : dnnl_f32;
}

/* The primitive of s in sl, created under s.threads OpenMP threads (oneDNN
 * fixes its partition when it creates the primitive). false when oneDNN
 * would run only its reference code for it: slower than kvbench's own. */
static bool create(slot *sl, const shape *s, char *impl, size_t impl_size)
{
    dnnl_dims_t da = {s->m, s->k}, db = {s->k, s->n}, dy = {s->m, s->n};
    dnnl_dims_t sa = {(dnnl_dim_t)s->lda, 1}, sy = {(dnnl_dim_t)s->ldy, 1};
    dnnl_dims_t sb = {1, (dnnl_dim_t)s->ldb}; /* B^T of an [n][k] matrix */
    if (s->b_kn) {
        sb[0] = (dnnl_dim_t)s->ldb;
        sb[1] = 1;
    }
    dnnl_matmul_desc_t md;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t pd = NULL;
    bool ok =
        dnnl_memory_desc_init_by_strides(&sl->a, 2, da, dnnl_type(s->dt), sa) == 0 &&
        dnnl_memory_desc_init_by_strides(&sl->b, 2, db, dnnl_type(s->dt), sb) == 0 &&
        dnnl_memory_desc_init_by_strides(&sl->y, 2, dy, dnnl_f32, sy) == 0 &&
        dnnl_matmul_desc_init(&md, &sl->a, &sl->b, NULL, &sl->y) == 0 &&
        dnnl_primitive_attr_create(&attr) == 0 &&
        dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) == 0 &&
        (s->scale == 1.0f || dnnl_primitive_attr_set_output_scales(attr, 1, 0, &s->scale) == 0);
    omp_set_num_threads(s->threads);
    ok = ok && dnnl_primitive_desc_create(&pd, &md, attr, lib.engine, NULL) == 0;
    const char *name = NULL;
    ok = ok && dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &name) == 0 && name;
    snprintf(impl, impl_size, "%s", ok ? name : "unavailable");
    ok = ok && strncmp(name, "ref", 3) != 0;
    if (ok)
        sl->scratch = *dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    ok = ok && dnnl_primitive_create(&sl->prim, pd) == 0;
    if (!ok)
        sl->prim = NULL;
    dnnl_primitive_desc_destroy(pd);
    dnnl_primitive_attr_destroy(attr);
    sl->s = *s;
    return ok;
}

/* The slot holding s's primitive (created on first use), claimed for a
 * call (users + 1), or NULL. Under lib.mu. */
static slot *claim(const shape *s)
{
    slot *victim = NULL;
    for (int i = 0; i < CACHE_SLOTS; i++) {
        slot *sl = &lib.slots[i];
        if (sl->prim && same_shape(&sl->s, s)) {
            sl->users++;
            return sl;
        }
        if (sl->users == 0 && (!victim || !sl->prim || (victim->prim && sl->used < victim->used)))
            victim = sl;
    }
    if (!victim)
        return NULL; /* every slot busy: the caller's own kernels run */
    if (victim->prim)
        dnnl_primitive_destroy(victim->prim);
    char impl[64];
    victim->prim = NULL;
    if (!create(victim, s, impl, sizeof impl))
        return NULL;
    victim->users = 1;
    return victim;
}

static bool execute(const slot *sl, const kv_dnnl_product *p)
{
    per_thread *t = this_thread(dnnl_memory_desc_get_size(&sl->scratch));
    dnnl_memory_t a = NULL, b = NULL, y = NULL, sp = NULL;
    bool ok = t && dnnl_memory_create(&a, &sl->a, lib.engine, (void *)p->a) == 0 &&
              dnnl_memory_create(&b, &sl->b, lib.engine, (void *)p->b) == 0 &&
              dnnl_memory_create(&y, &sl->y, lib.engine, p->y) == 0 &&
              dnnl_memory_create(&sp, &sl->scratch, lib.engine, t->scratch) == 0;
    if (ok) {
        dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, a},
                                  {DNNL_ARG_WEIGHTS, b},
                                  {DNNL_ARG_DST, y},
                                  {DNNL_ARG_SCRATCHPAD, sp}};
        omp_set_num_threads(sl->s.threads);
        ok = dnnl_primitive_execute(sl->prim, t->stream, 4, args) == 0 &&
             dnnl_stream_wait(t->stream) == 0;
    }
    dnnl_memory_destroy(a);
    dnnl_memory_destroy(b);
    dnnl_memory_destroy(y);
    dnnl_memory_destroy(sp);
    return ok;
}

bool kv_dnnl_matmul(int threads, const kv_dnnl_product *p)
{
    if (!kv_dnnl_usable(p->dt) || p->m <= 0 || p->n <= 0 || p->k <= 0)
        return false;
    shape s = {.dt = p->dt,
               .m = p->m,
               .n = p->n,
               .k = p->k,
               .threads = threads > 0 ? threads : 1,
               .lda = p->lda,
               .ldb = p->ldb,
               .ldy = p->ldy,
               .b_kn = p->b_kn,
               .scale = p->scale != 0.0f ? p->scale : 1.0f};
    pthread_mutex_lock(&lib.mu);
    slot *sl = start() ? claim(&s) : NULL;
    pthread_mutex_unlock(&lib.mu);
    if (!sl)
        return false;
    bool ok = execute(sl, p);
    pthread_mutex_lock(&lib.mu);
    sl->users--;
    sl->used = ++lib.tick;
    pthread_mutex_unlock(&lib.mu);
    return ok;
}

/* The implementation oneDNN picks for product s. */
static const char *impl_of(const shape *s, char *buf, size_t size)
{
    if (!kv_dnnl_usable(s->dt))
        return s->dt == KV_DTYPE_F32 ? "not used, OpenBLAS measured faster"
                                     : "not used below the avx512bf16 level";
    slot sl = {0};
    pthread_mutex_lock(&lib.mu);
    if (!start())
        snprintf(buf, size, "no CPU engine");
    else if (!create(&sl, s, buf, size))
        snprintf(buf + strlen(buf), size - strlen(buf), ", not used");
    if (sl.prim)
        dnnl_primitive_destroy(sl.prim);
    pthread_mutex_unlock(&lib.mu);
    return buf;
}

void kv_dnnl_describe(char *buf, size_t size)
{
    const dnnl_version_t *v = dnnl_version();
    /* prefill's shapes: 512 rows by a block of 256 output columns of a
     * 1024-wide projection (kv_matmul), a 128 x 512 tile of attention's
     * scores over 128 channels (attn_dnnl.c) */
    shape proj = {.dt = KV_DTYPE_F32,
                  .m = 512,
                  .n = 256,
                  .k = 1024,
                  .threads = 1,
                  .lda = 1024,
                  .ldb = 1024,
                  .ldy = 1024,
                  .scale = 1.0f};
    shape tile = {.dt = KV_DTYPE_BF16,
                  .m = 128,
                  .n = 512,
                  .k = 128,
                  .threads = 1,
                  .lda = 128,
                  .ldb = 128,
                  .ldy = 512,
                  .scale = 1.0f};
    shape proj16 = proj;
    proj16.dt = KV_DTYPE_BF16;
    char f32[96], bf16[96], att[96];
    impl_of(&tile, att, sizeof att);
    snprintf(buf, size, "oneDNN %d.%d.%d (f32: %s; bf16: %s", v->major, v->minor, v->patch,
             impl_of(&proj, f32, sizeof f32), impl_of(&proj16, bf16, sizeof bf16));
    if (kv_dnnl_usable(KV_DTYPE_BF16))
        snprintf(buf + strlen(buf), size - strlen(buf), " projections, %s attention", att);
    snprintf(buf + strlen(buf), size - strlen(buf), ")");
}
