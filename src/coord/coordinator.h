/*
 * coordinator.h - the coordinator of one job: rendezvous in numbered
 * generations, failure detection by heartbeats, re-formation after a loss, a
 * planned leave or a join, and the job's progress.
 *
 * It runs on its own thread, inside `tide run` or `tide coordinator`, and never
 * touches tensors: collectives run peer to peer, so training goes on while the
 * coordinator is away (P7); only membership changes wait for it. A restarted
 * coordinator learns the current generation back from the workers, which
 * re-register with their generation, rank and step.
 *
 * A generation is formed from the survivors of the previous one (in their old
 * order) followed by waiting joiners, at least min and at most max of them; its
 * root is a survivor with the highest completed step, from which laggards and
 * joiners receive the state. Below min the job pauses until capacity returns, and
 * fails after pause_timeout_ms. In a static job (tide run without --min/--max)
 * ranks are the workers' TIDE_RANK and a loss ends the job.
 *
 * Every connection must prove the job secret; malformed or oversized messages
 * cost the sender its connection and a log line, never the coordinator (P8).
 * Thread-safety: every function here may be called from any thread.
 */
#ifndef TIDE_COORD_COORDINATOR_H
#define TIDE_COORD_COORDINATOR_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "core/auth.h"

typedef struct tide__coord tide__coord_t;

/* What the coordinator tells its owner as it happens (the run report). Called on
 * the coordinator's thread with its lock held: quick, and never calling back into
 * the coordinator. Any of them may be NULL. */
typedef struct {
    void *ctx;
    /* A member was lost ("loss"), left on notice ("leave"), or a worker joined
     * ("join"); rank in the generation it left or joined. */
    void (*member)(void *ctx, const char *kind, int rank, int pid);
    /* A generation is up and every member runs: its size, and what its forming
     * cost (steps lost; ms from the first sign of change to all running). */
    void (*generation)(void *ctx, int64_t generation, int size, int64_t lost_steps,
                       double recovery_ms);
    /* The group completed step `step` (0-based) of `samples` samples (0: not
     * known) in `seconds`, as rank 0 reported. */
    void (*step)(void *ctx, int64_t step, int64_t samples, double seconds);
    void (*metric)(void *ctx, const char *name, double value);
} tide__coord_hooks_t;

typedef struct {
    const char *host;     /* listen address; NULL: 127.0.0.1 */
    int port;             /* 0: any free port */
    int min, max;         /* workers per generation, 1 <= min <= max */
    int expect;           /* form generation 0 once this many have registered (0: max) */
    int static_ranks;     /* ranks are TIDE_RANK, min == max, and a loss ends the job */
    int settle_ms;        /* with >= min registered, wait this long for more (-1: default 500) */
    int pause_timeout_ms; /* below min longer than this fails the job (0: wait forever) */
    int heartbeat_ms;     /* 0: TIDE_HEARTBEAT_MS, default 500 */
    int peer_timeout_ms;  /* 0: TIDE_PEER_TIMEOUT_MS, default 3000 */
    const char *events_path; /* JSON lines, one per event (NULL: none); copied */
    const tide__secret_t *secret; /* copied */
    const char *http;        /* HOST:PORT of /metrics, /healthz, /status (NULL: none) */
    const char *job_name;    /* for /status (NULL: none) */
    tide__coord_hooks_t hooks;
} tide__coord_opts_t;

typedef enum {
    TIDE__JOB_STARTING = 0, /* waiting for the first generation */
    TIDE__JOB_RUNNING,      /* a generation is training */
    TIDE__JOB_RESIZING,     /* between generations */
    TIDE__JOB_PAUSED,       /* fewer than min workers: waiting for capacity */
    TIDE__JOB_DONE,         /* every member finished training */
    TIDE__JOB_FAILED        /* see message */
} tide__job_state_t;

typedef struct {
    tide__job_state_t state;
    int64_t generation; /* -1 before the first */
    int size;           /* members of the current generation */
    int waiting;        /* registered workers not in it */
    int finishing;      /* a member finished training: the job is ending, refill nothing */
    int64_t step;       /* the highest step a member has completed */
    double steps_per_s; /* over the last few seconds */
    int events;         /* events so far (grows by one per event) */
    int lost_pid;       /* static job: the member whose loss ended it, else 0 */
    int lost_rank;
    char message[256];  /* why the job failed, else the last event in words */
} tide__job_status_t;

const char *tide__job_state_name(tide__job_state_t s);

/* Starts a coordinator; *out is owned by the caller (tide__coord_stop frees it). */
int tide__coord_start(const tide__coord_opts_t *o, tide__coord_t **out);
/* Stops the thread, closes every connection and frees c. */
void tide__coord_stop(tide__coord_t *c);

/* "host:port" workers should dial (the bound port). Owned by c. */
const char *tide__coord_addr(const tide__coord_t *c);
/* Connections refused so far: failed secrets, malformed input (P8 tests). */
int tide__coord_refused(const tide__coord_t *c);

void tide__coord_status(tide__coord_t *c, tide__job_status_t *out);
/* A descriptor that becomes readable when the status changes; read 8 bytes from
 * it to re-arm (an eventfd). Owned by c. */
int tide__coord_notify_fd(const tide__coord_t *c);

/* The job's progress as JSON (a new reference the caller owns):
 * {state, generation, size, min, max, step, steps_per_s, waiting, uptime_s,
 *  members: [{rank, id, pid, host, step}], events: [...], metrics: {name:
 *  {step, value, history: [[step, value], ...]}}, recoveries: [{generation,
 *  kind, recovery_ms, lost_steps}]}. For the report, /status and the display. */
json_t *tide__coord_snapshot(tide__coord_t *c);

/* The port of the HTTP endpoints, or 0 when there are none. */
int tide__coord_http_port(const tide__coord_t *c);

/* The rank of the worker with this pid in the current generation, or -1. */
int tide__coord_rank_of_pid(tide__coord_t *c, int pid);
/* The pid of rank `rank` of the current generation (-1: a member at random),
 * or -1 when there is no such member. */
int tide__coord_pid_of_rank(tide__coord_t *c, int rank);
/* Gives the worker with this pid (registered from any host) notice to leave at
 * its next step boundary. TIDE_ENOTFOUND when no such worker is registered. */
int tide__coord_notice_pid(tide__coord_t *c, int pid);
/* Ends the job: every worker is told to stop, the state becomes FAILED with
 * reason unless the job is already DONE. */
void tide__coord_stop_job(tide__coord_t *c, const char *reason);

#endif
