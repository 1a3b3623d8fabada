#include "model/cpu.h"

#include <stdlib.h>
#include <string.h>

static const char *const names[KV_ISA_COUNT] = {"avx2", "avx512", "avx512bf16"};

/* -1 until first asked: detection runs once. */
static int detected = -1;
/* The level in use; the detected one until kv_isa_init or kv_isa_set says otherwise. */
static int active = -1;

const char *kv_isa_name(kv_isa isa)
{
    return isa >= 0 && isa < KV_ISA_COUNT ? names[isa] : "?";
}

int kv_isa_parse(const char *s, kv_isa *out, kv_error *err)
{
    for (int i = 0; i < KV_ISA_COUNT; i++)
        if (strcmp(s, names[i]) == 0) {
            *out = (kv_isa)i;
            return 0;
        }
    return kv_fail(err, "unknown instruction-set level '%s' (want avx2, avx512 or avx512bf16)", s);
}

kv_isa kv_isa_detected(void)
{
    if (detected < 0) {
        /* libgcc's checks include the OS's XSAVE support of the ZMM state,
         * so a level reported here can run. */
        __builtin_cpu_init();
        detected = KV_ISA_AVX2;
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl")) {
            detected = KV_ISA_AVX512;
            if (__builtin_cpu_supports("avx512bf16"))
                detected = KV_ISA_AVX512BF16;
        }
    }
    return (kv_isa)detected;
}

bool kv_isa_available(kv_isa isa)
{
    return isa >= 0 && isa <= kv_isa_detected();
}

int kv_isa_set(kv_isa isa, kv_error *err)
{
    if (!kv_isa_available(isa))
        return kv_fail(err, "this CPU cannot run the %s kernels (its best level is %s)",
                       kv_isa_name(isa), kv_isa_name(kv_isa_detected()));
    active = isa;
    return 0;
}

int kv_isa_init(kv_error *err)
{
    const char *env = getenv(KV_ISA_ENV);
    if (!env || !*env) {
        active = kv_isa_detected();
        return 0;
    }
    kv_isa want;
    if (kv_isa_parse(env, &want, err) != 0 || kv_isa_set(want, err) != 0)
        return kv_fail_prefix(err, KV_ISA_ENV);
    return 0;
}

kv_isa kv_isa_active(void)
{
    return active < 0 ? kv_isa_detected() : (kv_isa)active;
}
