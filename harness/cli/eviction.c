#include "cli/eviction.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/file.h"
#include "evict/evict_params.h"
#include "util/strbuf.h"

struct kb_eviction {
    kv_evict_params params;
    kv_evict_model model;
    kv_evictor *ev;
    kv_attn_stats_request req;
    FILE *trace;
    const char *trace_path;
    int trace_errno;
    const char *first_phase; /* NULL: trace lines name no phase */
};

/* Reports a problem with what the options gave: under the flag that set
 * the key, else the --eviction-config file's key, else (a rule between
 * keys) as the eviction's. */
static void report(const kb_args *a, const kv_evict_problem *pr)
{
    const kv_evict_param_def *d = pr->key ? kv_evict_param_find(pr->key) : NULL;
    if (d && kb_arg(a, d->flag))
        kb_error("--%s: %s", d->flag, pr->err.msg);
    else if (pr->key)
        kb_error("%s: %s: %s", kb_arg(a, "eviction-config"), pr->key, pr->err.msg);
    else
        kb_error("eviction: %s", pr->err.msg);
}

/* The --eviction-config file's keys onto *p, checked as a matrix's are. */
static int read_config(const char *path, kv_evict_params *p)
{
    char *text = NULL;
    size_t len = 0;
    kv_error err;
    if (kv_file_read(path, &text, &len, &err) != 0) {
        kb_error("%s", err.msg);
        return -1;
    }
    cJSON *j = cJSON_ParseWithLength(text, len);
    free(text);
    if (!j) {
        kb_error("%s: not valid JSON", path);
        return -1;
    }
    kv_evict_keys given;
    kv_evict_problem pr;
    int rc = kv_evict_params_decode(p, j, &given, &pr);
    if (rc != 0 && pr.key)
        kb_error("%s: %s: %s", path, pr.key, pr.err.msg);
    else if (rc != 0)
        kb_error("%s: %s", path, pr.err.msg);
    cJSON_Delete(j);
    return rc;
}

/* Sets each parameter a flag gives (flags override the file), checked
 * against the parameter table; *flagged receives the keys they set. */
static int set_flags(const kb_args *a, kv_evict_params *p, kv_evict_keys *flagged)
{
    *flagged = 0;
    kv_evict_problem pr;
    const kv_evict_param_def *d;
    for (int i = 0; (d = kv_evict_param(i)); i++) {
        const char *v = kb_arg(a, d->flag);
        if (!v)
            continue;
        if (kv_evict_param_set_checked(p, d->key, v, &pr) != 0) {
            report(a, &pr);
            return -1;
        }
        *flagged |= KV_EVICT_KEY(i);
    }
    return 0;
}

int kb_eviction_params(const kb_args *a, kv_evict_params *p)
{
    const char *config = kb_arg(a, "eviction-config");
    bool evict = config != NULL, any = evict; /* cache precision alone evicts nothing */
    const kv_evict_param_def *d;
    for (int i = 0; (d = kv_evict_param(i)); i++)
        if (kb_arg(a, d->flag)) {
            any = true;
            evict = evict || !kv_evict_param_is_cache(d->key);
        }
    kv_evict_params_default(p);
    if (!any)
        return 1;
    kv_evict_keys flagged;
    if ((config && read_config(config, p) != 0) || set_flags(a, p, &flagged) != 0)
        return -1;
    /* another algorithm's key (ea_* under h2o) that neither a flag nor the
     * file moved from its default was not asked for: no mistake of the user */
    kv_evict_problem pr;
    if (kv_evict_params_check(p, flagged | kv_evict_params_moved(p), &pr) != 0) {
        report(a, &pr);
        return -1;
    }
    return evict ? 0 : 1;
}

int kb_eviction_cache_quant(const kb_args *a, const kv_model *m, kv_cache_quant *q)
{
    kv_evict_params p;
    if (kb_eviction_params(a, &p) < 0)
        return KB_EXIT_USAGE;
    *q = kv_evict_params_cache_quant(&p);
    kv_error err;
    if (kv_cache_quant_check(q, kv_model_get_config(m)->head_dim, &err) != 0) {
        kb_error("%s", err.msg);
        return KB_EXIT_USAGE;
    }
    return KB_EXIT_OK;
}

/* A set's positions; a head that keeps fewer tokens than others (AdaKV)
 * ends in -1s, which are no tokens. */
static void write_positions(FILE *f, const int32_t *pos, int n)
{
    fputc('[', f);
    for (int i = 0; i < n && pos[i] >= 0; i++)
        fprintf(f, i ? ", %d" : "%d", pos[i]);
    fputc(']', f);
}

/* Trace lines are written as they happen and flushed, so a killed run
 * still leaves every eviction it made. One kept set: "kept_positions" is
 * its list; per_head: a list per KV head (of its own length with AdaKV). */
static void write_trace(void *ctx, int step, int layer, const int32_t *pos, int n, int sets)
{
    kb_eviction *e = ctx;
    if (!e->trace || e->trace_errno)
        return;
    fprintf(e->trace, "{\"step\": %d, \"layer\": %d, ", step, layer);
    if (e->first_phase)
        fprintf(e->trace, "\"phase\": \"%s\", ", step == 0 ? e->first_phase : "decode");
    fputs("\"kept_positions\": ", e->trace);
    if (sets > 1)
        fputc('[', e->trace);
    for (int g = 0; g < sets; g++) {
        if (g > 0)
            fputs(", ", e->trace);
        write_positions(e->trace, pos + (size_t)g * (size_t)n, n);
    }
    if (sets > 1)
        fputc(']', e->trace);
    int n_ref = 0;
    if (kv_evictor_refined_positions(e->ev, 0, &n_ref)) {
        /* the refiner's picks among the kept positions (KVCrush, CriticalKV) */
        fputs(", \"refined_positions\": ", e->trace);
        if (sets > 1)
            fputc('[', e->trace);
        for (int g = 0; g < sets; g++) {
            const int32_t *r = kv_evictor_refined_positions(e->ev, g, &n_ref);
            if (g > 0)
                fputs(", ", e->trace);
            write_positions(e->trace, r, n_ref);
        }
        if (sets > 1)
            fputc(']', e->trace);
    }
    if (fputs("}\n", e->trace) == EOF || fflush(e->trace) != 0)
        e->trace_errno = errno ? errno : EIO;
}

int kb_eviction_open(const kb_args *a, const kv_model *m, int n_prompt, int n_context,
                     kb_eviction **out)
{
    *out = NULL;
    kv_evict_params p;
    int rc = kb_eviction_params(a, &p);
    if (rc != 0) {
        if (rc > 0 && kb_arg(a, "trace")) {
            kb_error("--trace needs eviction (--eviction ALGO or --eviction-config FILE)");
            return KB_EXIT_USAGE;
        }
        return rc > 0 ? KB_EXIT_OK : KB_EXIT_USAGE;
    }
    /* compression_ratio is a share of what is compressed: the context alone
     * when it is compressed before the question is read */
    kv_evict_params_for_prompt(&p, !p.query_aware && n_context >= 0 ? n_context : n_prompt);
    const char *warning = kv_evict_params_warning(&p);
    if (warning)
        fprintf(stderr, "kvbench: warning: %s\n", warning);
    kb_eviction *e = calloc(1, sizeof *e);
    if (!e) {
        kb_error("out of memory");
        return KB_EXIT_FAIL;
    }
    e->params = p;
    kv_error err;
    bool o_proj = p.refined_size > 0 && strcmp(p.refined_algorithm, "criticalkv") == 0;
    if (kv_evict_model_load(&e->model, m, o_proj, &err) != 0 ||
        !(e->ev = kv_evictor_new(&e->params, &e->model, &err))) {
        kb_error("%s", err.msg);
        kb_eviction_close(e);
        return KB_EXIT_FAIL;
    }
    kv_evictor_generation_request(e->ev, &e->req);
    e->trace_path = kb_arg(a, "trace");
    if (e->trace_path && !(e->trace = fopen(e->trace_path, "w"))) {
        kb_error("%s: cannot write: %s", e->trace_path, strerror(errno));
        kb_eviction_close(e);
        return KB_EXIT_FAIL;
    }
    *out = e;
    return KB_EXIT_OK;
}

void kb_eviction_close(kb_eviction *e)
{
    if (!e)
        return;
    if (e->trace)
        fclose(e->trace);
    kv_evictor_free(e->ev);
    kv_evict_model_release(&e->model);
    free(e);
}

bool kb_eviction_query_aware(const kb_eviction *e)
{
    return e->params.query_aware;
}

void kb_eviction_set_phase(kb_eviction *e, const char *first)
{
    e->first_phase = first;
}

kv_attn_stats_request kb_eviction_request(const kb_eviction *e)
{
    return e->req;
}

int kb_eviction_step(kb_eviction *e, kv_cache *c, const kv_attn_stats *stats, int step,
                     kv_error *err)
{
    if (kv_evictor_step(e->ev, c, &e->req, stats, step, write_trace, e, err) != 0)
        return -1;
    if (e->trace_errno)
        return kv_fail(err, "%s: cannot write: %s", e->trace_path, strerror(e->trace_errno));
    return 0;
}

char *kb_eviction_schema_text(void)
{
    cJSON *props = kv_evict_params_schema();
    if (!props)
        return NULL;
    kv_strbuf b = {0};
    kv_strbuf_puts(&b, "\"properties\": {\n");
    for (const cJSON *p = props->child; p; p = p->next) {
        char *v = cJSON_PrintUnformatted(p);
        if (!v) {
            b.oom = true;
            break;
        }
        kv_strbuf_puts(&b, "        \"");
        kv_strbuf_puts(&b, p->string);
        kv_strbuf_puts(&b, "\": ");
        kv_strbuf_puts(&b, v);
        kv_strbuf_puts(&b, p->next ? ",\n" : "\n");
        free(v);
    }
    kv_strbuf_puts(&b, "      }");
    cJSON_Delete(props);
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s;
}
