/* Fuzz target: the config-matrix parser over arbitrary bytes. Whatever the
 * input, it either fails with a message or yields a matrix whose invariants
 * hold: config 0 is the full cache, names and hashes are unique. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_file.h"
#include "matrix/matrix.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_text(data, size);
    if (!text)
        return 0;
    kb_matrix m;
    kv_error err = {{0}};
    if (kb_matrix_parse(text, "fuzz", &m, &err) == 0) {
        if (m.n_configs < 1 || strcmp(m.configs[0].name, "full") != 0 || m.configs[0].params)
            abort();
        for (size_t i = 0; i < m.n_configs; i++)
            for (size_t j = i + 1; j < m.n_configs; j++)
                if (!strcmp(m.configs[i].name, m.configs[j].name) ||
                    !strcmp(m.configs[i].hash, m.configs[j].hash))
                    abort();
        cJSON *j = kb_matrix_to_json(&m);
        cJSON_Delete(j);
        kb_matrix_free(&m);
    } else if (!err.msg[0]) {
        abort(); /* every failure explains itself */
    }
    free(text);
    return 0;
}
