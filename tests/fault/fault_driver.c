/*
 * fault_driver.c - runs one fault scenario through the real launcher and checks what
 * `tide run` itself promises: its exit status, its stderr naming the failed rank,
 * and (for a death) every survivor's own verdict, which fault_worker writes to a
 * file because `tide run` exits non-zero for the victim whatever the survivors saw.
 *
 *   fault_driver TIDE WORKER death --np N --victim V --how exit|kill [--async]
 *   fault_driver TIDE WORKER exit  --np N --rank R --code C
 *
 * The job runs in its own process group under a deadline; on expiry the group is
 * killed and the test fails as a hang. TIDE_TRANSPORT and the rest of the
 * environment pass through to the job.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

static const char *tide_bin, *worker_bin;
static int g_argc;
static char **g_argv;

static const char *opt(const char *name, const char *dflt)
{
    for (int i = 0; i + 1 < g_argc; i++)
        if (strcmp(g_argv[i], name) == 0) return g_argv[i + 1];
    return dflt;
}

static long opt_long(const char *name, long dflt)
{
    const char *v = opt(name, NULL);
    return v ? strtol(v, NULL, 0) : dflt;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct {
    int status; /* waitpid status of `tide run` */
    bool timed_out;
    double seconds;
    char *err; /* its stderr (and the workers', which it inherits or forwards) */
    size_t len;
} job_result_t;

/* Runs argv (argv[0] a path) with a deadline; collects stderr, echoing it. */
static void run_job(char *const argv[], double deadline_s, job_result_t *out)
{
    memset(out, 0, sizeof *out);
    int p[2];
    assert_int_equal(pipe(p), 0);
    fprintf(stderr, "fault_driver: running");
    for (int i = 0; argv[i]; i++)
        fprintf(stderr, " %s", argv[i]);
    fprintf(stderr, "\n");
    double t0 = now();
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        setpgid(0, 0);
        dup2(p[1], STDERR_FILENO);
        close(p[0]);
        close(p[1]);
        execv(argv[0], argv);
        fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    setpgid(pid, pid);
    close(p[1]);
    fcntl(p[0], F_SETFL, O_NONBLOCK);
    size_t cap = 1 << 16;
    out->err = malloc(cap);
    bool exited = false, eof = false;
    double exited_at = 0;
    for (;;) {
        struct pollfd pfd = {p[0], POLLIN, 0};
        if (!eof)
            poll(&pfd, 1, 50);
        else
            usleep(50 * 1000);
        for (;;) {
            if (eof) break;
            if (out->len + 4096 + 1 > cap) {
                cap *= 2;
                out->err = realloc(out->err, cap);
            }
            ssize_t n = read(p[0], out->err + out->len, 4096);
            if (n > 0) {
                fwrite(out->err + out->len, 1, (size_t)n, stderr);
                out->len += (size_t)n;
            } else if (n == 0) {
                eof = true;
            } else {
                break; /* EAGAIN */
            }
        }
        if (!exited) {
            pid_t w = waitpid(pid, &out->status, WNOHANG);
            if (w == pid) {
                exited = true;
                exited_at = now();
                out->seconds = exited_at - t0;
            }
        }
        /* Done at EOF after the exit; a worker the launcher left behind may hold
         * the pipe open, so stop reading 2 s after the exit in any case. */
        if (exited && (eof || now() - exited_at > 2.0)) break;
        if (!exited && now() - t0 > deadline_s) {
            out->timed_out = true;
            kill(-pid, SIGKILL);
            waitpid(pid, &out->status, 0);
            out->seconds = now() - t0;
            break;
        }
    }
    close(p[0]);
    out->err[out->len] = '\0';
}

/* Whether a line of the job's stderr came from a worker rather than from the
 * launcher: the test workers prefix theirs "[rN]", libtide's log "[tide rank N]"
 * (after a timestamp). Only the launcher's own lines may count as naming the dead
 * rank, or a survivor's "lost rank 2" would pass for it. */
static bool worker_line(const char *line, size_t len)
{
    if (len >= 3 && line[0] == '[' && line[1] == 'r' && isdigit((unsigned char)line[2]))
        return true;
    const char *tag = "[tide rank ";
    size_t tl = strlen(tag);
    for (size_t i = 0; i + tl <= len; i++)
        if (strncmp(line + i, tag, tl) == 0) return true;
    return false;
}

static bool line_names_rank(const char *p, const char *end, int r);

/* Whether the launcher's part of text names rank r the way a person would:
 * "rank 2", "rank=2", "rank: 2", "worker 2", "rank #2" (any case), not followed by
 * another digit. */
static bool names_rank(const char *text, int r)
{
    for (const char *p = text; *p;) {
        const char *e = strchr(p, '\n');
        if (!e) e = p + strlen(p);
        if (!worker_line(p, (size_t)(e - p)) && line_names_rank(p, e, r)) return true;
        p = *e ? e + 1 : e;
    }
    return false;
}

static bool line_names_rank(const char *text, const char *end, int r)
{
    char num[16];
    snprintf(num, sizeof num, "%d", r);
    size_t nl = strlen(num);
    const char *words[] = {"rank", "worker"};
    for (const char *p = text; p < end; p++) {
        for (size_t w = 0; w < 2; w++) {
            size_t wl = strlen(words[w]);
            if (strncasecmp(p, words[w], wl) != 0) continue;
            const char *q = p + wl;
            if (*q == 's' || *q == 'S') q++;
            int sep = 0;
            while (sep < 3 && (*q == ' ' || *q == ':' || *q == '=' || *q == '#' || *q == '\t')) {
                q++;
                sep++;
            }
            if (strncmp(q, num, nl) == 0 && !isdigit((unsigned char)q[nl])) return true;
        }
    }
    return false;
}

static void describe_status(const job_result_t *r, char *buf, size_t n)
{
    if (r->timed_out)
        snprintf(buf, n, "timed out after %.1f s", r->seconds);
    else if (WIFEXITED(r->status))
        snprintf(buf, n, "exit %d after %.1f s", WEXITSTATUS(r->status), r->seconds);
    else if (WIFSIGNALED(r->status))
        snprintf(buf, n, "killed by signal %d after %.1f s", WTERMSIG(r->status), r->seconds);
    else
        snprintf(buf, n, "status 0x%x", r->status);
}

/* ------------------------------------------------------------------- death */

static void test_death(void **state)
{
    (void)state;
    int np = (int)opt_long("--np", 3);
    int victim = (int)opt_long("--victim", 1);
    const char *how = opt("--how", "exit");
    char dir[] = "/tmp/tide-fault-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char nps[16], vs[16];
    snprintf(nps, sizeof nps, "%d", np);
    snprintf(vs, sizeof vs, "%d", victim);
    bool async = false;
    for (int i = 0; i < g_argc; i++)
        if (strcmp(g_argv[i], "--async") == 0) async = true;
    char *argv[] = {(char *)tide_bin,
                    "run",
                    "-n",
                    nps,
                    "--",
                    (char *)worker_bin,
                    "death",
                    "--victim",
                    vs,
                    "--how",
                    (char *)how,
                    "--dir",
                    dir,
                    async ? "--async" : NULL,
                    NULL};
    job_result_t r;
    run_job(argv, 90.0, &r);
    char st[96];
    describe_status(&r, st, sizeof st);
    fprintf(stderr, "fault_driver: tide run: %s\n", st);

    int bad = 0;
    if (r.timed_out) {
        fprintf(stderr, "FAIL: the job hung (P1: no hang)\n");
        bad++;
    } else if (WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) {
        fprintf(stderr, "FAIL: tide run exited 0 although rank %d died\n", victim);
        bad++;
    }
    if (!names_rank(r.err, victim)) {
        fprintf(stderr, "FAIL: tide run's stderr does not name the dead rank %d\n", victim);
        bad++;
    }
    for (int k = 0; k < np; k++) {
        if (k == victim) continue;
        char path[256], line[512] = "";
        snprintf(path, sizeof path, "%s/rank.%d", dir, k);
        FILE *f = fopen(path, "r");
        if (!f) {
            fprintf(stderr,
                    "FAIL: survivor rank %d left no verdict (it hung, crashed, or the launcher "
                    "killed it before its collective returned)\n",
                    k);
            bad++;
            continue;
        }
        if (!fgets(line, sizeof line, f)) line[0] = '\0';
        fclose(f);
        unlink(path);
        line[strcspn(line, "\n")] = '\0';
        fprintf(stderr, "fault_driver: survivor %d: %s\n", k, line);
        if (strncmp(line, "ok", 2) != 0) bad++;
    }
    char path[256];
    snprintf(path, sizeof path, "%s/death", dir);
    unlink(path);
    rmdir(dir);
    free(r.err);
    assert_int_equal(bad, 0);
}

/* -------------------------------------------------------------------- exit */

static void test_exit(void **state)
{
    (void)state;
    int np = (int)opt_long("--np", 3);
    int who = (int)opt_long("--rank", 1);
    int code = (int)opt_long("--code", 3);
    char nps[16], ws[16], cs[16];
    snprintf(nps, sizeof nps, "%d", np);
    snprintf(ws, sizeof ws, "%d", who);
    snprintf(cs, sizeof cs, "%d", code);
    char *argv[] = {(char *)tide_bin, "run",    "-n", nps,      "--", (char *)worker_bin,
                    "exit",           "--rank", ws,   "--code", cs,   NULL};
    job_result_t r;
    run_job(argv, 60.0, &r);
    char st[96];
    describe_status(&r, st, sizeof st);
    fprintf(stderr, "fault_driver: tide run: %s\n", st);
    int bad = 0;
    if (r.timed_out) {
        fprintf(stderr, "FAIL: the job hung\n");
        bad++;
    } else if (code == 0) {
        if (!WIFEXITED(r.status) || WEXITSTATUS(r.status) != 0) {
            fprintf(stderr, "FAIL: every worker exited 0 but tide run: %s\n", st);
            bad++;
        }
    } else {
        if (WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) {
            fprintf(stderr, "FAIL: rank %d exited %d but tide run exited 0\n", who, code);
            bad++;
        } else if (WIFEXITED(r.status) && WEXITSTATUS(r.status) != code) {
            fprintf(stderr, "note: tide run exited %d, not the worker's %d (allowed)\n",
                    WEXITSTATUS(r.status), code);
        }
        if (!names_rank(r.err, who)) {
            fprintf(stderr, "FAIL: tide run's stderr does not name rank %d, which exited %d\n", who,
                    code);
            bad++;
        }
    }
    free(r.err);
    assert_int_equal(bad, 0);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: fault_driver TIDE WORKER death|exit [options]\n");
        return 2;
    }
    tide_bin = argv[1];
    worker_bin = argv[2];
    g_argc = argc - 3;
    g_argv = argv + 3;
    signal(SIGPIPE, SIG_IGN);
    if (strcmp(argv[3], "death") == 0) {
        const struct CMUnitTest tests[] = {cmocka_unit_test(test_death)};
        return cmocka_run_group_tests_name("fault death", tests, NULL, NULL);
    }
    if (strcmp(argv[3], "exit") == 0) {
        const struct CMUnitTest tests[] = {cmocka_unit_test(test_exit)};
        return cmocka_run_group_tests_name("fault exit", tests, NULL, NULL);
    }
    fprintf(stderr, "fault_driver: unknown scenario %s\n", argv[3]);
    return 2;
}
