/* Running a test at one instruction-set level (kvcore/cpu.h). A level this
 * CPU lacks is reported as a skip that names it, so a test log shows which
 * levels ran and which could not. */
#ifndef KB_TEST_LEVELS_H
#define KB_TEST_LEVELS_H

#include <criterion/criterion.h>

#include "cpu.h"

static inline void tu_use_level(kv_isa isa)
{
    kv_error err;
    if (!kv_isa_available(isa))
        cr_skip_test("this CPU lacks %s (its best level is %s)", kv_isa_name(isa),
                     kv_isa_name(kv_isa_detected()));
    cr_assert_eq(kv_isa_set(isa, &err), 0, "%s", err.msg);
}

#endif
