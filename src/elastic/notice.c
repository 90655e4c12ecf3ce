/* notice.c - where notices to leave come from. One small vtable per source
 * (STYLE.md 6): a signal (SIGTERM by default; TIDE_NOTICE_SIGNAL=TERM|USR1|USR2|
 * none), a file whose appearance is a notice (TIDE_NOTICE_FILE, for tests and
 * Kubernetes preStop hooks), the coordinator (the operator forwards cloud and
 * DisruptionTarget notices through it), and tide_notice. A notice is latched: the
 * member leaves at its next step boundary (P2). A second signal of the same kind
 * gets the default action, so a stuck worker can still be stopped. */
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "core/param.h"
#include "elastic/comm.h"
#include "elastic/control.h"

typedef struct {
    const char *name;
    void (*start)(tide_comm_t *c);
    int (*poll)(tide_comm_t *c);
    void (*stop)(tide_comm_t *c);
} notice_source_t;

/* ---- signal ---- */

static volatile sig_atomic_t sig_seen;
static int sig_num;
static int sig_installed;
static struct sigaction sig_old;

static void on_signal(int sig)
{
    if (sig_seen) {
        /* Second notice: the default action (normally: terminate). */
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    sig_seen = 1;
}

static void signal_start(tide_comm_t *c)
{
    const char *v = getenv("TIDE_NOTICE_SIGNAL");
    int sig = SIGTERM;
    if (v && *v) {
        if (!strcmp(v, "none")) return;
        else if (!strcmp(v, "TERM") || !strcmp(v, "SIGTERM")) sig = SIGTERM;
        else if (!strcmp(v, "USR1") || !strcmp(v, "SIGUSR1")) sig = SIGUSR1;
        else if (!strcmp(v, "USR2") || !strcmp(v, "SIGUSR2")) sig = SIGUSR2;
        else {
            TIDE_WARN("TIDE_NOTICE_SIGNAL=\"%s\": expected TERM, USR1, USR2 or none; using TERM", v);
        }
    }
    if (sig_installed) return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    if (sigaction(sig, &sa, &sig_old) == 0) {
        sig_installed = 1;
        sig_num = sig;
    }
    /* The launcher blocks nothing, but a parent might have: make sure it arrives. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
}

static int signal_poll(tide_comm_t *c)
{
    return sig_seen != 0;
}

static void signal_stop(tide_comm_t *c)
{
    if (!sig_installed) return;
    sigaction(sig_num, &sig_old, NULL);
    sig_installed = 0;
}

/* ---- file ---- */

static void file_start(tide_comm_t *c) {}

static int file_poll(tide_comm_t *c)
{
    const char *path = getenv("TIDE_NOTICE_FILE");
    struct stat st;
    return path && *path && stat(path, &st) == 0;
}

static void file_stop(tide_comm_t *c) {}

/* ---- coordinator, and the API ---- */

static void none_start(tide_comm_t *c) {}
static void none_stop(tide_comm_t *c) {}

static int coord_poll(tide_comm_t *c)
{
    return c->ctl && tide__ctl_notice(c->ctl);
}

static int api_poll(tide_comm_t *c)
{
    return c->notice_api;
}

static const notice_source_t sources[] = {
    {"signal", signal_start, signal_poll, signal_stop},
    {"file", file_start, file_poll, file_stop},
    {"coordinator", none_start, coord_poll, none_stop},
    {"tide_notice", none_start, api_poll, none_stop},
};
#define NSOURCES (sizeof sources / sizeof sources[0])

void tide__notice_start(tide_comm_t *c)
{
    for (size_t i = 0; i < NSOURCES; i++) sources[i].start(c);
}

int tide__notice_pending(tide_comm_t *c)
{
    if (c->noticed) return 1;
    for (size_t i = 0; i < NSOURCES; i++)
        if (sources[i].poll(c)) {
            c->noticed = 1;
            TIDE_INFO("notice to leave (%s): leaving at the next step boundary", sources[i].name);
            return 1;
        }
    return 0;
}

void tide__notice_stop(tide_comm_t *c)
{
    if (!c->loop_started) return;
    for (size_t i = 0; i < NSOURCES; i++) sources[i].stop(c);
}

int tide_notice(tide_comm_t *comm)
{
    if (!comm) return TIDE_EINVAL;
    comm->notice_api = 1;
    return TIDE_OK;
}
