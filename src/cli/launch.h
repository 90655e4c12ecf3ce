/*
 * launch.h - starting a job's worker processes on this machine and watching
 * them: the part of `tide run` and `tide bench` that owns child processes.
 *
 * Exit codes propagate: the job's status is the first failing worker's (its exit
 * code, or 128 + signal). A worker that fails makes the launcher stop the others
 * (SIGTERM, then SIGKILL after a grace period) and name it. SIGINT or SIGTERM to
 * the launcher stops every worker the same way.
 */
#ifndef TIDE_CLI_LAUNCH_H
#define TIDE_CLI_LAUNCH_H

typedef struct {
    int nworkers;
    char **argv;       /* the worker command, NULL-terminated */
    int grace_ms;      /* between SIGTERM and SIGKILL */
    const char **env;  /* extra NAME=VALUE for every worker, NULL-terminated (may be NULL) */
    int quiet;
} tide__launch_opts_t;

/* Runs the job to its end with a rendezvous of its own. Returns the exit status
 * the command should end with. */
int tide__launch_local(const tide__launch_opts_t *o);

#endif
