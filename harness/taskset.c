#include "taskset.h"

#include <string.h>

/* Stand-in for the datasets registry: LONGBENCH.md §1.1, in its order. */
typedef struct task_row {
    const char *name;
    const char *category;
    bool en16;
    bool has_e; /* part of LongBench-E */
} task_row;

static const task_row tasks[] = {
    {"narrativeqa", "Single-Doc QA", true, false},
    {"qasper", "Single-Doc QA", true, true},
    {"multifieldqa_en", "Single-Doc QA", true, true},
    {"multifieldqa_zh", "Single-Doc QA", false, false},
    {"hotpotqa", "Multi-Doc QA", true, true},
    {"2wikimqa", "Multi-Doc QA", true, true},
    {"musique", "Multi-Doc QA", true, false},
    {"dureader", "Multi-Doc QA", false, false},
    {"gov_report", "Summarization", true, true},
    {"qmsum", "Summarization", true, false},
    {"multi_news", "Summarization", true, true},
    {"vcsum", "Summarization", false, false},
    {"trec", "Few-shot", true, true},
    {"triviaqa", "Few-shot", true, true},
    {"samsum", "Few-shot", true, true},
    {"lsht", "Few-shot", false, false},
    {"passage_count", "Synthetic", true, true},
    {"passage_retrieval_en", "Synthetic", true, true},
    {"passage_retrieval_zh", "Synthetic", false, false},
    {"lcc", "Code", true, true},
    {"repobench-p", "Code", true, true},
};
enum { N_TASKS = sizeof tasks / sizeof tasks[0] };

const char *const kb_task_categories[] = {
    "Single-Doc QA", "Multi-Doc QA", "Summarization", "Few-shot", "Synthetic", "Code", NULL};

static const char *const group_en16[] = {"narrativeqa",
                                         "qasper",
                                         "multifieldqa_en",
                                         "hotpotqa",
                                         "2wikimqa",
                                         "musique",
                                         "gov_report",
                                         "qmsum",
                                         "multi_news",
                                         "trec",
                                         "triviaqa",
                                         "samsum",
                                         "passage_count",
                                         "passage_retrieval_en",
                                         "lcc",
                                         "repobench-p"};
static const char *const group_zh[] = {"multifieldqa_zh", "dureader", "vcsum", "lsht",
                                       "passage_retrieval_zh"};
static const char *const group_longbench[] = {"narrativeqa",
                                              "qasper",
                                              "multifieldqa_en",
                                              "multifieldqa_zh",
                                              "hotpotqa",
                                              "2wikimqa",
                                              "musique",
                                              "dureader",
                                              "gov_report",
                                              "qmsum",
                                              "multi_news",
                                              "vcsum",
                                              "trec",
                                              "triviaqa",
                                              "samsum",
                                              "lsht",
                                              "passage_count",
                                              "passage_retrieval_en",
                                              "passage_retrieval_zh",
                                              "lcc",
                                              "repobench-p"};
static const char *const group_longbench_e[] = {"qasper_e",
                                                "multifieldqa_en_e",
                                                "hotpotqa_e",
                                                "2wikimqa_e",
                                                "gov_report_e",
                                                "multi_news_e",
                                                "trec_e",
                                                "triviaqa_e",
                                                "samsum_e",
                                                "passage_count_e",
                                                "passage_retrieval_en_e",
                                                "lcc_e",
                                                "repobench-p_e"};

#define GROUP(NAME, ARR)                                                                           \
    {                                                                                              \
        NAME, ARR, sizeof ARR / sizeof ARR[0]                                                      \
    }
static const struct {
    const char *name;
    const char *const *tasks;
    size_t n;
} groups[] = {
    GROUP("en16", group_en16),
    GROUP("zh", group_zh),
    GROUP("longbench", group_longbench),
    GROUP("longbench_e", group_longbench_e),
};

/* The row of a task; "qasper_e" finds qasper's row when qasper is in LongBench-E. */
static const task_row *find(const char *name)
{
    size_t len = strlen(name);
    bool e = len > 2 && strcmp(name + len - 2, "_e") == 0;
    for (int i = 0; i < N_TASKS; i++) {
        if (strcmp(tasks[i].name, name) == 0)
            return &tasks[i];
        if (e && tasks[i].has_e && strlen(tasks[i].name) == len - 2 &&
            strncmp(tasks[i].name, name, len - 2) == 0)
            return &tasks[i];
    }
    return NULL;
}

bool kb_task_known(const char *name)
{
    return find(name) != NULL;
}

const char *const *kb_task_group(const char *name, size_t *n)
{
    for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++)
        if (strcmp(groups[i].name, name) == 0) {
            *n = groups[i].n;
            return groups[i].tasks;
        }
    return NULL;
}

const char *kb_task_category(const char *name)
{
    const task_row *t = find(name);
    return t ? t->category : "Other";
}

bool kb_task_in_en16(const char *name)
{
    const task_row *t = find(name);
    return t && t->en16 && strcmp(t->name, name) == 0;
}

int kb_task_order(const char *name)
{
    const task_row *t = find(name);
    if (!t)
        return N_TASKS * 2;
    /* a LongBench-E task sorts right after its base task */
    return (int)(t - tasks) * 2 + (strcmp(t->name, name) != 0);
}
