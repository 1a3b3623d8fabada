/* kvcore/jsonstr: JSON strings that keep NUL bytes, both ways, and the
 * prediction lines the runner writes with them. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rundir/predfile.h"
#include "util/jsonstr.h"
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

/* A prediction line written to a file and read back as resume, scoring and
 * reports read it. */
static kb_pred_lines round_trip(const kb_prediction *p)
{
    kv_strbuf b = {0};
    cr_assert_eq(kb_prediction_format(p, &b), 0);
    kv_strbuf_puts(&b, "\n");
    char path[] = "/tmp/kvb-jsonstr-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, b.s, b.len), (ssize_t)b.len);
    close(fd);
    kb_pred_lines l;
    kv_error err;
    cr_assert_eq(kb_pred_lines_read(path, &l, &err), 0, "%s: %s", err.msg, b.s);
    cr_assert_eq(l.n, 1);
    b.s[b.len - 1] = '\0'; /* the line as written, without its '\n' */
    cr_assert_str_eq(l.text[0], b.s, "kept verbatim");
    unlink(path);
    kv_strbuf_free(&b);
    return l;
}

/* What the runner writes for a generated answer holding a NUL byte (the
 * token of byte 0x00) is read back whole. */
Test(jsonstr, prediction_lines_keep_a_nul_in_pred_and_answers)
{
    kv_str answers[] = {{"Paris\0 is wrong", 15}};
    kb_prediction p = {.id = kv_str_c("s1"),
                       .task = "hotpotqa",
                       .config = "full",
                       .pred = {"Paris\0 is wrong", 15},
                       .answers = answers,
                       .n_answers = 1};
    kb_pred_lines l = round_trip(&p);
    cr_assert(strstr(l.text[0], "\"pred\":\"Paris\\u0000 is wrong\""), "%s", l.text[0]);
    const kb_prediction *r = &l.line[0];
    cr_expect_null(r->unscorable);
    cr_expect_eq(r->pred.n, 15);
    cr_expect(memcmp(r->pred.p, "Paris\0 is wrong", 15) == 0);
    cr_expect_eq(r->n_answers, 1);
    cr_expect_eq(r->answers[0].n, 15);
    cr_expect_str_eq(r->task, "hotpotqa");
    kb_pred_lines_free(&l);
}

/* An id is a byte string: one with a NUL ("\u0000" in JSON) is written,
 * read back, kept apart from its prefix in an id set, and named in messages
 * as JSON spells it. */
Test(jsonstr, an_id_with_a_nul_round_trips)
{
    kv_str answers[] = {kv_str_c("x")};
    kb_prediction p = {.id = {"a\0b", 3},
                       .index = 7,
                       .task = "trec",
                       .config = "full",
                       .pred = kv_str_c("x"),
                       .answers = answers,
                       .n_answers = 1};
    kb_pred_lines l = round_trip(&p);
    cr_assert(strstr(l.text[0], "{\"id\":\"a\\u0000b\",\"index\":7,"), "%s", l.text[0]);
    cr_assert(kv_str_eq(l.line[0].id, p.id), "%zu bytes", l.line[0].id.n);
    kb_idset ids = {0};
    cr_assert_eq(kb_idset_add(&ids, l.line[0].id), 1);
    cr_assert_eq(kb_idset_add(&ids, kv_str_c("a")), 1, "a cut at the NUL would merge them");
    cr_assert_eq(kb_idset_add(&ids, (kv_str){"a\0b", 3}), 0);
    cr_assert_eq(kb_idset_size(&ids), 2);
    kb_idset_free(&ids);
    char msg[64];
    cr_assert_str_eq(kv_json_quote_to(msg, sizeof msg, l.line[0].id.p, l.line[0].id.n),
                     "\"a\\u0000b\"");
    kb_pred_lines_free(&l);
    /* as a person types it on a command line */
    char typed[] = "\\u0000a\\u0000";
    kv_str id = kv_unescape_nul(typed);
    cr_assert(kv_str_eq(id, (kv_str){"\0a\0", 3}), "%zu bytes", id.n);
}

/* A line is spelled as kvbench has always written it (cJSON's printer until
 * the line had its own writer), so shards written before and after merge
 * into files that read alike: whole numbers plainly, else 15 digits when
 * they read back, else 17; -0 keeps its sign; v2 lines carry their class,
 * difficulty and answer. */
Test(jsonstr, prediction_lines_are_spelled_as_before)
{
    kv_str answers[] = {kv_str_c("B")};
    kb_prediction p = {.id = kv_str_c("v2-1"),
                       .index = 3,
                       .task = "longbench_v2",
                       .config = "full",
                       .config_hash = "abcdef",
                       .pred = kv_str_c("The answer is (B)"),
                       .answers = answers,
                       .n_answers = 1,
                       .length_class = "short",
                       .difficulty = "easy",
                       .prompt_tokens = 3000000000.0,
                       .kept_tokens = 64,
                       .context_tokens = 0.5,
                       .kept_context_tokens = -0.0,
                       .generated_tokens = 1e20,
                       .prefill_s = 1.0 / 3,
                       .decode_s = 0.1};
    kv_strbuf b = {0};
    cr_assert_eq(kb_prediction_format(&p, &b), 0);
    cr_assert_str_eq(b.s, "{\"id\":\"v2-1\",\"index\":3,\"dataset\":\"longbench_v2\",\"config\":\"full\","
                          "\"config_hash\":\"abcdef\",\"pred\":\"The answer is (B)\",\"answers\":"
                          "[\"B\"],\"all_classes\":null,\"length\":\"short\",\"difficulty\":\"easy\","
                          "\"answer\":\"B\",\"prompt_tokens\":3000000000,\"kept_tokens\":64,"
                          "\"context_tokens\":0.5,\"kept_context_tokens\":-0,\"generated_tokens\":"
                          "1e+20,\"prefill_s\":0.33333333333333331,\"decode_s\":0.1}");
    kv_strbuf_free(&b);
}
