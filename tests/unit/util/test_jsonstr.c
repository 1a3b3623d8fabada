/* kvcore/jsonstr: JSON strings that keep NUL bytes, both ways, and the
 * prediction lines the runner writes with them. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "util/jsonstr.h"
#include "rundir/predfile.h"
#include "score/score.h"
#include "util/utf8.h"

static char *quote(const char *s, size_t n)
{
    kv_strbuf b = {0};
    cr_assert_eq(kv_json_quote(&b, s, n), 0);
    return b.s;
}

Test(jsonstr, quote_escapes_like_python_json_dumps)
{
    /* json.dumps("x\0y\"\\\t\n\x1f\x7f", ensure_ascii=False) */
    char *q = quote("x\0y\"\\\t\n\x1f\x7f\xc3\xa9", 11);
    cr_expect_str_eq(q, "\"x\\u0000y\\\"\\\\\\t\\n\\u001f\x7f\xc3\xa9\"");
    free(q);
}

Test(jsonstr, quote_repairs_ill_formed_utf8)
{
    /* each maximal ill-formed subpart becomes one U+FFFD, as the tokenizer's decode does */
    char *q = quote("a\xff\xe6\x97z\xed\xa0\x80", 8);
    cr_expect_str_eq(q, "\"a\xef\xbf\xbd\xef\xbf\xbdz\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"");
    cr_expect_eq(kv_utf8_valid_prefix(q, strlen(q)), strlen(q));
    free(q);
}

Test(jsonstr, load_keeps_nuls_and_quote_writes_them_back)
{
    const char *text = "{\"t\": \"a\\u0000b\\u0000\"}";
    kv_error err;
    json_t *v = kv_json_load(text, strlen(text), &err);
    cr_assert(v, "%s", err.msg);
    kv_str s;
    cr_assert_eq(kv_json_take(json_object_get(v, "t"), &s), 0);
    cr_assert_eq(s.n, 4);
    cr_assert(memcmp(s.p, "a\0b\0", 4) == 0);
    char *q = quote(s.p, s.n);
    cr_expect_str_eq(q, "\"a\\u0000b\\u0000\"");
    free(q);
    kv_str_free(&s);
    json_decref(v);
}

Test(jsonstr, load_names_the_byte_of_invalid_utf8)
{
    kv_error err;
    cr_expect_null(kv_json_load("[\"\x80\"]", 4, &err));
    cr_expect_str_eq(err.msg, "invalid UTF-8 at byte 3 (0x80)");
    cr_expect_null(kv_json_load("[1,]", 4, &err));
    cr_expect(strstr(err.msg, "not valid JSON at byte 4"), "%s", err.msg);
}

/* What the runner writes for a generated answer holding a NUL byte (the
 * token of byte 0x00) is read back whole by the scorer's line reader. */
Test(jsonstr, prediction_lines_keep_a_nul_in_pred_and_answers)
{
    kv_str answers[] = {{"Paris\0 is wrong", 15}};
    kb_prediction p = {.id = "s1",
                       .task = "hotpotqa",
                       .config = "full",
                       .pred = "Paris\0 is wrong",
                       .pred_len = 15,
                       .answers = answers,
                       .n_answers = 1};
    cJSON *o = kb_prediction_json(&p);
    cr_assert(o);
    char *line = cJSON_PrintUnformatted(o);
    cr_assert(strstr(line, "\"pred\":\"Paris\\u0000 is wrong\""), "%s", line);
    kb_scored_line l = {.where = strdup("x:1")};
    kv_error err;
    cr_assert_eq(kb_scored_line_parse(line, strlen(line), "x.jsonl", &l, &err), 0, "%s", err.msg);
    cr_expect_eq(l.pred.n, 15);
    cr_expect(memcmp(l.pred.p, "Paris\0 is wrong", 15) == 0);
    cr_expect_eq(l.n_answers, 1);
    cr_expect_eq(l.answers[0].n, 15);
    cr_expect_str_eq(l.dataset, "hotpotqa");
    kb_scored_line_free(&l);
    free(line);
    cJSON_Delete(o);
}

/* Ids carry a NUL as KV_ID_NUL: "\u0000" in a string becomes it before cJSON
 * reads a line, and prints back as "\u0000"; an escaped backslash before
 * "u0000" is not a NUL, and neither is "\u0000" outside a string. */
Test(jsonstr, ids_keep_a_nul_through_cjson)
{
    char text[] = "{\"id\": \"a\\u0000b\", \"x\": \"\\\\u0000\", \"y\": \"\\\"\\u0000\"} \\u0000";
    size_t n = kv_json_ids_in(text, strlen(text));
    cr_assert_str_eq(text, "{\"id\": \"a" KV_ID_NUL "b\", \"x\": \"\\\\u0000\", \"y\": \"\\\"" KV_ID_NUL
                           "\"} \\u0000");
    cr_assert_eq(n, strlen(text));
    cJSON *j = cJSON_ParseWithLength(text, n);
    cr_assert(j);
    cJSON_DeleteItemFromObject(j, "x");
    cr_assert_str_eq(cJSON_GetObjectItem(j, "id")->valuestring, "a" KV_ID_NUL "b");
    char *out = kv_json_ids_out(cJSON_PrintUnformatted(j));
    cr_assert_str_eq(out, "{\"id\":\"a\\u0000b\",\"y\":\"\\\"\\u0000\"}");
    free(out);
    cJSON_Delete(j);
    char *id = kv_id_from_bytes("\0a\0", 3);
    cr_assert_str_eq(id, KV_ID_NUL "a" KV_ID_NUL);
    kv_error err;
    kv_fail(&err, "sample \"%s\"", id); /* errors stay UTF-8 */
    cr_assert_str_eq(err.msg, "sample \"??a??\"");
    free(id);
}
