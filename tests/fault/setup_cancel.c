/*
 * setup_cancel.c - the TCP transport's setup gives up at once when its
 * generation is aborted (P1: never hang), in each of the places it can wait on a
 * peer that is alive to the kernel but frozen (SIGSTOP, or cut off after the
 * member table went out):
 *
 *   connect    the peer's listener completes the connection in its backlog, so
 *              the wait is the handshake: the peer never sends its hello
 *   accept     the peer never connects
 *   handshake  the peer connects and then never sends its claim
 *
 * Each case runs tide__tcp_create in this process against a socket the test
 * holds still, writes the cancel eventfd after CANCEL_MS, and checks that the
 * setup returns TIDE_EABORTED within SLACK_MS of it, far below its 20 s timeout.
 * A control case without a cancel descriptor shows that the setup really waits
 * there (until its timeout), so the other cases cannot pass by accident.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "core/auth.h"
#include "core/net.h"
#include "core/param.h"
#include "tide.h"
#include "transport/transport.h"

#define CANCEL_MS 300
#define SLACK_MS 400    /* a loaded 2-core machine, sanitizers */
#define TIMEOUT_MS 20000 /* what the setup would wait without a cancel */

typedef struct {
    int efd;
    int delay_ms;
} canceller_t;

static void *cancel_later(void *arg)
{
    canceller_t *c = arg;
    struct timespec ts = {c->delay_ms / 1000, (long)(c->delay_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    uint64_t one = 1;
    if (write(c->efd, &one, sizeof one) != sizeof one) perror("setup_cancel: write");
    return NULL;
}

/* Two ranks: the frozen peer's listener (members[0]: never accepted from, so a
 * connection to it completes in the backlog and then hears nothing) and the
 * setup's own data listener (members[1]'s port; the accept side). */
typedef struct {
    tide__secret_t secret;
    tide__member_t members[2];
    int my_listener;
    int peer_listener;
} world_t;

static void world_init(world_t *w)
{
    memset(w, 0, sizeof *w);
    w->secret.len = 32;
    memset(w->secret.key, 0x5a, w->secret.len);
    int port;
    assert_int_equal(tide__net_listen("127.0.0.1", 0, 16, &w->peer_listener, &port), TIDE_OK);
    w->members[0] = (tide__member_t){.rank = 0, .pid = 1, .data_port = port};
    assert_int_equal(tide__net_listen("127.0.0.1", 0, 16, &w->my_listener, &port), TIDE_OK);
    w->members[1] = (tide__member_t){.rank = 1, .pid = 2, .data_port = port};
    for (int i = 0; i < 2; i++) {
        snprintf(w->members[i].addr, sizeof w->members[i].addr, "127.0.0.1");
        snprintf(w->members[i].host_id, sizeof w->members[i].host_id, "setup-cancel-%d", i);
    }
}

static void world_free(world_t *w)
{
    close(w->peer_listener);
    close(w->my_listener);
}

/* Runs the setup of `rank` (0 accepts from rank 1, 1 connects to rank 0) with
 * the cancel written after delay_ms (< 0: no cancel descriptor at all). Returns
 * the setup's status; *ms is how long it took. */
static int run_setup(world_t *w, int rank, int delay_ms, int timeout_ms, double *ms)
{
    int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    assert_true(efd >= 0);
    tide__transport_setup_t s = {.rank = rank,
                                 .size = 2,
                                 .generation = 7,
                                 .members = w->members,
                                 .secret = &w->secret,
                                 .job_id = "setup-cancel",
                                 .listen_fd = w->my_listener,
                                 .timeout_ms = timeout_ms,
                                 .cancel_fd = delay_ms >= 0 ? efd : -1};
    canceller_t c = {efd, delay_ms};
    pthread_t th;
    if (delay_ms >= 0) assert_int_equal(pthread_create(&th, NULL, cancel_later, &c), 0);
    uint64_t t0 = tide__now_ns();
    tide__transport_t *t = NULL;
    int rc = tide__tcp_create(&s, &t);
    *ms = (double)(tide__now_ns() - t0) / 1e6;
    if (delay_ms >= 0) pthread_join(th, NULL);
    if (t) t->ops->destroy(t);
    close(efd);
    return rc;
}

static void expect_cancelled(int rc, double ms, const char *where)
{
    printf("# %s: %s after %.0f ms (cancel at %d ms)\n", where, tide_errname(rc), ms, CANCEL_MS);
    assert_int_equal(rc, TIDE_EABORTED);
    assert_true(ms >= CANCEL_MS - 5);
    assert_true(ms <= CANCEL_MS + SLACK_MS);
}

/* The setup of rank, cancelled after CANCEL_MS, must end at once. */
static void expect_setup_cancelled(int rank, const char *where)
{
    world_t w;
    world_init(&w);
    double ms;
    int rc = run_setup(&w, rank, CANCEL_MS, TIMEOUT_MS, &ms);
    expect_cancelled(rc, ms, where);
    world_free(&w);
}

/* Rank 1 connects to rank 0, whose listener completes the connection in its
 * backlog and never says hello. */
static void test_connect_to_frozen_peer(void **state)
{
    (void)state;
    expect_setup_cancelled(1, "connect to a frozen peer");
}

/* The control: without a cancel descriptor the same setup waits out its timeout. */
static void test_connect_without_cancel_waits(void **state)
{
    (void)state;
    world_t w;
    world_init(&w);
    double ms;
    int rc = run_setup(&w, 1, -1, 1000, &ms);
    printf("# no cancel descriptor: %s after %.0f ms (timeout 1000 ms)\n", tide_errname(rc), ms);
    assert_int_not_equal(rc, TIDE_OK);
    assert_int_not_equal(rc, TIDE_EABORTED);
    assert_true(ms >= 950);
    world_free(&w);
}

/* Rank 0 waits for rank 1, which never connects. */
static void test_accept_from_absent_peer(void **state)
{
    (void)state;
    expect_setup_cancelled(0, "accept from an absent peer");
}

/* Rank 0 accepts a connection from "rank 1" that then never sends its claim. */
static void test_handshake_with_silent_peer(void **state)
{
    (void)state;
    world_t w;
    world_init(&w);
    /* The setup's listener (my_listener) takes the silent connection from its
     * backlog and then waits for the claim. */
    int fd, port = w.members[1].data_port;
    assert_int_equal(tide__net_connect("127.0.0.1", port, 1000, -1, &fd), TIDE_OK);
    double ms;
    int rc = run_setup(&w, 0, CANCEL_MS, TIMEOUT_MS, &ms);
    expect_cancelled(rc, ms, "handshake with a silent peer");
    close(fd);
    world_free(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_connect_to_frozen_peer),
        cmocka_unit_test(test_connect_without_cancel_waits),
        cmocka_unit_test(test_accept_from_absent_peer),
        cmocka_unit_test(test_handshake_with_silent_peer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
