/* launch.c - see launch.h. Signals arrive through a signalfd so the wait loop is
 * one poll; children get the default signal mask back before exec. */
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/launch.h"
#include "coord/rendezvous.h"
#include "core/auth.h"
#include "core/error.h"
#include "core/param.h"

typedef struct {
    pid_t pid;
    int alive;
    int status;
} worker_t;

static void remove_shm_leftovers(const char *job)
{
    char prefix[64];
    snprintf(prefix, sizeof prefix, "tide-%s-", job);
    DIR *d = opendir("/dev/shm");
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, prefix, strlen(prefix))) {
            char path[512];
            snprintf(path, sizeof path, "/dev/shm/%s", e->d_name);
            unlink(path);
        }
    closedir(d);
}

static pid_t spawn(const tide__launch_opts_t *o, int rank, const char *rdzv, const char *secret,
                   const char *job, const sigset_t *oldmask)
{
    pid_t pid = fork();
    if (pid != 0) return pid;
    sigprocmask(SIG_SETMASK, oldmask, NULL);
    char v[64];
    setenv("TIDE_RENDEZVOUS", rdzv, 1);
    snprintf(v, sizeof v, "%d", rank);
    setenv("TIDE_RANK", v, 1);
    snprintf(v, sizeof v, "%d", o->nworkers);
    setenv("TIDE_SIZE", v, 1);
    setenv("TIDE_JOB_SECRET", secret, 1);
    setenv("TIDE_JOB_ID", job, 1);
    for (const char **e = o->env; e && *e; e++) putenv((char *)*e);
    execvp(o->argv[0], o->argv);
    fprintf(stderr, "tide run: cannot run %s: %s\n", o->argv[0], strerror(errno));
    _exit(127);
}

static void describe(int rank, pid_t pid, int status, char *out, size_t n)
{
    if (WIFSIGNALED(status))
        snprintf(out, n, "rank %d (pid %d) was killed by signal %d (%s)", rank, (int)pid,
                 WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        snprintf(out, n, "rank %d (pid %d) exited with status %d", rank, (int)pid,
                 WEXITSTATUS(status));
}

static int exit_code_of(int status)
{
    return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

int tide__launch_local(const tide__launch_opts_t *o)
{
    tide__secret_t secret;
    char secret_hex[2 * TIDE__SECRET_MAX + 1], job[17];
    unsigned char jb[8];
    if (tide__secret_generate(&secret, secret_hex, sizeof secret_hex) != TIDE_OK ||
        tide__random_bytes(jb, sizeof jb) != TIDE_OK) {
        fprintf(stderr, "tide run: cannot generate the job secret\n");
        return 1;
    }
    for (int i = 0; i < 8; i++) snprintf(job + 2 * i, 3, "%02x", jb[i]);
    /* Signals are blocked before any thread starts, so that SIGCHLD reaches the
     * signalfd and not whichever thread the kernel picks. */
    sigset_t mask, oldmask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGHUP);
    sigprocmask(SIG_BLOCK, &mask, &oldmask);
    tide__rdzv_t *rdzv;
    if (tide__rdzv_start("127.0.0.1", 0, o->nworkers, &secret, &rdzv) != TIDE_OK) {
        fprintf(stderr, "tide run: cannot start the rendezvous\n");
        sigprocmask(SIG_SETMASK, &oldmask, NULL);
        return 1;
    }
    int sfd = signalfd(-1, &mask, SFD_CLOEXEC);
    worker_t *w = calloc((size_t)o->nworkers, sizeof *w);
    int alive = 0, result = 0, stopping = 0;
    uint64_t kill_at = 0;
    for (int i = 0; i < o->nworkers; i++) {
        w[i].pid = spawn(o, i, tide__rdzv_addr(rdzv), secret_hex, job, &oldmask);
        if (w[i].pid < 0) {
            fprintf(stderr, "tide run: fork: %s\n", strerror(errno));
            result = 1;
            stopping = 1;
            break;
        }
        w[i].alive = 1;
        alive++;
    }
    if (stopping) {
        for (int i = 0; i < o->nworkers; i++)
            if (w[i].alive) kill(w[i].pid, SIGTERM);
        kill_at = tide__now_ns() + (uint64_t)o->grace_ms * 1000000ull;
    }
    while (alive > 0) {
        int timeout = -1;
        if (kill_at) {
            uint64_t now = tide__now_ns();
            timeout = now >= kill_at ? 0 : (int)((kill_at - now) / 1000000ull) + 1;
        }
        struct pollfd p = {sfd, POLLIN, 0};
        int pr = poll(&p, 1, timeout);
        if (pr > 0) {
            struct signalfd_siginfo si;
            if (read(sfd, &si, sizeof si) == sizeof si && si.ssi_signo != SIGCHLD && !stopping) {
                fprintf(stderr, "tide run: %s: stopping %d worker(s)\n", strsignal((int)si.ssi_signo),
                        alive);
                stopping = 1;
                result = 128 + (int)si.ssi_signo;
                for (int i = 0; i < o->nworkers; i++)
                    if (w[i].alive) kill(w[i].pid, SIGTERM);
                kill_at = tide__now_ns() + (uint64_t)o->grace_ms * 1000000ull;
            }
        }
        if (kill_at && tide__now_ns() >= kill_at) {
            for (int i = 0; i < o->nworkers; i++)
                if (w[i].alive) kill(w[i].pid, SIGKILL);
            kill_at = 0;
        }
        int status;
        pid_t pid;
        while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
            for (int i = 0; i < o->nworkers; i++) {
                if (w[i].pid != pid || !w[i].alive) continue;
                w[i].alive = 0;
                w[i].status = status;
                alive--;
                int failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
                if (failed && !stopping) {
                    char what[160];
                    describe(i, pid, status, what, sizeof what);
                    fprintf(stderr, "tide run: %s; stopping the other %d worker(s)\n", what, alive);
                    result = exit_code_of(status);
                    if (!result) result = 1;
                    stopping = 1;
                    for (int j = 0; j < o->nworkers; j++)
                        if (w[j].alive) kill(w[j].pid, SIGTERM);
                    kill_at = tide__now_ns() + (uint64_t)o->grace_ms * 1000000ull;
                }
            }
        }
    }
    close(sfd);
    sigprocmask(SIG_SETMASK, &oldmask, NULL);
    tide__rdzv_stop(rdzv);
    remove_shm_leftovers(job);
    free(w);
    return result;
}
