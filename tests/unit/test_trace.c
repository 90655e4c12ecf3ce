/*
 * test_trace.c - the capacity trace: scaling to --max, the speed-up, events of
 * several lines, merging of changes that scale alike, the --min floor, replay
 * (tide__trace_next / _target), bad files (each message names its line), and the
 * real AWS p3 trace of ../shared/traces when it is there.
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

#include "cli/trace.h"
#include "tide.h"

static int parse(const char *text, const tide__trace_opts_t *o, tide__trace_t *tr, char *err,
                 size_t errlen)
{
    return tide__trace_parse(text, strlen(text), "cap.csv", o, tr, err, errlen);
}

static void test_scaling_and_events(void **state)
{
    (void)state;
    /* C = 8: scale by 4/8. The three lines at 0 are one event (the last counts). */
    const char *text = "time_ms,capacity\n"
                       "0,1\n0,2\n0,8\n"
                       "1000,6\r\n"   /* 3 */
                       "# a comment\n"
                       " 2000 , 7 \n" /* 3.5 rounds to 4 */
                       "2000,2\n"     /* same event: 1 */
                       "3000,3\n"     /* 1.5 -> 2 */
                       "3500,2\n"     /* 1 */
                       "4000,0\n";    /* 0 */
    tide__trace_opts_t o = {.speedup = 2, .max_workers = 4, .min_workers = 0, .notice_s = 30};
    tide__trace_t tr;
    char err[256] = "";
    assert_int_equal(parse(text, &o, &tr, err, sizeof err), TIDE_OK);
    assert_int_equal(tr.trace_max, 8);
    assert_int_equal(tr.lines, 9);
    assert_true(tr.duration_s == 2.0);
    assert_true(tr.notice_s == 30);
    static const tide__trace_point_t want[] = {{0, 4}, {0.5, 3}, {1.0, 1}, {1.5, 2},
                                               {1.75, 1}, {2.0, 0}};
    assert_int_equal(tr.count, sizeof want / sizeof want[0]);
    for (size_t i = 0; i < tr.count; i++) {
        if (tr.points[i].t != want[i].t || tr.points[i].world != want[i].world)
            fail_msg("point %zu: (%g, %d), wanted (%g, %d)", i, tr.points[i].t,
                     tr.points[i].world, want[i].t, want[i].world);
    }
    assert_int_equal(tide__trace_target(&tr, 0), 4);
    assert_int_equal(tide__trace_target(&tr, 0.49), 4);
    assert_int_equal(tide__trace_target(&tr, 0.5), 3);
    assert_int_equal(tide__trace_target(&tr, 100), 0);
    tide__trace_free(&tr);
    assert_null(tr.points);

    /* With --min 2 the troughs are raised, and repeats merge away. */
    o.min_workers = 2;
    assert_int_equal(parse(text, &o, &tr, err, sizeof err), TIDE_OK);
    static const tide__trace_point_t want_min[] = {{0, 4}, {0.5, 3}, {1.0, 2}};
    assert_int_equal(tr.count, 3);
    for (size_t i = 0; i < tr.count; i++) {
        assert_true(tr.points[i].t == want_min[i].t);
        assert_int_equal(tr.points[i].world, want_min[i].world);
    }
    tide__trace_free(&tr);
}

static void test_relative_time_and_merging(void **state)
{
    (void)state;
    /* Times count from the first line; 18 and 19 of 32 both scale to 2 of 4. */
    const char *text = "5000,32\n6000,18\n7000,19\n8000,32\n";
    tide__trace_opts_t o = {.speedup = 1, .max_workers = 4};
    tide__trace_t tr;
    assert_int_equal(parse(text, &o, &tr, NULL, 0), TIDE_OK);
    assert_int_equal(tr.count, 3);
    assert_true(tr.points[0].t == 0 && tr.points[0].world == 4);
    assert_true(tr.points[1].t == 1 && tr.points[1].world == 2);
    assert_true(tr.points[2].t == 3 && tr.points[2].world == 4);
    tide__trace_free(&tr);
}

static void test_next_is_edge_triggered(void **state)
{
    (void)state;
    const char *text = "0,4\n1000,2\n2000,3\n3000,4\n4000,1\n";
    tide__trace_opts_t o = {.speedup = 1, .max_workers = 4, .notice_s = 5};
    tide__trace_t tr;
    assert_int_equal(parse(text, &o, &tr, NULL, 0), TIDE_OK);
    size_t cur = 0;
    tide__trace_change_t ch;
    /* At 0 the job already has 4: nothing to do, and the point is consumed. */
    assert_int_equal(tide__trace_next(&tr, &cur, 0, 4, &ch), 0);
    assert_int_equal(cur, 1);
    assert_int_equal(tide__trace_next(&tr, &cur, 0.9, 4, &ch), 0);
    assert_int_equal(tide__trace_next(&tr, &cur, 1.0, 4, &ch), 1);
    assert_int_equal(ch.preempt, 2);
    assert_int_equal(ch.start, 0);
    assert_true(ch.notice_s == 5);
    assert_int_equal(ch.target, 2);
    assert_true(ch.t == 1.0);
    /* Asked again with the preemption under way: nothing more. */
    assert_int_equal(tide__trace_next(&tr, &cur, 1.5, 2, &ch), 0);
    assert_int_equal(tide__trace_next(&tr, &cur, 2.0, 2, &ch), 1);
    assert_int_equal(ch.start, 1);
    assert_int_equal(ch.preempt, 0);
    /* Woken late past two points: only the newest target counts. */
    assert_int_equal(tide__trace_next(&tr, &cur, 4.5, 3, &ch), 1);
    assert_int_equal(ch.target, 1);
    assert_int_equal(ch.preempt, 2);
    assert_true(ch.t == 4.0);
    assert_int_equal(tide__trace_next(&tr, &cur, 99, 1, &ch), 0);
    assert_int_equal(tide__trace_next(&tr, &cur, 99, 0, &ch), 0); /* schedule done */
    tide__trace_free(&tr);
}

typedef struct {
    const char *text;
    int line; /* 0: a message about the whole file */
    const char *needle;
} bad_case_t;

static void test_bad_files(void **state)
{
    (void)state;
    static const bad_case_t cases[] = {
        {"0,4\n2000,3\n1000,2\n", 3, "before the previous line's 2000 ms"},
        {"0,4\nabc,3\n", 2, "time \"abc\" is not a non-negative number"},
        {"0,4\n-5,3\n", 2, "is not a non-negative number"},
        {"0,4\n1e3,3\n", 2, "is not a non-negative number"},
        {"0,4\n100\n", 2, "expected \"time_ms,capacity\""},
        {"0,4\n100,2,7\n", 2, "more than two fields"},
        {"0,4\n100,2.5\n", 2, "capacity \"2.5\" is not an integer"},
        {"0,4\n100,\n", 2, "capacity \"\" is not an integer"},
        {"0,4\n100,-1\n", 2, "is not an integer"},
        {"0,4\ntime_ms,capacity\n", 2, "is not a non-negative number"}, /* header only first */
        {"", 0, "no \"time_ms,capacity\" lines"},
        {"# only a comment\n\n", 0, "no \"time_ms,capacity\" lines"},
        {"0,0\n10,0\n", 0, "capacity is never above 0"},
    };
    tide__trace_opts_t o = {.speedup = 1, .max_workers = 4};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tide__trace_t tr;
        char err[512] = "";
        int rc = parse(cases[i].text, &o, &tr, err, sizeof err);
        char prefix[64];
        if (cases[i].line) snprintf(prefix, sizeof prefix, "cap.csv:%d: ", cases[i].line);
        else snprintf(prefix, sizeof prefix, "cap.csv: ");
        if (rc != TIDE_ECONFIG || strncmp(err, prefix, strlen(prefix)) ||
            !strstr(err, cases[i].needle))
            fail_msg("case %zu: rc %d, message \"%s\"; wanted \"%s...%s\"", i, rc, err, prefix,
                     cases[i].needle);
        assert_null(tr.points);
    }

    /* A line over the cap. */
    size_t n = TIDE__TRACE_MAX_LINE + 10;
    char *text = malloc(n + 16);
    assert_non_null(text);
    strcpy(text, "0,4\n");
    memset(text + 4, '1', n);
    strcpy(text + 4 + n, ",3\n");
    tide__trace_t tr;
    char err[256];
    assert_int_equal(parse(text, &o, &tr, err, sizeof err), TIDE_ECONFIG);
    assert_non_null(strstr(err, "cap.csv:2: line too long"));
    free(text);

    /* Bad options. */
    tide__trace_opts_t bad = {.speedup = 0, .max_workers = 4};
    assert_int_equal(parse("0,4\n", &bad, &tr, err, sizeof err), TIDE_ECONFIG);
    assert_non_null(strstr(err, "speed-up"));
    bad = (tide__trace_opts_t){.speedup = 1, .max_workers = 2, .min_workers = 3};
    assert_int_equal(parse("0,4\n", &bad, &tr, err, sizeof err), TIDE_ECONFIG);
    bad = (tide__trace_opts_t){.speedup = 1, .max_workers = 2, .notice_s = -1};
    assert_int_equal(parse("0,4\n", &bad, &tr, err, sizeof err), TIDE_ECONFIG);

    assert_int_equal(tide__trace_load("/nonexistent/trace.csv", &o, &tr, err, sizeof err),
                     TIDE_EIO);
    assert_non_null(strstr(err, "/nonexistent/trace.csv: cannot open"));
}

static void test_aws_p3_trace(void **state)
{
    (void)state;
#ifdef TIDE_SHARED_TRACE
    if (access(TIDE_SHARED_TRACE, R_OK)) {
        skip();
        return;
    }
    tide__trace_opts_t o = {.speedup = 140, .max_workers = 4, .min_workers = 1, .notice_s = 2};
    tide__trace_t tr;
    char err[512] = "";
    int rc = tide__trace_load(TIDE_SHARED_TRACE, &o, &tr, err, sizeof err);
    if (rc) fail_msg("%s", err);
    assert_int_equal(tr.trace_max, 32); /* found in the file, not assumed */
    assert_true(tr.lines > 300);
    /* About 11.4 hours at 140x: about 5 minutes. */
    assert_true(tr.duration_s > 250 && tr.duration_s < 330);
    assert_true(tr.count >= 2);
    assert_true(tr.points[0].t == 0);
    for (size_t i = 0; i < tr.count; i++) {
        assert_in_range(tr.points[i].world, 1, 4);
        if (i) {
            assert_true(tr.points[i].t > tr.points[i - 1].t);
            assert_int_not_equal(tr.points[i].world, tr.points[i - 1].world);
        }
    }
    tide__trace_free(&tr);
#else
    skip();
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scaling_and_events),
        cmocka_unit_test(test_relative_time_and_merging),
        cmocka_unit_test(test_next_is_edge_triggered),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_aws_p3_trace),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
