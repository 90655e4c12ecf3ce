/*
 * test_chaos.c - the `--chaos FILE` parser: a good file with every action, comments,
 * blank lines, CRLF and lines out of time order; and one bad file per rule, each
 * checked to be refused with a message that names the file, the line and the fault.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cli/chaos.h"
#include "tide.h"

static int parse(const char *text, int max, tide__chaos_t *c, char *err, size_t errlen)
{
    return tide__chaos_parse(text, strlen(text), "chaos.jsonl", max, c, err, errlen);
}

static void test_good_file(void **state)
{
    (void)state;
    const char *text = "# a schedule\n"
                       "\n"
                       "{\"t\": 20, \"action\": \"kill\", \"target\": \"random\"}\n"
                       "   \t\n"
                       "{\"t\": 5.5, \"action\": \"preempt\", \"notice_s\": 30, \"target\": 3}\r\n"
                       "  # indented comment\n"
                       "{\"t\": 20, \"action\": \"freeze\", \"target\": 0}\n"
                       "{\"action\": \"join\", \"t\": 0}\n"
                       "{\"t\": 40, \"action\": \"coordinator-restart\"}\n"
                       "{\"t\": 41, \"action\": \"kill\"}"; /* no final newline */
    tide__chaos_t c;
    char err[256] = "";
    assert_int_equal(parse(text, 4, &c, err, sizeof err), TIDE_OK);
    assert_string_equal(err, "");
    assert_int_equal(c.count, 6);

    assert_int_equal(c.actions[0].kind, TIDE__CHAOS_JOIN);
    assert_true(c.actions[0].t == 0);
    assert_int_equal(c.actions[0].target, TIDE__CHAOS_TARGET_NONE);
    assert_int_equal(c.actions[0].line, 8);

    assert_int_equal(c.actions[1].kind, TIDE__CHAOS_PREEMPT);
    assert_true(c.actions[1].t == 5.5);
    assert_true(c.actions[1].notice_s == 30);
    assert_int_equal(c.actions[1].target, 3);
    assert_int_equal(c.actions[1].line, 5);

    /* Same t: the file's order is kept. */
    assert_int_equal(c.actions[2].kind, TIDE__CHAOS_KILL);
    assert_int_equal(c.actions[2].target, TIDE__CHAOS_TARGET_RANDOM);
    assert_int_equal(c.actions[2].line, 3);
    assert_int_equal(c.actions[3].kind, TIDE__CHAOS_FREEZE);
    assert_int_equal(c.actions[3].target, 0);

    assert_int_equal(c.actions[4].kind, TIDE__CHAOS_COORD_RESTART);
    assert_int_equal(c.actions[5].kind, TIDE__CHAOS_KILL);
    assert_int_equal(c.actions[5].target, TIDE__CHAOS_TARGET_RANDOM); /* the default */
    assert_true(c.actions[5].notice_s == 0);

    assert_string_equal(tide__chaos_kind_name(TIDE__CHAOS_COORD_RESTART), "coordinator-restart");
    assert_string_equal(tide__chaos_kind_name((tide__chaos_kind_t)99), "?");
    tide__chaos_free(&c);
    assert_null(c.actions);
    tide__chaos_free(NULL);
}

static void test_empty_and_comment_only(void **state)
{
    (void)state;
    tide__chaos_t c;
    assert_int_equal(parse("", 4, &c, NULL, 0), TIDE_OK);
    assert_int_equal(c.count, 0);
    assert_int_equal(parse("# nothing\n\n", 4, &c, NULL, 0), TIDE_OK);
    assert_int_equal(c.count, 0);
    tide__chaos_free(&c);
}

static void test_next_fires_each_once_in_order(void **state)
{
    (void)state;
    tide__chaos_t c;
    assert_int_equal(parse("{\"t\":3,\"action\":\"kill\"}\n{\"t\":1,\"action\":\"join\"}\n"
                           "{\"t\":2,\"action\":\"freeze\",\"target\":1}\n",
                           4, &c, NULL, 0),
                     TIDE_OK);
    size_t cur = 0;
    assert_null(tide__chaos_next(&c, &cur, 0.5));
    const tide__chaos_action_t *a = tide__chaos_next(&c, &cur, 1.0);
    assert_non_null(a);
    assert_int_equal(a->kind, TIDE__CHAOS_JOIN);
    assert_null(tide__chaos_next(&c, &cur, 1.5));
    /* Woken late: both due actions come out, in order, then nothing. */
    a = tide__chaos_next(&c, &cur, 10);
    assert_int_equal(a->kind, TIDE__CHAOS_FREEZE);
    a = tide__chaos_next(&c, &cur, 10);
    assert_int_equal(a->kind, TIDE__CHAOS_KILL);
    assert_null(tide__chaos_next(&c, &cur, 100));
    tide__chaos_free(&c);
}

typedef struct {
    const char *text;
    int line;          /* the line the message must name */
    const char *needle; /* and a phrase it must contain */
} bad_case_t;

static void test_bad_lines_are_named(void **state)
{
    (void)state;
    static const bad_case_t cases[] = {
        {"{\"t\":1,\"action\":\"explode\"}\n", 1, "unknown action \"explode\""},
        {"# ok\n{\"action\":\"kill\"}\n", 2, "missing \"t\""},
        {"{\"t\":1}\n", 1, "missing \"action\""},
        {"{\"t\":1,\"action\":7}\n", 1, "\"action\" must be a string"},
        {"{\"t\":-1,\"action\":\"kill\"}\n", 1, "must not be negative"},
        {"{\"t\":\"5\",\"action\":\"kill\"}\n", 1, "\"t\" must be a number"},
        {"{\"t\":true,\"action\":\"kill\"}\n", 1, "\"t\" must be a number"},
        {"{\"t\":1e9,\"action\":\"kill\"}\n", 1, "more than a week"},
        {"\n\n{\"t\":1,\"action\":\"kill\",\"notice_s\":5}\n", 3,
         "\"notice_s\" is only allowed with preempt, not with kill"},
        {"{\"t\":1,\"action\":\"preempt\"}\n", 1, "preempt needs \"notice_s\""},
        {"{\"t\":1,\"action\":\"preempt\",\"notice_s\":-2}\n", 1, "must not be negative"},
        {"{\"t\":1,\"action\":\"kill\",\"target\":4}\n", 1, "target 4 is out of range"},
        {"{\"t\":1,\"action\":\"kill\",\"target\":-1}\n", 1, "out of range"},
        {"{\"t\":1,\"action\":\"kill\",\"target\":1.5}\n", 1, "must be a rank (an integer)"},
        {"{\"t\":1,\"action\":\"kill\",\"target\":\"all\"}\n", 1, "not \"all\""},
        {"{\"t\":1,\"action\":\"join\",\"target\":1}\n", 1, "\"target\" is not allowed with join"},
        {"{\"t\":1,\"action\":\"kill\"} trailing\n", 1, "not valid JSON"},
        {"{\"t\":1,\"action\":\"kill\"}{}\n", 1, "not valid JSON"},
        {"{\"t\":1,\"action\":\"kill\"\n", 1, "not valid JSON"},
        {"[1,2]\n", 1, "expected a JSON object"},
        {"{\"t\":1,\"action\":\"kill\",\"notice\":5}\n", 1, "unknown key \"notice\""},
        {"{\"t\":1,\"t\":2,\"action\":\"kill\"}\n", 1, "not valid JSON"},
        {"{\"t\":1,\"action\":\"kill\"}\n{\"t\":2,\"action\":\"kil\"}\n", 2, "unknown action"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tide__chaos_t c = {(void *)1, 99};
        char err[512] = "";
        int rc = parse(cases[i].text, 4, &c, err, sizeof err);
        char prefix[64];
        snprintf(prefix, sizeof prefix, "chaos.jsonl:%d: ", cases[i].line);
        if (rc != TIDE_ECONFIG || strncmp(err, prefix, strlen(prefix)) ||
            !strstr(err, cases[i].needle))
            fail_msg("case %zu (%s): rc %d, message \"%s\"; wanted \"%s...%s\"", i,
                     cases[i].text, rc, err, prefix, cases[i].needle);
        assert_null(c.actions); /* emptied on failure */
        assert_int_equal(c.count, 0);
    }
}

static void test_long_line_and_caps(void **state)
{
    (void)state;
    size_t n = TIDE__CHAOS_MAX_LINE + 100;
    char *text = malloc(n + 64);
    assert_non_null(text);
    strcpy(text, "{\"t\":1,\"action\":\"kill\"}\n{\"t\":2,\"action\":\"kill\",\"x\":\"");
    size_t len = strlen(text);
    memset(text + len, 'a', n);
    strcpy(text + len + n, "\"}\n");
    tide__chaos_t c;
    char err[256];
    assert_int_equal(parse(text, 4, &c, err, sizeof err), TIDE_ECONFIG);
    assert_non_null(strstr(err, "chaos.jsonl:2: line too long"));
    free(text);

    /* A NUL inside a line is not JSON; the parser must not stop reading at it. */
    const char nul[] = "{\"t\":1,\"action\":\"kill\"}\n{\"t\":1,\0\"action\":\"kill\"}\n";
    assert_int_equal(tide__chaos_parse(nul, sizeof nul - 1, "f", 4, &c, err, sizeof err),
                     TIDE_ECONFIG);
    assert_non_null(strstr(err, "f:2: not valid JSON"));

    /* Without --max any rank >= 0 is taken. */
    assert_int_equal(parse("{\"t\":1,\"action\":\"kill\",\"target\":77}\n", 0, &c, err, sizeof err),
                     TIDE_OK);
    assert_int_equal(c.actions[0].target, 77);
    tide__chaos_free(&c);
}

static void test_load_from_disk(void **state)
{
    (void)state;
    char path[] = "/tmp/tide-test-chaos-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *text = "{\"t\": 1, \"action\": \"preempt\", \"notice_s\": 0, \"target\": 1}\n";
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    tide__chaos_t c;
    char err[512];
    assert_int_equal(tide__chaos_load(path, 2, &c, err, sizeof err), TIDE_OK);
    assert_int_equal(c.count, 1);
    assert_true(c.actions[0].notice_s == 0);
    tide__chaos_free(&c);
    /* The same file against --max 1: the message names the real path. */
    assert_int_equal(tide__chaos_load(path, 1, &c, err, sizeof err), TIDE_ECONFIG);
    char want[128];
    snprintf(want, sizeof want, "%s:1: target 1 is out of range", path);
    assert_non_null(strstr(err, want));
    unlink(path);
    assert_int_equal(tide__chaos_load(path, 2, &c, err, sizeof err), TIDE_EIO);
    assert_non_null(strstr(err, path));
    assert_non_null(strstr(err, "cannot open"));
    assert_int_equal(tide__chaos_load("/", 2, &c, err, sizeof err), TIDE_EIO);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_file),
        cmocka_unit_test(test_empty_and_comment_only),
        cmocka_unit_test(test_next_fires_each_once_in_order),
        cmocka_unit_test(test_bad_lines_are_named),
        cmocka_unit_test(test_long_line_and_caps),
        cmocka_unit_test(test_load_from_disk),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
