/* datasets/sample: schema validation, "file:line: what" errors, the stop and
 * skip policies, limit and ids selection. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/jsonstr.h"
#include "longbench/sample.h"
#include "support/testutil.h"

#define GOOD(ID)                                                                                   \
    "{\"input\": \"q\", \"context\": \"c\\n\\u00e9\\ud83d\\ude00\", \"answers\": [\"a\", \"b\"], " \
    "\"length\": 3, \"dataset\": \"qasper\", \"language\": \"en\", \"all_classes\": null, "        \
    "\"_id\": \"" ID "\", \"extra\": {\"ignored\": [1, 2]}}\n"

static char *write_file(const char *name, const char *data)
{
    char *path = tu_at(name);
    FILE *f = fopen(path, "wb");
    fputs(data, f);
    fclose(f);
    return path;
}

/* Loads path with opts and returns the number of samples, or -1 with err. */
static int load_all(const char *path, const lb_loader_options *opts, kv_error *err, long *skipped)
{
    lb_loader *l = lb_loader_open(path, opts, err);
    if (!l)
        return -1;
    lb_sample s;
    int n = 0, rc;
    while ((rc = lb_loader_next(l, &s, err)) == 1) {
        n++;
        lb_sample_free(&s);
    }
    if (skipped)
        *skipped = lb_loader_skipped(l);
    lb_loader_close(l);
    return rc < 0 ? -1 : n;
}

TestSuite(sample, .init = tu_dir_make, .fini = tu_dir_remove);

Test(sample, fields_and_json_escapes)
{
    char *path = write_file("a.jsonl", GOOD("id1"));
    kv_error err;
    lb_loader *l = lb_loader_open(path, NULL, &err);
    lb_sample s;
    cr_assert_eq(lb_loader_next(l, &s, &err), 1, "%s", err.msg);
    cr_assert_str_eq(s.input.p, "q");
    cr_assert_str_eq(s.context.p, "c\n\xc3\xa9\xf0\x9f\x98\x80", "escapes and surrogate pairs");
    cr_assert_eq(s.n_answers, 2);
    cr_assert_str_eq(s.answers[1].p, "b");
    cr_assert_null(s.all_classes);
    cr_assert_eq(s.length, 3);
    cr_assert_str_eq(s.id.p, "id1");
    cr_assert_str_eq(s.dataset, "qasper");
    cr_assert_str_eq(s.language, "en");
    cr_assert_eq(s.lineno, 1);
    lb_sample_free(&s);
    cr_assert_eq(lb_loader_next(l, &s, &err), 0);
    lb_loader_close(l);
    free(path);
}

/* One malformed line and the message the user gets for it. */
static void expect_error(const char *line, const char *what)
{
    char *data = NULL;
    cr_assert_neq(asprintf(&data, "%s%s\n%s", GOOD("ok1"), line, GOOD("ok2")), -1);
    char *path = write_file("bad.jsonl", data);
    kv_error err;
    cr_assert_eq(load_all(path, NULL, &err, NULL), -1, "accepted: %s", line);
    char *want = NULL;
    cr_assert_neq(asprintf(&want, "%s:2: %s", path, what), -1);
    cr_assert_str_eq(err.msg, want);
    free(want);
    free(path);
    free(data);
}

Test(sample, malformed_lines_are_named)
{
    expect_error("{\"input\": \"q\"", "not valid JSON: the text ends early (expected ',' or '}')");
    expect_error("[1, 2]", "a record must be a JSON object, found an array");
    expect_error("{\"a\": 1} {\"b\": 2}", "not valid JSON at byte 10: text after the record");
    expect_error("{\"_id\": \"a\tb\"}",
                 "not valid JSON at byte 11: a control character in a string must be escaped");
    expect_error("{\"x\": [1, tru]}", "not valid JSON at byte 11: expected a JSON value");
    expect_error("{\"_id\": \"x\", \"input\": \"\", \"dataset\": \"d\", \"language\": \"en\", "
                 "\"answers\": [\"a\"], \"length\": 1, \"all_classes\": null}",
                 "missing key \"context\"");
    expect_error("{\"_id\": \"x\", \"input\": 5, \"context\": \"c\"}",
                 "\"input\" must be a string, found a number");
    expect_error("{\"_id\": \"x\", \"input\": \"\", \"context\": \"c\", \"dataset\": \"d\", "
                 "\"language\": \"en\", \"length\": 1, \"answers\": [], \"all_classes\": null}",
                 "\"answers\" is empty: a sample needs at least one answer");
    expect_error("{\"_id\": \"x\", \"input\": \"\", \"context\": \"c\", \"dataset\": \"d\", "
                 "\"language\": \"en\", \"length\": 1, \"answers\": [\"a\", 2], "
                 "\"all_classes\": null}",
                 "\"answers\"[1] must be a string, found a number");
    expect_error("{\"_id\": \"x\", \"input\": \"\", \"context\": \"c\", \"dataset\": \"d\", "
                 "\"language\": \"en\", \"length\": 1.5, \"answers\": [\"a\"], "
                 "\"all_classes\": null}",
                 "\"length\" must be a whole number >= 0, found 1.5");
    expect_error("{\"_id\": \"x\", \"input\": \"\", \"context\": \"c\", \"dataset\": \"d\", "
                 "\"language\": \"en\", \"length\": 1, \"answers\": [\"a\"], "
                 "\"all_classes\": \"City\"}",
                 "\"all_classes\" must be an array of strings, found a string");
    expect_error("{\"_id\": \"x\", \"input\": \"\", \"context\": \"c\", \"dataset\": \"d\", "
                 "\"language\": \"en\", \"length\": 1, \"answers\": [\"a\"]}",
                 "missing key \"all_classes\"");
}

/* JSON's "\u0000" is data (4 of the official passage_retrieval_zh samples have
 * it in their context): every text field keeps its bytes after it. */
Test(sample, nul_characters_in_text_keep_the_whole_string)
{
    char *path =
        write_file("nul.jsonl",
                   "{\"_id\": \"n1\", \"input\": \"q\\u0000r\", \"context\": \"a\\u0000b\\u0000\", "
                   "\"answers\": [\"Paris\\u0000 is wrong\"], \"all_classes\": [\"x\\u0000y\"], "
                   "\"length\": 2, \"dataset\": \"trec\", \"language\": \"en\"}\n");
    kv_error err;
    lb_loader *l = lb_loader_open(path, NULL, &err);
    lb_sample s;
    cr_assert_eq(lb_loader_next(l, &s, &err), 1, "%s", err.msg);
    cr_assert_eq(s.input.n, 3);
    cr_assert(memcmp(s.input.p, "q\0r", 3) == 0);
    cr_assert_eq(s.context.n, 4);
    cr_assert(memcmp(s.context.p, "a\0b\0", 4) == 0);
    cr_assert_eq(s.answers[0].n, 15);
    cr_assert(memcmp(s.answers[0].p, "Paris\0 is wrong", 15) == 0);
    cr_assert_eq(s.all_classes[0].n, 3);
    lb_sample_free(&s);
    lb_loader_close(l);
    free(path);
}

/* An id is a key (resume, selection): a NUL in it is kept, byte for byte,
 * so "a\u0000b" and "a" stay two samples. A NUL in a name is refused rather
 * than cut. */
Test(sample, a_nul_in_an_id_is_kept_and_in_a_name_refused)
{
    char *path = write_file("nulid.jsonl",
                            "{\"_id\": \"a\\u0000b\\u0000\", \"input\": \"\", \"context\": \"c\", "
                            "\"answers\": [\"x\"], \"all_classes\": null, \"length\": 1, "
                            "\"dataset\": \"trec\", \"language\": \"en\"}\n");
    kv_error err;
    lb_loader *l = lb_loader_open(path, NULL, &err);
    lb_sample s;
    cr_assert_eq(lb_loader_next(l, &s, &err), 1, "%s", err.msg);
    cr_assert(kv_str_eq(s.id, (kv_str){"a\0b\0", 4}), "%zu bytes", s.id.n);
    lb_sample_free(&s);
    lb_loader_close(l);
    free(path);
    expect_error(
        "{\"_id\": \"x\", \"input\": \"\", \"context\": \"c\", \"dataset\": \"d\\u0000\"}",
        "\"dataset\" holds a NUL character (\\u0000), which kvbench refuses in names");
}

/* Python refuses such a file with a position; so does the loader, instead of
 * passing the bytes on into prediction files that are no longer UTF-8. */
Test(sample, invalid_utf8_is_an_error_with_its_byte)
{
    expect_error("{\"_id\": \"x\", \"input\": \"\xff\"}", "invalid UTF-8 at byte 24 (0xFF)");
    expect_error("{\"_id\": \"\xe6\x97\"}", "invalid UTF-8 at byte 10 (0xE6)");     /* cut short */
    expect_error("{\"_id\": \"\xed\xa0\x80\"}", "invalid UTF-8 at byte 10 (0xED)"); /* surrogate */
}

Test(sample, a_line_cut_short_says_so)
{
    char *data = NULL;
    cr_assert_neq(asprintf(&data, "%s{\"input\": \"q\", \"cont", GOOD("ok1")), -1);
    char *path = write_file("cut.jsonl", data);
    kv_error err;
    cr_assert_eq(load_all(path, NULL, &err, NULL), -1);
    cr_assert(strstr(err.msg, ":2: the last line is cut short (no newline at the end of the file)"),
              "%s", err.msg);
    free(path);
    free(data);
}

Test(sample, skip_policy_counts_bad_lines)
{
    char *data = NULL;
    cr_assert_neq(asprintf(&data, "%snot json\n%s[]\n\n%s", GOOD("a"), GOOD("b"), GOOD("c")), -1);
    char *path = write_file("mixed.jsonl", data);
    kv_error err;
    lb_loader_options skip = {.on_error = LB_ON_ERROR_SKIP};
    long skipped = 0;
    cr_assert_eq(load_all(path, &skip, &err, &skipped), 3, "%s", err.msg);
    cr_assert_eq(skipped, 2);
    lb_loader *l = lb_loader_open(path, &skip, &err);
    lb_sample s;
    while (lb_loader_next(l, &s, &err) == 1)
        lb_sample_free(&s);
    char *want = NULL;
    cr_assert_neq(asprintf(&want, "%s:4: a record must be a JSON object, found an array", path),
                  -1);
    cr_assert_str_eq(lb_loader_last_skip(l), want);
    cr_assert_eq(lb_loader_records(l), 5);
    lb_loader_close(l);
    /* The default policy stops at line 2. */
    cr_assert_eq(load_all(path, NULL, &err, NULL), -1);
    cr_assert(strstr(err.msg, "mixed.jsonl:2: not valid JSON"), "%s", err.msg);
    free(want);
    free(path);
    free(data);
}

Test(sample, limit_and_ids_keep_file_order)
{
    char *data = NULL;
    cr_assert_neq(asprintf(&data, "%s%s%s%s", GOOD("a"), GOOD("b"), GOOD("c"), GOOD("d")), -1);
    char *path = write_file("four.jsonl", data);
    kv_error err;
    lb_loader_options lim = {.limit = 2};
    cr_assert_eq(load_all(path, &lim, &err, NULL), 2);
    kv_str ids[] = {kv_str_c("d"), kv_str_c("b")};
    lb_loader_options sel = {.ids = ids, .n_ids = 2};
    lb_loader *l = lb_loader_open(path, &sel, &err);
    lb_sample s;
    cr_assert_eq(lb_loader_next(l, &s, &err), 1);
    cr_assert_str_eq(s.id.p, "b", "file order, not the order of the ids");
    lb_sample_free(&s);
    cr_assert_eq(lb_loader_next(l, &s, &err), 1);
    cr_assert_str_eq(s.id.p, "d");
    cr_assert_eq(s.lineno, 4);
    lb_sample_free(&s);
    cr_assert_eq(lb_loader_next(l, &s, &err), 0);
    lb_loader_close(l);
    kv_str missing[] = {kv_str_c("b"), kv_str_c("zz")};
    lb_loader_options sel2 = {.ids = missing, .n_ids = 2};
    cr_assert_eq(load_all(path, &sel2, &err, NULL), -1);
    cr_assert(strstr(err.msg, "no sample has _id \"zz\""), "%s", err.msg);
    free(path);
    free(data);
}

Test(sample, missing_file)
{
    kv_error err;
    cr_assert_null(lb_loader_open("/nonexistent/kvbench/x.jsonl", NULL, &err));
    cr_assert(strstr(err.msg, "/nonexistent/kvbench/x.jsonl: cannot open"), "%s", err.msg);
}

/* The real official lines: 3 records each, Chinese text, all_classes null. */
Test(sample, official_head3_files)
{
    const char *names[] = {"multi_news", "multifieldqa_zh", "passage_retrieval_zh"};
    const long lengths[] = {2099, 9593, 6478}; /* "length" of each first line */
    for (int i = 0; i < 3; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "longbench/%s.head3.jsonl", names[i]);
        char *path = tu_data(rel);
        kv_error err;
        lb_loader *l = lb_loader_open(path, NULL, &err);
        lb_sample s;
        cr_assert_eq(lb_loader_next(l, &s, &err), 1, "%s", err.msg);
        cr_assert_str_eq(s.dataset, names[i]);
        cr_assert_eq(s.length, lengths[i]);
        cr_assert_eq(s.id.n, 48);
        cr_assert_null(s.all_classes);
        lb_sample_free(&s);
        cr_assert_eq(load_all(path, NULL, &err, NULL), 3, "%s", err.msg);
        lb_loader_close(l);
        free(path);
    }
}

/* LongBench v2's data.json: a JSON array read one element at a time. */
#define V2(ID, ANSWER)                                                                             \
    "{\"_id\": \"" ID "\", \"domain\": \"d\", \"difficulty\": \"hard\", \"length\": \"short\", "   \
    "\"question\": \"q?\", \"choice_A\": \"a\", \"choice_B\": \"b\", \"choice_C\": \"c\", "        \
    "\"choice_D\": \"d\", \"answer\": \"" ANSWER "\", \"context\": \"x } ] \\\" {\"}"

Test(sample, v2_json_array)
{
    char *path = write_file("data.json", " [\n  " V2("a", "B") ",\n  " V2("b", "D") "\n]\n");
    lb_loader_options o = {.schema = LB_SCHEMA_V2};
    kv_error err;
    lb_loader *l = lb_loader_open(path, &o, &err);
    lb_sample s;
    cr_assert_eq(lb_loader_next(l, &s, &err), 1, "%s", err.msg);
    cr_assert_str_eq(s.id.p, "a");
    cr_assert_str_eq(s.input.p, "q?");
    cr_assert_str_eq(s.context.p, "x } ] \" {", "brackets and quotes inside strings");
    cr_assert_str_eq(s.choices[3].p, "d");
    cr_assert_eq(s.n_answers, 1);
    cr_assert_str_eq(s.answers[0].p, "B");
    cr_assert_str_eq(s.difficulty, "hard");
    cr_assert_str_eq(s.length_class, "short");
    cr_assert_eq(s.lineno, 2);
    lb_sample_free(&s);
    cr_assert_eq(lb_loader_next(l, &s, &err), 1, "%s", err.msg);
    cr_assert_str_eq(s.id.p, "b");
    cr_assert_eq(s.lineno, 3);
    lb_sample_free(&s);
    cr_assert_eq(lb_loader_next(l, &s, &err), 0);
    lb_loader_close(l);
    free(path);
}

static void expect_v2_error(const char *data, const char *what)
{
    char *path = write_file("data.json", data);
    lb_loader_options o = {.schema = LB_SCHEMA_V2};
    kv_error err;
    cr_assert_eq(load_all(path, &o, &err, NULL), -1, "accepted %s", data);
    cr_assert(strstr(err.msg, what), "%s (wanted %s)", err.msg, what);
    free(path);
}

Test(sample, v2_errors)
{
    expect_v2_error("[" V2("a", "E") "]", "\"answer\" must be one of A, B, C, D");
    expect_v2_error("[" V2("a", "A") " " V2("b", "A") "]",
                    "data.json:1: expected ',' or ']' after element 1");
    expect_v2_error("[" V2("a", "A") ",\n" V2("b", "A"), "no closing ']'");
    expect_v2_error("[\n" V2("a", "A") ",\n{\"_id\": \"b\", \"context\": \"cut",
                    "data.json:3: the array is cut short inside element 2");
    expect_v2_error("[1]", "element 1 is not a JSON object");
    expect_v2_error("[{\"_id\": \"x\", \"question\": \"q\", \"context\": \"c\"}]",
                    "data.json:1: missing key \"choice_A\"");
}
