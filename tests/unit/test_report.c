/*
 * test_report.c - the run report: the builder fed a small run (written, parsed back
 * with jansson and every field checked), events resolved by the builder and by
 * the caller, rollbacks, the caps, feeding from several threads at once, the
 * summary paragraph, the reader's errors on malformed files, and `tide report
 * --png` on a sample report (a PNG of the asked-for size).
 */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "cli/cli.h"
#include "cli/report.h"
#include "tide.h"

static void tmp_path(char *buf, size_t n, const char *what)
{
    static int seq;
    snprintf(buf, n, "/tmp/tide-test-report-%ld-%d-%s", (long)getpid(), seq++, what);
}

/* The small run every test below starts from: 4 workers, a kill, a preempt, a loss
 * (same size re-formed) and a join that never completes. */
static tide__report_t *small_run(void)
{
    tide__report_t *r;
    assert_int_equal(tide__report_create(&r), TIDE_OK);
    assert_int_equal(tide__report_world_size(r, 0.0, 4), TIDE_OK);
    for (int i = 0; i < 10; i++)
        assert_int_equal(tide__report_step(r, 0.1 * (i + 1), i, 32, 0.1), TIDE_OK);
    assert_int_equal(tide__report_event(r, 1.05, "kill", 2), 0);
    assert_int_equal(tide__report_world_size(r, 1.5, 3), TIDE_OK);
    assert_int_equal(tide__report_step(r, 1.7, 10, 32, 0.1), TIDE_OK); /* ends event 0 */
    assert_int_equal(tide__report_event(r, 2.0, "preempt", 1), 1);
    assert_int_equal(tide__report_event_resolved(r, 1, 0, 300.0), TIDE_OK);
    assert_int_equal(tide__report_world_size(r, 2.1, 2), TIDE_OK);
    assert_int_equal(tide__report_step(r, 2.3, 11, 32, 0.1), TIDE_OK);
    assert_int_equal(tide__report_event(r, 2.6, "loss", 0), 2);
    assert_int_equal(tide__report_event_resolved(r, 2, 1, -1), TIDE_OK); /* recovery: auto */
    assert_int_equal(tide__report_world_size(r, 2.8, 2), TIDE_OK);       /* same size */
    assert_int_equal(tide__report_step(r, 3.0, 12, 32, 0.1), TIDE_OK);
    assert_int_equal(tide__report_event(r, 3.1, "join", -1), 3);
    assert_int_equal(tide__report_metric(r, "loss", 0.5), TIDE_OK);
    assert_int_equal(tide__report_metric(r, "accuracy", 0.9), TIDE_OK);
    assert_int_equal(tide__report_metric(r, "loss", 0.25), TIDE_OK);
    assert_int_equal(tide__report_metric(r, "diverged", NAN), TIDE_OK);
    return r;
}

static json_t *write_and_read(tide__report_t *r, int exit_status, char *path, size_t n)
{
    tmp_path(path, n, "report.json");
    assert_int_equal(tide__report_write(r, path, exit_status), TIDE_OK);
    json_error_t jerr;
    json_t *j = json_load_file(path, 0, &jerr);
    if (!j) fail_msg("%s: %s", path, jerr.text);
    return j;
}

static double num(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    if (!json_is_number(v)) fail_msg("%s is not a number", key);
    return json_number_value(v);
}

static void test_round_trip(void **state)
{
    (void)state;
    tide__report_t *r = small_run();
    char path[256];
    json_t *j = write_and_read(r, 3, path, sizeof path);

    assert_int_equal(json_integer_value(json_object_get(j, "version")), 1);
    assert_string_equal(json_string_value(json_object_get(j, "tide_version")), tide_version());
    assert_int_equal(json_integer_value(json_object_get(j, "exit_status")), 3);
    assert_int_equal(json_integer_value(json_object_get(j, "steps")), 13);
    assert_int_equal(json_integer_value(json_object_get(j, "last_step")), 12);
    assert_int_equal(json_integer_value(json_object_get(j, "samples")), 13 * 32);
    double wall = num(j, "wall_s");
    assert_true(wall >= 3.1 && wall < 60);
    assert_true(fabs(num(j, "step_time_s") - 1.3) < 1e-6);
    assert_true(fabs(num(j, "goodput") - 1.3 / wall) < 1e-6);
    assert_true(fabs(num(j, "samples_per_s") - 416 / wall) < 1e-6);
    assert_true(fabs(num(j, "median_recovery_ms") - 400) < 1e-6); /* of 650, 300, 400 */

    json_t *ws = json_object_get(j, "world_size_timeline");
    assert_int_equal(json_array_size(ws), 3); /* 4, 3, 2: the same-size one is not a change */
    static const int sizes[] = {4, 3, 2};
    static const double times[] = {0.0, 1.5, 2.1};
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(json_integer_value(json_object_get(json_array_get(ws, i), "world_size")),
                         sizes[i]);
        assert_true(fabs(num(json_array_get(ws, i), "t") - times[i]) < 1e-6);
    }

    json_t *ev = json_object_get(j, "events");
    assert_int_equal(json_array_size(ev), 4);
    json_t *e0 = json_array_get(ev, 0), *e1 = json_array_get(ev, 1);
    json_t *e2 = json_array_get(ev, 2), *e3 = json_array_get(ev, 3);
    assert_string_equal(json_string_value(json_object_get(e0, "kind")), "kill");
    assert_int_equal(json_integer_value(json_object_get(e0, "rank")), 2);
    assert_int_equal(json_integer_value(json_object_get(e0, "id")), 0);
    assert_true(fabs(num(e0, "t") - 1.05) < 1e-6);
    assert_int_equal(json_integer_value(json_object_get(e0, "lost_steps")), 0);
    assert_true(fabs(num(e0, "recovery_ms") - 650) < 1e-6);
    assert_int_equal(json_integer_value(json_object_get(e1, "lost_steps")), 0);
    assert_true(fabs(num(e1, "recovery_ms") - 300) < 1e-6);
    assert_int_equal(json_integer_value(json_object_get(e2, "lost_steps")), 1);
    assert_true(fabs(num(e2, "recovery_ms") - 400) < 1e-6);
    assert_string_equal(json_string_value(json_object_get(e3, "kind")), "join");
    assert_true(json_is_null(json_object_get(e3, "rank")));
    assert_true(json_is_null(json_object_get(e3, "lost_steps")));
    assert_true(json_is_null(json_object_get(e3, "recovery_ms")));

    json_t *m = json_object_get(j, "metrics");
    assert_int_equal(json_object_size(m), 3);
    assert_true(num(m, "loss") == 0.25);
    assert_true(num(m, "accuracy") == 0.9);
    assert_true(json_is_null(json_object_get(m, "diverged")));

    /* 13 steps of 32 samples, spread over their windows: the rate integrates back. */
    json_t *rates = json_object_get(j, "rate_timeline");
    assert_true(json_array_size(rates) > 0 && json_array_size(rates) <= 1024);
    double total = 0;
    for (size_t i = 0; i < json_array_size(rates); i++) {
        const json_t *o = json_array_get(rates, i);
        double width = 0.25;
        if (i + 1 == json_array_size(rates)) width = wall - 0.25 * (double)i;
        total += num(o, "samples_per_s") * (width < 0.25 ? width : 0.25);
    }
    assert_true(fabs(total - 416) < 1e-6);

    char err[256];
    assert_int_equal(tide__report_check(j, err, sizeof err), TIDE_OK);
    json_decref(j);
    unlink(path);
    tide__report_destroy(r);
}

static void test_rollback_and_bad_input(void **state)
{
    (void)state;
    tide__report_t *r;
    assert_int_equal(tide__report_create(&r), TIDE_OK);
    tide__report_world_size(r, 0, 2);
    for (int i = 0; i < 10; i++) tide__report_step(r, 0.1 * i, i, 8, 0.05);
    int id = tide__report_event(r, 1.0, "loss", 1);
    assert_true(id >= 0);
    /* Steps of the old group before the new one forms do not end the recovery. */
    tide__report_step(r, 1.1, 10, 8, 0.05);
    tide__report_world_size(r, 2.0, 1);
    /* Restored from a checkpoint at step 5: steps 5..10 are done again. */
    tide__report_step(r, 2.5, 5, 8, 0.05);
    char path[256];
    json_t *j = write_and_read(r, 0, path, sizeof path);
    json_t *e = json_array_get(json_object_get(j, "events"), 0);
    assert_int_equal(json_integer_value(json_object_get(e, "lost_steps")), 6);
    assert_true(fabs(num(e, "recovery_ms") - 1500) < 1e-6);
    json_decref(j);
    unlink(path);

    assert_int_equal(tide__report_event(r, 1, "Kill", 0), TIDE_EINVAL);
    assert_int_equal(tide__report_event(r, 1, "", 0), TIDE_EINVAL);
    assert_int_equal(tide__report_event(r, 1, "a b", 0), TIDE_EINVAL);
    assert_int_equal(tide__report_event(r, 1, NULL, 0), TIDE_EINVAL);
    assert_int_equal(tide__report_event_resolved(r, 99, 0, 0), TIDE_ENOTFOUND);
    assert_int_equal(tide__report_event_resolved(r, -1, 0, 0), TIDE_ENOTFOUND);
    assert_int_equal(tide__report_metric(r, "", 1), TIDE_EINVAL);
    char longname[TIDE__REPORT_MAX_NAME + 2];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    assert_int_equal(tide__report_metric(r, longname, 1), TIDE_EINVAL);
    for (int i = 0; i < TIDE__REPORT_MAX_METRICS + 5; i++) {
        char name[32];
        snprintf(name, sizeof name, "m%d", i);
        int rc = tide__report_metric(r, name, i);
        assert_int_equal(rc, i < TIDE__REPORT_MAX_METRICS ? TIDE_OK : TIDE_ENOMEM);
    }
    assert_int_equal(tide__report_world_size(r, 1, -1), TIDE_EINVAL);
    assert_int_equal(tide__report_step(r, 1, 1, -1, 0), TIDE_EINVAL);
    /* Nonsense times are clamped, never stored as NaN (JSON cannot hold one). */
    assert_int_equal(tide__report_step(r, NAN, 11, 8, INFINITY), TIDE_OK);
    j = tide__report_json(r, 0);
    assert_non_null(j);
    assert_int_equal(json_integer_value(
                         json_object_get(json_object_get(j, "dropped"), "metrics")),
                     5);
    assert_int_equal(tide__report_check(j, NULL, 0), TIDE_OK);
    json_decref(j);
    assert_int_equal(tide__report_write(r, "/nonexistent-dir/report.json", 0), TIDE_EIO);
    tide__report_destroy(r);
    tide__report_destroy(NULL);
}

#define NTHREADS 4
#define PER_THREAD 2000

static void *feeder(void *arg)
{
    tide__report_t *r = arg;
    for (int i = 0; i < PER_THREAD; i++) {
        double t = tide__report_elapsed(r);
        tide__report_step(r, t, i, 4, 0.0001);
        if (i % 200 == 0) {
            int id = tide__report_event(r, t, "kill", i % 7);
            tide__report_world_size(r, t, 1 + i % 3);
            if (id >= 0 && i % 400 == 0) tide__report_event_resolved(r, id, 0, 1.0);
        }
        if (i % 50 == 0) tide__report_metric(r, "loss", 1.0 / (i + 1));
    }
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    tide__report_t *r;
    assert_int_equal(tide__report_create(&r), TIDE_OK);
    pthread_t th[NTHREADS];
    for (int i = 0; i < NTHREADS; i++) assert_int_equal(pthread_create(&th[i], NULL, feeder, r), 0);
    /* Meanwhile, the JSON is built and the summary printed, as `make demo` would. */
    for (int k = 0; k < 5; k++) {
        json_t *j = tide__report_json(r, 0);
        assert_non_null(j);
        json_decref(j);
    }
    for (int i = 0; i < NTHREADS; i++) pthread_join(th[i], NULL);
    json_t *j = tide__report_json(r, 0);
    assert_int_equal(json_integer_value(json_object_get(j, "steps")), NTHREADS * PER_THREAD);
    assert_int_equal(json_integer_value(json_object_get(j, "samples")), NTHREADS * PER_THREAD * 4);
    assert_int_equal(json_array_size(json_object_get(j, "events")), NTHREADS * PER_THREAD / 200);
    json_decref(j);
    tide__report_destroy(r);
}

static void test_summary(void **state)
{
    (void)state;
    tide__report_t *r = small_run();
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    tide__report_print_summary(r, f);
    fclose(f);
    static const char *const want[] = {
        "13 steps", "(416 samples)", "goodput", "World size 4 -> 3 -> 2", "4 events:",
        "kill of rank 2 at 1.1 s (0 lost steps, recovered in 650 ms)",
        "loss of rank 0 at 2.6 s (1 lost step, recovered in 400 ms)", "join at 3.1 s",
        "not recovered", "Median recovery 400 ms", "loss 0.25", "accuracy 0.9",
    };
    /* The paragraph is wrapped: compare with line breaks taken as spaces. */
    for (char *p = text; *p; p++)
        if (*p == '\n') *p = ' ';
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(text, want[i])) fail_msg("summary lacks \"%s\":\n%s", want[i], text);
    assert_null(strstr(text, "Exit status")); /* not known before the write */
    free(text);
    tide__report_destroy(r);

    /* Too many events to list one by one (a replayed trace): totals per kind. */
    assert_int_equal(tide__report_create(&r), TIDE_OK);
    for (int i = 0; i < 15; i++) {
        tide__report_event(r, i, i % 3 ? "preempt" : "join", i % 3 ? 1 : -1);
        tide__report_world_size(r, i + 0.5, 2 + i % 2);
        tide__report_step(r, i + 0.25 * (1 + (i == 7)) + 0.5, i, 8, 0.1);
    }
    tide__report_event(r, 20, "kill", 0);
    f = open_memstream(&text, &len);
    tide__report_print_summary(r, f);
    fclose(f);
    for (char *p = text; *p; p++)
        if (*p == '\n') *p = ' ';
    static const char *const want_totals[] = {
        "16 events: 5 join, 10 preempt, 1 kill; 0 lost steps in all;",
        "the slowest recovery 1000 ms (preempt at 7.0 s); 1 not recovered.",
    };
    for (size_t i = 0; i < sizeof want_totals / sizeof want_totals[0]; i++)
        if (!strstr(text, want_totals[i]))
            fail_msg("summary lacks \"%s\":\n%s", want_totals[i], text);
    free(text);
    tide__report_destroy(r);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_reader_errors(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        const char *needle;
    } cases[] = {
        {"{\"version\": 1, ", "not valid JSON"},
        {"[]", "expected a JSON object"},
        {"{}", "version: missing"},
        {"{\"version\": 2}", "version 2"},
        {"{\"version\": 1, \"wall_s\": 1, \"steps\": 1, \"world_size_timeline\": [], "
         "\"rate_timeline\": []}",
         "events: missing"},
        {"{\"version\": 1, \"wall_s\": \"x\", \"steps\": 1, \"world_size_timeline\": [], "
         "\"rate_timeline\": [], \"events\": []}",
         "wall_s: expected a number"},
        {"{\"version\": 1, \"wall_s\": 1, \"steps\": 1, \"world_size_timeline\": [], "
         "\"rate_timeline\": [], \"events\": [{\"t\": 1, \"kind\": \"kill\"}, {\"t\": \"2\", "
         "\"kind\": \"kill\"}]}",
         "events[1].t: expected a number"},
        {"{\"version\": 1, \"wall_s\": 1, \"steps\": 1, \"world_size_timeline\": [{\"t\": 0, "
         "\"world_size\": 2.5}], \"rate_timeline\": [], \"events\": []}",
         "world_size_timeline[0].world_size: expected an integer"},
        {"{\"version\": 1, \"wall_s\": 1, \"steps\": 1, \"world_size_timeline\": [], "
         "\"rate_timeline\": [7], \"events\": []}",
         "rate_timeline[0]: expected an object"},
        {"{\"version\": 1, \"wall_s\": 1, \"steps\": 1, \"world_size_timeline\": [], "
         "\"rate_timeline\": [], \"events\": [], \"metrics\": {\"x\": \"y\"}}",
         "metrics.x: expected a number"},
    };
    char path[256];
    tmp_path(path, sizeof path, "bad.json");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_text(path, cases[i].text);
        json_t *j = (json_t *)1;
        char err[512] = "";
        int rc = tide__report_read(path, &j, err, sizeof err);
        if (rc != TIDE_EPROTO || strncmp(err, path, strlen(path)) || !strstr(err, cases[i].needle))
            fail_msg("case %zu: rc %d, \"%s\"; wanted \"%s: ...%s\"", i, rc, err, path,
                     cases[i].needle);
        assert_null(j);
    }
    unlink(path);
    json_t *j;
    char err[512];
    assert_int_equal(tide__report_read(path, &j, err, sizeof err), TIDE_EIO);
    assert_non_null(strstr(err, "cannot open"));

    /* Through the command: a clear message and exit status 1, no PNG. */
    char png[256];
    tmp_path(png, sizeof png, "never.png");
    write_text(path, "{ not json");
    char *argv[] = {"report", path, "--png", png, NULL};
    assert_int_equal(tide__cli_report(4, argv), 1);
    assert_int_not_equal(access(png, F_OK), 0);
    unlink(path);
    char *usage[] = {"report", NULL};
    assert_int_equal(tide__cli_report(1, usage), 2);
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void test_png(void **state)
{
    (void)state;
    /* A minute of training with every kind of event, like `make demo`. */
    tide__report_t *r;
    assert_int_equal(tide__report_create(&r), TIDE_OK);
    static const struct {
        double t;
        const char *kind;
        int rank, world_after;
    } evs[] = {{10, "preempt", 3, 3}, {20, "kill", 1, 2},  {30, "join", -1, 3},
               {38, "freeze", 0, 2},  {45, "coordinator-restart", -1, 2},
               {50, "join", -1, 3},   {55, "leave", 2, 2}};
    size_t next = 0;
    int world = 4, step = 0;
    tide__report_world_size(r, 0, world);
    for (double t = 0.1; t < 60; t += 0.1) {
        if (next < sizeof evs / sizeof evs[0] && t >= evs[next].t) {
            tide__report_event(r, t, evs[next].kind, evs[next].rank);
            world = evs[next].world_after;
            t += 0.8; /* the recovery */
            tide__report_world_size(r, t, world);
            next++;
        }
        tide__report_step(r, t, step++, 32 * world / 4, 0.1);
    }
    tide__report_metric(r, "loss", 0.31);
    char path[256], png[256];
    tmp_path(path, sizeof path, "sample.json");
    tmp_path(png, sizeof png, "sample.png");
    assert_int_equal(tide__report_write(r, path, 0), TIDE_OK);
    tide__report_destroy(r);

    char *argv[] = {"report", path, "--png", png, "--size", "1000x600", NULL};
    assert_int_equal(tide__cli_report(6, argv), 0);
    FILE *f = fopen(png, "rb");
    assert_non_null(f);
    unsigned char head[24];
    assert_int_equal(fread(head, 1, sizeof head, f), sizeof head);
    fclose(f);
    assert_memory_equal(head, "\x89PNG\r\n\x1a\n", 8);
    assert_memory_equal(head + 12, "IHDR", 4);
    assert_int_equal(be32(head + 16), 1000);
    assert_int_equal(be32(head + 20), 600);
    struct stat st;
    assert_int_equal(stat(png, &st), 0);
    assert_true(st.st_size > 10000 && st.st_size < 2000000); /* drawn, not blank */

    char *bad_size[] = {"report", path, "--png", png, "--size", "10x10", NULL};
    assert_int_equal(tide__cli_report(6, bad_size), 2);
    char *bad_out[] = {"report", path, "--png", "/nonexistent-dir/x.png", NULL};
    assert_int_equal(tide__cli_report(4, bad_out), 1);
    unlink(png);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),     cmocka_unit_test(test_rollback_and_bad_input),
        cmocka_unit_test(test_threads),        cmocka_unit_test(test_summary),
        cmocka_unit_test(test_reader_errors),  cmocka_unit_test(test_png),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
