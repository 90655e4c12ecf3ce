/* launch.c - see launch.h. Signals arrive through a signalfd so the wait loop is
 * one poll (with the coordinator's notification descriptor); children get the
 * default signal mask back before exec. Signals are blocked before the
 * coordinator's thread starts, so SIGCHLD reaches the signalfd and not whichever
 * thread the kernel picks. */
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/chaos.h"
#include "cli/launch.h"
#include "cli/report.h"
#include "cli/trace.h"
#include "coord/coordinator.h"
#include "coord/discovery.h"
#include "core/auth.h"
#include "core/error.h"
#include "core/net.h"
#include "core/param.h"

#define HEALTHY_RUN_MS 30000 /* a worker that ran this long clears its host's failures */
#define DONE_GRACE_MS 10000  /* after training finished, workers get this long to exit */

typedef struct {
    pid_t pid;
    int alive;
    int status;
    int index;
    int host;
    uint64_t started_ns;
    int noticed;
    int frozen;        /* SIGSTOPped by a chaos action */
    uint64_t kill_ns;  /* a preemption's SIGKILL is due then (0: none) */
} worker_t;

typedef struct {
    char name[TIDE__HOST_MAX];
    int slots;
    int running;
} host_t;

typedef struct {
    const tide__launch_opts_t *o;
    int elastic;
    tide__coord_t *coord;
    char rdzv[200];
    char secret_hex[2 * TIDE__SECRET_MAX + 1];
    char job[17];
    sigset_t oldmask;
    worker_t *w;
    int nw, capw;
    int next_index;
    host_t *hosts;
    int nhosts;
    tide__blacklist_t bl;
    int alive;
    int result;
    int stopping;
    int done;
    int failed;
    int ever_running;
    uint64_t kill_at, term_at;
    int seen_events;
    uint64_t next_poll_ns;
    int live_line; /* a progress line is on the terminal */
    uint64_t last_live_ns;

    tide__coord_opts_t co; /* to restart the coordinator (chaos) */
    tide__secret_t secret;
    char lhost[160];
    uint64_t t0_ns;
    int experiment; /* chaos or trace: capacity changes only by their actions */
    tide__chaos_t chaos;
    size_t chaos_cur;
    double chaos_t0; /* when training's first step completed (the schedule's 0), or < 0 */
    tide__trace_t trace;
    int has_trace;
    size_t trace_cur;
    tide__report_t *report;
    pthread_mutex_t rmu; /* pending and claimed, which the coordinator's hooks use */
    int pending[1024];   /* report events waiting for the generation that resolves them */
    int pending_lossy[1024];
    int npending;
    struct {
        int pid;
        int id;
    } claimed[256]; /* pids whose event a chaos or trace action recorded itself */
    int nclaimed;
} job_t;

static double elapsed(const job_t *j)
{
    return j->report ? tide__report_elapsed(j->report) : (double)(tide__now_ns() - j->t0_ns) / 1e9;
}

/* ---- the run report, fed by the coordinator's hooks (its thread) ---- */

static void claim(job_t *j, int pid, int id)
{
    pthread_mutex_lock(&j->rmu);
    if (j->nclaimed == (int)(sizeof j->claimed / sizeof j->claimed[0])) {
        memmove(j->claimed, j->claimed + 1, sizeof j->claimed - sizeof j->claimed[0]);
        j->nclaimed--;
    }
    j->claimed[j->nclaimed].pid = pid;
    j->claimed[j->nclaimed].id = id;
    j->nclaimed++;
    pthread_mutex_unlock(&j->rmu);
}

static void add_pending(job_t *j, int id, int lossy)
{
    if (id < 0 || j->npending == (int)(sizeof j->pending / sizeof j->pending[0])) return;
    j->pending[j->npending] = id;
    j->pending_lossy[j->npending] = lossy;
    j->npending++;
}

static void hook_member(void *ctx, const char *kind, int rank, int pid)
{
    job_t *j = ctx;
    if (!j->report) return;
    pthread_mutex_lock(&j->rmu);
    int claimed = 0;
    for (int i = 0; i < j->nclaimed; i++)
        if (j->claimed[i].pid == pid) {
            /* The action that caused it recorded the event; a join is only
             * admitted now, so a planned event keeps waiting for its group. */
            claimed = 1;
            j->claimed[i] = j->claimed[--j->nclaimed];
            break;
        }
    if (!claimed) add_pending(j, tide__report_event(j->report, elapsed(j), kind, rank), strcmp(kind, "loss") == 0);
    pthread_mutex_unlock(&j->rmu);
}

static void hook_generation(void *ctx, int64_t gen, int size, int64_t lost_steps, double recovery_ms)
{
    job_t *j = ctx;
    if (!j->report) return;
    pthread_mutex_lock(&j->rmu);
    tide__report_world_size(j->report, elapsed(j), size);
    /* The runtime knows what the events since the last generation cost in steps
     * (a dropped in-flight step counts); the builder times their recovery. */
    for (int i = 0; i < j->npending; i++)
        tide__report_event_resolved(j->report, j->pending[i], j->pending_lossy[i] ? lost_steps : 0, -1);
    j->npending = 0;
    pthread_mutex_unlock(&j->rmu);
}

static void hook_step(void *ctx, int64_t step, int64_t samples, double seconds)
{
    job_t *j = ctx;
    if (j->report) tide__report_step(j->report, elapsed(j), step, samples, seconds);
}

static void hook_metric(void *ctx, const char *name, double value)
{
    job_t *j = ctx;
    if (j->report) tide__report_metric(j->report, name, value);
}

/* Records an event the launcher itself causes (chaos, trace). */
static int report_event(job_t *j, const char *kind, int rank, int lossy)
{
    if (!j->report) return -1;
    pthread_mutex_lock(&j->rmu);
    int id = tide__report_event(j->report, elapsed(j), kind, rank);
    add_pending(j, id, lossy);
    pthread_mutex_unlock(&j->rmu);
    return id;
}

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

static int is_local(const char *host)
{
    return !strcmp(host, "localhost") || !strcmp(host, "127.0.0.1") || !strcmp(host, "::1");
}

/* Appends s to buf, single-quoted for /bin/sh. */
static int append_quoted(char *buf, size_t cap, size_t *len, const char *s)
{
    if (*len + 3 >= cap) return -1;
    buf[(*len)++] = '\'';
    for (; *s; s++) {
        if (*s == '\'') {
            if (*len + 5 >= cap) return -1;
            memcpy(buf + *len, "'\\''", 4);
            *len += 4;
        } else {
            if (*len + 2 >= cap) return -1;
            buf[(*len)++] = *s;
        }
    }
    buf[(*len)++] = '\'';
    buf[(*len)++] = ' ';
    buf[*len] = 0;
    return 0;
}

/* The command line that starts a worker on a remote host: the template with
 * {host} replaced, then `env` with every TIDE_* variable, then the command. */
static int remote_command(const job_t *j, const char *host, char *buf, size_t cap)
{
    size_t len = 0;
    const char *t = j->o->launch_tmpl;
    while (*t) {
        if (!strncmp(t, "{host}", 6)) {
            size_t hl = strlen(host);
            if (len + hl + 1 >= cap) return -1;
            memcpy(buf + len, host, hl);
            len += hl;
            t += 6;
        } else {
            if (len + 2 >= cap) return -1;
            buf[len++] = *t++;
        }
    }
    buf[len++] = ' ';
    buf[len] = 0;
    if (append_quoted(buf, cap, &len, "env")) return -1;
    extern char **environ;
    for (char **e = environ; *e; e++)
        if (!strncmp(*e, "TIDE_", 5) && append_quoted(buf, cap, &len, *e)) return -1;
    for (char **a = j->o->argv; *a; a++)
        if (append_quoted(buf, cap, &len, *a)) return -1;
    return 0;
}

static int spawn(job_t *j, int host)
{
    if (j->nw == j->capw) {
        int cap = j->capw ? 2 * j->capw : 16;
        worker_t *w = realloc(j->w, (size_t)cap * sizeof *w);
        if (!w) return -1;
        j->w = w;
        j->capw = cap;
    }
    int index = j->next_index++;
    const char *hname = j->hosts[host].name;
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "tide run: fork: %s\n", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        sigprocmask(SIG_SETMASK, &j->oldmask, NULL);
        /* Workers do not outlive the launcher. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        char v[96];
        setenv("TIDE_RENDEZVOUS", j->rdzv, 1);
        if (!j->elastic || index < j->o->nworkers) {
            snprintf(v, sizeof v, "%d", index);
            setenv("TIDE_RANK", v, 1);
            snprintf(v, sizeof v, "%d", j->o->nworkers);
            setenv("TIDE_SIZE", v, 1);
        } else {
            unsetenv("TIDE_RANK");
            unsetenv("TIDE_SIZE");
        }
        setenv("TIDE_JOB_SECRET", j->secret_hex, 1);
        setenv("TIDE_JOB_ID", j->job, 1);
        snprintf(v, sizeof v, "w%d", index);
        setenv("TIDE_WORKER_ID", v, 1);
        for (const char **e = j->o->env; e && *e; e++) putenv((char *)*e);
        if (is_local(hname) || !j->o->launch_tmpl) {
            execvp(j->o->argv[0], j->o->argv);
            fprintf(stderr, "tide run: cannot run %s: %s\n", j->o->argv[0], strerror(errno));
            _exit(127);
        }
        static char cmd[65536];
        if (remote_command(j, hname, cmd, sizeof cmd)) {
            fprintf(stderr, "tide run: the command for host %s is too long\n", hname);
            _exit(127);
        }
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    j->w[j->nw++] = (worker_t){pid, 1, 0, index, host, tide__now_ns(), 0, 0, 0};
    j->alive++;
    j->hosts[host].running++;
    return 0;
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

static void clear_live(job_t *j)
{
    if (j->live_line) {
        fprintf(stderr, "\r\033[K");
        j->live_line = 0;
    }
}

static void say(job_t *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(job_t *j, const char *fmt, ...)
{
    clear_live(j);
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "tide run: %s\n", line);
}

static void signal_all(job_t *j, int sig)
{
    for (int i = 0; i < j->nw; i++)
        if (j->w[i].alive) kill(j->w[i].pid, sig);
}

static void stop_job(job_t *j, int result)
{
    if (j->stopping) return;
    j->stopping = 1;
    if (!j->result) j->result = result;
    if (j->coord && j->elastic) tide__coord_stop_job(j->coord, "the launcher is stopping the job");
    signal_all(j, SIGTERM);
    j->kill_at = tide__now_ns() + (uint64_t)j->o->grace_ms * 1000000ull;
}

static void reap(job_t *j)
{
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        for (int i = 0; i < j->nw; i++) {
            worker_t *w = &j->w[i];
            if (w->pid != pid || !w->alive) continue;
            w->alive = 0;
            w->status = status;
            j->alive--;
            j->hosts[w->host].running--;
            /* In an experiment, a worker that dies by itself takes its capacity
             * with it (those the experiment ended gave theirs up already). */
            if (j->experiment && !w->noticed && j->hosts[w->host].slots > 0) j->hosts[w->host].slots--;
            int failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
            if (!j->elastic) {
                if (failed && !j->stopping) {
                    /* A member the coordinator lost first (it froze) is the cause,
                     * not the peers whose collectives it then failed. */
                    tide__job_status_t st;
                    tide__coord_status(j->coord, &st);
                    char what[160];
                    describe(w->index, pid, status, what, sizeof what);
                    if (st.state == TIDE__JOB_FAILED && st.lost_pid && st.lost_pid != (int)pid) {
                        say(j, "%s (then %s); stopping the job (%d worker(s))", st.message, what,
                            j->alive);
                        j->failed = 1;
                        stop_job(j, 1);
                        continue;
                    }
                    say(j, "%s; stopping the other %d worker(s)", what, j->alive);
                    int code = exit_code_of(status);
                    stop_job(j, code ? code : 1);
                }
                continue;
            }
            const char *host = j->hosts[w->host].name;
            uint64_t ran_ms = (tide__now_ns() - w->started_ns) / 1000000ull;
            if (!failed || ran_ms > HEALTHY_RUN_MS) tide__blacklist_ok(&j->bl, host);
            if (!failed || j->stopping || j->done) continue;
            if (WIFEXITED(status) && (WEXITSTATUS(status) == 126 || WEXITSTATUS(status) == 127) &&
                !j->ever_running) {
                say(j, "worker %d could not start %s (exit status %d)", w->index, j->o->argv[0],
                    WEXITSTATUS(status));
                stop_job(j, WEXITSTATUS(status));
                continue;
            }
            /* Ended by the experiment (a kill, a freeze, a preemption, or a
             * notice it did not live to see): no fault of the host's. */
            int cool = w->noticed ? 0 : tide__blacklist_fail(&j->bl, host);
            int rank = tide__coord_rank_of_pid(j->coord, (int)pid);
            char what[160];
            if (WIFSIGNALED(status))
                snprintf(what, sizeof what, "was killed by signal %d (%s)", WTERMSIG(status),
                         strsignal(WTERMSIG(status)));
            else
                snprintf(what, sizeof what, "exited with status %d", WEXITSTATUS(status));
            char rk[48] = "";
            if (rank >= 0) snprintf(rk, sizeof rk, "rank %d, ", rank);
            if (w->noticed)
                say(j, "worker %d (%spid %d) on %s %s, as the experiment asked; the job goes on",
                    w->index, rk, (int)pid, host, what);
            else
                say(j, "worker %d (%spid %d) on %s %s; the job goes on (%s cools down for %d ms)",
                    w->index, rk, (int)pid, host, what, host, cool);
        }
    }
}

static int host_index(job_t *j, const char *name)
{
    for (int i = 0; i < j->nhosts; i++)
        if (!strcmp(j->hosts[i].name, name)) return i;
    return -1;
}

/* Applies the latest capacity: new hosts are added, missing ones get 0 slots. */
static void set_capacity(job_t *j, const tide__host_slots_t *hs, int n)
{
    for (int i = 0; i < j->nhosts; i++) j->hosts[i].slots = 0;
    for (int k = 0; k < n; k++) {
        int i = host_index(j, hs[k].name);
        if (i < 0) {
            if (j->nhosts == TIDE__HOSTS_MAX) continue;
            i = j->nhosts++;
            memset(&j->hosts[i], 0, sizeof j->hosts[i]);
            size_t l = strnlen(hs[k].name, sizeof j->hosts[i].name - 1);
            memcpy(j->hosts[i].name, hs[k].name, l);
            j->hosts[i].name[l] = 0;
        }
        j->hosts[i].slots = hs[k].slots;
    }
}

static void poll_hosts(job_t *j)
{
    if (!j->o->hosts_script || tide__now_ns() < j->next_poll_ns) return;
    int every = j->o->hosts_poll_ms > 0 ? j->o->hosts_poll_ms : 1000;
    j->next_poll_ns = tide__now_ns() + (uint64_t)every * 1000000ull;
    static tide__host_slots_t hs[TIDE__HOSTS_MAX];
    int n = tide__hosts_run(j->o->hosts_script, 10000, hs, TIDE__HOSTS_MAX);
    if (n < 0) return; /* keep the last capacity; the error is logged */
    set_capacity(j, hs, n);
}

/* Fills free slots (up to max) and gives notice to workers beyond capacity. */
static void reconcile(job_t *j)
{
    if (!j->elastic || j->stopping || j->done) return;
    for (int h = 0; h < j->nhosts; h++) {
        /* Workers already leaving (or killed, or frozen) count for nothing. */
        int excess = -j->hosts[h].slots;
        for (int i = 0; i < j->nw; i++)
            if (j->w[i].alive && !j->w[i].noticed && j->w[i].host == h) excess++;
        for (int i = j->nw - 1; i >= 0 && excess > 0; i--) {
            worker_t *w = &j->w[i];
            if (!w->alive || w->host != h || w->noticed) continue;
            w->noticed = 1;
            excess--;
            if (tide__coord_notice_pid(j->coord, (int)w->pid) != TIDE_OK) kill(w->pid, SIGTERM);
            if (!j->o->quiet)
                say(j, "capacity of %s shrank to %d: worker %d (pid %d) leaves at its next step",
                    j->hosts[h].name, j->hosts[h].slots, w->index, (int)w->pid);
        }
    }
    if (j->o->no_respawn && j->next_index >= j->o->nworkers) return;
    /* Members that finished exit before the last one says so: their slots are
     * not free capacity, and a worker started now would only be stopped. */
    tide__job_status_t st;
    tide__coord_status(j->coord, &st);
    if (st.finishing) return;
    int active = 0;
    for (int i = 0; i < j->nw; i++)
        if (j->w[i].alive && !j->w[i].noticed) active++;
    for (int h = 0; h < j->nhosts && active < j->o->max; h++) {
        if (tide__blacklisted(&j->bl, j->hosts[h].name)) continue;
        int running = 0;
        for (int i = 0; i < j->nw; i++)
            if (j->w[i].alive && !j->w[i].noticed && j->w[i].host == h) running++;
        while (running < j->hosts[h].slots && active < j->o->max) {
            if (j->o->no_respawn && j->next_index >= j->o->nworkers) return;
            if (spawn(j, h) != 0) return;
            running++;
            active++;
        }
    }
}

static void show_progress(job_t *j)
{
    tide__job_status_t st;
    tide__coord_status(j->coord, &st);
    if (st.events != j->seen_events) {
        j->seen_events = st.events;
        if (!j->o->quiet && j->elastic && st.message[0]) say(j, "%s", st.message);
    }
    if (st.state == TIDE__JOB_RUNNING) j->ever_running = 1;
    if (j->o->quiet || !j->elastic || !isatty(STDERR_FILENO)) return;
    uint64_t now = tide__now_ns();
    if (now - j->last_live_ns < 500000000ull) return;
    j->last_live_ns = now;
    fprintf(stderr, "\r\033[K[tide] %s  gen %lld  %d worker(s)%s  step %lld  %.1f steps/s",
            tide__job_state_name(st.state), (long long)st.generation, st.size,
            st.waiting ? " +waiting" : "", (long long)st.step, st.steps_per_s);
    j->live_line = 1;
}

static worker_t *worker_of_pid(job_t *j, int pid)
{
    for (int i = 0; i < j->nw; i++)
        if (j->w[i].alive && j->w[i].pid == pid) return &j->w[i];
    return NULL;
}

static int active_count(const job_t *j)
{
    int n = 0;
    for (int i = 0; i < j->nw; i++)
        if (j->w[i].alive && !j->w[i].noticed) n++;
    return n;
}

/* A preemption: notice now, SIGKILL notice_s later (at once without notice). */
static void preempt(job_t *j, worker_t *w, double notice_s)
{
    w->noticed = 1;
    if (notice_s <= 0) {
        kill(w->pid, SIGKILL);
        return;
    }
    if (tide__coord_notice_pid(j->coord, (int)w->pid) != TIDE_OK) kill(w->pid, SIGTERM);
    w->kill_ns = tide__now_ns() + (uint64_t)(notice_s * 1e9);
}

static void restart_coordinator(job_t *j)
{
    const char *addr = tide__coord_addr(j->coord);
    j->co.port = atoi(strrchr(addr, ':') + 1);
    tide__coord_stop(j->coord);
    j->coord = NULL;
    if (tide__coord_start(&j->co, &j->coord) != TIDE_OK) {
        say(j, "cannot restart the coordinator on port %d", j->co.port);
        j->coord = NULL;
        stop_job(j, 1);
        return;
    }
    j->seen_events = 0;
}

/* A member (a rank, or -1 for one at random) the experiment acts on. */
static worker_t *pick_member(job_t *j, int rank, int *rank_out)
{
    int pid = tide__coord_pid_of_rank(j->coord, rank);
    worker_t *w = pid > 0 ? worker_of_pid(j, pid) : NULL;
    if (w && w->noticed) w = NULL;
    if (!w && rank < 0)
        for (int i = j->nw - 1; i >= 0 && !w; i--)
            if (j->w[i].alive && !j->w[i].noticed) w = &j->w[i];
    *rank_out = w ? tide__coord_rank_of_pid(j->coord, (int)w->pid) : -1;
    return w;
}

/* How long an action on a member waits for one (the group may be re-forming
 * when it falls due) before it is skipped. */
#define CHAOS_MEMBER_WAIT_S 5.0

static void run_chaos(job_t *j)
{
    if (!j->chaos.count || j->stopping || j->done) return;
    if (j->chaos_t0 < 0) {
        /* The schedule's clock starts with training, not with the processes:
         * a worker loading its data is not yet what the experiment is about,
         * and a loaded machine would otherwise shift every action into the
         * start-up. */
        tide__job_status_t st;
        tide__coord_status(j->coord, &st);
        if (st.step < 1) return;
        j->chaos_t0 = elapsed(j);
        say(j, "chaos: training runs; the schedule starts now");
    }
    double now = elapsed(j) - j->chaos_t0;
    const tide__chaos_action_t *a;
    while ((a = tide__chaos_next(&j->chaos, &j->chaos_cur, now))) {
        const char *kind = tide__chaos_kind_name(a->kind);
        int rank;
        switch (a->kind) {
        case TIDE__CHAOS_KILL:
        case TIDE__CHAOS_PREEMPT:
        case TIDE__CHAOS_FREEZE: {
            worker_t *w = pick_member(j, a->target >= 0 ? a->target : -1, &rank);
            if (!w && rank < 0 && now - a->t < CHAOS_MEMBER_WAIT_S &&
                tide__coord_pid_of_rank(j->coord, 0) <= 0) {
                j->chaos_cur--; /* between generations: try again on the next tick */
                return;
            }
            if (!w) {
                say(j, "chaos (line %d): %s: no such member now; skipped", a->line, kind);
                break;
            }
            int id = report_event(j, kind, rank, 1);
            claim(j, (int)w->pid, id);
            say(j, "chaos: %s rank %d (pid %d)%s", kind, rank, (int)w->pid,
                a->kind == TIDE__CHAOS_PREEMPT ? " with notice" : "");
            if (j->hosts[w->host].slots > 0) j->hosts[w->host].slots--;
            if (a->kind == TIDE__CHAOS_KILL) {
                w->noticed = 1;
                kill(w->pid, SIGKILL);
            } else if (a->kind == TIDE__CHAOS_PREEMPT) {
                preempt(j, w, a->notice_s);
            } else {
                w->noticed = w->frozen = 1;
                kill(w->pid, SIGSTOP);
            }
            break;
        }
        case TIDE__CHAOS_JOIN:
            if (active_count(j) >= j->o->max || !j->nhosts) {
                say(j, "chaos (line %d): join: already --max %d workers; skipped", a->line, j->o->max);
                break;
            }
            j->hosts[0].slots++;
            if (spawn(j, 0) == 0) {
                claim(j, (int)j->w[j->nw - 1].pid, report_event(j, "join", -1, 0));
                say(j, "chaos: join (pid %d)", (int)j->w[j->nw - 1].pid);
            }
            break;
        case TIDE__CHAOS_COORD_RESTART:
            report_event(j, "coordinator-restart", -1, 0);
            say(j, "chaos: restarting the coordinator");
            restart_coordinator(j);
            break;
        }
    }
}

static void run_trace(job_t *j)
{
    if (!j->has_trace || j->stopping || j->done) return;
    tide__trace_change_t ch;
    if (!tide__trace_next(&j->trace, &j->trace_cur, elapsed(j), active_count(j), &ch)) return;
    say(j, "trace: capacity %d -> %d", active_count(j), ch.target);
    for (int i = 0; i < ch.preempt; i++) {
        int rank;
        worker_t *w = pick_member(j, -1, &rank);
        if (!w) break;
        claim(j, (int)w->pid, report_event(j, "preempt", rank, 1));
        if (j->hosts[w->host].slots > 0) j->hosts[w->host].slots--;
        preempt(j, w, ch.notice_s);
    }
    for (int i = 0; i < ch.start && j->nhosts; i++) {
        j->hosts[0].slots++;
        if (spawn(j, 0) != 0) break;
        claim(j, (int)j->w[j->nw - 1].pid, report_event(j, "join", -1, 0));
    }
}

static void watch_coordinator(job_t *j)
{
    tide__job_status_t st;
    tide__coord_status(j->coord, &st);
    if (st.state == TIDE__JOB_FAILED && !j->failed) {
        j->failed = 1;
        if (j->stopping) return;
        if (!j->elastic) {
            /* A loss the launcher may also see as an exit: that one names it best. */
            reap(j);
            if (j->stopping) return;
            say(j, "%s; stopping the job (%d worker(s))", st.message, j->alive);
        } else {
            say(j, "the job failed: %s", st.message);
        }
        stop_job(j, 1);
    } else if (st.state == TIDE__JOB_DONE && !j->done) {
        j->done = 1;
        j->term_at = tide__now_ns() + (uint64_t)DONE_GRACE_MS * 1000000ull;
    }
}

/* Loads the chaos file and the trace, and creates the report: before any worker
 * starts, so that a bad file stops nothing. */
static int prepare_experiments(job_t *j)
{
    const tide__launch_opts_t *o = j->o;
    char err[512];
    if ((o->chaos_path || o->trace_path) && !j->elastic) {
        fprintf(stderr, "tide run: --chaos and --trace need an elastic job (--min/--max)\n");
        return 2;
    }
    if (o->chaos_path && tide__chaos_load(o->chaos_path, o->max, &j->chaos, err, sizeof err) != TIDE_OK) {
        fprintf(stderr, "tide run: %s\n", err);
        return 2;
    }
    if (o->trace_path) {
        tide__trace_opts_t to = {o->trace_speedup > 0 ? o->trace_speedup : 1.0, o->max, o->min,
                                 o->trace_notice_s};
        if (tide__trace_load(o->trace_path, &to, &j->trace, err, sizeof err) != TIDE_OK) {
            fprintf(stderr, "tide run: %s\n", err);
            return 2;
        }
        j->has_trace = 1;
    }
    j->experiment = o->chaos_path || o->trace_path;
    if (o->report_path && tide__report_create(&j->report) != TIDE_OK) {
        fprintf(stderr, "tide run: cannot create the report\n");
        return 1;
    }
    return 0;
}

static void end_experiments(job_t *j)
{
    if (j->report) {
        if (tide__report_write(j->report, j->o->report_path, j->result) != TIDE_OK)
            fprintf(stderr, "tide run: cannot write the report %s\n", j->o->report_path);
        if (!j->o->quiet) tide__report_print_summary(j->report, stderr);
        tide__report_destroy(j->report);
        j->report = NULL;
    }
    tide__chaos_free(&j->chaos);
    if (j->has_trace) tide__trace_free(&j->trace);
}

int tide__launch_local(const tide__launch_opts_t *o)
{
    job_t j;
    memset(&j, 0, sizeof j);
    j.chaos_t0 = -1;
    j.o = o;
    j.elastic = o->min > 0;
    j.t0_ns = tide__now_ns();
    pthread_mutex_init(&j.rmu, NULL);
    int prc = prepare_experiments(&j);
    if (prc) {
        end_experiments(&j);
        pthread_mutex_destroy(&j.rmu);
        return prc;
    }
    unsigned char jb[8];
    if (tide__secret_generate(&j.secret, j.secret_hex, sizeof j.secret_hex) != TIDE_OK ||
        tide__random_bytes(jb, sizeof jb) != TIDE_OK) {
        fprintf(stderr, "tide run: cannot generate the job secret\n");
        return 1;
    }
    for (int i = 0; i < 8; i++) snprintf(j.job + 2 * i, 3, "%02x", jb[i]);
    snprintf(j.lhost, sizeof j.lhost, "127.0.0.1");
    int lport = 0;
    if (o->listen) {
        if (tide__net_split_addr(o->listen, j.lhost, sizeof j.lhost, &lport) != TIDE_OK) {
            snprintf(j.lhost, sizeof j.lhost, "%s", o->listen);
            lport = 0;
        }
    }
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGHUP);
    sigprocmask(SIG_BLOCK, &mask, &j.oldmask);
    tide__coord_opts_t *co = &j.co;
    co->host = j.lhost;
    co->port = lport;
    co->secret = &j.secret;
    co->settle_ms = -1;
    co->events_path = o->events_path;
    co->http = o->http;
    co->job_name = j.job;
    co->hooks = (tide__coord_hooks_t){&j, hook_member, hook_generation, hook_step, hook_metric};
    if (j.elastic) {
        co->min = o->min;
        co->max = o->max;
        co->expect = o->hosts_script ? 0 : o->nworkers;
        co->pause_timeout_ms = o->pause_timeout_ms > 0 ? o->pause_timeout_ms : 60000;
    } else {
        co->min = co->max = o->nworkers;
        co->static_ranks = 1;
    }
    if (tide__coord_start(co, &j.coord) != TIDE_OK) {
        fprintf(stderr, "tide run: cannot start the coordinator on %s:%d\n", j.lhost, lport);
        sigprocmask(SIG_SETMASK, &j.oldmask, NULL);
        end_experiments(&j);
        return 1;
    }
    if (o->http && !o->quiet)
        say(&j, "status at http://%s:%d/status (tide status)", j.lhost, tide__coord_http_port(j.coord));
    const char *caddr = tide__coord_addr(j.coord);
    if (o->advertise) {
        const char *colon = strrchr(caddr, ':');
        snprintf(j.rdzv, sizeof j.rdzv, "%s%s", o->advertise, colon ? colon : "");
    } else {
        snprintf(j.rdzv, sizeof j.rdzv, "%s", caddr);
    }
    tide__blacklist_init(&j.bl, o->blacklist_base_ms, o->blacklist_max_ms > 0 ? o->blacklist_max_ms : 60000);
    j.hosts = calloc(TIDE__HOSTS_MAX, sizeof *j.hosts);
    int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    if (!j.hosts || sfd < 0) {
        fprintf(stderr, "tide run: out of resources\n");
        tide__coord_stop(j.coord);
        sigprocmask(SIG_SETMASK, &j.oldmask, NULL);
        free(j.hosts);
        end_experiments(&j);
        return 1;
    }
    if (o->hosts_script) {
        poll_hosts(&j);
        if (!j.nhosts)
            say(&j, "the hosts script %s lists no host yet; waiting for capacity", o->hosts_script);
    } else {
        j.nhosts = 1;
        snprintf(j.hosts[0].name, sizeof j.hosts[0].name, "localhost");
        j.hosts[0].slots = o->nworkers;
    }
    if (!j.elastic) {
        for (int i = 0; i < o->nworkers; i++)
            if (spawn(&j, 0) != 0) {
                stop_job(&j, 1);
                break;
            }
    } else {
        reconcile(&j);
    }
    for (;;) {
        if (j.alive == 0) {
            if (!j.elastic || j.stopping || j.done || j.failed) break;
            /* Nobody left. With a hosts script, capacity may come back (the
             * coordinator's pause timeout bounds the wait); without, only a
             * respawn or the experiment can bring a worker. */
            if (!o->hosts_script && (o->no_respawn || j.experiment) && !j.chaos.count && !j.has_trace)
                break;
        }
        int timeout = 100;
        if (j.kill_at) {
            uint64_t now = tide__now_ns();
            int left = now >= j.kill_at ? 0 : (int)((j.kill_at - now) / 1000000ull) + 1;
            if (left < timeout) timeout = left;
        }
        int cfd = j.coord ? tide__coord_notify_fd(j.coord) : -1;
        struct pollfd p[2] = {{sfd, POLLIN, 0}, {cfd, POLLIN, 0}};
        int pr = poll(p, cfd >= 0 ? 2 : 1, timeout);
        if (pr > 0 && p[0].revents) {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof si) == sizeof si) {
                if (si.ssi_signo == SIGCHLD || j.stopping) continue;
                say(&j, "%s: stopping %d worker(s)", strsignal((int)si.ssi_signo), j.alive);
                stop_job(&j, 128 + (int)si.ssi_signo);
                break;
            }
        }
        if (pr > 0 && cfd >= 0 && p[1].revents) {
            uint64_t v;
            ssize_t r = read(cfd, &v, sizeof v);
            (void)r;
        }
        reap(&j);
        if (!j.coord) break;
        watch_coordinator(&j);
        show_progress(&j);
        if (j.elastic) {
            run_chaos(&j);
            if (!j.coord) break;
            run_trace(&j);
            poll_hosts(&j);
            reconcile(&j);
        }
        uint64_t now = tide__now_ns();
        for (int i = 0; i < j.nw; i++)
            if (j.w[i].alive && j.w[i].kill_ns && now >= j.w[i].kill_ns) {
                kill(j.w[i].pid, SIGKILL); /* the end of a preemption's notice */
                j.w[i].kill_ns = 0;
            }
        if (j.done) {
            /* Frozen workers will never exit by themselves. */
            for (int i = 0; i < j.nw; i++)
                if (j.w[i].alive && j.w[i].frozen) kill(j.w[i].pid, SIGKILL);
        }
        if (j.done && j.term_at && now >= j.term_at && j.alive) {
            say(&j, "training finished, but %d worker(s) did not exit; stopping them", j.alive);
            signal_all(&j, SIGTERM);
            j.term_at = 0;
            j.kill_at = now + (uint64_t)o->grace_ms * 1000000ull;
        }
        if (j.kill_at && now >= j.kill_at) {
            signal_all(&j, SIGKILL);
            j.kill_at = 0;
        }
    }
    clear_live(&j);
    if (j.elastic && !j.stopping && !j.done && !j.result) {
        say(&j, "every worker exited before training finished");
        j.result = 1;
    }
    if (j.alive) {
        /* Only on the way out of a failure: nobody is left behind. */
        signal_all(&j, SIGKILL);
        while (j.alive && waitpid(-1, NULL, 0) > 0) j.alive--;
    }
    close(sfd);
    sigprocmask(SIG_SETMASK, &j.oldmask, NULL);
    tide__coord_stop(j.coord);
    remove_shm_leftovers(j.job);
    end_experiments(&j);
    tide__blacklist_free(&j.bl);
    pthread_mutex_destroy(&j.rmu);
    free(j.w);
    free(j.hosts);
    return j.result;
}
