/* Running a test at every instruction-set level (kvcore/model/cpu.h) this CPU
 * has. The levels it lacks cannot run here (they would raise SIGILL); their
 * kernels' logic is checked on any CPU by tests/unit/model/test_kernels_emulated.c, and
 * the log names which levels ran, so a reader sees what was covered. */
#ifndef KB_TEST_LEVELS_H
#define KB_TEST_LEVELS_H

#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "model/cpu.h"

/* Calls check(isa) at each level the CPU has, then restores the best one. */
static inline void tu_each_level(void (*check)(kv_isa isa))
{
    kv_error err;
    int ran = 0;
    for (int l = 0; l < KV_ISA_COUNT; l++) {
        if (!kv_isa_available((kv_isa)l)) {
            cr_log_info("level %s: not on this CPU", kv_isa_name((kv_isa)l));
            continue;
        }
        cr_assert_eq(kv_isa_set((kv_isa)l, &err), 0, "%s", err.msg);
        check((kv_isa)l);
        cr_log_info("level %s: checked", kv_isa_name((kv_isa)l));
        ran++;
    }
    cr_assert_gt(ran, 0, "no level ran: the baseline must always run");
    cr_assert_eq(kv_isa_set(kv_isa_detected(), &err), 0, "%s", err.msg);
}

#endif
