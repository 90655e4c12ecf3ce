/*
 * elastic_driver.c - the elastic fault tests: real processes, killed, frozen,
 * given notice, joined, with the coordinator itself killed and restarted. Each
 * scenario names the promise it checks and fails if it is broken.
 *
 *   elastic_driver TIDE WORKER SCENARIO
 *
 *   kill      P1, P3  kill -9 during a large allreduce: every survivor's collective
 *                     errs within 1 s; they resume from the highest completed step
 *                     (lost_steps <= 1) on the reference trajectory
 *   stop      P1      SIGSTOP a worker: the survivors err within the heartbeat
 *                     timeout, and re-form without it
 *   leave     P2      notice through TIDE_NOTICE_FILE: the member leaves at a step
 *                     boundary, nobody rolls back (lost_steps 0), no error anywhere
 *   sigterm   P2      the same notice as SIGTERM
 *   join      P4      a new worker joins at a step boundary and receives the state in
 *                     memory: its checksum equals the members'; nobody rolls back
 *   restart   P7      the coordinator is killed -9: training goes on; restarted on the
 *                     same address, it adopts the generation and the next join succeeds
 *   below-min         a loss below --min pauses the job; a new worker resumes it
 *   garbage   P8      garbage to the coordinator's port and to a worker's data port, a
 *                     stale-generation data connection: refused, logged, the job goes on
 *   secret    P8      a worker with the wrong secret gets a clear error; the job goes on
 *   run-chaos P1-P4, P7  `tide run --chaos`: a kill, a preemption with notice, joins and a
 *                     coordinator restart; tide run exits 0 and its report gives each
 *                     event lost_steps <= 1
 *   run-hosts         `tide run --hosts-script`: capacity grows (a worker joins), and a
 *                     host whose workers fail is blacklisted with a doubling cooldown
 *   run-min           `tide run`: below --min for longer than --pause-timeout, the job
 *                     fails with a message
 *   run-netns P1, P3, P4  three network namespaces play three hosts (`--launch 'ip netns
 *                     exec {host}'`, TCP between them); one namespace's link is cut
 *                     (`ip link set ... down`): the other two err within the heartbeat
 *                     timeout and train on from the highest completed step; when the
 *                     link comes back, the cut-off worker re-joins with the members'
 *                     state. Needs root (exit 77, skipped, without)
 *
 * Every scenario also checks, for every step any worker completed, that its state
 * is the reference trajectory's (a job of one computes it): the toy model of
 * elastic_worker.c is exact, so elasticity must not change a single bit (P3, P6).
 * TIDE_TRANSPORT passes through. A scenario runs under a deadline (45 s; 90 s in
 * sanitizer builds, where TIDE_TEST_SCALE < 1 also makes the kill scenario lighter).
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "core/auth.h"
#include "core/net.h"

#define MAX_W 16
#define MAX_STEPS 4096
#define DEADLINE_S 45.0

typedef struct {
    pid_t pid;
    int alive;
    int status;
    char id[16];
    char log[300];
    char err[300];
} wproc_t;

typedef struct {
    char type[8];
    int64_t step;
    int gen, rank, size;
    uint64_t crc;
    double t;
    char rc[32];
} rec_t;

static const char *tide_bin, *worker_bin, *scenario;
static char dir[256], secret_hex[129], job_id[17], events[300], coord_out[300];
static char coord_addr[64];
static int coord_port;
static pid_t coord_pid;
static wproc_t W[MAX_W];
static int NW;
static uint64_t ref_crc[MAX_STEPS], ref_init;
static int steps = 60, count = 64, step_ms = 25, failures;
static unsigned expect_fail; /* workers whose failure is the point */
static double t_start;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "FAIL [%s]: ", scenario);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    failures++;
}

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "elastic_driver [%s] %.3f: ", scenario, now() - t_start);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* ---- processes ---- */

static void reap(void)
{
    int st;
    pid_t p;
    while ((p = waitpid(-1, &st, WNOHANG)) > 0) {
        for (int i = 0; i < NW; i++)
            if (W[i].pid == p) {
                W[i].alive = 0;
                W[i].status = st;
            }
        if (p == coord_pid) coord_pid = 0;
    }
}

static void start_coordinator(int min, int max, int expect, int port, int pause_ms)
{
    char listen[64], smin[16], smax[16], sexp[16], spause[16];
    snprintf(listen, sizeof listen, "127.0.0.1:%d", port);
    snprintf(smin, sizeof smin, "%d", min);
    snprintf(smax, sizeof smax, "%d", max);
    snprintf(sexp, sizeof sexp, "%d", expect);
    snprintf(spause, sizeof spause, "%d", pause_ms);
    int p[2];
    if (pipe(p) < 0) exit(3);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(p[1], STDOUT_FILENO);
        int e = open(coord_out, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (e >= 0) dup2(e, STDERR_FILENO);
        close(p[0]);
        setenv("TIDE_JOB_SECRET", secret_hex, 1);
        execl(tide_bin, tide_bin, "coordinator", "--listen", listen, "--min", smin, "--max", smax,
              "--expect", sexp, "--events", events, "--pause-timeout", spause, "--settle-ms", "300",
              (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    coord_pid = pid;
    /* "tide coordinator listening on HOST:PORT" */
    char buf[256] = {0};
    size_t len = 0;
    double until = now() + 10;
    while (now() < until && !strchr(buf, '\n')) {
        struct pollfd pf = {p[0], POLLIN, 0};
        if (poll(&pf, 1, 100) > 0) {
            ssize_t r = read(p[0], buf + len, sizeof buf - 1 - len);
            if (r <= 0) break;
            len += (size_t)r;
        }
    }
    close(p[0]);
    char *a = strstr(buf, "listening on ");
    if (!a) {
        fail("the coordinator did not start (see %s)", coord_out);
        exit(1);
    }
    a += strlen("listening on ");
    a[strcspn(a, "\n")] = 0;
    snprintf(coord_addr, sizeof coord_addr, "%s", a);
    coord_port = atoi(strrchr(coord_addr, ':') + 1);
    note("coordinator pid %d on %s", (int)pid, coord_addr);
}

static void kill_coordinator(void)
{
    if (coord_pid > 0) {
        kill(coord_pid, SIGKILL);
        waitpid(coord_pid, NULL, 0);
        coord_pid = 0;
    }
}

/* Starts a worker; secret NULL: the job's. */
static int spawn_worker(const char *secret)
{
    int i = NW++;
    wproc_t *w = &W[i];
    char id[16];
    snprintf(id, sizeof id, "w%d", i);
    memcpy(w->id, id, sizeof id);
    snprintf(w->log, sizeof w->log, "%s/%s.log", dir, id);
    snprintf(w->err, sizeof w->err, "%s/%s.err", dir, id);
    char ssteps[16], scount[16], sms[16], notice[1024];
    snprintf(ssteps, sizeof ssteps, "%d", steps);
    snprintf(scount, sizeof scount, "%d", count);
    snprintf(sms, sizeof sms, "%d", step_ms);
    snprintf(notice, sizeof notice, "%s/notice.%s", dir, id);
    pid_t pid = fork();
    if (pid == 0) {
        int e = open(w->err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (e >= 0) dup2(e, STDERR_FILENO);
        setenv("TIDE_RENDEZVOUS", coord_addr, 1);
        setenv("TIDE_JOB_SECRET", secret ? secret : secret_hex, 1);
        setenv("TIDE_JOB_ID", job_id, 1);
        setenv("TIDE_WORKER_ID", w->id, 1);
        setenv("TIDE_NOTICE_FILE", notice, 1);
        const char *wrap = getenv("ELASTIC_WRAPPER") ? "--wrapper" : NULL;
        execl(worker_bin, worker_bin, "--log", w->log, "--steps", ssteps, "--count", scount,
              "--step-ms", sms, wrap, "1", (char *)NULL);
        _exit(127);
    }
    w->pid = pid;
    w->alive = 1;
    return i;
}

/* ---- logs ---- */

static int parse_line(const char *line, rec_t *r)
{
    memset(r, 0, sizeof *r);
    r->step = -1;
    if (sscanf(line, "%7s", r->type) != 1) return -1;
    const char *p;
    if ((p = strstr(line, "step="))) r->step = strtoll(p + 5, NULL, 10);
    if ((p = strstr(line, "gen="))) r->gen = atoi(p + 4);
    if ((p = strstr(line, "rank="))) r->rank = atoi(p + 5);
    if ((p = strstr(line, "size="))) r->size = atoi(p + 5);
    if ((p = strstr(line, "crc="))) r->crc = strtoull(p + 4, NULL, 16);
    if ((p = strstr(line, " t="))) r->t = strtod(p + 3, NULL);
    if ((p = strstr(line, "rc="))) sscanf(p + 3, "%31s", r->rc);
    return 0;
}

/* Reads a worker's log; returns the number of records (at most cap). */
static int read_log(const char *path, rec_t *out, int cap)
{
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[600];
    int n = 0;
    while (n < cap && fgets(line, sizeof line, f))
        if (parse_line(line, &out[n]) == 0) n++;
    fclose(f);
    return n;
}

static rec_t recs[MAX_STEPS * 2];

/* The highest completed step index a worker logged, or -1. */
static int64_t last_step(int i)
{
    int n = read_log(W[i].log, recs, MAX_STEPS * 2);
    int64_t best = -1;
    for (int k = 0; k < n; k++)
        if (!strcmp(recs[k].type, "step") && recs[k].step > best) best = recs[k].step;
    return best;
}

static int has(int i, const char *type)
{
    int n = read_log(W[i].log, recs, MAX_STEPS * 2);
    for (int k = 0; k < n; k++)
        if (!strcmp(recs[k].type, type)) return 1;
    return 0;
}

static double deadline;

static void check_deadline(const char *what)
{
    if (now() > deadline) {
        fail("timed out waiting for %s (P1: no hang)", what);
        for (int i = 0; i < NW; i++)
            if (W[i].alive) kill(W[i].pid, SIGKILL);
        kill_coordinator();
        exit(1);
    }
}

/* Waits until every worker in the set (mask of indices; alive ones) logged step >= k. */
static void wait_steps(unsigned mask, int64_t k)
{
    for (;;) {
        reap();
        int ok = 1;
        for (int i = 0; i < NW; i++)
            if ((mask >> i & 1) && last_step(i) < k) ok = 0;
        if (ok) return;
        check_deadline("workers to reach a step");
        usleep(5000);
    }
}

static void wait_exit(int i, double timeout)
{
    double until = now() + timeout;
    while (W[i].alive && now() < until) {
        reap();
        usleep(10000);
    }
}

static int events_has(const char *needle)
{
    FILE *f = fopen(events, "r");
    if (!f) return 0;
    char line[4096];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) found = strstr(line, needle) != NULL;
    fclose(f);
    return found;
}

static void wait_event(const char *needle)
{
    while (!events_has(needle)) {
        reap();
        check_deadline(needle);
        usleep(10000);
    }
}

/* ---- the reference, and the checks every scenario makes ---- */

static void reference(void)
{
    char path[300], ssteps[16], scount[16];
    snprintf(path, sizeof path, "%s/reference.log", dir);
    snprintf(ssteps, sizeof ssteps, "%d", steps);
    snprintf(scount, sizeof scount, "%d", count);
    pid_t pid = fork();
    if (pid == 0) {
        unsetenv("TIDE_RENDEZVOUS");
        execl(worker_bin, worker_bin, "--log", path, "--steps", ssteps, "--count", scount,
              "--step-ms", "0", (char *)NULL);
        _exit(127);
    }
    int st;
    waitpid(pid, &st, 0);
    int n = read_log(path, recs, MAX_STEPS * 2);
    for (int k = 0; k < n; k++) {
        if (!strcmp(recs[k].type, "step") && recs[k].step >= 0 && recs[k].step < MAX_STEPS)
            ref_crc[recs[k].step] = recs[k].crc;
        if (!strcmp(recs[k].type, "begin")) ref_init = recs[k].crc;
    }
    if (!ref_crc[steps - 1]) {
        fail("the reference run did not complete");
        exit(1);
    }
}

/* Every step and every restore of every worker is on the reference trajectory;
 * replays (a step index done twice by one worker) are counted. */
static void check_trajectory(int max_replays)
{
    for (int i = 0; i < NW; i++) {
        if (expect_fail >> i & 1) continue;
        int n = read_log(W[i].log, recs, MAX_STEPS * 2);
        int64_t prev = -1;
        int replays = 0;
        for (int k = 0; k < n; k++) {
            rec_t *r = &recs[k];
            if (!strcmp(r->type, "step")) {
                if (r->crc != ref_crc[r->step])
                    fail("%s: step %" PRId64 " left state %016" PRIx64 ", the reference has %016" PRIx64
                         " (P3/P6)", W[i].id, r->step, r->crc, ref_crc[r->step]);
                if (prev >= 0 && r->step <= prev) replays += (int)(prev - r->step + 1);
                else if (prev >= 0 && r->step != prev + 1)
                    fail("%s: step %" PRId64 " after step %" PRId64 ": steps skipped", W[i].id, r->step,
                         prev);
                prev = r->step;
            } else if (!strcmp(r->type, "begin")) {
                uint64_t want = r->step == 0 ? ref_init : ref_crc[r->step - 1];
                if (r->crc != want)
                    fail("%s: restored state at step %" PRId64 " is %016" PRIx64 ", want %016" PRIx64
                         " (P3/P4)", W[i].id, r->step, r->crc, want);
                if (prev >= 0 && r->step < prev + 1)
                    replays += (int)(prev + 1 - r->step);
                prev = r->step - 1;
            } else if (!strcmp(r->type, "done")) {
                if (r->step != steps || r->crc != ref_crc[steps - 1])
                    fail("%s: done at step %" PRId64 " with %016" PRIx64 ", want %d and %016" PRIx64,
                         W[i].id, r->step, r->crc, steps, ref_crc[steps - 1]);
            } else if (!strcmp(r->type, "fail")) {
                fail("%s: failed with %s", W[i].id, r->rc);
            }
        }
        if (replays > max_replays)
            fail("%s: %d step(s) done twice, at most %d allowed (lost steps)", W[i].id, replays,
                 max_replays);
    }
}

static void finish(unsigned expect_done)
{
    for (int i = 0; i < NW; i++) {
        if (!(expect_done >> i & 1)) continue;
        wait_exit(i, deadline - now());
        if (W[i].alive) {
            fail("%s did not finish (P1: no hang)", W[i].id);
            continue;
        }
        if (!has(i, "done")) fail("%s exited without finishing training", W[i].id);
        if (!(WIFEXITED(W[i].status) && WEXITSTATUS(W[i].status) == 0))
            fail("%s exited with status %d", W[i].id, W[i].status);
    }
}

static void dump_on_failure(void)
{
    if (!failures) return;
    for (int i = 0; i < NW; i++) {
        char cmd[700];
        snprintf(cmd, sizeof cmd, "echo '--- %s log'; tail -n 8 %s; echo '--- %s stderr'; tail -n 15 %s",
                 W[i].id, W[i].log, W[i].id, W[i].err);
        if (system(cmd) < 0) break;
    }
    char cmd[700];
    snprintf(cmd, sizeof cmd, "echo '--- coordinator'; tail -n 30 %s; echo '--- events'; cat %s",
             coord_out, events);
    if (system(cmd) < 0) return;
}

/* The first error a worker logged after t, or -1. */
static double first_error_after(int i, double t)
{
    int n = read_log(W[i].log, recs, MAX_STEPS * 2);
    for (int k = 0; k < n; k++)
        if (!strcmp(recs[k].type, "error") && recs[k].t >= t - 0.001) return recs[k].t;
    return -1;
}

/* Whether worker i's collective (not just its group, between steps) failed after t. */
static int collective_error_after(int i, double t)
{
    FILE *f = fopen(W[i].log, "r");
    if (!f) return 0;
    char line[600];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        rec_t r;
        if (parse_line(line, &r) == 0 && !strcmp(r.type, "error") && r.t >= t - 0.001 &&
            !strstr(line, "in=between_steps"))
            found = 1;
    }
    fclose(f);
    return found;
}

/* The longest time between two consecutive steps of worker i after t. */
static double max_step_gap(int i, double t)
{
    int n = read_log(W[i].log, recs, MAX_STEPS * 2);
    double last = -1, gap = 0;
    for (int k = 0; k < n; k++) {
        if (strcmp(recs[k].type, "step") || recs[k].t < t) continue;
        if (last >= 0 && recs[k].t - last > gap) gap = recs[k].t - last;
        last = recs[k].t;
    }
    return gap;
}

/* The step at which worker i began its first generation after time t. */
static int64_t begin_after(int i, double t)
{
    int n = read_log(W[i].log, recs, MAX_STEPS * 2);
    for (int k = 0; k < n; k++)
        if (!strcmp(recs[k].type, "begin") && recs[k].t >= t) return recs[k].step;
    return -1;
}

/* ---- scenarios ---- */

static unsigned all_but(int n, int victim)
{
    return ((1u << n) - 1) & ~(1u << victim);
}

static void wait_begin_after(unsigned mask, double t)
{
    for (;;) {
        reap();
        int ok = 1;
        for (int i = 0; i < NW; i++)
            if ((mask >> i & 1) && begin_after(i, t) < 0) ok = 0;
        if (ok) return;
        check_deadline("the next generation");
        usleep(5000);
    }
}

static double scale = 1.0; /* TIDE_TEST_SCALE: sanitizer builds run lighter */

static void scenario_kill(void)
{
    /* 16 MiB of float64 (2 MiB under sanitizers): the allreduce is most of each step. */
    count = scale < 1 ? 1 << 18 : 1 << 21;
    step_ms = 0;
    steps = 40;
    reference();
    start_coordinator(2, 4, 4, 0, 30000);
    for (int i = 0; i < 4; i++) spawn_worker(NULL);
    wait_steps(0xf, 5);
    int victim = 2;
    int64_t v_before = last_step(victim);
    double t_kill = now();
    kill(W[victim].pid, SIGKILL);
    note("killed %s at step %" PRId64, W[victim].id, v_before);
    unsigned surv = all_but(4, victim);
    wait_begin_after(surv, t_kill);
    int64_t v_last = last_step(victim), resumed = -1;
    int in_flight = 0;
    for (int i = 0; i < 4; i++) {
        if (i == victim) continue;
        double te = first_error_after(i, t_kill);
        if (collective_error_after(i, t_kill)) in_flight++;
        if (te < 0) fail("%s saw no error after the kill", W[i].id);
        else if (te - t_kill > 1.0)
            fail("%s's collective failed %.3f s after the kill, want < 1 s (P1)", W[i].id, te - t_kill);
        else note("%s: error %.3f s after the kill", W[i].id, te - t_kill);
        int64_t b = begin_after(i, t_kill);
        if (resumed >= 0 && b != resumed) fail("survivors resumed at different steps (%" PRId64 ", %" PRId64 ")", resumed, b);
        resumed = b;
    }
    if (!in_flight) fail("no survivor was in a collective when the victim died: nothing checked P1");
    /* The victim completed steps 0..v_last; resuming at `resumed` loses v_last+1-resumed. */
    if (v_last + 1 - resumed > 1)
        fail("resumed at step %" PRId64 " but the victim had completed step %" PRId64 ": %" PRId64
             " steps lost, at most 1 allowed (P3)", resumed, v_last, v_last + 1 - resumed);
    note("victim completed up to step %" PRId64 "; survivors resumed at step %" PRId64, v_last, resumed);
    finish(surv);
    check_trajectory(1);
}

static void scenario_stop(void)
{
    setenv("TIDE_HEARTBEAT_MS", "200", 1);
    setenv("TIDE_PEER_TIMEOUT_MS", "1500", 1);
    steps = 80;
    reference();
    start_coordinator(2, 4, 3, 0, 30000);
    for (int i = 0; i < 3; i++) spawn_worker(NULL);
    wait_steps(0x7, 5);
    int victim = 1;
    double t_stop = now();
    kill(W[victim].pid, SIGSTOP);
    note("froze %s", W[victim].id);
    unsigned surv = all_but(3, victim);
    wait_begin_after(surv, t_stop);
    for (int i = 0; i < 3; i++) {
        if (i == victim) continue;
        double te = first_error_after(i, t_stop);
        if (te < 0) fail("%s saw no error after the freeze", W[i].id);
        else if (te - t_stop > 1.5 + 1.0)
            fail("%s's collective failed %.3f s after the freeze, want within the 1.5 s heartbeat "
                 "timeout (+1 s) (P1)", W[i].id, te - t_stop);
        else note("%s: error %.3f s after the freeze", W[i].id, te - t_stop);
    }
    finish(surv);
    kill(W[victim].pid, SIGKILL);
    wait_exit(victim, 5);
    check_trajectory(1);
}

static void scenario_leave(int by_signal)
{
    steps = 60;
    reference();
    start_coordinator(2, 4, 4, 0, 30000);
    for (int i = 0; i < 4; i++) spawn_worker(NULL);
    wait_steps(0xf, 5);
    int victim = 1;
    double t_notice = now();
    if (by_signal) {
        kill(W[victim].pid, SIGTERM);
    } else {
        char path[1024];
        snprintf(path, sizeof path, "%s/notice.w%d", dir, victim);
        FILE *f = fopen(path, "w");
        if (f) fclose(f);
    }
    note("gave %s notice (%s)", W[victim].id, by_signal ? "SIGTERM" : "TIDE_NOTICE_FILE");
    wait_exit(victim, 20);
    if (W[victim].alive) fail("%s did not leave after its notice", W[victim].id);
    else if (!(WIFEXITED(W[victim].status) && WEXITSTATUS(W[victim].status) == 0))
        fail("%s left with status %d, want exit 0", W[victim].id, W[victim].status);
    if (!has(victim, "left")) fail("%s did not log its leave", W[victim].id);
    if (first_error_after(victim, 0) >= 0)
        fail("%s logged an error (a collective after leaving must return TIDE_ESTOPPED)",
             W[victim].id);
    int64_t v_last = last_step(victim);
    unsigned surv = all_but(4, victim);
    wait_begin_after(surv, t_notice);
    for (int i = 0; i < 4; i++) {
        if (i == victim) continue;
        if (first_error_after(i, 0) >= 0) fail("%s saw an error during a planned leave (P2)", W[i].id);
        int64_t b = begin_after(i, t_notice);
        if (b != v_last + 1)
            fail("%s resumed at step %" PRId64 ", the leaver completed step %" PRId64 " (P2: no rollback)",
                 W[i].id, b, v_last);
    }
    note("%s left after step %" PRId64 "; the others went on from step %" PRId64, W[victim].id, v_last,
         v_last + 1);
    wait_event("\"kind\":\"leave\"");
    if (!events_has("\"lost_steps\":0,\"recovery_ms\"")) fail("no generation event with lost_steps 0");
    finish(surv);
    check_trajectory(0);
}

static void scenario_join(void)
{
    steps = 200;
    count = 4096;
    reference();
    start_coordinator(2, 4, 3, 0, 30000);
    for (int i = 0; i < 3; i++) spawn_worker(NULL);
    wait_steps(0x7, 5);
    double t_join = now();
    setenv("ELASTIC_STARTUP_MS", "2500", 1); /* the joiner takes its time to start */
    int j = spawn_worker(NULL);
    unsetenv("ELASTIC_STARTUP_MS");
    note("started joiner %s (2.5 s of start-up after tide_init)", W[j].id);
    wait_begin_after(1u << j, 0);
    int64_t b = begin_after(j, 0);
    double joined = now();
    note("%s joined at step %" PRId64 " after %.3f s", W[j].id, b, joined - t_join);
    for (int i = 0; i < 3; i++) {
        if (first_error_after(i, 0) >= 0) fail("%s saw an error during a join (P4)", W[i].id);
        double gap = max_step_gap(i, t_join);
        /* Members that waited for the joiner's start-up would stall about 2.5 s;
         * 1.2 s leaves room for a loaded machine. */
        if (gap > 1.2)
            fail("%s stalled %.3f s between two steps while a worker joined: the join cost the "
                 "group (P4)", W[i].id, gap);
        else note("%s: longest gap between steps during the join %.3f s", W[i].id, gap);
    }
    wait_event("\"kind\":\"join\"");
    finish(0xf);
    /* The joiner's restored checksum is checked against the members' (the
     * reference's) state at that step in check_trajectory; no replays anywhere. */
    check_trajectory(0);
}

static void scenario_restart(void)
{
    steps = 150;
    reference();
    start_coordinator(2, 4, 3, 0, 30000);
    for (int i = 0; i < 3; i++) spawn_worker(NULL);
    wait_steps(0x7, 5);
    kill_coordinator();
    int64_t s0 = last_step(0);
    note("killed the coordinator at step %" PRId64, s0);
    usleep(1500000);
    int64_t s1 = last_step(0);
    if (s1 < s0 + 5) fail("training stalled without the coordinator: step %" PRId64 " -> %" PRId64 " (P7)", s0, s1);
    else note("without the coordinator: step %" PRId64 " -> %" PRId64, s0, s1);
    start_coordinator(2, 4, 3, coord_port, 30000);
    wait_event("\"event\":\"adopted\"");
    int j = spawn_worker(NULL);
    note("started joiner %s", W[j].id);
    wait_begin_after(1u << j, 0);
    note("%s joined at step %" PRId64, W[j].id, begin_after(j, 0));
    finish(0xf);
    check_trajectory(0);
}

static void scenario_below_min(void)
{
    steps = 80;
    reference();
    start_coordinator(3, 3, 3, 0, 30000);
    for (int i = 0; i < 3; i++) spawn_worker(NULL);
    wait_steps(0x7, 5);
    kill(W[2].pid, SIGKILL);
    double t_kill = now();
    note("killed %s: 2 left, --min 3", W[2].id);
    wait_event("\"event\":\"paused\"");
    int64_t p0 = last_step(0);
    usleep(1500000);
    int64_t p1 = last_step(0);
    if (p1 != p0) fail("the job went on below --min: step %" PRId64 " -> %" PRId64, p0, p1);
    int j = spawn_worker(NULL);
    note("paused at step %" PRId64 "; started %s", p1, W[j].id);
    wait_begin_after((1u << 0) | (1u << 1) | (1u << j), t_kill);
    wait_event("\"event\":\"resumed\"");
    finish((1u << 0) | (1u << 1) | (1u << j));
    check_trajectory(1);
}

/* The TCP port a process listens on (its data listener), from /proc. */
static int listen_port_of(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    if (!d) return -1;
    unsigned long inodes[64];
    int ni = 0;
    struct dirent *e;
    while ((e = readdir(d)) && ni < 64) {
        char l[1024], target[64];
        snprintf(l, sizeof l, "%s/%s", path, e->d_name);
        ssize_t n = readlink(l, target, sizeof target - 1);
        if (n > 0) {
            target[n] = 0;
            unsigned long ino;
            if (sscanf(target, "socket:[%lu]", &ino) == 1) inodes[ni++] = ino;
        }
    }
    closedir(d);
    FILE *f = fopen("/proc/net/tcp", "r");
    if (!f) return -1;
    char line[512];
    int port = -1;
    while (fgets(line, sizeof line, f)) {
        unsigned lport, st;
        unsigned long ino;
        if (sscanf(line, " %*d: %*x:%x %*x:%*x %x %*x:%*x %*x:%*x %*x %*d %*d %lu", &lport, &st, &ino) != 3)
            continue;
        if (st != 0x0A) continue;
        for (int i = 0; i < ni; i++)
            if (inodes[i] == ino) port = (int)lport;
    }
    fclose(f);
    return port;
}

static int dial(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void send_garbage(int port, int kind)
{
    int fd = dial(port);
    if (fd < 0) {
        fail("cannot connect to port %d", port);
        return;
    }
    unsigned char junk[1024];
    for (size_t i = 0; i < sizeof junk; i++) junk[i] = (unsigned char)(i * 131 + 7);
    if (kind == 1) memset(junk, 0xff, 4); /* an absurd length prefix */
    ssize_t w = send(fd, junk, sizeof junk, MSG_NOSIGNAL);
    (void)w;
    usleep(50000);
    close(fd);
}

static int stale_fd, stale_rc;
static const tide__secret_t *stale_secret;

static void *stale_main(void *arg)
{
    stale_rc = tide__auth_connect(stale_fd, stale_secret, TIDE__CONN_DATA, 0, 3, 20000, -1);
    return NULL;
}

static void scenario_garbage(void)
{
    setenv("TIDE_TRANSPORT", "tcp", 1);
    steps = 80;
    reference();
    start_coordinator(2, 4, 3, 0, 30000);
    for (int i = 0; i < 3; i++) spawn_worker(NULL);
    wait_steps(0x7, 5);
    /* The coordinator: garbage before the handshake, an absurd length, and a
     * silent connection; none may cost it anything but that connection. */
    send_garbage(coord_port, 0);
    send_garbage(coord_port, 1);
    int silent = dial(coord_port);
    /* A proven connection that then sends a malformed and an oversized frame. */
    tide__secret_t sec;
    tide__secret_from_hex(secret_hex, &sec);
    int fd = dial(coord_port);
    if (fd >= 0 && tide__auth_connect(fd, &sec, TIDE__CONN_CONTROL, 0, 0, 2000, -1) == 0) {
        unsigned char frame[16] = {0, 0, 0, 8, '{', '"', 't', 'y', 'p', 'e', '"', ':'};
        ssize_t w = send(fd, frame, 12, MSG_NOSIGNAL);
        (void)w;
    } else {
        fail("the driver could not complete a control handshake");
    }
    /* A worker's data port: garbage, and a proven connection of a stale generation. */
    int port = listen_port_of(W[0].pid);
    if (port <= 0) fail("cannot find %s's data port", W[0].id);
    else {
        send_garbage(port, 0);
        int s = dial(port);
        note("sent garbage to the coordinator (port %d) and to %s's data port %d", coord_port, W[0].id, port);
        /* The stale claim waits in the backlog until the next generation forms;
         * a thread makes it while the join below makes every member form
         * generation 1 over tcp. */
        if (s >= 0) {
            stale_fd = s;
            stale_secret = &sec;
            pthread_t th;
            pthread_create(&th, NULL, stale_main, NULL);
            int j = spawn_worker(NULL);
            wait_begin_after(1u << j, 0);
            pthread_join(th, NULL);
            close(s);
            if (stale_rc != -11 /* TIDE_ESTALE */)
                fail("a stale-generation data connection got %d, not TIDE_ESTALE (P8)", stale_rc);
            else note("the stale-generation connection was refused with TIDE_ESTALE");
        }
    }
    if (silent >= 0) close(silent);
    if (fd >= 0) close(fd);
    finish(0xf);
    check_trajectory(0);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "grep -q 'refused\\|malformed' %s", coord_out);
    if (system(cmd) != 0) fail("the coordinator logged nothing about the garbage");
    snprintf(cmd, sizeof cmd, "grep -q 'refused a data connection' %s/w0.err", dir);
    if (system(cmd) != 0) fail("%s logged nothing about the garbage on its data port", W[0].id);
}

static void scenario_secret(void)
{
    steps = 60;
    reference();
    start_coordinator(2, 4, 2, 0, 30000);
    for (int i = 0; i < 2; i++) spawn_worker(NULL);
    wait_steps(0x3, 5);
    int bad = spawn_worker("00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff");
    expect_fail |= 1u << bad;
    wait_exit(bad, 15);
    if (W[bad].alive) fail("the worker with the wrong secret did not exit");
    else if (WIFEXITED(W[bad].status) && WEXITSTATUS(W[bad].status) == 0)
        fail("the worker with the wrong secret exited 0");
    char cmd[400];
    snprintf(cmd, sizeof cmd, "grep -qi 'secret' %s", W[bad].err);
    if (system(cmd) != 0) fail("the wrong secret gave no clear error (see %s)", W[bad].err);
    else note("the wrong secret was refused with a clear error");
    finish(0x3);
    check_trajectory(0);
    /* The bad worker's log holds only its failure. */
}


/* ---- scenarios through `tide run` ---- */

/* Runs `tide run ARGS -- sh -c 'exec WORKER --log DIR/$TIDE_WORKER_ID.log ...'`,
 * its stderr to DIR/run.err; returns its wait status (or -1 on a timeout). */
static int run_tide(const char *const *args, int nargs, const char *extra_env, double timeout_s)
{
    char wcmd[2048], errp[400];
    snprintf(wcmd, sizeof wcmd,
             "exec %s --log %s/$TIDE_WORKER_ID.log --steps %d --count %d --step-ms %d", worker_bin,
             dir, steps, count, step_ms);
    snprintf(errp, sizeof errp, "%s/run.err", dir);
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0);
        int e = open(errp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (e >= 0) dup2(e, STDERR_FILENO);
        if (extra_env) putenv((char *)extra_env);
        const char *argv[64];
        int n = 0;
        argv[n++] = tide_bin;
        argv[n++] = "run";
        for (int i = 0; i < nargs && n < 56; i++) argv[n++] = args[i];
        argv[n++] = "--";
        argv[n++] = "/bin/sh";
        argv[n++] = "-c";
        argv[n++] = wcmd;
        argv[n] = NULL;
        execv(tide_bin, (char *const *)argv);
        _exit(127);
    }
    double until = now() + timeout_s;
    int st;
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) return st;
        if (now() > until) {
            kill(-pid, SIGKILL);
            waitpid(pid, &st, 0);
            fail("tide run did not finish within %.0f s (P1: no hang)", timeout_s);
            return -1;
        }
        usleep(20000);
    }
}

/* After a `tide run`: every worker log in DIR becomes an entry of W. */
static void collect_workers(void)
{
    for (int i = 0; i < 64 && NW < MAX_W; i++) {
        char path[400];
        snprintf(path, sizeof path, "%s/w%d.log", dir, i);
        if (access(path, R_OK) != 0) continue;
        wproc_t *w = &W[NW++];
        snprintf(w->id, sizeof w->id, "w%d", i);
        snprintf(w->log, sizeof w->log, "%s/w%d.log", dir, i);
        snprintf(w->err, sizeof w->err, "%s/run.err", dir);
    }
}

static int grep_file(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[4096];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) found = strstr(line, needle) != NULL;
    fclose(f);
    return found;
}

static void scenario_run_chaos(void)
{
    steps = 220;
    reference();
    char chaos[400], report[400], errp[400];
    snprintf(chaos, sizeof chaos, "%s/chaos.jsonl", dir);
    snprintf(report, sizeof report, "%s/report.json", dir);
    snprintf(errp, sizeof errp, "%s/run.err", dir);
    FILE *f = fopen(chaos, "w");
    fprintf(f, "{\"t\": 0.8, \"action\": \"kill\", \"target\": 1}\n"
               "{\"t\": 1.6, \"action\": \"preempt\", \"notice_s\": 5, \"target\": 0}\n"
               "{\"t\": 2.4, \"action\": \"join\"}\n"
               "{\"t\": 3.0, \"action\": \"coordinator-restart\"}\n"
               "{\"t\": 4.2, \"action\": \"join\"}\n");
    fclose(f);
    const char *args[] = {"-n", "4", "--min", "1", "--max", "4", "--chaos", chaos,
                          "--report", report, "--events", events};
    int st = run_tide(args, 12, NULL, deadline - now());
    if (st != -1 && !(WIFEXITED(st) && WEXITSTATUS(st) == 0))
        fail("tide run exited with status %d, want 0 (see %s)", st, errp);
    collect_workers();
    if (NW < 6) fail("%d workers ran, want 6 (4, and 2 joins)", NW);
    int done = 0;
    for (int i = 0; i < NW; i++) done += has(i, "done");
    if (done < 2) fail("only %d worker(s) finished training", done);
    check_trajectory(1);
    /* The report: five events, each with its cost known, none over one step. */
    char cmd[1200];
    snprintf(cmd, sizeof cmd,
             "python3 -c \"import json,sys; r=json.load(open('%s')); e=r['events']; "
             "k=[x['kind'] for x in e]; "
             "ok=k==['kill','preempt','join','coordinator-restart','join'] and "
             "all(x['lost_steps'] is not None and x['lost_steps']<=1 for x in e) and "
             "r['median_recovery_ms'] is not None and r['exit_status']==0; "
             "print('report events', k, [x['lost_steps'] for x in e], [x['recovery_ms'] for x in e], file=sys.stderr); "
             "sys.exit(0 if ok else 1)\"",
             report);
    if (system(cmd) != 0) fail("the report's events are not what happened (see %s)", report);
    if (!grep_file(errp, "adopted generation")) fail("the restarted coordinator did not adopt the generation (P7)");
}

static void scenario_run_hosts(void)
{
    steps = 150;
    reference();
    char hosts[400], script[400], errp[400];
    snprintf(hosts, sizeof hosts, "%s/hosts", dir);
    snprintf(script, sizeof script, "%s/hosts.sh", dir);
    snprintf(errp, sizeof errp, "%s/run.err", dir);
    FILE *f = fopen(hosts, "w");
    fprintf(f, "localhost:2\n");
    fclose(f);
    f = fopen(script, "w");
    fprintf(f, "#!/bin/sh\ncat %s\n", hosts);
    fclose(f);
    chmod(script, 0755);
    pid_t writer = fork();
    if (writer == 0) {
        /* Once training runs, capacity grows by one slot here and one on a host
         * whose workers cannot start. */
        char p0[400];
        snprintf(p0, sizeof p0, "%s/w0.log", dir);
        for (int i = 0; i < 1000 && !grep_file(p0, "step=10 "); i++) usleep(10000);
        FILE *g = fopen(hosts, "w");
        fprintf(g, "# grown\nlocalhost:3\nbadhost:1\n");
        fclose(g);
        _exit(0);
    }
    const char *args[] = {"--min", "1", "--max", "4", "--hosts-script", script, "--hosts-poll-ms",
                          "100", "--launch", "false {host}", "--blacklist-cooldown", "200"};
    int st = run_tide(args, 12, NULL, deadline - now());
    waitpid(writer, NULL, 0);
    if (st != -1 && !(WIFEXITED(st) && WEXITSTATUS(st) == 0))
        fail("tide run exited with status %d, want 0 (see %s)", st, errp);
    collect_workers();
    int joined = 0;
    for (int i = 0; i < NW; i++) joined += begin_after(i, 0) > 0;
    if (!joined) fail("no worker joined when the hosts script added a slot");
    if (!grep_file(errp, "badhost cools down for 200 ms") || !grep_file(errp, "badhost cools down for 400 ms"))
        fail("the failing host was not blacklisted with a doubling cooldown (see %s)", errp);
    else note("the failing host was blacklisted: 200 ms, then 400 ms, ...");
    check_trajectory(0);
}

static void scenario_run_min(void)
{
    steps = 2000;
    char chaos[400], errp[400];
    snprintf(chaos, sizeof chaos, "%s/chaos.jsonl", dir);
    snprintf(errp, sizeof errp, "%s/run.err", dir);
    FILE *f = fopen(chaos, "w");
    fprintf(f, "{\"t\": 0.5, \"action\": \"kill\", \"target\": 2}\n");
    fclose(f);
    const char *args[] = {"-n", "3", "--min", "3", "--max", "3", "--chaos", chaos, "--pause-timeout", "1500"};
    double t0 = now();
    int st = run_tide(args, 10, NULL, deadline - now());
    if (st == -1) return;
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) fail("tide run exited 0 below --min");
    if (!grep_file(errp, "fewer than --min")) fail("tide run gave no message about --min (see %s)", errp);
    else note("below --min: tide run failed after %.1f s with a message", now() - t0);
}

/* ---- run-netns: network namespaces as hosts ---- */

static void rmdir_all(const char *path)
{
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", path);
    if (system(cmd) < 0) return;
}

static char ns_prefix[16]; /* names: PREFIXb (bridge), PREFIXh1..3, PREFIXv1..3 (veths) */
static int ns_subnet;      /* 10.213.SUBNET.0/24 */
static int ns_made;

/* Runs a shell command, its output to DIR/netns.log; returns its exit status. */
static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
    char cmd[1024], full[1500];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    snprintf(full, sizeof full, "(%s) >>%s/netns.log 2>&1", cmd, dir);
    int st = system(full);
    return st == -1 || !WIFEXITED(st) ? -1 : WEXITSTATUS(st);
}

static void netns_teardown(void)
{
    if (!ns_made) return;
    for (int i = 1; i <= 3; i++) sh("ip netns del %sh%d", ns_prefix, i); /* takes its veth end */
    sh("ip link del %sb", ns_prefix);
    ns_made = 0;
}

/* A bridge in this namespace (the coordinator's side, 10.213.S.1) and three
 * namespaces on it (10.213.S.11..13). Returns -1 where this cannot run here. */
static int netns_setup(void)
{
    snprintf(ns_prefix, sizeof ns_prefix, "tn%d", (int)(getpid() % 100000));
    ns_subnet = 1 + (int)(getpid() % 250);
    if (geteuid() != 0 || sh("ip netns add %sh1", ns_prefix) != 0) return -1;
    ns_made = 1;
    atexit(netns_teardown);
    int bad = sh("ip netns add %sh2 && ip netns add %sh3", ns_prefix, ns_prefix) ||
              sh("ip link add %sb type bridge && ip addr add 10.213.%d.1/24 dev %sb && "
                 "ip link set %sb up",
                 ns_prefix, ns_subnet, ns_prefix, ns_prefix);
    for (int i = 1; i <= 3 && !bad; i++)
        bad = sh("ip link add %sv%d type veth peer name eth0 netns %sh%d && "
                 "ip link set %sv%d master %sb up && "
                 "ip -n %sh%d addr add 10.213.%d.1%d/24 dev eth0 && "
                 "ip -n %sh%d link set eth0 up && ip -n %sh%d link set lo up",
                 ns_prefix, i, ns_prefix, i, ns_prefix, i, ns_prefix, ns_prefix, i, ns_subnet, i,
                 ns_prefix, i, ns_prefix, i);
    if (bad) {
        fail("could not build the namespaces (see %s/netns.log)", dir);
        return 0;
    }
    /* The bridge forwards once each port says so (state 3). */
    for (int tries = 0; tries < 100; tries++) {
        int up = 0;
        for (int i = 1; i <= 3; i++)
            up += sh("grep -qx 3 /sys/class/net/%sv%d/brport/state", ns_prefix, i) == 0;
        if (up == 3) break;
        usleep(50000);
    }
    return 0;
}

/* The report's events: the first of KIND at or after index *from, or NULL. */
static json_t *report_event(json_t *events_arr, const char *kind, size_t *from)
{
    for (size_t k = *from; k < json_array_size(events_arr); k++) {
        json_t *e = json_array_get(events_arr, k);
        const char *ek = json_string_value(json_object_get(e, "kind"));
        if (ek && !strcmp(ek, kind)) {
            *from = k + 1;
            return e;
        }
    }
    return NULL;
}

static void scenario_run_netns(void)
{
    if (netns_setup() < 0) {
        note("skipped: needs root and `ip netns` (network namespaces as hosts)");
        rmdir_all(dir);
        exit(77);
    }
    if (failures) return;
    /* A short heartbeat so that the cut is noticed quickly; the check below is
     * against whatever timeout is in force. */
    const int hb_ms = 200, timeout_ms = 1500;
    setenv("TIDE_HEARTBEAT_MS", "200", 1);
    setenv("TIDE_PEER_TIMEOUT_MS", "1500", 1);
    setenv("TIDE_LOG_LEVEL", "info", 1); /* "joined generation G as rank R of N over tcp" */
    steps = scale < 1 ? 300 : 400;
    step_ms = 20;
    reference();
    char hosts[400], listen[32], times[400], errp[400], report[400];
    snprintf(hosts, sizeof hosts, "%s/hosts.sh", dir);
    snprintf(times, sizeof times, "%s/cut-times", dir);
    snprintf(errp, sizeof errp, "%s/run.err", dir);
    snprintf(report, sizeof report, "%s/report.json", dir);
    snprintf(listen, sizeof listen, "10.213.%d.1", ns_subnet);
    FILE *f = fopen(hosts, "w");
    fprintf(f, "#!/bin/sh\nprintf '%sh1:1\\n%sh2:1\\n%sh3:1\\n'\n", ns_prefix, ns_prefix, ns_prefix);
    fclose(f);
    chmod(hosts, 0755);
    pid_t cutter = fork();
    if (cutter == 0) {
        /* w1 runs in PREFIXh2 (one slot per host, started in order). Once it
         * trains, its link goes down; once the others re-formed, it comes back. */
        char w1[400];
        snprintf(w1, sizeof w1, "%s/w1.log", dir);
        for (int i = 0; i < 3000 && !grep_file(w1, "step=20 "); i++) usleep(10000);
        double t_cut = now();
        sh("ip link set %sv2 down", ns_prefix);
        for (int i = 0; i < 1000 && !events_has("\"kind\":\"loss\""); i++) usleep(10000);
        usleep(1000000);
        double t_heal = now();
        sh("ip link set %sv2 up", ns_prefix);
        FILE *g = fopen(times, "w");
        if (g) {
            fprintf(g, "%.6f %.6f\n", t_cut, t_heal);
            fclose(g);
        }
        _exit(0);
    }
    const char *args[] = {"--min", "2", "--max", "3", "--hosts-script", hosts, "--hosts-poll-ms", "200",
                          "--launch", "ip netns exec {host}", "--listen", listen, "--events", events,
                          "--report", report};
    int st = run_tide(args, 16, NULL, deadline - now());
    waitpid(cutter, NULL, 0);
    if (st != -1 && !(WIFEXITED(st) && WEXITSTATUS(st) == 0))
        fail("tide run exited with status %d, want 0 (see %s)", st, errp);
    double t_cut = -1, t_heal = -1;
    f = fopen(times, "r");
    if (!f || fscanf(f, "%lf %lf", &t_cut, &t_heal) != 2) fail("the link was never cut");
    if (f) fclose(f);
    collect_workers();
    if (NW < 3 || t_cut < 0) return;
    if (!grep_file(errp, "of 3 over tcp")) fail("the namespaces did not talk over tcp (see %s)", errp);
    /* P1: the two on the live links err within the heartbeat timeout. */
    for (int i = 0; i < 3; i += 2) {
        double te = first_error_after(i, t_cut);
        if (te < 0) fail("%s saw no error after the link was cut", W[i].id);
        else if (te - t_cut > (timeout_ms + 2 * hb_ms) / 1000.0 + 0.5)
            fail("%s erred %.3f s after the cut, want within the %d ms heartbeat timeout (P1)", W[i].id,
                 te - t_cut, timeout_ms);
        else note("%s: error %.3f s after the cut (timeout %d ms)", W[i].id, te - t_cut, timeout_ms);
    }
    /* P4: the cut-off worker came back as a joiner with the members' state
     * (check_trajectory checks the state it began with) and finished. */
    int64_t back = begin_after(1, t_heal);
    if (back < 0) fail("w1 did not re-join after its link came back");
    else note("w1 re-joined at step %" PRId64 " after the link came back", back);
    for (int i = 0; i < 3; i++)
        if (!has(i, "done")) fail("%s did not finish training", W[i].id);
    if (NW > 3) fail("%d workers ran, want 3: a slot was refilled while its worker lived", NW);
    /* The report: a loss on 10.213.S.12 with at most one step lost, then a join. */
    json_error_t je;
    json_t *r = json_load_file(report, 0, &je);
    json_t *ev = json_object_get(r, "events");
    size_t at = 0;
    json_t *loss = report_event(ev, "loss", &at), *join = report_event(ev, "join", &at);
    char want_host[32];
    snprintf(want_host, sizeof want_host, "10.213.%d.12", ns_subnet);
    if (!loss) {
        fail("the report has no loss event (see %s)", report);
    } else {
        json_t *ls = json_object_get(loss, "lost_steps");
        if (!json_is_integer(ls) || json_integer_value(ls) > 1)
            fail("the loss cost %s steps, at most 1 allowed (P3)", json_is_integer(ls) ? "more" : "unknown");
        else note("loss: %" JSON_INTEGER_FORMAT " step(s) lost, recovery %.0f ms", json_integer_value(ls),
                  json_number_value(json_object_get(loss, "recovery_ms")));
    }
    if (!join) fail("the report has no join after the loss (see %s)", report);
    if (!events_has(want_host)) fail("the lost member was not the one on %s", want_host);
    json_decref(r);
    check_trajectory(1);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: elastic_driver TIDE WORKER SCENARIO\n");
        return 2;
    }
    tide_bin = argv[1];
    worker_bin = argv[2];
    scenario = argv[3];
    t_start = now();
    const char *sc = getenv("TIDE_TEST_SCALE");
    if (sc && atof(sc) > 0 && atof(sc) <= 1) scale = atof(sc);
    deadline = t_start + (scale < 1 ? 2 * DEADLINE_S : DEADLINE_S);
    snprintf(dir, sizeof dir, "/tmp/tide-elastic-%s-XXXXXX", scenario);
    if (!mkdtemp(dir)) return 3;
    snprintf(events, sizeof events, "%s/events.jsonl", dir);
    snprintf(coord_out, sizeof coord_out, "%s/coordinator.err", dir);
    tide__secret_t s;
    tide__secret_generate(&s, secret_hex, sizeof secret_hex);
    unsigned char jb[8];
    tide__random_bytes(jb, sizeof jb);
    for (int i = 0; i < 8; i++) snprintf(job_id + 2 * i, 3, "%02x", jb[i]);
    setenv("OPENBLAS_NUM_THREADS", "1", 1);
    note("working in %s", dir);
    if (!strcmp(scenario, "kill")) scenario_kill();
    else if (!strcmp(scenario, "stop")) scenario_stop();
    else if (!strcmp(scenario, "leave")) scenario_leave(0);
    else if (!strcmp(scenario, "sigterm")) scenario_leave(1);
    else if (!strcmp(scenario, "join")) scenario_join();
    else if (!strcmp(scenario, "restart")) scenario_restart();
    else if (!strcmp(scenario, "below-min")) scenario_below_min();
    else if (!strcmp(scenario, "garbage")) scenario_garbage();
    else if (!strcmp(scenario, "secret")) scenario_secret();
    else if (!strcmp(scenario, "run-chaos")) scenario_run_chaos();
    else if (!strcmp(scenario, "run-hosts")) scenario_run_hosts();
    else if (!strcmp(scenario, "run-min")) scenario_run_min();
    else if (!strcmp(scenario, "run-netns")) scenario_run_netns();
    else {
        fprintf(stderr, "elastic_driver: unknown scenario %s\n", scenario);
        return 2;
    }
    for (int i = 0; i < NW; i++)
        if (W[i].alive) kill(W[i].pid, SIGKILL);
    reap();
    dump_on_failure();
    kill_coordinator();
    netns_teardown(); /* before its log's folder goes */
    note("%s (%.1f s)", failures ? "FAILED" : "passed", now() - t_start);
    if (!failures) {
        char cmd[400];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        if (system(cmd) < 0) return 1;
    }
    return failures ? 1 : 0;
}
