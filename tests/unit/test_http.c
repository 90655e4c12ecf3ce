/*
 * test_http.c - the coordinator's HTTP server on a loopback port, fetched with
 * libcurl: /metrics (Prometheus text), /healthz, /status, 404, 405, a GET with a
 * body, a failing or oversized callback; the Prometheus helpers; and `tide status`
 * against the same server (the table, unreachable, malformed answers).
 */
#include <setjmp.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <jansson.h>

#include "cli/cli.h"
#include "coord/http.h"
#include "tide.h"

enum {
    MODE_OK,
    MODE_FAIL,
    MODE_MALFORMED,
    MODE_HUGE,
    MODE_UNHEALTHY,
    MODE_NOT_OBJECT,
    MODE_SNAPSHOT,
};

/* Set by the test thread, read by the server's: atomic, so TSan agrees. */
typedef struct {
    _Atomic int mode;
    _Atomic int calls;
} ctx_t;

static int handler(void *arg, tide__http_endpoint_t ep, tide__http_body_t *b)
{
    ctx_t *c = arg;
    c->calls++;
    if (c->mode == MODE_FAIL) return TIDE_EIO;
    if (c->mode == MODE_HUGE) {
        static char chunk[64 * 1024];
        memset(chunk, 'x', sizeof chunk);
        while (tide__http_append(b, chunk, sizeof chunk) == TIDE_OK) {}
        return 200;
    }
    switch (ep) {
    case TIDE__HTTP_METRICS:
        tide__http_prom(b, "tide_", "world_size", "gauge", "Members of the current generation", 4);
        tide__http_prom_family(b, "tide_", "member_step", "gauge", "Last step per member");
        tide__http_prom_sample(b, "tide_", "member_step", "rank=\"0\"", 1200);
        tide__http_prom_sample(b, "tide_", "member_step", "rank=\"1\"", 1199);
        tide__http_prom(b, "tide_metric_", "val/loss", "gauge", "back\\slash\nnewline", 0.25);
        tide__http_prom(b, NULL, "9lives", "counter", NULL, INFINITY);
        return 200;
    case TIDE__HTTP_HEALTHZ: return c->mode == MODE_UNHEALTHY ? 503 : 200;
    case TIDE__HTTP_STATUS:
        if (c->mode == MODE_MALFORMED) return tide__http_printf(b, "{\"job\": oops") ? 500 : 200;
        if (c->mode == MODE_NOT_OBJECT) return tide__http_printf(b, "[1, 2]") ? 500 : 200;
        if (c->mode == MODE_SNAPSHOT) /* the names of tide__coord_snapshot */
            return tide__http_printf(
                       b, "{\"state\": \"running\", \"generation\": 2, \"size\": 3, \"min\": 1, "
                          "\"max\": 4, \"step\": 50, \"steps_per_s\": 12.5, \"waiting\": 0, "
                          "\"members\": [{\"rank\": 0, \"id\": 1, \"pid\": 10, \"host\": \"h\", "
                          "\"step\": 50}], \"events\": [{}, {}]}")
                       ? 500
                       : 200;
        {
            json_t *j = json_pack(
                "{s:s,s:s,s:i,s:i,s:i,s:i,s:i,s:f,s:i,s:[{s:i,s:s,s:i,s:i,s:s,s:i},"
                "{s:i,s:s,s:i,s:i,s:s,s:i}]}",
                "job", "demo\x1b[31m", "state", "training", "generation", 3, "step", 1200,
                "world_size", 2, "min", 1, "max", 4, "samples_per_s", 612.5, "pending_joins", 1,
                "members", "rank", 0, "host", "127.0.0.1", "pid", 4242, "step", 1200, "state",
                "active", "last_heartbeat_ms", 120, "rank", 1, "host", "worker-with-a-long-name",
                "pid", 4243, "step", 1199, "state", "notice", "last_heartbeat_ms", 80);
            int rc = tide__http_json(b, j);
            json_decref(j);
            return rc ? rc : 200;
        }
    }
    return 404;
}

typedef struct {
    char *data;
    size_t len;
} buf_t;

static size_t collect(char *p, size_t size, size_t nmemb, void *arg)
{
    buf_t *b = arg;
    size_t n = size * nmemb;
    char *q = realloc(b->data, b->len + n + 1);
    if (!q) return 0;
    memcpy(q + b->len, p, n);
    b->data = q;
    b->len += n;
    b->data[b->len] = '\0';
    return n;
}

typedef struct {
    long code;
    char type[128];
    char allow[64];
    char *body;
} reply_t;

static size_t on_header(char *p, size_t size, size_t nmemb, void *arg)
{
    reply_t *r = arg;
    size_t n = size * nmemb;
    if (n > 6 && !strncasecmp(p, "Allow:", 6))
        snprintf(r->allow, sizeof r->allow, "%.*s", (int)(n - 6), p + 6);
    return n;
}

static reply_t fetch(int port, const char *method, const char *path, const char *body)
{
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
    CURL *c = curl_easy_init();
    assert_non_null(c);
    buf_t b = {0};
    reply_t r = {0};
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_PROXY, "");
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 5000L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &r);
    if (body) curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    if (method && !strcmp(method, "HEAD")) curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    else if (method) curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    CURLcode cc = curl_easy_perform(c);
    if (cc != CURLE_OK) fail_msg("%s %s: %s", method ? method : "GET", url, curl_easy_strerror(cc));
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.code);
    char *ct = NULL;
    curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &ct);
    if (ct) snprintf(r.type, sizeof r.type, "%s", ct);
    curl_easy_cleanup(c);
    r.body = b.data ? b.data : strdup("");
    return r;
}

static int setup(void **state)
{
    static ctx_t ctx;
    ctx = (ctx_t){0};
    tide__http_t *h;
    if (tide__http_start("127.0.0.1", 0, handler, &ctx, &h)) return -1;
    *state = h;
    return 0;
}

static int teardown(void **state)
{
    tide__http_stop(*state);
    return 0;
}

static void test_endpoints(void **state)
{
    tide__http_t *h = *state;
    int port = tide__http_port(h);
    assert_true(port > 0 && port < 65536);

    reply_t r = fetch(port, NULL, "/metrics", NULL);
    assert_int_equal(r.code, 200);
    assert_string_equal(r.type, "text/plain; version=0.0.4; charset=utf-8");
    static const char *const lines[] = {
        "# HELP tide_world_size Members of the current generation\n",
        "# TYPE tide_world_size gauge\ntide_world_size 4\n",
        ("# TYPE tide_member_step gauge\ntide_member_step{rank=\"0\"} 1200\n"
         "tide_member_step{rank=\"1\"} 1199\n"),
        "# HELP tide_metric_val_loss back\\\\slash\\nnewline\n",
        "tide_metric_val_loss 0.25\n",
        "# TYPE _9lives counter\n_9lives +Inf\n",
    };
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++)
        if (!strstr(r.body, lines[i])) fail_msg("/metrics lacks \"%s\":\n%s", lines[i], r.body);
    assert_null(strstr(r.body, "# HELP _9lives")); /* no help given, no HELP line */
    free(r.body);

    r = fetch(port, NULL, "/healthz", NULL);
    assert_int_equal(r.code, 200);
    assert_string_equal(r.body, "ok\n");
    free(r.body);

    r = fetch(port, NULL, "/status", NULL);
    assert_int_equal(r.code, 200);
    assert_string_equal(r.type, "application/json");
    json_error_t jerr;
    json_t *j = json_loads(r.body, 0, &jerr);
    assert_non_null(j);
    assert_int_equal(json_integer_value(json_object_get(j, "generation")), 3);
    assert_int_equal(json_array_size(json_object_get(j, "members")), 2);
    json_decref(j);
    free(r.body);

    r = fetch(port, "HEAD", "/status", NULL);
    assert_int_equal(r.code, 200);
    assert_string_equal(r.body, "");
    free(r.body);

    r = fetch(port, NULL, "/nope", NULL);
    assert_int_equal(r.code, 404);
    free(r.body);
    r = fetch(port, NULL, "/metrics/", NULL);
    assert_int_equal(r.code, 404);
    free(r.body);

    r = fetch(port, "POST", "/metrics", "x=1");
    assert_int_equal(r.code, 405);
    assert_non_null(strstr(r.allow, "GET"));
    free(r.body);
    r = fetch(port, "DELETE", "/status", NULL);
    assert_int_equal(r.code, 405);
    free(r.body);
    r = fetch(port, "GET", "/status", "a body");
    assert_int_equal(r.code, 413);
    free(r.body);
    /* Query strings do not change the path. */
    r = fetch(port, NULL, "/healthz?verbose=1", NULL);
    assert_int_equal(r.code, 200);
    free(r.body);
}

static void test_failing_handler(void **state)
{
    (void)state;
    ctx_t ctx = {.mode = MODE_FAIL};
    tide__http_t *h;
    assert_int_equal(tide__http_start("127.0.0.1", 0, handler, &ctx, &h), TIDE_OK);
    int port = tide__http_port(h);
    reply_t r = fetch(port, NULL, "/status", NULL);
    assert_int_equal(r.code, 500);
    free(r.body);
    ctx.mode = MODE_HUGE;
    r = fetch(port, NULL, "/metrics", NULL);
    assert_int_equal(r.code, 500);
    free(r.body);
    ctx.mode = MODE_UNHEALTHY;
    r = fetch(port, NULL, "/healthz", NULL);
    assert_int_equal(r.code, 503);
    free(r.body);
    assert_true(ctx.calls == 3);
    tide__http_stop(h);

    /* No handler: /healthz still answers, the rest is 404. */
    assert_int_equal(tide__http_start("127.0.0.1", 0, NULL, NULL, &h), TIDE_OK);
    port = tide__http_port(h);
    r = fetch(port, NULL, "/healthz", NULL);
    assert_int_equal(r.code, 200);
    free(r.body);
    r = fetch(port, NULL, "/metrics", NULL);
    assert_int_equal(r.code, 404);
    free(r.body);

    /* The port is taken: a clear failure, not a crash. */
    tide__http_t *h2 = NULL;
    assert_int_equal(tide__http_start("127.0.0.1", port, NULL, NULL, &h2), TIDE_ESYS);
    assert_null(h2);
    tide__http_stop(h);
    assert_int_equal(tide__http_start("127.0.0.1", 70000, NULL, NULL, &h2), TIDE_EINVAL);
    tide__http_stop(NULL);
}

/* Runs `tide status ARGS` with stdout and stderr captured in *out. */
static int run_status(char **argv, int argc, char **out)
{
    char path[] = "/tmp/tide-test-status-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    fflush(stdout);
    fflush(stderr);
    int saved_out = dup(1), saved_err = dup(2);
    dup2(fd, 1);
    dup2(fd, 2);
    int rc = tide__cli_status(argc, argv);
    fflush(stdout);
    fflush(stderr);
    dup2(saved_out, 1);
    dup2(saved_err, 2);
    close(saved_out);
    close(saved_err);
    off_t len = lseek(fd, 0, SEEK_END);
    *out = calloc(1, (size_t)len + 1);
    if (pread(fd, *out, (size_t)len, 0) != len) (*out)[0] = '\0';
    close(fd);
    unlink(path);
    return rc;
}

static void test_status_command(void **state)
{
    (void)state;
    ctx_t ctx = {.mode = MODE_OK};
    tide__http_t *h;
    assert_int_equal(tide__http_start("127.0.0.1", 0, handler, &ctx, &h), TIDE_OK);
    char addr[64], url[80];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", tide__http_port(h));
    snprintf(url, sizeof url, "http://%s/", addr);
    char *out;

    char *argv[] = {"status", addr, NULL};
    assert_int_equal(run_status(argv, 2, &out), 0);
    static const char *const want[] = {
        "generation   3\n", "step         1200\n", "world size   2 (min 1, max 4)\n",
        "rate         612.5 samples/s\n", "joining      1\n", "2 members\n",
        "RANK  HOST                     PID   STEP  STATE   HEARTBEAT\n",
        "0     127.0.0.1                4242  1200  active  120 ms ago\n",
        "1     worker-with-a-long-name  4243  1199  notice  80 ms ago\n",
        "job          demo?[31m\n", /* the escape byte is not passed to the terminal */
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(out, want[i])) fail_msg("tide status lacks \"%s\":\n%s", want[i], out);
    free(out);

    char *argv_url[] = {"status", "--json", url, NULL};
    assert_int_equal(run_status(argv_url, 3, &out), 0);
    assert_non_null(strstr(out, "\"generation\": 3"));
    free(out);

    ctx.mode = MODE_SNAPSHOT;
    assert_int_equal(run_status(argv, 2, &out), 0);
    static const char *const want_snap[] = {
        "world size   3 (min 1, max 4)\n", "rate         12.50 steps/s\n", "joining      0\n",
        "events       2\n", "0     h     10   50    -      -\n",
    };
    for (size_t i = 0; i < sizeof want_snap / sizeof want_snap[0]; i++)
        if (!strstr(out, want_snap[i]))
            fail_msg("tide status lacks \"%s\":\n%s", want_snap[i], out);
    free(out);

    ctx.mode = MODE_MALFORMED;
    assert_int_equal(run_status(argv, 2, &out), 1);
    assert_non_null(strstr(out, "not valid JSON"));
    assert_non_null(strstr(out, "/status"));
    free(out);
    ctx.mode = MODE_NOT_OBJECT;
    assert_int_equal(run_status(argv, 2, &out), 1);
    assert_non_null(strstr(out, "expected a JSON object"));
    free(out);
    ctx.mode = MODE_FAIL;
    assert_int_equal(run_status(argv, 2, &out), 1);
    assert_non_null(strstr(out, "answered HTTP 500"));
    free(out);
    ctx.mode = MODE_HUGE;
    assert_int_equal(run_status(argv, 2, &out), 1); /* the server refuses it: 500 */
    free(out);

    tide__http_stop(h);
    assert_int_equal(run_status(argv, 2, &out), 1);
    assert_non_null(strstr(out, "cannot reach"));
    free(out);

    char *bad[] = {"status", "host:1/path?x", NULL};
    assert_int_equal(run_status(bad, 2, &out), 2);
    assert_non_null(strstr(out, "is not a coordinator address"));
    free(out);
    char *none[] = {"status", NULL};
    assert_int_equal(run_status(none, 1, &out), 2);
    free(out);
    char *bad_timeout[] = {"status", "--timeout", "0", addr, NULL};
    assert_int_equal(run_status(bad_timeout, 4, &out), 2);
    free(out);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_endpoints, setup, teardown),
        cmocka_unit_test(test_failing_handler),
        cmocka_unit_test(test_status_command),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
