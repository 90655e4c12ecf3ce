/*
 * fault_worker.c - the worker side of the fault tests, one process of a `tide run`
 * job. One mode per run:
 *
 *   death --victim V --how exit|kill --dir D [--count C] [--iters K] [--async]
 *       Every rank loops over large float32 allreduces (--async: rounds of 4
 *       iallreduces in flight, waited in order; every one after the first failed
 *       one must fail too, and the last wait must return within the bound). After K iterations a
 * thread of rank V notes the time (system-wide CLOCK_MONOTONIC) in D/death and then _exit(7)s or
 * raise(SIGKILL)s while its main thread is inside an allreduce. Every other rank must see its
 * collective fail with TIDE_EPEERLOST or TIDE_EABORTED within a second of that time;
 * tide_comm_status must then return the same code, and the next collective must return it at once
 *       without touching its buffers. Each survivor writes its verdict to
 *       D/rank.R ("ok ..." or "FAIL ..."), which fault_driver checks, since
 *       `tide run` exits non-zero for the victim whatever the survivors do.
 *
 *   exit --rank R --code C
 *       init, barrier, finalize; then rank R exits C and the others 0.
 *
 *   mismatch --case NAME [--settle-ms MS]
 *       Rank N-1 (only it) calls a collective that differs from everyone else's in
 *       one respect (count, dtype, op, root or kind). Every rank must get an error
 *       (TIDE_EMISMATCH), none may hang (watchdog), the communicator must then be
 *       failed with that code, and the next call must fail at once with it without
 *       touching its buffers. Exits 0 when all of that held on this rank.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tt.h"

/* Upper bounds the tests assert. DEATH_MAX_S is the promise (P1 for a closed
 * connection or an exited process); STICKY_MAX_S is "at once" with room for a
 * loaded two-core machine. */
#define DEATH_MAX_S 1.0
#define STICKY_MAX_S 0.1
#define MISMATCH_MAX_S 5.0

static tide_comm_t *comm;
static int rank, size;

static int init_or_die(void)
{
    tt_watchdog(60, "tide_init");
    int rc = tide_init(&comm);
    if (rc != TIDE_OK) {
        tt_fail("tide_init returned %d %s", rc, tt_rcname(rc));
        return -1;
    }
    rank = tt_rank = tide_rank(comm);
    size = tide_size(comm);
    return 0;
}

/* Checks that comm failed with err and stays failed: status, and a next call that
 * returns err at once with its buffers untouched. */
static void check_sticky(int err, const char *after)
{
    int st = tide_comm_status(comm);
    if (st != err)
        tt_fail("after %s: tide_comm_status is %d %s, want the collective's %d %s", after, st,
                tt_rcname(st), err, tt_rcname(err));
    tt_buf_t s, r;
    tt_buf_alloc(&s, 4096 * 4);
    tt_buf_alloc(&r, 4096 * 4);
    tt_buf_fill_pattern(&s, 1);
    tt_buf_fill_pattern(&r, 2);
    double t0 = tt_now();
    int rc = tide_allreduce(comm, s.data, r.data, 4096, TIDE_FLOAT32, TIDE_SUM);
    double dt = tt_now() - t0;
    if (rc != err)
        tt_fail("after %s: the next allreduce returned %d %s, want the same error %d %s", after, rc,
                tt_rcname(rc), err, tt_rcname(err));
    if (dt > STICKY_MAX_S)
        tt_fail("after %s: the next allreduce took %.3f s to fail, want at once (< %.2f s)", after,
                dt, STICKY_MAX_S);
    if (!tt_buf_has_pattern(&s, 1) || !tt_buf_has_pattern(&r, 2))
        tt_fail("after %s: the failing allreduce modified its buffers", after);
    t0 = tt_now();
    rc = tide_broadcast(comm, r.data, 16, TIDE_INT32, 0);
    dt = tt_now() - t0;
    if (rc != err)
        tt_fail("after %s: a broadcast returned %d %s, want %d %s", after, rc, tt_rcname(rc), err,
                tt_rcname(err));
    if (dt > STICKY_MAX_S) tt_fail("after %s: a broadcast took %.3f s to fail", after, dt);
    if (!tt_buf_has_pattern(&r, 2))
        tt_fail("after %s: the failing broadcast modified its buffer", after);
    tt_buf_free(&s);
    tt_buf_free(&r);
}

/* ------------------------------------------------------------------ death */

static const char *death_dir;
static const char *death_how;
static double death_delay;

static void *victim_thread(void *arg)
{
    (void)arg;
    tt_sleep(death_delay);
    char path[4096];
    snprintf(path, sizeof path, "%s/death", death_dir);
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    double t = tt_now();
    if (f) {
        fprintf(f, "%.9f\n", t);
        fclose(f);
        rename(tmp, path);
    }
    fprintf(stderr, "[r%d] dying now (%s) at t=%.6f\n", rank, death_how, t);
    if (strcmp(death_how, "kill") == 0) raise(SIGKILL);
    _exit(7);
    return NULL;
}

static int write_verdict(const char *dir, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int write_verdict(const char *dir, const char *fmt, ...)
{
    char path[4096], tmp[4200], line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    snprintf(path, sizeof path, "%s/rank.%d", dir, rank);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return -1;
    fprintf(f, "%s\n", line);
    fclose(f);
    return rename(tmp, path);
}

static double read_death_time(const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/death", dir);
    /* The victim wrote it before dying, so it is there; poll briefly anyway. */
    for (int i = 0; i < 200; i++) {
        FILE *f = fopen(path, "r");
        if (f) {
            double t = -1;
            int n = fscanf(f, "%lf", &t);
            fclose(f);
            if (n == 1) return t;
        }
        tt_sleep(0.01);
    }
    return -1;
}

/* `tide run` answers a dead worker by sending SIGTERM to the others (and SIGKILL
 * after a grace period). A survivor that died of that SIGTERM could not report how
 * its collective ended, so, unless libtide installed a SIGTERM handler of its own
 * (a notice source), the survivor notes the signal and carries on: what is measured
 * is the library's promise, not the launcher's policy. */
static volatile sig_atomic_t got_sigterm;
static double sigterm_at;

static void on_sigterm(int sig)
{
    (void)sig;
    if (!got_sigterm) sigterm_at = tt_now(); /* clock_gettime is async-signal-safe */
    got_sigterm = 1;
}

static void keep_running_on_sigterm(void)
{
    struct sigaction old;
    if (sigaction(SIGTERM, NULL, &old) != 0 || old.sa_handler != SIG_DFL) return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigterm;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, NULL);
}

/* One round of the death loop: one blocking allreduce, or (async) NASYNC
 * iallreduces in flight at once, waited in order. Returns the first error. In an
 * async round every request after a failed one must fail too, since it needs the
 * same peers (P1 covers requests in flight as well). */
#define NASYNC 4
static int death_round(bool async, float *a, size_t count)
{
    if (!async) return tide_allreduce(comm, a, a, count, TIDE_FLOAT32, TIDE_MAX);
    tide_request_t *req[NASYNC];
    int start_rc[NASYNC];
    size_t part = count / NASYNC;
    for (int i = 0; i < NASYNC; i++) {
        req[i] = NULL;
        start_rc[i] = tide_iallreduce(comm, a + (size_t)i * part, a + (size_t)i * part, part,
                                      TIDE_FLOAT32, TIDE_MAX, &req[i]);
    }
    int first = TIDE_OK;
    for (int i = 0; i < NASYNC; i++) {
        int rc = start_rc[i] == TIDE_OK ? tide_wait(req[i]) : start_rc[i];
        if (rc == TIDE_OK && first != TIDE_OK)
            tt_fail("iallreduce %d of a round succeeded after an earlier one failed with %s", i,
                    tt_rcname(first));
        if (rc != TIDE_OK && first == TIDE_OK) first = rc;
    }
    return first;
}

static int mode_death(int argc, char **argv)
{
    int victim = (int)tt_opt_long(argc, argv, "--victim", 1);
    death_how = tt_opt(argc, argv, "--how", "exit");
    death_dir = tt_opt(argc, argv, "--dir", NULL);
    size_t count = (size_t)tt_opt_long(argc, argv, "--count", (long)tt_scaled_count(1 << 20, 4097));
    long iters = tt_opt_long(argc, argv, "--iters", 4);
    bool async = false;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--async") == 0) async = true;
    if (!death_dir) return TT_EXIT_USAGE;
    if (init_or_die() != 0) return TT_EXIT_FAIL;
    if (victim < 0 || victim >= size) {
        tt_fail("victim %d outside the job of %d", victim, size);
        return TT_EXIT_USAGE;
    }
    float *a = malloc(count * sizeof(float));
    for (size_t i = 0; i < count; i++)
        a[i] = 1.0f;
    if (rank != victim) {
        /* From here on a survivor's verdict says "no verdict" until it has one, so
         * that one that hangs or is killed leaves a readable reason; and SIGTERM
         * from the launcher must not kill it before it has one. */
        keep_running_on_sigterm();
        write_verdict(death_dir, "FAIL no verdict: hung or killed before its collective "
                                 "returned (see its stderr)");
    }

    /* Calibrate the delay so that the victim dies inside an allreduce: half the
     * measured time of one round. */
    double t_one = 0;
    long k = 0;
    int err = TIDE_OK;
    for (; k < iters; k++) {
        tt_watchdog(60, "death: allreduces before the victim dies");
        double t0 = tt_now();
        err = death_round(async, a, count);
        t_one = tt_now() - t0;
        if (err != TIDE_OK) break;
    }
    if (err != TIDE_OK && rank == victim) {
        tt_fail("round %ld before the death returned %d %s", k, err, tt_rcname(err));
        return TT_EXIT_FAIL;
    }
    if (rank == victim) {
        death_delay = t_one / 2;
        pthread_t th;
        pthread_create(&th, NULL, victim_thread, NULL);
        pthread_detach(th);
        for (;;) /* dies in here, from the thread */
            death_round(async, a, count);
    }

    /* A survivor: go on until a round fails (a slow survivor may see the death
     * while still calibrating). 50 rounds is far more than the victim needs to
     * die. The watchdog fires before the launcher's 5 s grace ends. */
    double t_err = tt_now();
    for (; err == TIDE_OK && k < iters + 50; k++) {
        tt_watchdog(4, "death: a survivor's allreduce after the victim died (P1: no hang)");
        err = death_round(async, a, count);
        t_err = tt_now(); /* async: when the round's last wait returned */
    }
    tt_watchdog(20, "death: checks after the error");
    if (err == TIDE_OK) {
        tt_fail("50 allreduces succeeded after rank %d died", victim);
        write_verdict(death_dir, "FAIL no error in 50 allreduces after rank %d died", victim);
        free(a);
        return TT_EXIT_FAIL;
    }
    double t_death = read_death_time(death_dir);
    double latency = t_death < 0 ? -1 : t_err - t_death;
    if (t_death < 0 && k < iters) tt_fail("round %ld failed before the victim died", k);
    if (err != TIDE_EPEERLOST && err != TIDE_EABORTED)
        tt_fail("the allreduce failed with %d %s, want TIDE_EPEERLOST or TIDE_EABORTED", err,
                tt_rcname(err));
    if (t_death < 0)
        tt_fail("the victim's death time is missing");
    else if (latency > DEATH_MAX_S)
        tt_fail("the error came %.3f s after rank %d died, want < %.1f s", latency, victim,
                DEATH_MAX_S);
    check_sticky(err, "a peer's death");
    char term[64] = "no SIGTERM";
    if (got_sigterm)
        snprintf(term, sizeof term, "SIGTERM %.3f s after the death", sigterm_at - t_death);
    if (tt_failures)
        write_verdict(death_dir, "FAIL err=%s latency=%.3f, %s (see this rank's stderr)",
                      tt_rcname(err), latency, term);
    else
        write_verdict(death_dir, "ok err=%s latency=%.3f iterations=%ld, %s", tt_rcname(err),
                      latency, k, term);
    tt_note("survivor: %s %.3f s after the death, %s", tt_rcname(err), latency, term);
    tt_watchdog(20, "tide_finalize on a failed communicator");
    tide_finalize(comm);
    tt_watchdog(0, NULL);
    free(a);
    return tt_failures ? TT_EXIT_FAIL : 0;
}

/* ------------------------------------------------------------------- exit */

static int mode_exit(int argc, char **argv)
{
    int who = (int)tt_opt_long(argc, argv, "--rank", 0);
    int code = (int)tt_opt_long(argc, argv, "--code", 3);
    if (init_or_die() != 0) return TT_EXIT_FAIL;
    tt_watchdog(60, "exit: barrier");
    int rc = tide_barrier(comm);
    tt_expect_rc(rc, TIDE_OK, "barrier");
    tt_watchdog(60, "exit: finalize");
    tt_expect_rc(tide_finalize(comm), TIDE_OK, "finalize");
    tt_watchdog(0, NULL);
    if (tt_failures) return TT_EXIT_FAIL;
    return rank == who ? code : 0;
}

/* --------------------------------------------------------------- mismatch */

typedef enum { K_ALLREDUCE, K_BROADCAST, K_ALLGATHER, K_BARRIER } kind_t;

typedef struct {
    kind_t kind;
    size_t count;
    tide_dtype_t dt;
    tide_op_t op;
    int root;
} call_t;

typedef struct {
    const char *name;
    call_t common, odd; /* odd: what rank N-1 calls */
} mcase_t;

#define AR(c, d, o)                                                                                \
    {                                                                                              \
        K_ALLREDUCE, (c), (d), (o), 0                                                              \
    }
#define BC(c, d, r)                                                                                \
    {                                                                                              \
        K_BROADCAST, (c), (d), TIDE_SUM, (r)                                                       \
    }
#define AG(c, d)                                                                                   \
    {                                                                                              \
        K_ALLGATHER, (c), (d), TIDE_SUM, 0                                                         \
    }
#define BAR                                                                                        \
    {                                                                                              \
        K_BARRIER, 0, TIDE_INT32, TIDE_SUM, 0                                                      \
    }

static const mcase_t mcases[] = {
    {"count", AR(1000, TIDE_FLOAT32, TIDE_SUM), AR(1001, TIDE_FLOAT32, TIDE_SUM)},
    /* Different sizes usually take different algorithms: neither may hang. */
    {"count-small-large", AR(7, TIDE_FLOAT32, TIDE_SUM),
     AR(TT_LARGE_COUNT, TIDE_FLOAT32, TIDE_SUM)},
    {"count-large-small", AR(TT_LARGE_COUNT, TIDE_INT64, TIDE_MAX), AR(1, TIDE_INT64, TIDE_MAX)},
    /* Same element size, different type: a check of byte counts alone misses it. */
    {"dtype-same-size", AR(1000, TIDE_FLOAT32, TIDE_SUM), AR(1000, TIDE_INT32, TIDE_SUM)},
    {"dtype-16bit", AR(1000, TIDE_FLOAT16, TIDE_SUM), AR(1000, TIDE_BFLOAT16, TIDE_SUM)},
    {"dtype-size", AR(1000, TIDE_FLOAT32, TIDE_SUM), AR(1000, TIDE_FLOAT64, TIDE_SUM)},
    {"op", AR(1000, TIDE_FLOAT32, TIDE_SUM), AR(1000, TIDE_FLOAT32, TIDE_MAX)},
    {"op-avg", AR(100000, TIDE_FLOAT32, TIDE_SUM), AR(100000, TIDE_FLOAT32, TIDE_AVG)},
    {"root", BC(1000, TIDE_FLOAT32, 0), BC(1000, TIDE_FLOAT32, 1)},
    {"bcast-count", BC(1000, TIDE_UINT8, 0), BC(999, TIDE_UINT8, 0)},
    {"kind-bcast", AR(1000, TIDE_FLOAT32, TIDE_SUM), BC(1000, TIDE_FLOAT32, 0)},
    {"kind-allgather", AR(1000, TIDE_FLOAT32, TIDE_SUM), AG(1000, TIDE_FLOAT32)},
    {"kind-barrier", AR(1, TIDE_INT32, TIDE_SUM), BAR},
};

static int do_call(const call_t *c, void *buf, void *recv)
{
    switch (c->kind) {
    case K_ALLREDUCE:
        return tide_allreduce(comm, buf, recv, c->count, c->dt, c->op);
    case K_BROADCAST:
        return tide_broadcast(comm, buf, c->count, c->dt, c->root);
    case K_ALLGATHER:
        return tide_allgather(comm, buf, recv, c->count, c->dt);
    default:
        return tide_barrier(comm);
    }
}

static int mode_mismatch(int argc, char **argv)
{
    const char *name = tt_opt(argc, argv, "--case", NULL);
    const mcase_t *mc = NULL;
    for (size_t i = 0; name && i < sizeof mcases / sizeof mcases[0]; i++)
        if (strcmp(mcases[i].name, name) == 0) mc = &mcases[i];
    if (!mc) {
        fprintf(stderr, "mismatch: unknown --case %s; cases:", name ? name : "(none)");
        for (size_t i = 0; i < sizeof mcases / sizeof mcases[0]; i++)
            fprintf(stderr, " %s", mcases[i].name);
        fprintf(stderr, "\n");
        return TT_EXIT_USAGE;
    }
    if (init_or_die() != 0) return TT_EXIT_FAIL;
    if (size < 2) {
        tt_note("mismatch needs two ranks or more");
        tide_finalize(comm);
        return TT_EXIT_USAGE;
    }
    /* One good collective first, so the connections exist and the mismatch is not
     * caught by some first-call handshake only. */
    tt_watchdog(60, "mismatch: the matched allreduce before");
    int32_t x = 1, y = 0;
    int rc = tide_allreduce(comm, &x, &y, 1, TIDE_INT32, TIDE_SUM);
    if (!tt_expect_rc(rc, TIDE_OK, "matched allreduce before the mismatch") || y != size) {
        tt_fail("matched allreduce before the mismatch: sum %d, want %d", y, size);
        return TT_EXIT_FAIL;
    }

    /* Let every rank leave that allreduce before anyone enters the mismatched call:
     * a rank that detects the mismatch fails the group, and a slow rank still
     * finishing the matched call would then fail there instead (a separate
     * question, see BUGS-for-lead.md), which is not what this test is about. */
    tt_sleep((double)tt_opt_long(argc, argv, "--settle-ms", 200) / 1000.0);

    const call_t *mine = rank == size - 1 ? &mc->odd : &mc->common;
    size_t maxcount = mc->common.count > mc->odd.count ? mc->common.count : mc->odd.count;
    size_t bytes = (maxcount + 1) * 8 * (size_t)size;
    void *buf = calloc(1, bytes), *recv = calloc(1, bytes);
    static char what[160];
    snprintf(what, sizeof what, "mismatch case %s (rank %d of %d calls the odd one)", mc->name,
             size - 1, size);
    tt_watchdog(15, what);
    double t0 = tt_now();
    rc = do_call(mine, buf, recv);
    double dt = tt_now() - t0;
    tt_watchdog(20, "mismatch: checks after the error");
    if (rc == TIDE_OK)
        tt_fail("%s: returned TIDE_OK, want TIDE_EMISMATCH", what);
    else if (rc != TIDE_EMISMATCH)
        tt_fail("%s: returned %d %s, want TIDE_EMISMATCH", what, rc, tt_rcname(rc));
    if (dt > MISMATCH_MAX_S) tt_fail("%s: took %.3f s to return", what, dt);
    tt_note("%s: %s after %.3f s", what, tt_rcname(rc), dt);
    if (rc != TIDE_OK) check_sticky(rc, what);
    free(buf);
    free(recv);
    tt_watchdog(20, "tide_finalize on a failed communicator");
    tide_finalize(comm);
    tt_watchdog(0, NULL);
    return tt_failures ? TT_EXIT_FAIL : 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: fault_worker death|exit|mismatch [options]\n");
        return TT_EXIT_USAGE;
    }
    if (strcmp(argv[1], "death") == 0) return mode_death(argc, argv);
    if (strcmp(argv[1], "exit") == 0) return mode_exit(argc, argv);
    if (strcmp(argv[1], "mismatch") == 0) return mode_mismatch(argc, argv);
    fprintf(stderr, "fault_worker: unknown mode %s\n", argv[1]);
    return TT_EXIT_USAGE;
}
