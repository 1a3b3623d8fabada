/* The task registry as data. Check it against LongBench (commit 2e00731f8d0b):
 *   templates  LongBench/config/dataset2prompt.json  (below, same order)
 *   max_gen    LongBench/config/dataset2maxlen.json
 *   metric     LongBench/eval.py dataset2metric
 *   chat       LongBench/pred.py: every task except trec triviaqa samsum lsht lcc repobench-p
 *   first_line LongBench/eval.py: trec triviaqa samsum lsht
 *   n          LongBench/task.md (LongBench-E: 0-4k + 4-8k + 8k+)
 * The templates are the JSON string literals of dataset2prompt.json, split
 * after each \n only so that they can be read; the escapes mean the same in C.
 *
 * "question from" is where the question part of a prompt starts: the first
 * place in the template where that text occurs. It is the cut of NVIDIA
 * kvpress's LongBench datasets (evaluation/benchmarks/longbench and
 * longbenchv2, create_huggingface_dataset.py: context_prefix, then
 * question_template + answer_prefix), so a query-agnostic config compresses
 * what kvpress compresses (docs/longbench.md, "Context and question").
 */
#include "longbench/tasks.h"

#include <string.h>

#include "longbench/usertask.h"

// clang-format off
static const char P_NARRATIVEQA[] =
    "You are given a story, which can be either a novel or a movie script, and a question. Answer the question asconcisely as you can, using a single phrase if possible. Do not provide any explanation.\n"
    "\n"
    "Story: {context}\n"
    "\n"
    "Now, answer the question based on the story asconcisely as you can, using a single phrase if possible. Do not provide any explanation.\n"
    "\n"
    "Question: {input}\n"
    "\n"
    "Answer:";

static const char P_QASPER[] =
    "You are given a scientific article and a question. Answer the question as concisely as you can, using a single phrase or sentence if possible. If the question cannot be answered based on the information in the article, write \"unanswerable\". If the question is a yes/no question, answer \"yes\", \"no\", or \"unanswerable\". Do not provide any explanation.\n"
    "\n"
    "Article: {context}\n"
    "\n"
    " Answer the question based on the above article as concisely as you can, using a single phrase or sentence if possible. If the question cannot be answered based on the information in the article, write \"unanswerable\". If the question is a yes/no question, answer \"yes\", \"no\", or \"unanswerable\". Do not provide any explanation.\n"
    "\n"
    "Question: {input}\n"
    "\n"
    "Answer:";

static const char P_MULTIFIELDQA_EN[] =
    "Read the following text and answer briefly.\n"
    "\n"
    "{context}\n"
    "\n"
    "Now, answer the following question based on the above text, only give me the answer and do not output any other words.\n"
    "\n"
    "Question: {input}\n"
    "Answer:";

static const char P_MULTIFIELDQA_ZH[] =
    "阅读以下文字并用中文简短回答：\n"
    "\n"
    "{context}\n"
    "\n"
    "现在请基于上面的文章回答下面的问题，只告诉我答案，不要输出任何其他字词。\n"
    "\n"
    "问题：{input}\n"
    "回答：";

static const char P_HOTPOTQA[] =
    "Answer the question based on the given passages. Only give me the answer and do not output any other words.\n"
    "\n"
    "The following are given passages.\n"
    "{context}\n"
    "\n"
    "Answer the question based on the given passages. Only give me the answer and do not output any other words.\n"
    "\n"
    "Question: {input}\n"
    "Answer:";

static const char P_2WIKIMQA[] =
    "Answer the question based on the given passages. Only give me the answer and do not output any other words.\n"
    "\n"
    "The following are given passages.\n"
    "{context}\n"
    "\n"
    "Answer the question based on the given passages. Only give me the answer and do not output any other words.\n"
    "\n"
    "Question: {input}\n"
    "Answer:";

static const char P_MUSIQUE[] =
    "Answer the question based on the given passages. Only give me the answer and do not output any other words.\n"
    "\n"
    "The following are given passages.\n"
    "{context}\n"
    "\n"
    "Answer the question based on the given passages. Only give me the answer and do not output any other words.\n"
    "\n"
    "Question: {input}\n"
    "Answer:";

static const char P_DUREADER[] =
    "请基于给定的文章回答下述问题。\n"
    "\n"
    "文章：{context}\n"
    "\n"
    "请基于上述文章回答下面的问题。\n"
    "\n"
    "问题：{input}\n"
    "回答：";

static const char P_GOV_REPORT[] =
    "You are given a report by a government agency. Write a one-page summary of the report.\n"
    "\n"
    "Report:\n"
    "{context}\n"
    "\n"
    "Now, write a one-page summary of the report.\n"
    "\n"
    "Summary:";

static const char P_QMSUM[] =
    "You are given a meeting transcript and a query containing a question or instruction. Answer the query in one or more sentences.\n"
    "\n"
    "Transcript:\n"
    "{context}\n"
    "\n"
    "Now, answer the query based on the above meeting transcript in one or more sentences.\n"
    "\n"
    "Query: {input}\n"
    "Answer:";

static const char P_MULTI_NEWS[] =
    "You are given several news passages. Write a one-page summary of all news. \n"
    "\n"
    "News:\n"
    "{context}\n"
    "\n"
    "Now, write a one-page summary of all the news.\n"
    "\n"
    "Summary:";

static const char P_VCSUM[] =
    "下面有一段会议记录，请你阅读后，写一段总结，总结会议的内容。\n"
    "会议记录：\n"
    "{context}\n"
    "\n"
    "会议总结：";

static const char P_TREC[] =
    "Please determine the type of the question below. Here are some examples of questions.\n"
    "\n"
    "{context}\n"
    "{input}";

static const char P_TRIVIAQA[] =
    "Answer the question based on the given passage. Only give me the answer and do not output any other words. The following are some examples.\n"
    "\n"
    "{context}\n"
    "\n"
    "{input}";

static const char P_SAMSUM[] =
    "Summarize the dialogue into a few short sentences. The following are some examples.\n"
    "\n"
    "{context}\n"
    "\n"
    "{input}";

static const char P_LSHT[] =
    "请判断给定新闻的类别，下面是一些例子。\n"
    "\n"
    "{context}\n"
    "{input}";

static const char P_PASSAGE_COUNT[] =
    "There are some paragraphs below sourced from Wikipedia. Some of them may be duplicates. Please carefully read these paragraphs and determine how many unique paragraphs there are after removing duplicates. In other words, how many non-repeating paragraphs are there in total?\n"
    "\n"
    "{context}\n"
    "\n"
    "Please enter the final count of unique paragraphs after removing duplicates. The output format should only contain the number, such as 1, 2, 3, and so on.\n"
    "\n"
    "The final answer is: ";

static const char P_PASSAGE_RETRIEVAL_EN[] =
    "Here are 30 paragraphs from Wikipedia, along with an abstract. Please determine which paragraph the abstract is from.\n"
    "\n"
    "{context}\n"
    "\n"
    "The following is an abstract.\n"
    "\n"
    "{input}\n"
    "\n"
    "Please enter the number of the paragraph that the abstract is from. The answer format must be like \"Paragraph 1\", \"Paragraph 2\", etc.\n"
    "\n"
    "The answer is: ";

static const char P_PASSAGE_RETRIEVAL_ZH[] =
    "以下是若干段落文字，以及其中一个段落的摘要。请确定给定的摘要出自哪一段。\n"
    "\n"
    "{context}\n"
    "\n"
    "下面是一个摘要\n"
    "\n"
    "{input}\n"
    "\n"
    "请输入摘要所属段落的编号。答案格式必须是\"段落1\"，\"段落2\"等格式\n"
    "\n"
    "答案是：";

static const char P_LCC[] =
    "Please complete the code given below. \n"
    "{context}Next line of code:\n";

static const char P_REPOBENCH_P[] =
    "Please complete the code given below. \n"
    "{context}{input}Next line of code:\n";

/* LongBench v2 (root prompts/0shot*.txt of the same commit): $DOC$, $Q$, $C_A$..$C_D$
 * and $COT$ are replaced by the stripped fields. */
static const char V2_0SHOT[] =
    "Please read the following text and answer the question below.\n"
    "\n"
    "<text>\n"
    "$DOC$\n"
    "</text>\n"
    "\n"
    "What is the correct answer to this question: $Q$\n"
    "Choices:\n"
    "(A) $C_A$\n"
    "(B) $C_B$\n"
    "(C) $C_C$\n"
    "(D) $C_D$\n"
    "\n"
    "Format your response as follows: \"The correct answer is (insert answer here)\".";

static const char V2_0SHOT_COT[] =
    "Please read the following text and answer the questions below.\n"
    "\n"
    "<text>\n"
    "$DOC$\n"
    "</text>\n"
    "\n"
    "What is the correct answer to this question: $Q$\n"
    "Choices:\n"
    "(A) $C_A$\n"
    "(B) $C_B$\n"
    "(C) $C_C$\n"
    "(D) $C_D$\n"
    "\n"
    "Let’s think step by step:";

static const char V2_0SHOT_COT_ANS[] =
    "Please read the following text and answer the questions below.\n"
    "\n"
    "The text is too long and omitted here.\n"
    "\n"
    "What is the correct answer to this question: $Q$\n"
    "Choices:\n"
    "(A) $C_A$\n"
    "(B) $C_B$\n"
    "(C) $C_C$\n"
    "(D) $C_D$\n"
    "\n"
    "Let’s think step by step: $COT$\n"
    "\n"
    "Based on the above, what is the single, most likely answer choice? Format your response as follows: \"The correct answer is (insert answer here)\".";

static const char V2_0SHOT_NO_CONTEXT[] =
    "What is the correct answer to this question: $Q$\n"
    "Choices:\n"
    "(A) $C_A$\n"
    "(B) $C_B$\n"
    "(C) $C_C$\n"
    "(D) $C_D$\n"
    "\n"
    "What is the single, most likely answer choice? Format your response as follows: \"The correct answer is (insert answer here)\".";

static const char V2_0SHOT_RAG[] =
    "Please read the following retrieved text chunks and answer the question below.\n"
    "\n"
    "<text>\n"
    "$DOC$\n"
    "</text>\n"
    "\n"
    "What is the correct answer to this question: $Q$\n"
    "Choices:\n"
    "(A) $C_A$\n"
    "(B) $C_B$\n"
    "(C) $C_C$\n"
    "(D) $C_D$\n"
    "\n"
    "Format your response as follows: \"The correct answer is (insert answer here)\".";

/* kvbench's synthetic retrieval tasks (datasets/synthetic/, written by
 * tools/synth/synth.py; templates as tools/synth/README.md states them).
 * `input` ends with the answer's lead-in ("The pass key is ", "key: ",
 * "... ["), so the first generated token is the answer itself. */
static const char S_PASSKEY[] =
    "There is a pass key hidden in the text below. Find it and remember it.\n\n{context}\n\n{input}";
static const char S_KV[] =
    "Below is a list of keys and their values. Remember the value of every key.\n\n"
    "{context}\n\n{input}";
static const char S_PASSAGE[] =
    "Below are numbered paragraphs. Each one ends with its number in brackets.\n\n"
    "{context}\n\n{input}";

/* v2: kvpress's context ends before the question and its choices (without
 * context, the whole prompt is the question). */
#define V2_CUT "What is the correct answer to this question:"

#define V1 LB_FAMILY_V1
#define E  LB_FAMILY_E
#define V2 LB_FAMILY_V2
#define SY LB_FAMILY_SYNTHETIC
#define BR LB_TEMPLATE_BRACES
#define DL LB_TEMPLATE_DOLLARS

const lb_task lb_tasks[] = {
/*  name                    base                    family category         metric                max_gen lang   chat   first  \n-stop  n    kind template  question from */
    {"narrativeqa",          "narrativeqa",          V1, "single-doc QA",  "qa_f1_score",          128, "en",   true,  false, false, 200, BR, P_NARRATIVEQA, "Question: {input}"},
    {"qasper",               "qasper",               V1, "single-doc QA",  "qa_f1_score",          128, "en",   true,  false, false, 200, BR, P_QASPER, "Question: {input}"},
    {"multifieldqa_en",      "multifieldqa_en",      V1, "single-doc QA",  "qa_f1_score",           64, "en",   true,  false, false, 150, BR, P_MULTIFIELDQA_EN, "Question: {input}"},
    {"multifieldqa_zh",      "multifieldqa_zh",      V1, "single-doc QA",  "qa_f1_zh_score",        64, "zh",   true,  false, false, 200, BR, P_MULTIFIELDQA_ZH, "问题：{input}"},
    {"hotpotqa",             "hotpotqa",             V1, "multi-doc QA",   "qa_f1_score",           32, "en",   true,  false, false, 200, BR, P_HOTPOTQA, "Question: {input}"},
    {"2wikimqa",             "2wikimqa",             V1, "multi-doc QA",   "qa_f1_score",           32, "en",   true,  false, false, 200, BR, P_2WIKIMQA, "Question: {input}"},
    {"musique",              "musique",              V1, "multi-doc QA",   "qa_f1_score",           32, "en",   true,  false, false, 200, BR, P_MUSIQUE, "Question: {input}"},
    {"dureader",             "dureader",             V1, "multi-doc QA",   "rouge_zh_score",       128, "zh",   true,  false, false, 200, BR, P_DUREADER, "问题：{input}"},
    {"gov_report",           "gov_report",           V1, "summarization",  "rouge_score",          512, "en",   true,  false, false, 200, BR, P_GOV_REPORT, "Now, write"},
    {"qmsum",                "qmsum",                V1, "summarization",  "rouge_score",          512, "en",   true,  false, false, 200, BR, P_QMSUM, "Query: {input}"},
    {"multi_news",           "multi_news",           V1, "summarization",  "rouge_score",          512, "en",   true,  false, false, 200, BR, P_MULTI_NEWS, "Now, write"},
    {"vcsum",                "vcsum",                V1, "summarization",  "rouge_zh_score",       512, "zh",   true,  false, false, 200, BR, P_VCSUM, "会议总结："},
    {"trec",                 "trec",                 V1, "few-shot",       "classification_score",  64, "en",   false, true,  false, 200, BR, P_TREC, "{input}"},
    {"triviaqa",             "triviaqa",             V1, "few-shot",       "qa_f1_score",           32, "en",   false, true,  false, 200, BR, P_TRIVIAQA, "{input}"},
    {"samsum",               "samsum",               V1, "few-shot",       "rouge_score",          128, "en",   false, true,  true,  200, BR, P_SAMSUM, "{input}"},
    {"lsht",                 "lsht",                 V1, "few-shot",       "classification_score",  64, "zh",   false, true,  false, 200, BR, P_LSHT, "{input}"},
    {"passage_count",        "passage_count",        V1, "synthetic",      "count_score",           32, "en",   true,  false, false, 200, BR, P_PASSAGE_COUNT, "Please enter"},
    {"passage_retrieval_en", "passage_retrieval_en", V1, "synthetic",      "retrieval_score",       32, "en",   true,  false, false, 200, BR, P_PASSAGE_RETRIEVAL_EN, "{input}"},
    {"passage_retrieval_zh", "passage_retrieval_zh", V1, "synthetic",      "retrieval_zh_score",    32, "zh",   true,  false, false, 200, BR, P_PASSAGE_RETRIEVAL_ZH, "{input}"},
    {"lcc",                  "lcc",                  V1, "code",           "code_sim_score",        64, "code", false, false, false, 500, BR, P_LCC, "Next line of code"},
    {"repobench-p",          "repobench-p",          V1, "code",           "code_sim_score",        64, "code", false, false, false, 500, BR, P_REPOBENCH_P, "{input}"},

    {"qasper_e",             "qasper",               E,  "single-doc QA",  "qa_f1_score",          128, "en",   true,  false, false, 224, BR, P_QASPER, "Question: {input}"},
    {"multifieldqa_en_e",    "multifieldqa_en",      E,  "single-doc QA",  "qa_f1_score",           64, "en",   true,  false, false, 150, BR, P_MULTIFIELDQA_EN, "Question: {input}"},
    {"hotpotqa_e",           "hotpotqa",             E,  "multi-doc QA",   "qa_f1_score",           32, "en",   true,  false, false, 300, BR, P_HOTPOTQA, "Question: {input}"},
    {"2wikimqa_e",           "2wikimqa",             E,  "multi-doc QA",   "qa_f1_score",           32, "en",   true,  false, false, 300, BR, P_2WIKIMQA, "Question: {input}"},
    {"gov_report_e",         "gov_report",           E,  "summarization",  "rouge_score",          512, "en",   true,  false, false, 300, BR, P_GOV_REPORT, "Now, write"},
    {"multi_news_e",         "multi_news",           E,  "summarization",  "rouge_score",          512, "en",   true,  false, false, 294, BR, P_MULTI_NEWS, "Now, write"},
    {"trec_e",               "trec",                 E,  "few-shot",       "classification_score",  64, "en",   false, true,  false, 300, BR, P_TREC, "{input}"},
    {"triviaqa_e",           "triviaqa",             E,  "few-shot",       "qa_f1_score",           32, "en",   false, true,  false, 300, BR, P_TRIVIAQA, "{input}"},
    {"samsum_e",             "samsum",               E,  "few-shot",       "rouge_score",          128, "en",   false, true,  true,  300, BR, P_SAMSUM, "{input}"},
    {"passage_count_e",      "passage_count",        E,  "synthetic",      "count_score",           32, "en",   true,  false, false, 300, BR, P_PASSAGE_COUNT, "Please enter"},
    {"passage_retrieval_en_e","passage_retrieval_en",E,  "synthetic",      "retrieval_score",       32, "en",   true,  false, false, 300, BR, P_PASSAGE_RETRIEVAL_EN, "{input}"},
    {"lcc_e",                "lcc",                  E,  "code",           "code_sim_score",        64, "code", false, false, false, 300, BR, P_LCC, "Next line of code"},
    {"repobench-p_e",        "repobench-p",          E,  "code",           "code_sim_score",        64, "code", false, false, false, 300, BR, P_REPOBENCH_P, "{input}"},

    /* v2: official runs go through a chat API; 128 new tokens, 1024 for the CoT step. */
    {"v2",                   "v2",                   V2, "multiple choice", "accuracy",            128, "en",   true,  false, false, 503, DL, V2_0SHOT, V2_CUT},
    {"v2_cot",               "v2",                   V2, "multiple choice", "accuracy",           1024, "en",   true,  false, false, 503, DL, V2_0SHOT_COT, V2_CUT},
    {"v2_cot_ans",           "v2",                   V2, "multiple choice", "accuracy",            128, "en",   true,  false, false, 503, DL, V2_0SHOT_COT_ANS, V2_CUT},
    {"v2_no_context",        "v2",                   V2, "multiple choice", "accuracy",            128, "en",   true,  false, false, 503, DL, V2_0SHOT_NO_CONTEXT, V2_CUT},
    {"v2_rag",               "v2",                   V2, "multiple choice", "accuracy",            128, "en",   true,  false, false, 503, DL, V2_0SHOT_RAG, V2_CUT},

    /* Synthetic (issue 10): metrics are LongBench's own. passkey: the number in the
     * answer (count_score extracts numbers); passage variant: "Paragraph N". */
    {"synth_passkey",        "synth_passkey",        SY, "retrieval",      "count_score",            8, "en",   false, false, false,  90, BR, S_PASSKEY, "{input}"},
    {"synth_kv",             "synth_kv",             SY, "retrieval",      "count_score",            8, "en",   false, false, false,  90, BR, S_KV, "{input}"},
    {"synth_passage",        "synth_passage",        SY, "retrieval",      "retrieval_score",        6, "en",   false, false, false,  90, BR, S_PASSAGE, "{input}"},
};
// clang-format on

const size_t lb_n_tasks = sizeof lb_tasks / sizeof lb_tasks[0];

const lb_task *lb_task_find(const char *name)
{
    for (size_t i = 0; i < lb_n_tasks; i++)
        if (strcmp(lb_tasks[i].name, name) == 0)
            return &lb_tasks[i];
    return lb_user_task_find(name);
}

size_t lb_task_question_at(const lb_task *task)
{
    const char *at = task->question_from ? strstr(task->prompt, task->question_from) : NULL;
    if (at)
        return (size_t)(at - task->prompt);
    /* a template without a cut of its own: everything after the context */
    const char *ctx = task->template_kind == LB_TEMPLATE_DOLLARS ? "$DOC$" : "{context}";
    at = strstr(task->prompt, ctx);
    return at ? (size_t)(at - task->prompt) + strlen(ctx) : 0;
}

const lb_task *lb_tasks_of(lb_family family, size_t *n)
{
    /* Families are contiguous in the table. */
    const lb_task *first = NULL;
    *n = 0;
    for (size_t i = 0; i < lb_n_tasks; i++) {
        if (lb_tasks[i].family != family)
            continue;
        if (!first)
            first = &lb_tasks[i];
        (*n)++;
    }
    return first;
}

const char *lb_family_name(lb_family family)
{
    switch (family) {
    case LB_FAMILY_V1:
        return "longbench";
    case LB_FAMILY_E:
        return "longbench-e";
    case LB_FAMILY_V2:
        return "longbench-v2";
    case LB_FAMILY_SYNTHETIC:
        return "synthetic";
    case LB_FAMILY_USER:
        return "user";
    }
    return "?";
}

bool lb_task_is_english16(const lb_task *task)
{
    return task->family == LB_FAMILY_V1 && strcmp(task->language, "zh") != 0;
}
