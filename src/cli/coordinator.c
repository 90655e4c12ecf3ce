/* coordinator.c - `tide coordinator`: one job's coordinator as a process of its
 * own (on a cluster; `tide run` embeds one). Workers reach it at the --listen
 * address with the job's secret (TIDE_JOB_SECRET). It exits 0 once training has
 * finished, 1 when the job failed, and on SIGINT/SIGTERM (restarting it is safe:
 * the workers re-register, P7). */
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "cli/cli.h"
#include "coord/coordinator.h"
#include "core/auth.h"
#include "core/error.h"
#include "core/net.h"
#include "core/param.h"

static const char usage_text[] =
    "usage: tide coordinator --listen HOST:PORT --min N --max N [options]\n"
    "  --expect N          form the first generation as soon as N workers registered\n"
    "  --pause-timeout MS  fail the job after this long below --min (default: wait)\n"
    "  --settle-ms MS      with >= min registered, wait this long for more (default 500)\n"
    "  --events FILE       events as JSON lines\n"
    "  --http HOST:PORT    serve /metrics, /healthz and /status there (tide status)\n"
    "  --job NAME          the job's name in /status\n"
    "  --linger-ms MS      after the job ends, keep answering this long (default 2000)\n"
    "The job's secret is read from TIDE_JOB_SECRET (hex).\n";

int tide__cli_coordinator(int argc, char **argv)
{
    const char *listen = NULL, *events = NULL, *http = NULL, *job = NULL;
    int64_t min = 0, max = 0, expect = 0, pause = 0, settle = 500, linger = 2000;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(usage_text, stdout);
            return 0;
        }
        if (!v) {
            fprintf(stderr, "tide coordinator: %s needs a value\n%s", a, usage_text);
            return 2;
        }
        int bad = 0;
        if (!strcmp(a, "--listen")) listen = v;
        else if (!strcmp(a, "--events")) events = v;
        else if (!strcmp(a, "--http")) http = v;
        else if (!strcmp(a, "--job")) job = v;
        else if (!strcmp(a, "--min")) bad = tide__parse_int(v, 1, 4096, &min);
        else if (!strcmp(a, "--max")) bad = tide__parse_int(v, 1, 4096, &max);
        else if (!strcmp(a, "--expect")) bad = tide__parse_int(v, 0, 4096, &expect);
        else if (!strcmp(a, "--pause-timeout")) bad = tide__parse_int(v, 0, 86400000, &pause);
        else if (!strcmp(a, "--settle-ms")) bad = tide__parse_int(v, 0, 3600000, &settle);
        else if (!strcmp(a, "--linger-ms")) bad = tide__parse_int(v, 0, 3600000, &linger);
        else {
            fprintf(stderr, "tide coordinator: unknown option \"%s\"\n%s", a, usage_text);
            return 2;
        }
        if (bad) {
            fprintf(stderr, "tide coordinator: %s \"%s\": not a valid number\n", a, v);
            return 2;
        }
        i++;
    }
    char host[160];
    int port;
    if (!listen || tide__net_split_addr(listen, host, sizeof host, &port) != TIDE_OK) {
        fprintf(stderr, "tide coordinator: --listen HOST:PORT is required\n%s", usage_text);
        return 2;
    }
    if (!min) min = 1;
    if (!max) max = min;
    if (min > max) {
        fprintf(stderr, "tide coordinator: --min %lld is above --max %lld\n", (long long)min,
                (long long)max);
        return 2;
    }
    tide__secret_t secret;
    const char *hex = getenv("TIDE_JOB_SECRET");
    if (!hex || tide__secret_from_hex(hex, &secret) != TIDE_OK) {
        fprintf(stderr, "tide coordinator: TIDE_JOB_SECRET must hold the job's secret as 32 to "
                        "128 hex digits\n");
        return 2;
    }
    sigset_t mask, old;
    sigemptyset(&mask);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGHUP);
    sigprocmask(SIG_BLOCK, &mask, &old);
    tide__coord_opts_t o = {.host = host,
                            .port = port,
                            .min = (int)min,
                            .max = (int)max,
                            .expect = (int)expect,
                            .settle_ms = (int)settle,
                            .pause_timeout_ms = (int)pause,
                            .events_path = events,
                            .secret = &secret,
                            .http = http,
                            .job_name = job};
    tide__coord_t *c;
    if (tide__coord_start(&o, &c) != TIDE_OK) {
        fprintf(stderr, "tide coordinator: cannot listen on %s\n", listen);
        return 1;
    }
    printf("tide coordinator listening on %s\n", tide__coord_addr(c));
    if (tide__coord_http_port(c))
        printf("tide coordinator serving http on port %d\n", tide__coord_http_port(c));
    fflush(stdout);
    int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    int cfd = tide__coord_notify_fd(c);
    int result = 0, seen = 0;
    uint64_t end_at = 0;
    for (;;) {
        struct pollfd p[2] = {{sfd, POLLIN, 0}, {cfd, POLLIN, 0}};
        poll(p, 2, 200);
        if (p[0].revents) {
            struct signalfd_siginfo si;
            if (read(sfd, &si, sizeof si) == sizeof si) {
                fprintf(stderr, "tide coordinator: %s: exiting\n", strsignal((int)si.ssi_signo));
                result = 128 + (int)si.ssi_signo;
                break;
            }
        }
        if (p[1].revents) {
            uint64_t v;
            ssize_t r = read(cfd, &v, sizeof v);
            (void)r;
        }
        tide__job_status_t st;
        tide__coord_status(c, &st);
        if (st.events != seen) {
            seen = st.events;
            fprintf(stderr, "tide coordinator: %s\n", st.message);
        }
        if ((st.state == TIDE__JOB_DONE || st.state == TIDE__JOB_FAILED) && !end_at) {
            result = st.state == TIDE__JOB_DONE ? 0 : 1;
            end_at = tide__now_ns() + (uint64_t)linger * 1000000ull;
        }
        if (end_at && tide__now_ns() >= end_at) break;
    }
    close(sfd);
    tide__coord_stop(c);
    sigprocmask(SIG_SETMASK, &old, NULL);
    return result;
}
