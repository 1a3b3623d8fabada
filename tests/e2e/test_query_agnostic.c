/* Query-agnostic eviction (issue 29, docs/eviction.md) through `kvbench
 * generate --question` on the trained demo model and its synthetic
 * key-value samples:
 *   - with query_aware false, every policy keeps the same context positions
 *     whatever the question, evicts once (phase "context") and never again;
 *     with query_aware true SnapKV's kept positions follow the question;
 *   - the full cache gives the same tokens split (context, then question) and
 *     unsplit, and its logits agree within 1e-5 of the largest logit (the
 *     largest difference is logged: 1.6e-4 on logits up to 64 when
 *     measured). */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/testutil.h"
#include "util/npy.h"

/* Sample `index` of synth_kv: its context as the template gives it
 * ("Below is ...\n\n{context}\n\n") and its question ({input}); alt is a
 * question about the first key of the context instead. */
typedef struct kv_sample {
    char ctx[512], q[512], alt[512], answer[32];
} kv_sample;

static void write_file(const char *path, const char *text, size_t len)
{
    FILE *f = fopen(path, "wb");
    cr_assert(f, "%s", path);
    cr_assert_eq(fwrite(text, 1, len, f), len);
    fclose(f);
}

static void load_sample(const char *tmp, int index, kv_sample *out)
{
    char *path = tu_source("datasets/synthetic/synth_kv.jsonl");
    char *text = tu_slurp(path, NULL);
    char *line = text;
    for (int i = 0; i < index; i++)
        line = strchr(line, '\n') + 1;
    *strchr(line, '\n') = '\0';
    cJSON *j = cJSON_Parse(line);
    cr_assert(j);
    const char *context = cJSON_GetObjectItem(j, "context")->valuestring;
    const char *input = cJSON_GetObjectItem(j, "input")->valuestring;
    snprintf(out->answer, sizeof out->answer, "%s",
             cJSON_GetArrayItem(cJSON_GetObjectItem(j, "answers"), 0)->valuestring);
    char *body = NULL;
    cr_assert_geq(asprintf(&body,
                           "Below is a list of keys and their values. Remember the value of every "
                           "key.\n\n%s\n\n",
                           context),
                  0);
    snprintf(out->ctx, sizeof out->ctx, "%s/ctx%d.txt", tmp, index);
    write_file(out->ctx, body, strlen(body));
    snprintf(out->q, sizeof out->q, "%s/q%d.txt", tmp, index);
    write_file(out->q, input, strlen(input));
    char key[4] = {context[0], context[1], context[2], 0}, *alt = NULL;
    cr_assert_geq(asprintf(&alt, "What is the value of key %s?\n%s:", key, key), 0);
    cr_assert(strcmp(alt, input) != 0);
    snprintf(out->alt, sizeof out->alt, "%s/alt%d.txt", tmp, index);
    write_file(out->alt, alt, strlen(alt));
    free(alt);
    free(body);
    cJSON_Delete(j);
    free(text);
    free(path);
}

/* kvbench generate on the demo model: prompt file, question file (or
 * NULL), extra flags (NULL-terminated, may be NULL). */
static tu_result generate(const char *prompt, const char *question, const char *const *flags)
{
    char *model = tu_source("models/kvbench-retrieval");
    const char *argv[64] = {getenv("KVBENCH"), "generate", "--model", model, "--prompt-file",
                            prompt, "--max-new-tokens", "6", "--threads", "1", "--json"};
    int n = 11;
    if (question) {
        argv[n++] = "--question-file";
        argv[n++] = question;
    }
    for (int i = 0; flags && flags[i]; i++)
        argv[n++] = flags[i];
    argv[n] = NULL;
    tu_result r = tu_run_argv((char *const *)argv);
    free(model);
    cr_assert_eq(r.status, 0, "%s", r.err);
    return r;
}

static char *generated_text(const tu_result *r)
{
    cJSON *j = cJSON_Parse(r->out);
    cr_assert(j, "%s", r->out);
    char *text = strdup(cJSON_GetObjectItem(j, "text")->valuestring);
    cJSON_Delete(j);
    return text;
}

/* The trace file's step-0 lines (their kept positions, phase aside), and
 * whether any line has a later step; every line's phase must be `phase`
 * at step 0 and "decode" after. */
static char *step0(const char *path, const char *phase, int *later)
{
    char *text = tu_slurp(path, NULL), *out = calloc(1, strlen(text) + 1);
    *later = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        cr_assert(j, "%s", line);
        int step = cJSON_GetObjectItem(j, "step")->valueint;
        const char *ph = cJSON_GetObjectItem(j, "phase")->valuestring;
        cr_assert_str_eq(ph, step == 0 ? phase : "decode", "%s", line);
        if (step == 0) {
            char *kept = cJSON_PrintUnformatted(cJSON_GetObjectItem(j, "kept_positions"));
            strcat(out, kept);
            strcat(out, "\n");
            free(kept);
        } else {
            *later = 1;
        }
        cJSON_Delete(j);
    }
    free(text);
    return out;
}

/* Every policy, at a 128-token budget on ~1k-token contexts. */
static const char *const policies[][8] = {
    {"snapkv", "--window-size", "32", NULL},
    {"snapkv", "--strategy", "per_head", NULL},
    {"snapkv", "--strategy", "per_head", "--head-budget", "adaptive", NULL},
    {"snapkv", "--layer-budget", "pyramid", NULL},
    {"h2o", "--refined-size", "16", NULL},
    {"h2o", "--refined-size", "16", "--refined-algorithm", "criticalkv", NULL},
    {"streaming", NULL},
    {"random", NULL},
    {"knorm", NULL},
    {"tova", NULL},
    {"keydiff", NULL},
    {"expected_attention", NULL},
};

/* The kept positions of step 0 under one policy and question. */
static char *kept(const char *tmp, const kv_sample *s, const char *question, const char *const *p,
                  const char *query_aware, int *later)
{
    char trace[512];
    snprintf(trace, sizeof trace, "%s/trace.jsonl", tmp);
    const char *flags[24] = {"--eviction",       p[0],          "--start-size",  "4",
                             "--recent-size",    "32",          "--intermediate-size", "92",
                             "--apply-rerotation", "false",     "--query-aware", query_aware,
                             "--trace",          trace};
    int n = 14;
    for (int i = 1; p[i]; i++)
        flags[n++] = p[i];
    flags[n] = NULL;
    tu_result r = generate(s->ctx, question, flags);
    tu_result_free(&r);
    return step0(trace, strcmp(query_aware, "false") == 0 ? "context" : "question", later);
}

TestSuite(query_agnostic, .init = tu_dir_make, .fini = tu_dir_remove);

Test(query_agnostic, the_question_never_changes_the_kept_context)
{
    kv_sample s;
    load_sample(tu_dir, 0, &s);
    for (size_t i = 0; i < sizeof policies / sizeof policies[0]; i++) {
        int later_a, later_b;
        char *a = kept(tu_dir, &s, s.q, policies[i], "false", &later_a);
        char *b = kept(tu_dir, &s, s.alt, policies[i], "false", &later_b);
        cr_assert(strlen(a) > 0, "%s: no eviction", policies[i][0]);
        cr_assert_str_eq(a, b, "%s %s: the kept context depends on the question", policies[i][0],
                         policies[i][1] ? policies[i][1] : "");
        cr_assert(!later_a && !later_b, "%s: evicted again after the question", policies[i][0]);
        free(a);
        free(b);
    }
    /* query-aware SnapKV reads the question: another question, other tokens */
    int later;
    char *a = kept(tu_dir, &s, s.q, policies[0], "true", &later);
    char *b = kept(tu_dir, &s, s.alt, policies[0], "true", &later);
    cr_assert_str_neq(a, b, "query-aware SnapKV kept the same positions for two questions");
    free(a);
    free(b);
}

/* The same prompt, split or not: the full cache's tokens are the same, its
 * logits within 1e-5 of the largest (two forwards chunk the prefill
 * differently: the projections and attention tiles sum in another order). */
Test(query_agnostic, full_cache_is_the_same_split_or_not)
{
    double worst = 0, largest = 0;
    int right = 0;
    for (int i = 0; i < 6; i++) {
        kv_sample s;
        load_sample(tu_dir, i * 15, &s);
        char *ctx = tu_slurp(s.ctx, NULL), *q = tu_slurp(s.q, NULL), *whole = NULL;
        cr_assert_geq(asprintf(&whole, "%s%s", ctx, q), 0);
        char whole_path[512], npy_a[512], npy_b[512];
        snprintf(whole_path, sizeof whole_path, "%s/whole.txt", tu_dir);
        write_file(whole_path, whole, strlen(whole));
        snprintf(npy_a, sizeof npy_a, "%s/a.npy", tu_dir);
        snprintf(npy_b, sizeof npy_b, "%s/b.npy", tu_dir);
        const char *fa[] = {"--dump-logits", npy_a, NULL}, *fb[] = {"--dump-logits", npy_b, NULL};
        tu_result ra = generate(whole_path, NULL, fa), rb = generate(s.ctx, s.q, fb);
        char *ta = generated_text(&ra), *tb = generated_text(&rb);
        cr_assert_str_eq(ta, tb, "sample %d: split and unsplit prefills answer differently", i * 15);
        right += strncmp(ta, s.answer, strlen(s.answer)) == 0;
        float *la, *lb;
        size_t rows_a, rows_b, cols_a, cols_b;
        kv_error err;
        cr_assert_eq(kv_npy_read(npy_a, &la, &rows_a, &cols_a, &err), 0, "%s", err.msg);
        cr_assert_eq(kv_npy_read(npy_b, &lb, &rows_b, &cols_b, &err), 0, "%s", err.msg);
        cr_assert(rows_a == rows_b && cols_a == cols_b);
        for (size_t k = 0; k < rows_a * cols_a; k++) {
            worst = fmax(worst, fabs((double)la[k] - (double)lb[k]));
            largest = fmax(largest, fabs((double)la[k]));
        }
        free(la);
        free(lb);
        free(ta);
        free(tb);
        tu_result_free(&ra);
        tu_result_free(&rb);
        free(whole);
        free(ctx);
        free(q);
    }
    cr_log_info("full cache split vs unsplit: largest logit difference %.3g (largest logit %.3g), "
                "%d of 6 right",
                worst, largest, right);
    /* float32 sums in another order: relative to the logits' size */
    cr_assert_leq(worst, 1e-5 * largest, "largest logit difference %.3g of %.3g", worst, largest);
    cr_assert_geq(right, 4, "the demo model answers");
}

Test(query_agnostic, query_agnostic_needs_a_question)
{
    kv_sample s;
    load_sample(tu_dir, 0, &s);
    char *model = tu_source("models/kvbench-retrieval");
    tu_result r = tu_kvbench("generate", "--model", model, "--prompt-file", s.ctx, "--eviction",
                             "snapkv", "--query-aware", "false", NULL);
    cr_assert_eq(r.status, 2, "%s", r.err);
    cr_assert(strstr(r.err, "kvbench: generate: --query-aware false") && strstr(r.err, "--question"),
              "%s", r.err);
    tu_result_free(&r);
    r = tu_kvbench("generate", "--model", model, "--tokens", "1,2,3", "--question", "x", NULL);
    cr_assert_eq(r.status, 2, "%s", r.err);
    cr_assert(strstr(r.err, "--question-tokens with --tokens"), "%s", r.err);
    tu_result_free(&r);
    free(model);
}

/* `kvbench run` of matrix `name` (query_aware of the eviction configs:
 * "[true, false]" or "true") over 4 samples of two tasks; its stderr. */
static char *run_matrix(const char *name, const char *query_aware)
{
    char *path = tu_write_demo_matrix(
        name, NULL,
        "\"limit\": 4,\n"
        " \"threads\": 1, \"tasks\": [\"synth_passkey\", \"synth_kv\"], \"sweep\": [\n"
        " {\"algorithm\": [\"snapkv\", \"h2o\"], \"start_size\": 4, \"recent_size\": 32,\n"
        "  \"intermediate_size\": 92, \"apply_rerotation\": false, \"query_aware\": %s}]",
        query_aware);
    tu_result r = tu_kvbench("run", path, NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    char *err = strdup(r.err);
    tu_result_free(&r);
    free(path);
    return err;
}

/* The number before `what` in text. */
static long count_before(const char *text, const char *what)
{
    const char *p = strstr(text, what);
    cr_assert(p, "no '%s' in: %s", what, text);
    while (p > text && p[-1] == ' ')
        p--;
    while (p > text && p[-1] >= '0' && p[-1] <= '9')
        p--;
    return atol(p);
}

static cJSON *lines_of(const char *dir, const char *run, const char *config, const char *task)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/runs/%s/predictions/%s/%s.jsonl", dir, run, config, task);
    char *text = tu_slurp(path, NULL);
    cJSON *arr = cJSON_CreateArray();
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"))
        cJSON_AddItemToArray(arr, cJSON_Parse(line));
    free(text);
    return arr;
}

static double num(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItem(o, key);
    cr_assert(cJSON_IsNumber(v), "no %s", key);
    return v->valuedouble;
}

/* One prefill of the context per sample; the question once on the full
 * cache and once, batched, on the query-agnostic caches; the query-aware
 * configs and the full cache answer as in a run without query-agnostic
 * configs. */
Test(query_agnostic, a_mixed_run_shares_its_prefills, .timeout = 300)
{
    char *mixed = run_matrix("mixed", "[true, false]");
    char *aware = run_matrix("aware", "true");
    cr_assert_eq(count_before(mixed, "prefills"), 8, "%s", mixed);
    cr_assert_eq(count_before(mixed, "of the question on the full cache"), 8, "%s", mixed);
    cr_assert_eq(count_before(mixed, "batched over the query-agnostic"), 8, "%s", mixed);
    cr_assert_eq(count_before(aware, "prefills"), 8, "%s", aware);
    cr_assert_eq(count_before(aware, "of the question on the full cache"), 0, "%s", aware);
    cr_assert_eq(count_before(aware, "batched over the query-agnostic"), 0, "%s", aware);
    static const char *const same[] = {"full", "snapkv_s4_r32_i92_norot", "h2o_s4_r32_i92_norot"};
    static const char *const tasks[] = {"synth_passkey", "synth_kv"};
    for (int t = 0; t < 2; t++) {
        for (int c = 0; c < 3; c++) {
            cJSON *a = lines_of(tu_dir, "mixed", same[c], tasks[t]);
            cJSON *b = lines_of(tu_dir, "aware", same[c], tasks[t]);
            cr_assert_eq(cJSON_GetArraySize(a), 4);
            for (int i = 0; i < 4; i++) {
                const cJSON *x = cJSON_GetArrayItem(a, i), *y = cJSON_GetArrayItem(b, i);
                cr_assert_str_eq(cJSON_GetObjectItem(x, "pred")->valuestring,
                                 cJSON_GetObjectItem(y, "pred")->valuestring, "%s %s line %d",
                                 same[c], tasks[t], i);
                cr_assert_eq(num(x, "kept_context_tokens"), num(y, "kept_context_tokens"));
            }
            cJSON_Delete(a);
            cJSON_Delete(b);
        }
        cJSON *q = lines_of(tu_dir, "mixed", "snapkv_s4_r32_i92_norot_qa0", tasks[t]);
        for (int i = 0; i < 4; i++) {
            const cJSON *x = cJSON_GetArrayItem(q, i);
            double ctx = num(x, "context_tokens"), prompt = num(x, "prompt_tokens");
            cr_assert(ctx > 900 && ctx < prompt, "%g of %g", ctx, prompt);
            /* the budget bounds the context; the question is never evicted */
            cr_assert_eq(num(x, "kept_context_tokens"), 128);
            cr_assert_eq(num(x, "kept_tokens"), 128);
        }
        cJSON_Delete(q);
    }
    /* the report's config table says which setting each config ran in */
    char path[1024];
    snprintf(path, sizeof path, "%s/runs/mixed/summary.md", tu_dir);
    char *md = tu_slurp(path, NULL);
    cr_assert(strstr(md, "| config | hash | budget | query_aware | parameters |"), "%s", md);
    cr_assert(strstr(md, "| 128 | false | `{\"algorithm\":\"snapkv\""), "%s", md);
    cr_assert(strstr(md, "| 128 | true | `{\"algorithm\":\"snapkv\""), "%s", md);
    cr_assert(strstr(md, "| full | - | `full cache` |"), "%s", md);
    free(md);
    snprintf(path, sizeof path, "%s/runs/mixed/report.html", tu_dir);
    char *html = tu_slurp(path, NULL);
    cr_assert(strstr(html, "<th>query_aware</th>") && strstr(html, "<td>false</td>"));
    free(html);
    free(mixed);
    free(aware);
}
