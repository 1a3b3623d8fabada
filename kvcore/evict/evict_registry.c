/* The registries of scorers and refiners: adding a policy is one file
 * defining a const kv_scorer or kv_refiner, one line here and its rows in
 * evict_table.h. The evictor and the parameter parser find policies here
 * by name; nothing here calls back into them. */
#include <string.h>

#include "evict/evict_impl.h"

static const kv_scorer *const scorers[] = {
    &kv_scorer_snapkv, &kv_scorer_h2o,     &kv_scorer_streaming,
    &kv_scorer_random, &kv_scorer_knorm,   &kv_scorer_tova,
    &kv_scorer_keydiff, &kv_scorer_expected_attention,
};
static const kv_refiner *const refiners[] = {&kv_refiner_kvcrush, &kv_refiner_criticalkv};

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

const kv_scorer *kv_scorer_find(const char *name)
{
    for (int i = 0; i < COUNT(scorers); i++)
        if (strcmp(scorers[i]->name, name) == 0)
            return scorers[i];
    return NULL;
}

const kv_refiner *kv_refiner_find(const char *name)
{
    for (int i = 0; i < COUNT(refiners); i++)
        if (strcmp(refiners[i]->name, name) == 0)
            return refiners[i];
    return NULL;
}

const char *kv_evict_algorithm(int i)
{
    return i >= 0 && i < COUNT(scorers) ? scorers[i]->name : NULL;
}
