/* LongBench's metrics: the conformance cases scored by LongBench's own
 * eval.py (tests/data/longbench), and the quirks of its metrics.py (see
 * docs/longbench.md) on hand-made inputs. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "score/jieba.h"
#include "score/metrics.h"
#include "score/score.h"
#include "support/testutil.h"

static kb_jieba *jieba;
static kb_metrics *metrics;

static void setup(void)
{
    kv_error err;
    cr_assert_eq(kb_metrics_new(NULL, &metrics, &err), 0, "%s", err.msg);
}

/* Loads jieba's data (only the tests that need it pay for the load) and
 * gives `metrics` access to it; false when the data is absent. */
static bool with_jieba(void)
{
    kv_error err;
    if (kb_jieba_load(NULL, &jieba, &err) < 0)
        return false;
    kb_metrics_free(metrics);
    cr_assert_eq(kb_metrics_new(jieba, &metrics, &err), 0, "%s", err.msg);
    return true;
}

static void teardown(void)
{
    kb_metrics_free(metrics);
    kb_jieba_free(jieba);
}

TestSuite(metrics, .init = setup, .fini = teardown);

static double score(kb_metric metric, const char *pred, const char *gt)
{
    double s;
    kv_error err;
    cr_assert_eq(kb_metric_score(metrics, metric, kv_str_c(pred), kv_str_c(gt), NULL, &s, &err), 0,
                 "%s", err.msg);
    return s;
}

static double task(const char *dataset, const char *pred, const char *gt)
{
    double s;
    kv_error err;
    kv_str answers[] = {kv_str_c(gt)};
    cr_assert_eq(kb_score_prediction(metrics, dataset, kv_str_c(pred), answers, 1, NULL, &s, &err),
                 0, "%s", err.msg);
    return s;
}

/* ---- the conformance cases -------------------------------------------------- */

static kv_str *strings(const cJSON *arr, size_t *n)
{
    *n = 0;
    if (!cJSON_IsArray(arr))
        return NULL;
    kv_str *v = calloc((size_t)cJSON_GetArraySize(arr) + 1, sizeof *v);
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) v[(*n)++] = kv_str_c(it->valuestring);
    return v;
}

Test(metrics, conformance_cases_score_exactly_as_eval_py)
{
    char *cases_path = tu_data("longbench/cases.jsonl");
    char *ref_path = tu_data("longbench/cases_ref.jsonl");
    with_jieba();
    char *cases = tu_slurp(cases_path, NULL), *refs = tu_slurp(ref_path, NULL);
    char *save1, *save2;
    char *c = strtok_r(cases, "\n", &save1), *r = strtok_r(refs, "\n", &save2);
    int checked = 0, skipped_zh = 0, wrong = 0;
    for (; c && r; c = strtok_r(NULL, "\n", &save1), r = strtok_r(NULL, "\n", &save2)) {
        cJSON *cj = cJSON_Parse(c), *rj = cJSON_Parse(r);
        cr_assert(cj && rj);
        const char *id = cJSON_GetObjectItem(cj, "id")->valuestring;
        cr_assert_str_eq(id, cJSON_GetObjectItem(rj, "id")->valuestring, "files out of step");
        const char *dataset = cJSON_GetObjectItem(cj, "dataset")->valuestring;
        kb_metric metric;
        bool first;
        cr_assert_eq(kb_task_metric(dataset, &metric, &first), 0, "%s", dataset);
        if (kb_metric_needs_jieba(metric) && !jieba) {
            skipped_zh++;
        } else {
            size_t na, nc;
            kv_str *answers = strings(cJSON_GetObjectItem(cj, "answers"), &na);
            kv_str *classes = strings(cJSON_GetObjectItem(cj, "all_classes"), &nc);
            kb_classes cls = {classes, nc};
            double s;
            kv_error err;
            int rc = kb_score_prediction(
                metrics, dataset, kv_str_c(cJSON_GetObjectItem(cj, "prediction")->valuestring),
                answers, na, classes ? &cls : NULL, &s, &err);
            cr_expect_eq(rc, 0, "%s: %s", id, err.msg);
            char got[64], want[64];
            snprintf(got, sizeof got, "%.17g", s);
            snprintf(want, sizeof want, "%.17g", cJSON_GetObjectItem(rj, "score")->valuedouble);
            if (strcmp(got, want) != 0) {
                wrong++;
                cr_log_error("%s (%s): got %s, eval.py %s", id, dataset, got, want);
            }
            free(answers);
            free(classes);
            checked++;
        }
        cJSON_Delete(cj);
        cJSON_Delete(rj);
    }
    cr_assert(!c && !r, "cases.jsonl and cases_ref.jsonl differ in length");
    cr_expect_eq(wrong, 0, "%d of %d cases differ from eval.py", wrong, checked);
    cr_expect_gt(checked, 700);
    if (skipped_zh)
        cr_log_warn("%d Chinese cases not checked: jieba's data is absent "
                    "(apt-get install python3-jieba)",
                    skipped_zh);
    free(cases);
    free(refs);
    free(cases_path);
    free(ref_path);
}

/* ---- qa_f1_score -------------------------------------------------------------- */

Test(metrics, qa_f1_is_token_multiset_f1_after_normalisation)
{
    /* p = 2/4, r = 2/2: f1 = (2 * 0.5 * 1) / 1.5 */
    cr_expect_eq(score(KB_QA_F1, "cat dog bird fish", "cat dog"), (2 * 0.5 * 1.0) / 1.5);
    cr_expect_eq(score(KB_QA_F1, "The Cat!", "cat"), 1.0); /* case, punctuation, article */
    cr_expect_eq(score(KB_QA_F1, "cat cat", "cat"), (2 * 0.5 * 1.0) / 1.5); /* multiset */
    cr_expect_eq(score(KB_QA_F1, "the a an", "the"), 0.0);                  /* nothing left: 0 */
}

Test(metrics, qa_f1_articles_need_word_boundaries)
{
    cr_expect_eq(score(KB_QA_F1, "the1", "the1"), 1.0);            /* "the1" is one word */
    cr_expect_eq(score(KB_QA_F1, "the\xc2\xb2", "\xc2\xb2"), 0.0); /* ² is \w: kept */
    /* U+00B7 is not \w, so "the" before it is an article and goes */
    cr_expect_eq(score(KB_QA_F1, "the\xc2\xb7x", "\xc2\xb7x"), 1.0);
    /* curly quotes are not string.punctuation, and not \w */
    cr_expect_eq(score(KB_QA_F1, "the\xe2\x80\x99s", "\xe2\x80\x99s"), 1.0);
}

Test(metrics, qa_f1_lowercases_like_python)
{
    cr_expect_eq(score(KB_QA_F1, "\xc4\xb0", "i\xcc\x87"), 1.0); /* İ -> i + U+0307 */
    /* Final sigma: ΟΔΟΣ -> οδος (ς), a lone Σ -> σ */
    cr_expect_eq(
        score(KB_QA_F1, "\xce\x9f\xce\x94\xce\x9f\xce\xa3", "\xce\xbf\xce\xb4\xce\xbf\xcf\x82"),
        1.0);
    cr_expect_eq(score(KB_QA_F1, "\xce\xa3", "\xcf\x83"), 1.0);
    cr_expect_eq(score(KB_QA_F1, "caf\xc3\xa9", "cafe\xcc\x81"), 0.0); /* no normalisation */
    cr_expect_eq(score(KB_QA_F1,
                       "a\xe2\x80\x8b"
                       "b",
                       "a b"),
                 0.0);                                           /* U+200B is not space */
    cr_expect_eq(score(KB_QA_F1, "x\xe3\x80\x80y", "x y"), 1.0); /* U+3000 is */
}

/* ---- rouge_score ------------------------------------------------------------ */

Test(metrics, rouge_identical_text_scores_below_one)
{
    /* r = p = 1: 2 * (1 / (2 + 1e-8)) */
    cr_expect_eq(score(KB_ROUGE, "the cat sat", "the cat sat"),
                 2.0 * ((1.0 * 1.0) / (1.0 + 1.0 + 1e-8)));
}

Test(metrics, rouge_lcs_backtrack_tie_rule)
{
    /* rouge 1.0.1's backtrack tie rule: pred "b a c", gt "a b. b c" -> llcs 2 */
    cr_expect_eq(score(KB_ROUGE, "b a c", "a b. b c"), strtod("0.6666666616666668", NULL));
}

Test(metrics, rouge_empty_or_dots_only_is_zero)
{
    cr_expect_eq(score(KB_ROUGE, "", "the cat"), 0.0);
    cr_expect_eq(score(KB_ROUGE, "the cat", "..."), 0.0);
    /* a whitespace-only sentence is one empty word: "" vs "x" shares nothing */
    cr_expect_eq(score(KB_ROUGE, " ", "x"), 0.0);
    cr_expect_gt(score(KB_ROUGE, " ", " \t"), 0.99);
}

static char *words(int n, const char *sep)
{
    size_t cap = (size_t)n * 8 + 16, len = 0;
    char *s = malloc(cap);
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(s + len, cap - len, "%sw%d", i ? sep : "", i);
    return s;
}

Test(metrics, rouge_recursion_limit_zeroes_long_sentences)
{
    /* Python's recursion limit: identical one-sentence texts of L unique words
     * pass up to L = 990 under rouge_score, 989 under rouge_zh_score. */
    for (int L = 985; L <= 995; L++) {
        char *s = words(L, " ");
        double r = kb_rouge_l(metrics, s, s, 9), z = kb_rouge_l(metrics, s, s, 10);
        cr_expect_eq(r > 0, L <= 990, "rouge L=%d: %g", L, r);
        cr_expect_eq(z > 0, L <= 989, "rouge_zh L=%d: %g", L, z);
        free(s);
    }
    /* Split into sentences by '.', the same words are fine. */
    char *s = words(2000, ". ");
    cr_expect_gt(kb_rouge_l(metrics, s, s, 9), 0.99);
    free(s);
}

/* ---- classification_score ------------------------------------------------------ */

Test(metrics, classification_keeps_pythons_list_removal_skip)
{
    kv_str names[] = {kv_str_c("a"), kv_str_c("b"), kv_str_c("ab")};
    kb_classes cls = {names, 3};
    double s;
    kv_error err;
    /* L = [a, b, ab]; removing "a" shifts "b" under the cursor, which moves on:
     * "b" survives, L = [b, ab], score 1/2 (1 without the skip). */
    cr_assert_eq(
        kb_metric_score(metrics, KB_CLASSIFICATION, kv_str_c("ab"), kv_str_c("ab"), &cls, &s, &err),
        0);
    cr_expect_eq(s, 0.5);
    cr_assert_eq(
        kb_metric_score(metrics, KB_CLASSIFICATION, kv_str_c("b"), kv_str_c("ab"), &cls, &s, &err),
        0);
    cr_expect_eq(s, 0.0); /* the answer is not mentioned */
    cr_expect_lt(
        kb_metric_score(metrics, KB_CLASSIFICATION, kv_str_c("b"), kv_str_c("b"), NULL, &s, &err),
        0);
}

/* ---- retrieval_score, count_score ---------------------------------------------- */

Test(metrics, retrieval_and_count_compare_digit_strings)
{
    cr_expect_eq(score(KB_RETRIEVAL, "Paragraph 3 and Paragraph 5", "Paragraph 3"), 0.5);
    cr_expect_eq(score(KB_RETRIEVAL, "no number", "Paragraph 3"), 0.0);
    cr_expect_eq(score(KB_COUNT, "07", "7"), 0.0); /* strings, not numbers */
    /* Full-width digits are \d but not equal to ASCII ones */
    cr_expect_eq(score(KB_RETRIEVAL_ZH, "\xe6\xae\xb5\xe8\x90\xbd\xef\xbc\x91\xef\xbc\x92",
                       "\xe6\xae\xb5\xe8\x90\xbd"
                       "12"),
                 0.0);
    cr_expect_eq(score(KB_COUNT, "\xd9\xa1\xd9\xa2 and 12", "12"), 0.5); /* ١٢ is one number */
    double s;
    kv_error err;
    cr_expect_lt(kb_metric_score(metrics, KB_RETRIEVAL, kv_str_c("1"), kv_str_c("no paragraph"),
                                 NULL, &s, &err),
                 0);
    cr_expect(strstr(err.msg, "Paragraph N"));
}

/* ---- code_sim_score -------------------------------------------------------------- */

Test(metrics, code_sim_rounds_half_to_even)
{
    /* one common character of 16: 100 * 2/16 = 12.5 -> 12; three: 37.5 -> 38 */
    cr_expect_eq(kb_fuzz_ratio(metrics, "abcdefgh", "hijklmno"), 12);
    cr_expect_eq(kb_fuzz_ratio(metrics, "abcdefgh", "abcijklm"), 38);
    cr_expect_eq(score(KB_CODE_SIM, "abcdefgh", "hijklmno"), 12 / 100.0);
}

Test(metrics, code_sim_equality_before_emptiness)
{
    cr_expect_eq(score(KB_CODE_SIM, "", ""), 1.0);
    cr_expect_eq(score(KB_CODE_SIM, "x", ""), 0.0);
    /* the first line without ` # // is scored, indentation and \r kept */
    cr_expect_eq(score(KB_CODE_SIM, "\n# c\n// d\n  x = 1\r\ny", "  x = 1\r"), 1.0);
    cr_expect_eq(score(KB_CODE_SIM, "```\n#", "x"), 0.0);
}

Test(metrics, difflib_autojunk_drops_popular_characters)
{
    /* b of 200 'a': 'a' is popular (> 200//100 + 1 times) and leaves the
     * index, so "xaa" finds no match; 199 'a' are below the autojunk size. */
    char b[201];
    memset(b, 'a', 200);
    b[200] = '\0';
    cr_expect_eq(kb_difflib_ratio(metrics, "xaa", b), 0.0);
    b[199] = '\0';
    cr_expect_eq(kb_difflib_ratio(metrics, "xaa", b), 2.0 * 2 / 202);
    /* a match found elsewhere grows through popular characters */
    memset(b, 'a', 200);
    b[100] = 'y';
    cr_expect_eq(kb_difflib_ratio(metrics, "aya", b), 2.0 * 3 / 203);
}

/* ---- the Chinese metrics ------------------------------------------------------ */

static void expect_cut(const char *text, const char *want)
{
    kb_spans sp = {0};
    cr_assert_eq(kb_jieba_cut(jieba, text, strlen(text), &sp), 0);
    char got[512] = "";
    size_t len = 0;
    for (size_t i = 0; i < sp.n; i++)
        len += (size_t)snprintf(got + len, sizeof got - len, "%s%.*s", i ? "|" : "",
                                (int)sp.v[i].len, text + sp.v[i].off);
    cr_expect_str_eq(got, want);
    kb_spans_free(&sp);
}

Test(metrics, jieba_segments_like_jieba)
{
    cr_assert(with_jieba(), "jieba's data is absent (apt-get install python3-jieba)");
    /* what Debian's python3-jieba 0.42.1 gives for these (jieba.cut, HMM on) */
    expect_cut("iPhone 15 Pro的价格是7999元", "iPhone| |15| |Pro|的|价格|是|7999|元");
    expect_cut("3.5%的增长", "3.5%|的|增长");
    expect_cut("e-mail地址", "e|-|mail|地址");
    expect_cut("café北京", "caf|é|北京");
    expect_cut("他来到了网易杭研大厦", "他|来到|了|网易|杭研|大厦"); /* 杭研: HMM */
    expect_cut("a\r\nb", "a|\r\n|b");
}

/* 1,500 random mixed strings segmented by jieba 0.42.1 itself
 * (tests/tools/make_jieba_cases.py). */
Test(metrics, jieba_matches_python_jieba_on_random_text)
{
    cr_assert(with_jieba(), "jieba's data is absent (apt-get install python3-jieba)");
    char *path = tu_source("tests/data/scorers/jieba_cases.jsonl");
    char *text = tu_slurp(path, NULL), *save;
    int lines = 0, wrong = 0;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        cJSON *o = cJSON_Parse(line);
        cr_assert(o);
        const char *s = cJSON_GetObjectItem(o, "text")->valuestring;
        const cJSON *want = cJSON_GetObjectItem(o, "tokens");
        kb_spans sp = {0};
        cr_assert_eq(kb_jieba_cut(jieba, s, strlen(s), &sp), 0);
        bool same = sp.n == (size_t)cJSON_GetArraySize(want);
        for (size_t i = 0; same && i < sp.n; i++) {
            const char *w = cJSON_GetArrayItem(want, (int)i)->valuestring;
            same = strlen(w) == sp.v[i].len && memcmp(w, s + sp.v[i].off, sp.v[i].len) == 0;
        }
        if (!same && wrong++ < 5)
            cr_log_error("segmentation differs from jieba's for: %s", s);
        kb_spans_free(&sp);
        cJSON_Delete(o);
        lines++;
    }
    cr_expect_eq(lines, 1500);
    cr_expect_eq(wrong, 0, "%d of %d strings segmented differently", wrong, lines);
    free(text);
    free(path);
}

Test(metrics, chinese_metrics_refuse_without_jieba)
{
    kb_metrics *bare;
    kv_error err;
    double s;
    cr_assert_eq(kb_metrics_new(NULL, &bare, &err), 0);
    cr_expect_lt(
        kb_metric_score(bare, KB_QA_F1_ZH, kv_str_c("北京"), kv_str_c("北京"), NULL, &s, &err), 0);
    cr_expect(strstr(err.msg, "apt-get install python3-jieba"), "%s", err.msg);
    kb_metrics_free(bare);
    kb_jieba *j;
    cr_expect_lt(kb_jieba_load("/nonexistent/jieba", &j, &err), 0);
    cr_expect(strstr(err.msg, "apt-get install python3-jieba"), "%s", err.msg);
}

Test(metrics, qa_f1_zh_keeps_unlisted_punctuation)
{
    cr_assert(with_jieba(), "jieba's data is absent (apt-get install python3-jieba)");
    cr_expect_eq(score(KB_QA_F1_ZH, "北京。", "北京"), 1.0); /* 。 is in cn_punctuation */
    /* 《 is not: tokens 《 北京 》→ [《, 北京], p = 1/2, r = 1 */
    cr_expect_eq(score(KB_QA_F1_ZH, "《北京》", "北京"), (2 * 0.5 * 1.0) / 1.5);
}

/* ---- the first-line rule and max over answers ------------------------------- */

Test(metrics, first_line_rule_strips_only_newlines)
{
    cr_expect_eq(task("triviaqa", "\n\nParis\nLondon", "Paris"), 1.0);
    cr_expect_eq(task("triviaqa", "\n\nParis\nLondon", "London"), 0.0);
    cr_expect_eq(task("narrativeqa", "Paris\nLondon", "London"), (2 * 0.5 * 1.0) / 1.5);
    /* only '\n' is stripped: the first line of "\r\nParis" is "\r" */
    cr_expect_eq(task("triviaqa", "\r\nParis", "Paris"), 0.0);
    cr_expect_eq(task("narrativeqa", "\r\nParis", "Paris"), 1.0);
    cr_expect_eq(task("samsum", "\n", "x"), 0.0);
}

/* ---- NUL characters ----------------------------------------------------------------- */

/* eval.py reads predictions with json.loads, which keeps "\u0000": "paris\x00"
 * is one token of normalize_answer("Paris\x00 is wrong").split(), so
 * precision = recall = 2/3 and f1 = 2/3 (a cut string gave 0.5). */
Test(metrics, qa_f1_counts_a_token_with_a_nul)
{
    double s;
    kv_error err;
    kv_str pred = {"Paris\0 is wrong", 15}, gt = kv_str_c("Paris is wrong");
    cr_assert_eq(kb_metric_score(metrics, KB_QA_F1, pred, gt, NULL, &s, &err), 0, "%s", err.msg);
    double p = 1.0 * 2 / 3, r = 1.0 * 2 / 3;
    cr_expect_eq(s, (2 * p * r) / (p + r));
    kv_str answers[] = {gt};
    cr_assert_eq(kb_score_prediction(metrics, "hotpotqa", pred, answers, 1, NULL, &s, &err), 0);
    cr_expect_eq(s, (2 * p * r) / (p + r));
}

/* To Python, U+0000 is an ordinary character exactly like U+0001: not
 * whitespace (str.split, isspace), not punctuation (string.punctuation and
 * the Chinese list), not \w or \d, its own lower case, a single-character
 * token to jieba. So on every metric a text with NULs must score as the same
 * text with U+0001 in their place, which the conformance cases pin down. */
Test(metrics, nul_scores_as_any_other_control_character)
{
    bool zh = with_jieba();
#define S(lit) lit, sizeof(lit) - 1 /* a literal and its length, NULs included */
    static const struct {
        kb_metric metric;
        const char *pred;
        size_t pred_n;
        const char *gt;
        size_t gt_n;
    } cases[] = {
        {KB_QA_F1, S("the Eiffel\0 tower\0"), S("Eiffel tower")},
        {KB_ROUGE, S("a cat\0 sat. on\0 the mat"), S("a cat sat on the\0 mat")},
        {KB_RETRIEVAL, S("Paragraph 3\0 and Paragraph\0 5 3"), S("Paragraph 3")},
        {KB_COUNT, S("12\0 12 3\0"), S("12")},
        {KB_CODE_SIM, S("def f():\n\0return 1"), S("def f():\n    return\0 1")},
        {KB_CLASSIFICATION, S("Food\0 or City"), S("Food\0")},
        {KB_QA_F1_ZH, S("北京\0是首都"), S("北京是\0首都")},
        {KB_ROUGE_ZH, S("北京\0是 首都。"), S("北京是首都\0")},
        {KB_RETRIEVAL_ZH,
         S("段落\0"
           "1 段落1"),
         S("段落1")},
    };
#undef S
    kv_str names[] = {{"Food\0", 5}, kv_str_c("City"), kv_str_c("Food")};
    kb_classes cls = {names, 3};
    int nonzero = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (kb_metric_needs_jieba(cases[i].metric) && !zh)
            continue;
        char *p1 = malloc(cases[i].pred_n + 1), *g1 = malloc(cases[i].gt_n + 1);
        memcpy(p1, cases[i].pred, cases[i].pred_n + 1);
        memcpy(g1, cases[i].gt, cases[i].gt_n + 1);
        for (size_t k = 0; k < cases[i].pred_n; k++)
            p1[k] = p1[k] ? p1[k] : '\x01';
        for (size_t k = 0; k < cases[i].gt_n; k++)
            g1[k] = g1[k] ? g1[k] : '\x01';
        kv_str names1[] = {{"Food\x01", 5}, kv_str_c("City"), kv_str_c("Food")};
        kb_classes cls1 = {names1, 3};
        double with_nul, with_soh;
        kv_error err;
        cr_assert_eq(kb_metric_score(metrics, cases[i].metric,
                                     (kv_str){cases[i].pred, cases[i].pred_n},
                                     (kv_str){cases[i].gt, cases[i].gt_n}, &cls, &with_nul, &err),
                     0, "%s", err.msg);
        cr_assert_eq(kb_metric_score(metrics, cases[i].metric, (kv_str){p1, cases[i].pred_n},
                                     (kv_str){g1, cases[i].gt_n}, &cls1, &with_soh, &err),
                     0, "%s", err.msg);
        cr_expect_eq(with_nul, with_soh, "%s: %.17g with NULs, %.17g with U+0001",
                     kb_metric_name(cases[i].metric), with_nul, with_soh);
        nonzero += with_nul > 0;
        free(p1);
        free(g1);
    }
    cr_expect_geq(nonzero, 5, "the cases score above 0, so that text after a NUL counts");
}

Test(metrics, best_answer_wins)
{
    kv_str answers[] = {kv_str_c("dog"), kv_str_c("cat"), kv_str_c("cat dog")};
    double s;
    kv_error err;
    cr_assert_eq(
        kb_score_prediction(metrics, "hotpotqa", kv_str_c("cat"), answers, 3, NULL, &s, &err), 0);
    cr_expect_eq(s, 1.0);
    cr_assert_eq(
        kb_score_prediction(metrics, "qasper_e", kv_str_c("x"), answers, 0, NULL, &s, &err), 0);
    cr_expect_eq(s, 0.0);
    cr_expect_lt(
        kb_score_prediction(metrics, "nosuchtask", kv_str_c("x"), answers, 1, NULL, &s, &err), 0);
}
