/* Fuzz target: the eviction parameter parser. The input is tried as a JSON
 * config object (by the engine's parser and by the checked decoding, which
 * must agree) and, line by line, as "key value" CLI pairs; whatever parses
 * is validated, and a policy built from a valid set must work on a small
 * cache driven by uniform attention. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_file.h"
#include "evict/evict.h"
#include "evict/evict_params.h"

/* A few forwards of a 2-layer model with uniform attention. */
static void drive(const kv_evict_params *p)
{
    if (kv_evict_params_budget(p) > 64 || p->group_size > 64)
        return; /* keep each input cheap */
    kv_evict_model m = {
        .n_layers = 2, .n_heads = 2, .n_kv_heads = 1, .head_dim = 4, .rope_theta = 1e4};
    kv_error err;
    if (kv_evict_params_validate_layers(p, m.n_layers, &err) != 0)
        return;    /* refined_size above the smaller pyramid layer of two */
    int budget[2]; /* each layer's M */
    for (int l = 0; l < 2; l++)
        budget[l] = p->start_size + kv_evict_layer_intermediate(p, 2, l) + p->recent_size;
    kv_evictor *ev = kv_evictor_new(p, &m, &err);
    kv_cache *c = kv_cache_new(2, 1, 4, 8, &err);
    if (!ev || !c)
        abort(); /* a validated config must give a policy */
    kv_attn_stats_request req;
    kv_evictor_generation_request(ev, &req);
    int n = (budget[0] > budget[1] ? budget[0] : budget[1]) + 3;
    for (int step = 0; step < 6; step++) {
        int add = step == 0 ? n : 1;
        if (kv_cache_reserve(c, add, &err) != 0)
            abort();
        kv_attn_stats st[2];
        for (int l = 0; l < 2; l++) {
            kv_cache_layer *cl = &c->layers[l];
            for (int i = 0; i < add; i++) {
                memset(cl->k + (size_t)cl->len * 4, 0, 16);
                memset(cl->v + (size_t)cl->len * 4, 0, 16);
                cl->pos[cl->len++] = c->next_pos + i;
            }
            int keys = cl->len;
            st[l] = (kv_attn_stats){.n_heads = 2, .n_keys = keys};
            st[l].col_sums = calloc((size_t)2 * keys, sizeof(double));
            for (int w = 0; w < req.n_windows; w++)
                st[l].win_sums[w] = calloc((size_t)2 * keys, sizeof(double));
            for (int i = 0; i < 2 * keys; i++) {
                st[l].col_sums[i] = 1.0 / keys;
                for (int w = 0; w < req.n_windows; w++)
                    st[l].win_sums[w][i] = 1.0 / keys;
            }
        }
        c->next_pos += add;
        int rc = kv_evictor_step(ev, c, &req, st, step, NULL, NULL, &err);
        for (int l = 0; l < 2; l++) {
            free(st[l].col_sums);
            for (int w = 0; w < req.n_windows; w++)
                free(st[l].win_sums[w]);
        }
        if (rc != 0)
            abort(); /* eviction of a valid config never fails */
        for (int l = 0; l < 2; l++)
            if (c->layers[l].len > budget[l])
                abort();
    }
    kv_cache_free(c);
    kv_evictor_free(ev);
}

/* The checked decoding (evict_params.h) is the stricter reader: what it
 * accepts, the engine's own parser reads alike and validates; every
 * refusal says why. */
static void check_decoding(const cJSON *j)
{
    kv_evict_params a, b;
    kv_evict_keys given;
    kv_evict_problem pr = {0};
    kv_error err;
    kv_evict_params_default(&a);
    kv_evict_params_default(&b);
    if (kv_evict_params_decode(&a, j, &given, &pr) != 0 ||
        kv_evict_params_check(&a, given, &pr) != 0) {
        if (!pr.err.msg[0])
            abort();
        return;
    }
    if (kv_evict_params_from_json(&b, j, &err) != 0 || kv_evict_params_validate(&b, &err) != 0)
        abort();
    cJSON *x = kv_evict_params_to_json(&a), *y = kv_evict_params_to_json(&b);
    bool same = x && y && cJSON_Compare(x, y, true);
    cJSON_Delete(x);
    cJSON_Delete(y);
    if (!same)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_text(data, size);
    if (!text)
        return 0;
    kv_evict_params p;
    kv_error err;
    kv_evict_params_default(&p);
    cJSON *j = cJSON_ParseWithLength(text, size);
    if (j && kv_evict_params_from_json(&p, j, &err) == 0 && kv_evict_params_validate(&p, &err) == 0)
        drive(&p);
    if (j)
        check_decoding(j);
    cJSON_Delete(j);
    kv_evict_params_default(&p);
    bool ok = true;
    for (char *save, *line = strtok_r(text, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        char *sp = strchr(line, ' ');
        if (!sp)
            continue;
        *sp = '\0';
        ok = ok && kv_evict_params_set(&p, line, sp + 1, &err) == 0;
    }
    if (ok && kv_evict_params_validate(&p, &err) == 0)
        drive(&p);
    free(text);
    return 0;
}
