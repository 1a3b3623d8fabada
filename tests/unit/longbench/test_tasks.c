/* datasets/tasks: the registry checked against upstream LongBench's files
 * (tests/data/longbench: dataset2prompt.json, dataset2maxlen.json, the v2
 * prompts, the task table) and its own rules. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "longbench/tasks.h"
#include "support/testutil.h"

/* A file of tests/data/longbench as a malloc'd string. */
static char *data_file(const char *rel)
{
    char *path = NULL;
    cr_assert_neq(asprintf(&path, "longbench/%s", rel), -1);
    char *abs = tu_data(path);
    char *text = tu_slurp(abs, NULL);
    free(abs);
    free(path);
    return text;
}

/* A JSON object file of upstream's LongBench/config/ (tests/data/longbench/upstream). */
static cJSON *upstream_config(const char *name)
{
    char rel[128];
    snprintf(rel, sizeof rel, "upstream/%s", name);
    char *text = data_file(rel);
    cJSON *obj = cJSON_Parse(text);
    cr_assert(cJSON_IsObject(obj), "%s is not a JSON object", name);
    free(text);
    return obj;
}

Test(tasks, counts_and_unique_names)
{
    size_t n;
    lb_tasks_of(LB_FAMILY_V1, &n);
    cr_assert_eq(n, 21);
    lb_tasks_of(LB_FAMILY_E, &n);
    cr_assert_eq(n, 13);
    lb_tasks_of(LB_FAMILY_V2, &n);
    cr_assert_geq(n, 1);
    size_t english = 0;
    for (size_t i = 0; i < lb_n_tasks; i++) {
        cr_assert_eq(lb_task_find(lb_tasks[i].name), &lb_tasks[i], "duplicate name %s",
                     lb_tasks[i].name);
        english += lb_task_is_english16(&lb_tasks[i]);
    }
    cr_assert_eq(english, 16);
    cr_assert_null(lb_task_find("nonexistent"));
}

/* A LongBench-E task is its v1 task on other samples: same prompt, metric,
 * length and rules. */
Test(tasks, e_tasks_follow_their_base)
{
    size_t n;
    const lb_task *e = lb_tasks_of(LB_FAMILY_E, &n);
    for (size_t i = 0; i < n; i++) {
        const lb_task *b = lb_task_find(e[i].base);
        cr_assert(b && b->family == LB_FAMILY_V1, "%s: base %s", e[i].name, e[i].base);
        char want[64];
        snprintf(want, sizeof want, "%s_e", b->name);
        cr_assert_str_eq(e[i].name, want);
        cr_assert_str_eq(e[i].prompt, b->prompt);
        cr_assert_str_eq(e[i].metric, b->metric);
        cr_assert_eq(e[i].max_new_tokens, b->max_new_tokens);
        cr_assert_eq(e[i].chat, b->chat);
        cr_assert_eq(e[i].first_line, b->first_line);
    }
}

/* pred.py: `if dataset not in ["trec", "triviaqa", "samsum", "lsht", "lcc",
 * "repobench-p"]: prompt = build_chat(...)`; eval.py: first line for
 * trec triviaqa samsum lsht; samsum alone adds "\n" as a stop. */
Test(tasks, chat_first_line_and_stop_rules)
{
    const char *no_chat = " trec triviaqa samsum lsht lcc repobench-p ";
    const char *first = " trec triviaqa samsum lsht ";
    size_t n;
    const lb_task *t = lb_tasks_of(LB_FAMILY_V1, &n);
    for (size_t i = 0; i < n; i++) {
        char key[64];
        snprintf(key, sizeof key, " %s ", t[i].name);
        cr_assert_eq(t[i].chat, strstr(no_chat, key) == NULL, "%s chat", t[i].name);
        cr_assert_eq(t[i].first_line, strstr(first, key) != NULL, "%s first_line", t[i].name);
        cr_assert_eq(t[i].newline_stop, strcmp(t[i].name, "samsum") == 0, "%s", t[i].name);
    }
}

/* Every template equals upstream's dataset2prompt.json, and every task of
 * it is in the registry. */
Test(tasks, templates_equal_upstream)
{
    cJSON *prompts = upstream_config("dataset2prompt.json");
    size_t checked = 0;
    for (const cJSON *p = prompts->child; p; p = p->next) {
        const lb_task *t = lb_task_find(p->string);
        cr_assert(t, "task %s of dataset2prompt.json is not in the registry", p->string);
        cr_assert(cJSON_IsString(p));
        cr_assert_str_eq(t->prompt, p->valuestring, "%s: template differs", t->name);
        checked++;
    }
    cr_assert_eq(checked, 21);
    cJSON_Delete(prompts);
}

/* max_new_tokens from upstream's dataset2maxlen.json; metric, sample counts
 * and LongBench-E counts from tests/data/longbench/tasks.md:
 * | dataset | metric | n | E counts 0-4k/4-8k/8k+ | */
Test(tasks, numbers_equal_upstream)
{
    cJSON *maxlen = upstream_config("dataset2maxlen.json");
    char *table = data_file("tasks.md");
    size_t rows = 0, e_rows = 0;
    for (char *line = strtok(table, "\n"); line; line = strtok(NULL, "\n")) {
        char name[64], metric[64], e[64];
        int n;
        if (sscanf(line, "| %63s | %63s | %d | %63[^|]|", name, metric, &n, e) != 4)
            continue;
        const lb_task *t = lb_task_find(name);
        cr_assert(t, "task %s of tasks.md is not in the registry", name);
        cr_assert_str_eq(t->metric, metric, "%s", name);
        const cJSON *max_gen = cJSON_GetObjectItemCaseSensitive(maxlen, name);
        cr_assert(cJSON_IsNumber(max_gen), "dataset2maxlen.json has no %s", name);
        cr_assert_eq(t->max_new_tokens, max_gen->valueint, "%s", name);
        cr_assert_eq(t->n_samples, n, "%s", name);
        rows++;
        int a, b, c;
        char ename[80];
        snprintf(ename, sizeof ename, "%s_e", name);
        if (sscanf(e, "%d/%d/%d", &a, &b, &c) == 3) {
            const lb_task *te = lb_task_find(ename);
            cr_assert(te, "%s missing", ename);
            cr_assert_eq(te->n_samples, a + b + c, "%s", ename);
            e_rows++;
        } else {
            cr_assert_null(lb_task_find(ename), "%s is not a LongBench-E task", ename);
        }
    }
    cr_assert_eq(rows, 21);
    cr_assert_eq(cJSON_GetArraySize(maxlen), 21);
    cr_assert_eq(e_rows, 13);
    free(table);
    cJSON_Delete(maxlen);
}

/* LongBench v2 templates: upstream's prompts/0shot*.txt, byte for byte. */
Test(tasks, v2_templates_equal_upstream)
{
    const char *files[] = {"0shot", "0shot_cot", "0shot_cot_ans", "0shot_no_context", "0shot_rag"};
    const char *tasks[] = {"v2", "v2_cot", "v2_cot_ans", "v2_no_context", "v2_rag"};
    for (int i = 0; i < 5; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "upstream/prompts/%s.txt", files[i]);
        char *want = data_file(rel);
        const lb_task *t = lb_task_find(tasks[i]);
        cr_assert(t && t->family == LB_FAMILY_V2 && t->template_kind == LB_TEMPLATE_DOLLARS);
        cr_assert_str_eq(t->prompt, want, "%s", tasks[i]);
        free(want);
    }
}
