/*
 * elastic_unit.c - unit tests of the elastic runtime's pure parts: the hosts
 * script format and the blacklist (src/coord/discovery.c), the member-table parser
 * against malformed input (P8), the elastic sampler's promises (P6), and the step
 * loop and state registry in a job of one (tide_notice leaves at a step boundary).
 * Exit status 0 when every check passes; each failure is printed.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coord/discovery.h"
#include "elastic/control.h"
#include "tide.h"

static int failures;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            failures++;                                                                            \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                        \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

static void test_hosts(void)
{
    tide__host_slots_t h[8];
    int n = tide__hosts_parse("a:2\nb\n# a comment\n\n  a:1 \r\nc.example-1_x:0\n", h, 8);
    CHECK(n == 3, "parsed %d hosts", n);
    CHECK(n >= 2 && !strcmp(h[0].name, "a") && h[0].slots == 3, "a has %d slots", h[0].slots);
    CHECK(n >= 2 && !strcmp(h[1].name, "b") && h[1].slots == 1, "b has %d slots", h[1].slots);
    CHECK(n == 3 && h[2].slots == 0, "c has %d slots", h[2].slots);
    const char *bad[] = {"a:x\n", "a:-1\n", "a b\n", "a:2000\n", ":3\n", "a:\n", "a;rm -rf /\n", "a:1:2\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(tide__hosts_parse(bad[i], h, 8) < 0, "accepted \"%s\"", bad[i]);
    char longname[400];
    memset(longname, 'x', sizeof longname - 2);
    longname[sizeof longname - 2] = '\n';
    longname[sizeof longname - 1] = 0;
    CHECK(tide__hosts_parse(longname, h, 8) < 0, "accepted a 398-byte host name");
    CHECK(tide__hosts_parse("a\nb\nc\n", h, 2) < 0, "more hosts than the cap were accepted");
    CHECK(tide__hosts_parse("", h, 8) == 0, "an empty output is not zero hosts");

    n = tide__hosts_run("printf 'localhost:2\\nother\\n'", 5000, h, 8);
    CHECK(n == 2 && h[0].slots == 2, "running a script: %d hosts", n);
    CHECK(tide__hosts_run("exit 3", 5000, h, 8) < 0, "a failing script was accepted");
    CHECK(tide__hosts_run("sleep 5", 200, h, 8) < 0, "a script that hangs was waited for");
    CHECK(tide__hosts_run("printf 'a:1\\0b'", 5000, h, 8) < 0, "a NUL byte was accepted");
}

static void test_blacklist(void)
{
    tide__blacklist_t b;
    tide__blacklist_init(&b, 100, 350);
    CHECK(!tide__blacklisted(&b, "h"), "a fresh host is blacklisted");
    CHECK(tide__blacklist_fail(&b, "h") == 100, "first cooldown");
    CHECK(tide__blacklist_fail(&b, "h") == 200, "second cooldown");
    CHECK(tide__blacklist_fail(&b, "h") == 350, "third cooldown is capped");
    CHECK(tide__blacklist_fail(&b, "h") == 350, "fourth cooldown is capped");
    CHECK(tide__blacklisted(&b, "h"), "a failing host is not blacklisted");
    CHECK(!tide__blacklisted(&b, "other"), "another host is blacklisted");
    tide__blacklist_ok(&b, "h");
    CHECK(!tide__blacklisted(&b, "h"), "a host that did well stays blacklisted");
    CHECK(tide__blacklist_fail(&b, "h") == 100, "the record was not cleared");
    usleep(150000);
    CHECK(!tide__blacklisted(&b, "h"), "the cooldown did not end");
    tide__blacklist_free(&b);
}

static void test_membership(void)
{
    const char *good = "{\"type\":\"members\",\"generation\":3,\"size\":2,\"root\":1,\"root_step\":7,"
                       "\"transport\":\"tcp\",\"members\":["
                       "{\"rank\":1,\"id\":\"w1\",\"host\":\"h\",\"addr\":\"127.0.0.1\",\"port\":5,\"pid\":9,\"step\":7},"
                       "{\"rank\":0,\"id\":\"w0\",\"host\":\"h\",\"addr\":\"127.0.0.1\",\"port\":4,\"pid\":8,\"step\":6}]}";
    json_t *j = json_loads(good, 0, NULL);
    tide__membership_t m;
    int ok = j && tide__membership_parse(j, "w1", &m) == TIDE_OK;
    CHECK(ok, "a good table refused");
    if (ok) {
        CHECK(m.generation == 3 && m.size == 2 && m.my_rank == 1 && m.root == 1 && m.root_step == 7 &&
                  !m.use_shm && m.members[0].data_port == 4 && m.steps[0] == 6,
              "fields misread");
        tide__membership_free(&m);
    }
    if (j && tide__membership_parse(j, "w9", &m) == TIDE_OK) {
        CHECK(m.my_rank == -1, "a stranger found itself in the table");
        tide__membership_free(&m);
    }
    json_decref(j);
    /* Each is the good table with one thing wrong. */
    const char *bad[] = {
        "{\"type\":\"members\",\"generation\":3,\"size\":3,\"root\":1,\"root_step\":7,\"transport\":\"tcp\",\"members\":[]}",
        "{\"type\":\"members\",\"generation\":-1,\"size\":1,\"root\":0,\"root_step\":7,\"transport\":\"tcp\",\"members\":[{\"rank\":0,\"id\":\"w\",\"host\":\"h\",\"addr\":\"a\",\"port\":1,\"pid\":1,\"step\":1}]}",
        "{\"type\":\"members\",\"generation\":1,\"size\":1,\"root\":1,\"root_step\":7,\"transport\":\"tcp\",\"members\":[{\"rank\":0,\"id\":\"w\",\"host\":\"h\",\"addr\":\"a\",\"port\":1,\"pid\":1,\"step\":1}]}",
        "{\"type\":\"members\",\"generation\":1,\"size\":1,\"root\":0,\"root_step\":7,\"transport\":\"udp\",\"members\":[{\"rank\":0,\"id\":\"w\",\"host\":\"h\",\"addr\":\"a\",\"port\":1,\"pid\":1,\"step\":1}]}",
        "{\"type\":\"members\",\"generation\":1,\"size\":1,\"root\":0,\"root_step\":7,\"transport\":\"tcp\",\"members\":[{\"rank\":1,\"id\":\"w\",\"host\":\"h\",\"addr\":\"a\",\"port\":1,\"pid\":1,\"step\":1}]}",
        "{\"type\":\"members\",\"generation\":1,\"size\":1,\"root\":0,\"root_step\":7,\"transport\":\"tcp\",\"members\":[{\"rank\":0,\"id\":\"w\",\"host\":\"h\",\"addr\":\"a\",\"port\":70000,\"pid\":1,\"step\":1}]}",
        "{\"type\":\"members\",\"generation\":1,\"size\":2,\"root\":0,\"root_step\":7,\"transport\":\"tcp\",\"members\":[{\"rank\":0,\"id\":\"w\",\"host\":\"h\",\"addr\":\"a\",\"port\":1,\"pid\":1,\"step\":1},{\"rank\":0,\"id\":\"v\",\"host\":\"h\",\"addr\":\"a\",\"port\":1,\"pid\":1,\"step\":1}]}",
        "{\"type\":\"members\",\"generation\":1,\"size\":1,\"root\":0,\"root_step\":7,\"transport\":\"tcp\",\"members\":[{\"rank\":0,\"id\":\"w\",\"host\":\"\",\"addr\":\"a\",\"port\":1,\"pid\":1,\"step\":1}]}",
        "{\"type\":\"members\",\"generation\":1,\"size\":1,\"root\":0,\"root_step\":7,\"transport\":\"tcp\",\"members\":[{\"rank\":0,\"id\":\"w\",\"host\":\"h\",\"addr\":\"a\",\"port\":\"1\",\"pid\":1,\"step\":1}]}",
        "{\"type\":\"members\",\"generation\":1,\"size\":1,\"root\":0,\"root_step\":7,\"transport\":\"tcp\",\"members\":[7]}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        j = json_loads(bad[i], 0, NULL);
        CHECK(j != NULL, "case %zu is not JSON", i);
        int rc = j ? tide__membership_parse(j, "w", &m) : TIDE_EPROTO;
        CHECK(rc == TIDE_EPROTO, "malformed table %zu accepted (%d)", i, rc);
        if (rc == TIDE_OK) tide__membership_free(&m);
        json_decref(j);
    }
}

static void test_sampler(void)
{
    const size_t N = 103, B = 10; /* 11 steps, the last one of 3 */
    tide_sampler_t *s;
    CHECK(tide_sampler_create(N, B, 5, &s) == TIDE_OK, "create");
    CHECK(tide_sampler_steps_per_epoch(s) == 11, "steps per epoch");
    uint32_t ref[103], got[103], idx[10];
    for (int size = 1; size <= 7; size++) {
        size_t n = 0;
        for (uint64_t st = 0; st < 11; st++) {
            tide_sampler_seek(s, 2, st);
            for (int r = 0; r < size; r++) {
                size_t c, g;
                CHECK(tide_sampler_batch(s, r, size, idx, B, &c, &g) == TIDE_OK, "batch");
                CHECK(g == (st < 10 ? B : 3), "global batch %zu at step %llu", g, (unsigned long long)st);
                memcpy((size == 1 ? ref : got) + n, idx, c * sizeof *idx);
                n += c;
            }
        }
        CHECK(n == N, "an epoch in %d ranks visits %zu samples", size, n);
        if (size > 1) CHECK(!memcmp(ref, got, sizeof ref), "%d ranks see another order", size);
    }
    unsigned char seen[103] = {0};
    for (size_t i = 0; i < N; i++) seen[ref[i]]++;
    int once = 1;
    for (size_t i = 0; i < N; i++) once &= seen[i] == 1;
    CHECK(once, "an epoch is not a permutation");
    size_t c, g;
    CHECK(tide_sampler_batch(s, 3, 2, idx, B, &c, &g) == TIDE_EINVAL, "rank 3 of 2 accepted");
    CHECK(tide_sampler_batch(s, 0, 1, idx, 2, &c, &g) == TIDE_EINVAL, "a short idx accepted");
    tide_sampler_destroy(s);
}

static int calls;
static int step_fn(tide_comm_t *comm, void *arg)
{
    double *x = arg;
    *x += 1.0;
    if (++calls == 5) tide_notice(comm); /* leaves at the end of this step */
    return TIDE_OK;
}

static void test_job_of_one(void)
{
    unsetenv("TIDE_RENDEZVOUS");
    tide_comm_t *comm;
    CHECK(tide_init(&comm) == TIDE_OK, "a job of one");
    double x = 0, y[4] = {1, 2, 3, 4};
    CHECK(tide_state_register(comm, "x", &x, sizeof x) == TIDE_OK, "register");
    CHECK(tide_state_register(comm, "y", y, sizeof y) == TIDE_OK, "register");
    CHECK(tide_state_register(comm, "bad name!", y, sizeof y) == TIDE_EINVAL, "a bad name accepted");
    CHECK(tide_state_register(comm, "z", NULL, 8) == TIDE_EINVAL, "a NULL buffer accepted");
    uint64_t c0 = tide_state_checksum(comm);
    int rc = tide_elastic_run(comm, step_fn, &x);
    CHECK(rc == TIDE_ESTOPPED, "a notice did not end the loop with TIDE_ESTOPPED (%d)", rc);
    CHECK(calls == 5 && x == 5.0 && tide_step(comm) == 5, "ran %d steps, x=%g, step %lld", calls, x,
          (long long)tide_step(comm));
    CHECK(tide_state_checksum(comm) != c0, "the checksum ignores the state");
    CHECK(tide_step_begin(comm) == TIDE_ESTOPPED, "a member that left can begin a step");
    CHECK(tide_state_unregister(comm, "y") == TIDE_OK, "unregister");
    CHECK(tide_state_unregister(comm, "y") == TIDE_ENOTFOUND, "unregister twice");
    CHECK(tide_log_metric(comm, "loss", 0.5) == TIDE_OK, "a metric in a job of one");
    CHECK(tide_log_metric(comm, "", 0.5) == TIDE_EINVAL, "an empty metric name accepted");
    CHECK(tide_finalize(comm) == TIDE_OK, "finalize");
}

int main(void)
{
    test_hosts();
    test_blacklist();
    test_membership();
    test_sampler();
    test_job_of_one();
    if (failures) fprintf(stderr, "elastic_unit: %d failure(s)\n", failures);
    else fprintf(stderr, "elastic_unit: ok\n");
    return failures ? 1 : 0;
}
