/*
 * launch.h - starting a job's worker processes and watching them: the part of
 * `tide run` and `tide bench` that owns child processes, next to the job's
 * coordinator, which runs on a thread of the same process.
 *
 * Static job (min == 0): nworkers ranks on this machine. Exit codes propagate:
 * the job's status is the first failing worker's (its exit code, or 128 +
 * signal). A worker that fails, or stops answering heartbeats, makes the
 * launcher stop the others (SIGTERM, then SIGKILL after a grace period) and
 * name it.
 *
 * Elastic job (min > 0): a worker that dies no longer stops the job; the
 * coordinator re-forms without it. Capacity is a set of hosts with slots: the
 * output of hosts_script, polled (Horovod's format), or nworkers slots on
 * localhost. Free slots are filled (respawn, unless no_respawn), a host whose
 * workers keep failing is blacklisted with an exponential cooldown, and workers
 * beyond a shrunken capacity are given notice and leave at a step boundary.
 * Workers on a host other than localhost start through launch_tmpl ("ssh {host}",
 * "ip netns exec {host}"). The job ends with 0 once training finished, or
 * non-zero (with a message) when the coordinator gave up: fewer than min workers
 * for longer than pause_timeout_ms, or no worker left and none can come.
 *
 * SIGINT or SIGTERM to the launcher stops every worker the same way.
 *
 * A chaos file (kill, preempt, freeze, join, coordinator-restart at given times)
 * or a capacity trace drives the job for experiments, and the run report records
 * what each event cost (src/cli/chaos.h, trace.h, report.h).
 */
#ifndef TIDE_CLI_LAUNCH_H
#define TIDE_CLI_LAUNCH_H

typedef struct {
    int nworkers;      /* static: the job's size; elastic: how many to start with */
    char **argv;       /* the worker command, NULL-terminated */
    int grace_ms;      /* between SIGTERM and SIGKILL */
    const char **env;  /* extra NAME=VALUE for every worker, NULL-terminated (may be NULL) */
    int quiet;

    /* Elastic (min > 0). */
    int min, max;
    const char *hosts_script; /* NULL: nworkers slots on localhost */
    int hosts_poll_ms;        /* 0: 1000 */
    const char *launch_tmpl;  /* for hosts other than localhost; {host} is replaced */
    const char *listen;       /* the coordinator's HOST[:PORT] (NULL: 127.0.0.1, any port) */
    const char *advertise;    /* the host workers dial (NULL: the listen host) */
    const char *events_path;  /* the coordinator's events, JSON lines */
    int pause_timeout_ms;     /* 0: 60000 */
    int no_respawn;
    int blacklist_base_ms, blacklist_max_ms; /* 0: 1000, 60000 */

    /* Experiments (elastic only; docs/chaos-and-reports.md). With a chaos file or
     * a trace, capacity changes only by their actions: workers that exit are not
     * replaced. */
    const char *chaos_path;
    const char *trace_path;
    double trace_speedup;  /* 0: 1 */
    double trace_notice_s; /* notice each trace preemption gets (0: SIGKILL) */
    const char *report_path; /* the run report, written at the end */
    const char *http;        /* the coordinator's /metrics, /healthz, /status */
} tide__launch_opts_t;

/* Runs the job to its end with a coordinator of its own. Returns the exit status
 * the command should end with. */
int tide__launch_local(const tide__launch_opts_t *o);

#endif
