/* Fuzz target: config.json (and generation_config.json) text. Whatever is
 * accepted has sizes the engine can use. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_config.h"
#include "model/rope.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kv_model_config c;
    kv_error err;
    const char *text = (const char *)data;
    if (kv_model_config_parse(text, size, "config.json", &c, &err) != 0) {
        if (!err.msg[0] || strchr(err.msg, '\n'))
            abort();
        return 0;
    }
    if (c.hidden < 1 || c.n_layers < 1 || c.n_heads < 1 || c.n_kv_heads < 1 ||
        c.n_heads % c.n_kv_heads || c.head_dim < 2 || c.head_dim % 2 || c.vocab < 1 || c.ffn < 1)
        abort();
    kv_generation_config_parse(text, size, "generation_config.json", &c, &err);
    kv_rope r;
    if (kv_rope_init(&r, &c.rope, c.head_dim, &err) == 0)
        kv_rope_free(&r);
    kv_model_config_free(&c);
    return 0;
}
