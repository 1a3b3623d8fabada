/* datasets/tasks: the registry checked against the specification text
 * (../shared/LONGBENCH.md §1.1 table and §2.1 templates) and its own rules. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tasks.h"
#include "testutil.h"

/* The section of the spec between two headings, as a malloc'd string. */
static char *spec_section(const char *from, const char *to)
{
    char *path = tu_shared("LONGBENCH.md");
    if (!path)
        return NULL;
    char *md = tu_slurp(path, NULL);
    free(path);
    char *a = strstr(md, from);
    char *b = a ? strstr(a, to) : NULL;
    cr_assert(a && b, "LONGBENCH.md has no section %s", from);
    char *sec = strndup(a, (size_t)(b - a));
    free(md);
    return sec;
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

/* Every template equals the JSON string of dataset2prompt.json as the spec
 * quotes it, decoded by cJSON. */
Test(tasks, templates_equal_the_spec)
{
    char *sec = spec_section("### 2.1", "### 2.2");
    if (!sec)
        cr_skip_test("LONGBENCH.md absent (../shared absent)");
    size_t checked = 0;
    for (char *line = strtok(sec, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] != '"')
            continue;
        char *json = NULL;
        cr_assert_neq(asprintf(&json, "{%s}", line), -1);
        cJSON *obj = cJSON_Parse(json);
        cr_assert(obj && obj->child && cJSON_IsString(obj->child), "bad spec line %s", line);
        const lb_task *t = lb_task_find(obj->child->string);
        cr_assert(t, "task %s of the spec is not in the registry", obj->child->string);
        cr_assert_str_eq(t->prompt, obj->child->valuestring, "%s: template differs", t->name);
        checked++;
        cJSON_Delete(obj);
        free(json);
    }
    cr_assert_eq(checked, 21);
    free(sec);
}

/* The §1.1 table: | dataset | category | metric | max_gen | n | language | E counts | */
Test(tasks, numbers_equal_the_spec_table)
{
    char *sec = spec_section("### 1.1", "### 1.2");
    if (!sec)
        cr_skip_test("LONGBENCH.md absent (../shared absent)");
    size_t rows = 0, e_rows = 0;
    for (char *line = strtok(sec, "\n"); line; line = strtok(NULL, "\n")) {
        char name[64], metric[64], e[64];
        int max_gen, n;
        if (sscanf(line, "| %63s | %*[^|] | %63s | %d | %d | %*[^|] | %63[^|]|", name, metric,
                   &max_gen, &n, e) != 5)
            continue;
        const lb_task *t = lb_task_find(name);
        cr_assert(t, "task %s of the spec table is not in the registry", name);
        cr_assert_str_eq(t->metric, metric, "%s", name);
        cr_assert_eq(t->max_new_tokens, max_gen, "%s", name);
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
    cr_assert_eq(e_rows, 13);
    free(sec);
}

/* LongBench v2 templates: §7 quotes prompts/0shot*.txt as JSON strings. */
Test(tasks, v2_templates_equal_the_spec)
{
    char *sec = spec_section("## 7.", "## 8.");
    if (!sec)
        cr_skip_test("LONGBENCH.md absent (../shared absent)");
    const char *files[] = {"0shot.txt: ", "0shot_cot.txt: ", "0shot_cot_ans.txt: ",
                           "0shot_no_context.txt: ", "0shot_rag.txt: "};
    const char *tasks[] = {"v2", "v2_cot", "v2_cot_ans", "v2_no_context", "v2_rag"};
    for (int i = 0; i < 5; i++) {
        char *at = strstr(sec, files[i]);
        cr_assert(at, "LONGBENCH.md §7 has no %s", files[i]);
        at += strlen(files[i]);
        char *json = strndup(at, strcspn(at, "\n"));
        cJSON *v = cJSON_Parse(json);
        cr_assert(cJSON_IsString(v), "%s", json);
        const lb_task *t = lb_task_find(tasks[i]);
        cr_assert(t && t->family == LB_FAMILY_V2 && t->template_kind == LB_TEMPLATE_DOLLARS);
        cr_assert_str_eq(t->prompt, v->valuestring, "%s", tasks[i]);
        cJSON_Delete(v);
        free(json);
    }
    free(sec);
}
