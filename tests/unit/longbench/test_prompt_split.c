/* The context / question split of a prompt (lb_prompt.n_context): the
 * question part of real samples, decoded, begins with the question that
 * NVIDIA kvpress's LongBench datasets put after their context
 * (evaluation/benchmarks/longbench/create_huggingface_dataset.py:
 * question_template, with trec's, triviaqa's and samsum's inputs stripped
 * of their "Type:" / "Answer:" / "Summary:" tail, which kvpress moves into
 * answer_prefix), on the real Qwen3 tokenizer, whole and truncated, with and
 * without the chat template. The table below is kvpress's, written down
 * independently of datasets/longbench/tasks.c. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "longbench/prompt.h"
#include "longbench/sample.h"
#include "support/testutil.h"

typedef struct kvpress_question {
    const char *task;
    const char *question; /* kvpress's question_template; {input} is the sample's */
    const char *strip;    /* the suffix kvpress removes from the input first */
} kvpress_question;

static const kvpress_question kvpress[] = {
    {"narrativeqa", "Question: {input}\n\n", NULL},
    {"qasper", "Question: {input}\n\n", NULL},
    {"multifieldqa_en", "Question: {input}\n", NULL},
    {"multifieldqa_zh", "问题：{input}\n", NULL},
    {"hotpotqa", "Question: {input}\n", NULL},
    {"2wikimqa", "Question: {input}\n", NULL},
    {"musique", "Question: {input}\n", NULL},
    {"dureader", "问题：{input}\n", NULL},
    {"gov_report", "Now, write a one-page summary of the report.\n\n", NULL},
    {"qmsum", "Query: {input}\n", NULL},
    {"multi_news", "Now, write a one-page summary of all the news.\n\n", NULL},
    {"vcsum", "会议总结：", NULL}, /* question_template "" + answer_prefix */
    {"trec", "{input}", "Type:"},
    {"triviaqa", "{input}", "Answer:"},
    {"samsum", "{input}", "Summary:"},
    {"lsht", "{input}", NULL},
    {"passage_count",
     "Please enter the final count of unique paragraphs after removing duplicates. The output "
     "format should only contain the number, such as 1, 2, 3, and so on.\n\n",
     NULL},
    {"passage_retrieval_en",
     "{input}\n\nPlease enter the number of the paragraph that the abstract is from. The answer "
     "format must be like \"Paragraph 1\", \"Paragraph 2\", etc.\n\n",
     NULL},
    {"passage_retrieval_zh", "{input}\n\n请输入摘要所属段落的编号。答案格式必须是\"段落1\"，\"段落2\"等格式\n\n",
     NULL},
    {"lcc", "Next line of code:\n", NULL}, /* input "" + answer_prefix */
    {"repobench-p", "{input}", NULL},
};

/* The question kvpress's template gives sample s. */
static char *expected_question(const kvpress_question *k, const lb_sample *s)
{
    size_t n = s->input.n;
    size_t sl = k->strip ? strlen(k->strip) : 0;
    if (sl && n >= sl && memcmp(s->input.p + n - sl, k->strip, sl) == 0)
        n -= sl;
    const char *at = strstr(k->question, "{input}");
    char *out = NULL;
    if (at)
        cr_assert_neq(asprintf(&out, "%.*s%.*s%s", (int)(at - k->question), k->question, (int)n,
                               s->input.p, at + 7),
                      -1);
    else
        out = strdup(k->question);
    return out;
}

/* The first samples of a task: datasets/samples, else tests/data/longbench. */
static lb_loader *open_samples(const char *task)
{
    char rel[160];
    snprintf(rel, sizeof rel, "datasets/samples/%s.jsonl", task);
    char *path = tu_source(rel);
    FILE *f = fopen(path, "r");
    if (!f) {
        free(path);
        snprintf(rel, sizeof rel, "longbench/%s.head3.jsonl", task);
        path = tu_data(rel);
        f = fopen(path, "r");
    }
    if (!f) {
        free(path);
        return NULL;
    }
    fclose(f);
    kv_error err;
    lb_loader *l = lb_loader_open(path, NULL, &err);
    cr_assert(l, "%s", err.msg);
    free(path);
    return l;
}

/* A LongBench record made here, for the tasks without shipped samples. */
static lb_sample made_sample(const kvpress_question *k)
{
    static char context[4096];
    size_t n = 0;
    while (n + 40 < sizeof context)
        n += (size_t)snprintf(context + n, sizeof context - n, "Line %zu of the long context. ", n);
    lb_sample s = {0};
    s.id = kv_str_c("made");
    s.context = (kv_str){context, n};
    static char input[64];
    snprintf(input, sizeof input, "What does line 5 say?%s", k->strip ? k->strip : "");
    s.input = (kv_str){input, strlen(input)};
    return s;
}

static kv_tokenizer *qwen3(void)
{
    char *dir = tu_data("tokenizer/qwen3");
    kv_error err;
    kv_tokenizer *t = kv_tokenizer_load(dir, &err);
    cr_assert(t, "%s", err.msg);
    free(dir);
    return t;
}

/* Builds s's prompt and checks its split; returns whether it was truncated. */
static bool check_split(kv_tokenizer *t, const lb_task *task, const kvpress_question *k,
                        const lb_sample *s, const lb_prompt_options *o)
{
    lb_prompt p;
    kv_error err;
    cr_assert_eq(lb_prompt_build(task, s, t, o, &p, &err), 0, "%s", err.msg);
    cr_assert(p.n_context > 0 && p.n_context < p.n_ids, "%s %s: %zu of %zu tokens are context",
              task->name, s->id.p, p.n_context, p.n_ids);
    size_t qn = 0, cn = 0, an = 0;
    char *q = kv_tokenizer_decode_len(t, p.ids + p.n_context, p.n_ids - p.n_context, false, &qn);
    char *c = kv_tokenizer_decode_len(t, p.ids, p.n_context, false, &cn);
    char *all = kv_tokenizer_decode_len(t, p.ids, p.n_ids, false, &an);
    char *want = expected_question(k, s);
    size_t wn = strlen(want);
    cr_assert(qn >= wn && memcmp(q, want, wn) == 0,
              "%s %s (chat %d, truncated %d): the question part begins \"%.60s\", kvpress's "
              "\"%.60s\"",
              task->name, s->id.p, p.chat, p.truncated, q, want);
    /* the two parts are the prompt, cut between two tokens */
    cr_assert_eq(cn + qn, an);
    cr_assert(memcmp(all, c, cn) == 0 && memcmp(all + cn, q, qn) == 0);
    if (p.chat) /* the end of turn and the assistant header are the question's */
        cr_assert(strstr(q, "<|im_end|>") && strstr(q, "<|im_start|>assistant"), "%s", task->name);
    bool truncated = p.truncated;
    free(q);
    free(c);
    free(all);
    free(want);
    lb_prompt_free(&p);
    return truncated;
}

Test(prompt_split, question_part_begins_with_kvpress_question_for_every_v1_task)
{
    kv_tokenizer *t = qwen3();
    size_t n_v1;
    lb_tasks_of(LB_FAMILY_V1, &n_v1);
    cr_assert_eq(sizeof kvpress / sizeof kvpress[0], n_v1);
    int real = 0, truncated = 0, checked = 0;
    for (size_t i = 0; i < n_v1; i++) {
        const kvpress_question *k = &kvpress[i];
        const lb_task *task = lb_task_find(k->task);
        cr_assert(task && task->family == LB_FAMILY_V1, "%s", k->task);
        lb_loader *l = open_samples(k->task);
        real += l != NULL;
        for (int n = 0; n < 3; n++) {
            lb_sample s = {0};
            kv_error err;
            bool owned = false;
            if (l) {
                int got = lb_loader_next(l, &s, &err);
                cr_assert_geq(got, 0, "%s", err.msg);
                if (got == 0)
                    break;
                owned = true;
            } else {
                s = made_sample(k);
            }
            /* whole and middle-truncated, under both protocols (nncf: chat everywhere) */
            for (int proto = 0; proto < 2; proto++)
                for (long max_length = 0; max_length <= 300; max_length += 300) {
                    lb_prompt_options o = {.protocol = proto ? LB_PROTOCOL_NNCF
                                                             : LB_PROTOCOL_LONGBENCH,
                                           .max_length = max_length};
                    truncated += check_split(t, task, k, &s, &o);
                    checked++;
                }
            if (owned)
                lb_sample_free(&s);
            if (!l)
                break;
        }
        lb_loader_close(l);
    }
    cr_log_info("%d prompts of 21 tasks (%d with shipped samples), %d truncated", checked, real,
                truncated);
    cr_assert_geq(real, 11, "the shipped samples cover most tasks");
    cr_assert_gt(truncated, 20);
    kv_tokenizer_free(t);
}

/* The E variants share their base task's cut; v2's question starts at "What
 * is the correct answer" (without context, the whole prompt is the
 * question); the synthetic tasks' question is their input. */
Test(prompt_split, every_task_has_a_cut_in_its_template)
{
    for (size_t i = 0; i < lb_n_tasks; i++) {
        const lb_task *task = &lb_tasks[i];
        size_t at = lb_task_question_at(task);
        cr_assert(task->question_from && strstr(task->prompt, task->question_from), "%s",
                  task->name);
        if (task->family == LB_FAMILY_E)
            cr_assert_eq(at, lb_task_question_at(lb_task_find(task->base)), "%s", task->name);
        if (task->family == LB_FAMILY_V2)
            cr_assert(strncmp(task->prompt + at, "What is the correct answer to this question: ",
                              45) == 0,
                      "%s", task->name);
        if (task->family == LB_FAMILY_SYNTHETIC)
            cr_assert_str_eq(task->prompt + at, "{input}");
    }
    cr_assert_eq(lb_task_question_at(lb_task_find("v2_no_context")), 0);
}

Test(prompt_split, v2_and_synthetic_samples_split_before_their_question)
{
    kv_tokenizer *t = qwen3();
    struct {
        const char *task, *file, *begins;
    } cases[] = {
        {"v2", "datasets/samples/longbench-v2/data.json",
         "What is the correct answer to this question: "},
        {"synth_passkey", "datasets/synthetic/synth_passkey.jsonl", "What is the pass key?"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *path = tu_source(cases[i].file);
        kv_error err;
        lb_loader_options lo = {.schema = i == 0 ? LB_SCHEMA_V2 : LB_SCHEMA_V1};
        lb_loader *l = lb_loader_open(path, &lo, &err);
        cr_assert(l, "%s", err.msg);
        lb_sample s;
        cr_assert_eq(lb_loader_next(l, &s, &err), 1, "%s", err.msg);
        lb_prompt p;
        lb_prompt_options o = {.protocol = LB_PROTOCOL_LONGBENCH, .max_length = 2000};
        cr_assert_eq(lb_prompt_build(lb_task_find(cases[i].task), &s, t, &o, &p, &err), 0, "%s",
                     err.msg);
        char *q = kv_tokenizer_decode(t, p.ids + p.n_context, p.n_ids - p.n_context, false);
        cr_assert(strncmp(q, cases[i].begins, strlen(cases[i].begins)) == 0, "%s: \"%.60s\"",
                  cases[i].task, q);
        free(q);
        lb_prompt_free(&p);
        lb_sample_free(&s);
        lb_loader_close(l);
        free(path);
    }
    kv_tokenizer_free(t);
}
