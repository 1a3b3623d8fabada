/* eval.py's aggregation (Python and numpy rounding, pairwise mean, buckets),
 * LongBench v2's answer extraction, and `kvbench score` end to end. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "score/score.h"
#include "support/testutil.h"

TestSuite(score, .init = tu_dir_make, .fini = tu_dir_remove);

Test(score, python_and_numpy_round_differently)
{
    /* Python's round vs numpy's (docs/longbench.md): 2.835 -> 2.83 vs 2.84 */
    cr_expect_eq(kb_py_round(2.835, 2), 2.83);
    cr_expect_eq(kb_np_round2(2.835), 2.84);
    cr_expect_eq(kb_py_round(2.675, 2), 2.67); /* the binary value is below the half */
    cr_expect_eq(kb_py_round(0.125, 2), 0.12); /* an exact half: to even */
    cr_expect_eq(kb_py_round(0.375, 2), 0.38);
    cr_expect(isnan(kb_np_mean(NULL, 0)));
}

static void expect_17g(double got, const char *want)
{
    char buf[64];
    snprintf(buf, sizeof buf, "%.17g", got);
    cr_expect_str_eq(buf, want);
}

Test(score, mean_is_numpys_pairwise_sum)
{
    /* numpy 1.24.2's np.mean of these vectors; a left-to-right sum differs */
    double v13[] = {0.5, 1.0, 0.0,  0.9999999, 1.0,     2.0 / 3, 2.0 / 3,
                    0.5, 0.0, 0.25, 0.9999999, 2.0 / 3, 0.7};
    expect_17g(kb_np_mean(v13, 13), "0.61153844615384612");
    double v300[300];
    for (int i = 0; i < 300; i++)
        v300[i] = ((i * 37) % 11) / 7.0;
    expect_17g(kb_np_mean(v300, 300), "0.71285714285714286");
}

Test(score, buckets_follow_longbench_e)
{
    cr_expect_eq(kb_bucket_of(3999), KB_BUCKET_0_4K);
    cr_expect_eq(kb_bucket_of(4000), KB_BUCKET_4_8K);
    cr_expect_eq(kb_bucket_of(7999), KB_BUCKET_4_8K);
    cr_expect_eq(kb_bucket_of(8000), KB_BUCKET_8K_PLUS);
}

Test(score, v2_answer_extraction)
{
    cr_expect_eq(kb_v2_extract_answer(kv_str_c("The correct answer is (B)")), 'B');
    cr_expect_eq(kb_v2_extract_answer(kv_str_c("**The correct answer is C**")), 'C');
    cr_expect_eq(
        kb_v2_extract_answer(kv_str_c("The correct answer is (E). The correct answer is A")), 'A');
    cr_expect_eq(kb_v2_extract_answer(kv_str_c("the correct answer is (B)")),
                 0); /* case-sensitive */
    cr_expect_eq(kb_v2_extract_answer(kv_str_c("Answer: D")), 0);
    /* result.py reads the response with json, NULs included */
    static const char nul[] = "x\0 The correct answer is (C)";
    cr_expect_eq(kb_v2_extract_answer((kv_str){nul, sizeof nul - 1}), 'C');
}

Test(score, v2_accuracy_by_group)
{
    kb_v2_item items[] = {
        {'A', 'A', false, 0},
        {'B', 'C', false, 1},
        {0, 'D', true, 2},
        {'D', 'D', true, 2},
    };
    kb_v2_accuracy acc = kb_v2_score(items, 4);
    cr_expect_eq(acc.overall, 50.0);
    cr_expect_eq(acc.easy, 50.0);
    cr_expect_eq(acc.hard, 50.0);
    cr_expect_eq(acc.short_, 100.0);
    cr_expect_eq(acc.medium, 0.0);
    cr_expect_eq(acc.long_, 50.0);
    items[0].pred = 'B';
    cr_expect_eq(kb_v2_score(items, 3).overall, 0.0);
    cr_expect_eq(kb_v2_score(items, 1).hard != kb_v2_score(items, 1).hard, 1); /* NaN: no hard */
}

static void write_file(const char *dir, const char *name, const char *text)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fputs(text, f);
    fclose(f);
}

Test(score, cli_scores_a_longbench_pred_folder)
{
    /* trec's class list comes from the last line, as in eval.py */
    write_file(
        tu_dir, "trec.jsonl",
        "{\"pred\": \"Food\", \"answers\": [\"Food\"], \"all_classes\": null, \"length\": 10}\n"
        "{\"pred\": \"City, Food\", \"answers\": [\"City\"], \"all_classes\": [\"City\", "
        "\"Food\"], \"length\": 9000}\n");
    write_file(
        tu_dir, "qasper.jsonl",
        "{\"pred\": \"the cat\", \"answers\": [\"cat\"], \"all_classes\": null, \"length\": 5000}\n"
        "{\"pred\": \"dog\", \"answers\": [\"cat\", \"dog\"], \"all_classes\": null, \"length\": "
        "1}\n"
        "{\"pred\": \"no\", \"answers\": [\"cat\"], \"all_classes\": null, \"length\": 2}\n");
    write_file(tu_dir, "notes.txt", "not a prediction file\n");
    /* by default it only prints: LongBench's pred/ folder may be read-only */
    tu_result r = tu_kvbench("score", tu_dir, NULL);
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    cr_expect(strstr(r.out, "qasper"), "%s", r.out);
    cr_expect(strstr(r.out, "66.67"), "qasper: 2 of 3 right -> 66.67\n%s", r.out);
    cr_expect(strstr(r.out, "75.00"), "trec: 1 + 1/2 of 2 -> 75.00\n%s", r.out);
    char csv[4096], out[4096];
    snprintf(csv, sizeof csv, "%s/scores.csv", tu_dir);
    snprintf(out, sizeof out, "%s/result.json", tu_dir);
    cr_expect(access(csv, F_OK) != 0, "score wrote %s unasked", csv);
    tu_result_free(&r);
    r = tu_kvbench("score", tu_dir, "--csv", csv, "--output", out, NULL);
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    char *text = tu_slurp(csv, NULL);
    cr_expect(strstr(text, "qasper,qa_f1_score,3,66.67,2,50.00,1,100.00,0,NaN"), "%s", text);
    free(text);
    text = tu_slurp(out, NULL); /* eval.py's result.json */
    cJSON *j = cJSON_Parse(text);
    cr_expect_float_eq(cJSON_GetNumberValue(cJSON_GetObjectItem(j, "qasper")), 66.67, 1e-9, "%s",
                       text);
    cr_expect_float_eq(cJSON_GetNumberValue(cJSON_GetObjectItem(j, "trec")), 75.0, 1e-9, "%s",
                       text);
    cJSON_Delete(j);
    free(text);
    tu_result_free(&r);

    /* --output is the spelling of every command; --out, score's older one, still works */
    char older[4096];
    snprintf(older, sizeof older, "%s/result-out.json", tu_dir);
    r = tu_kvbench("score", tu_dir, "--out", older, NULL);
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    char *a = tu_slurp(out, NULL), *b = tu_slurp(older, NULL);
    cr_expect_str_eq(a, b);
    free(a);
    free(b);
    tu_result_free(&r);
    r = tu_kvbench("score", "--help", NULL);
    cr_expect(strstr(r.out, "--output PATH") && strstr(r.out, "(also --out)"), "%s", r.out);
    tu_result_free(&r);

    r = tu_kvbench("score", tu_dir, "--e", NULL);
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    cr_expect(strstr(r.out, "8k+"), "%s", r.out);
    tu_result_free(&r);

    snprintf(csv, sizeof csv, "%s/qasper.jsonl", tu_dir);
    r = tu_kvbench("score", csv, "--per-line", NULL);
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    cr_expect(strstr(r.out, "{\"id\": null, \"dataset\": \"qasper\", \"score\": 1}\n"), "%s",
              r.out);
    cr_expect(strstr(r.out, "\"score\": 0}\n"), "%s", r.out);
    tu_result_free(&r);
}

/* `kvbench score --per-line` on a folder holding one file `name` with `text`. */
static tu_result score_file_text(const char *name, const char *text)
{
    char *dir = tu_mkdtemp();
    write_file(dir, name, text);
    tu_result r = tu_kvbench("score", dir, "--per-line", NULL);
    tu_rmtree(dir);
    free(dir);
    return r;
}

/* eval.py keeps "\u0000" in pred (json.loads): "paris\x00" is a token of its
 * own, so qa_f1 = 2/3 on the first line; on the second, "rome\x00" matches
 * in the second answer only, and the text after the NULs counts (f1 1/2;
 * cut strings gave 1). */
Test(score, cli_keeps_nul_characters_in_predictions_and_answers)
{
    tu_result r = score_file_text(
        "hotpotqa.jsonl",
        "{\"pred\": \"Paris\\u0000 is wrong\", \"answers\": [\"Paris is wrong\"]}\n"
        "{\"pred\": \"Rome\\u0000 x\", \"answers\": [\"y\\u0000Rome\", \"Rome\\u0000 z\"]}\n");
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    cr_expect(strstr(r.out, "\"score\": 0.66666666666666663}"), "%s", r.out);
    cr_expect(strstr(r.out, "\"score\": 0.5}"), "%s", r.out);
    tu_result_free(&r);
}

/* Python refuses a prediction file that is not UTF-8, with the position. */
Test(score, cli_names_invalid_utf8_with_its_byte)
{
    tu_result r = score_file_text(
        "qasper.jsonl", "{\"pred\": \"x\", \"answers\": [\"x\"]}\n{\"pred\": \"\xc3\"}\n");
    cr_expect_eq(r.status, 1);
    cr_expect(strstr(r.err, "qasper.jsonl:2: invalid UTF-8 at byte 11 (0xC3)"), "%s", r.err);
    tu_result_free(&r);
}

Test(score, cli_reports_bad_lines_with_their_place)
{
    write_file(tu_dir, "qasper.jsonl", "{\"pred\": \"x\", \"answers\": [\"x\"]}\n{\"pred\": 3}\n");
    char path[4096];
    snprintf(path, sizeof path, "%s/qasper.jsonl", tu_dir);
    tu_result r = tu_kvbench("score", path, NULL);
    cr_expect_eq(r.status, 1);
    cr_expect(strstr(r.err, "qasper.jsonl:2"), "%s", r.err);
    tu_result_free(&r);
    write_file(tu_dir, "mystery.jsonl", "{\"pred\": \"x\", \"answers\": [\"x\"]}\n");
    snprintf(path, sizeof path, "%s/mystery.jsonl", tu_dir);
    r = tu_kvbench("score", path, NULL);
    cr_expect_eq(r.status, 1);
    cr_expect(strstr(r.err, "not a LongBench task"), "%s", r.err);
    tu_result_free(&r);
}

Test(score, cli_refuses_chinese_tasks_without_jieba)
{
    write_file(
        tu_dir, "mixed.jsonl",
        "{\"dataset\": \"dureader\", \"pred\": \"x\", \"answers\": [\"x\"]}\n"
        "{\"dataset\": \"hotpotqa\", \"id\": \"h1\", \"pred\": \"x\", \"answers\": [\"x\"]}\n");
    char path[4096];
    snprintf(path, sizeof path, "%s/mixed.jsonl", tu_dir);
    tu_result r = tu_kvbench("score", path, "--jieba", "/nonexistent/jieba", "--per-line", NULL);
    cr_expect_eq(r.status, 1);
    cr_expect(strstr(r.err, "apt-get install python3-jieba"), "%s", r.err);
    cr_expect(strstr(r.err, "refused"), "%s", r.err);
    cr_expect(strstr(r.out, "{\"id\": \"h1\", \"dataset\": \"hotpotqa\", \"score\": 1}"), "%s",
              r.out);
    tu_result_free(&r);
}

Test(score, cli_v2_accuracy_like_result_py)
{
    write_file(
        tu_dir, "model.jsonl",
        "{\"_id\": \"1\", \"difficulty\": \"easy\", \"length\": \"short\", \"answer\": \"A\", "
        "\"response\": \"**The correct answer is (A)**\"}\n"
        "{\"_id\": \"2\", \"difficulty\": \"hard\", \"length\": \"long\", \"answer\": \"B\", "
        "\"response\": \"The correct answer is C\"}\n"
        "{\"_id\": \"3\", \"difficulty\": \"hard\", \"length\": \"medium\", \"answer\": \"D\", "
        "\"pred\": \"D\"}\n");
    write_file(tu_dir, "array.json",
               "[{\"difficulty\": \"easy\", \"length\": \"long\", \"answer\": \"B\", \"response\": "
               "\"no idea\"}]");
    char csv[4096];
    snprintf(csv, sizeof csv, "%s/v2.csv", tu_dir);
    tu_result r = tu_kvbench("score", "--v2", tu_dir, "--csv", csv, NULL);
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    /* model: 2 of 3 right; easy 1/1, hard 1/2, short 1/1, medium 1/1, long 0/1 */
    cr_expect(strstr(r.out, "model.jsonl"), "%s", r.out);
    cr_expect(strstr(r.out, "66.7    100.0     50.0    100.0    100.0      0.0"), "%s", r.out);
    cr_expect(strstr(r.out, "array.json"), "%s", r.out);
    char *text = tu_slurp(csv, NULL);
    cr_expect(strstr(text, "array.json,1,0.0,0.0,NaN,NaN,NaN,0.0"), "%s", text);
    free(text);
    tu_result_free(&r);
}
