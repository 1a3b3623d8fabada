/* cpu: which instruction-set level the kernels run at.
 *
 * The CPU is detected once; the kernels then run at the best level it has,
 * or at the lower level named by the environment variable KVBENCH_ISA
 * (avx2, avx512, avx512bf16), so that results can be compared across levels
 * and tests can run every level a machine has. Each level's kernels are
 * compiled for that level alone (kernels_avx512.c, ...), so a portable
 * -march=x86-64-v3 build still carries and uses the AVX-512 code.
 */
#ifndef KV_CPU_H
#define KV_CPU_H

#include <stdbool.h>

#include "util/error.h"

typedef enum kv_isa {
    KV_ISA_AVX2,       /* AVX2 + FMA + F16C: the baseline the build is compiled for */
    KV_ISA_AVX512,     /* AVX-512F (+BW, VL) */
    KV_ISA_AVX512BF16, /* AVX-512F + AVX512_BF16 (vdpbf16ps) */
    KV_ISA_COUNT
} kv_isa;

/* The environment variable that forces a lower level. */
#define KV_ISA_ENV "KVBENCH_ISA"

/* "avx2", "avx512", "avx512bf16". */
const char *kv_isa_name(kv_isa isa);

/* The level named s; -1 with a message listing the names when unknown. */
int kv_isa_parse(const char *s, kv_isa *out, kv_error *err);

/* The best level this CPU (and its OS) supports. */
kv_isa kv_isa_detected(void);

/* Whether this CPU can run level isa. */
bool kv_isa_available(kv_isa isa);

/* Chooses the level from KVBENCH_ISA (unset or empty: the detected one).
 * Fails with a clear message when the variable names an unknown level or
 * one this CPU lacks; the level in use is then unchanged. Cheap to call
 * again: kv_model_load calls it. */
int kv_isa_init(kv_error *err);

/* Runs the kernels at level isa from now on (tests; kv_isa_init). Fails
 * when this CPU lacks it. Not to be called during a forward. */
int kv_isa_set(kv_isa isa, kv_error *err);

/* The level the kernels run at. */
kv_isa kv_isa_active(void);

#endif
