/*
 * control.h - the worker's side of the control connection to the coordinator
 * (inside `tide run`, or `tide coordinator`), and the control thread that keeps
 * it: heartbeats both ways, aborts, join and notice flags, shm preparation for
 * the next generation, member tables, and reconnection.
 *
 * One authenticated TCP connection per worker carries JSON messages (see
 * proto.h). The data plane never travels here; the coordinator never sees
 * tensors. When the connection drops (the coordinator restarted, P7) the thread
 * reconnects with backoff and re-registers under the same worker id with what the
 * worker is doing (its generation, rank and step), so training goes on meanwhile
 * and only membership changes wait.
 *
 * Threads: the control thread owns the connection; the application thread calls
 * everything below. Aborts reach the communicator through tide__comm_abort_gen.
 */
#ifndef TIDE_ELASTIC_CONTROL_H
#define TIDE_ELASTIC_CONTROL_H

#include <jansson.h>
#include <stdint.h>

#include "core/auth.h"
#include "tide.h"
#include "transport/transport.h"

typedef struct tide__ctl tide__ctl_t;

typedef struct {
    const char *rendezvous; /* HOST:PORT of the coordinator */
    const tide__secret_t *secret;
    const char *worker_id;
    const char *job_id;
    const char *transport; /* the worker's TIDE_TRANSPORT: auto, shm or tcp */
    int rank_hint, size_hint; /* TIDE_RANK / TIDE_SIZE, or -1 */
    int timeout_ms;           /* for the first connection and registration */
    tide_comm_t *comm;        /* aborted by the control thread (not owned) */
} tide__ctl_opts_t;

/* A generation's member table, as the coordinator published it. */
typedef struct {
    uint32_t generation;
    int size;
    int my_rank; /* this worker's rank in it, -1 if it is not in it */
    int root;    /* the member the state comes from */
    int64_t root_step;
    int use_shm;
    tide__member_t *members; /* size entries by rank; owned */
    int64_t *steps;          /* each member's completed steps (-1: no state); owned */
} tide__membership_t;

/* Connects (retrying while the coordinator starts, up to timeout_ms), proves the
 * secret, and learns the local address peers can reach this worker at (it
 * works across network namespaces): *local_addr. Does not register yet. */
int tide__ctl_open(const tide__ctl_opts_t *o, char *local_addr, size_t local_len, tide__ctl_t **out);
/* Registers with addr:port as this worker's data endpoint, waits for the
 * welcome, and starts the control thread. */
int tide__ctl_start(tide__ctl_t *ctl, const char *addr, int port);
/* Tells the coordinator how this member ends (final: "done", "bye", or NULL for
 * nothing), stops the thread, closes the connection, removes shm segments it
 * prepared and never used, and frees ctl. */
void tide__ctl_close(tide__ctl_t *ctl, const char *final, int64_t step);

/* Whether the coordinator runs an elastic job (else ranks are fixed and a loss
 * ends the job). Valid after tide__ctl_start. */
int tide__ctl_elastic(const tide__ctl_t *ctl);
void tide__ctl_timing_of(const tide__ctl_t *ctl, int *heartbeat_ms, int *peer_timeout_ms);

/* What a (re)registration reports: enum tide__wstatus, generation, rank, size,
 * completed steps. */
void tide__ctl_set_status(tide__ctl_t *ctl, int status, int64_t gen, int rank, int size, int64_t step);
void tide__ctl_set_step(tide__ctl_t *ctl, int64_t step);
void tide__ctl_set_port(tide__ctl_t *ctl, int port);

/* Sends msg (stolen) now; TIDE_ECLOSED while disconnected (the status above is
 * what a reconnection reports, so nothing essential is lost). */
int tide__ctl_send(tide__ctl_t *ctl, json_t *msg);

/* Waits for the member table of a generation after `after` (-1: any) that
 * names this worker. Returns TIDE_OK (*out filled; free with
 * tide__membership_free), TIDE_ESTOPPED (the job stopped: *stop_code is 0 when it
 * finished), TIDE_EAGAIN-like TIDE_ETIMEDOUT after timeout_ms (< 0: forever while
 * the coordinator is reachable; a coordinator unreachable for TIDE_TIMEOUT_MS
 * also times out), or returns TIDE_EABORTED when interrupt(arg) becomes true. */
int tide__ctl_wait_members(tide__ctl_t *ctl, int64_t after, int timeout_ms,
                           int (*interrupt)(void *), void *arg, tide__membership_t *out,
                           int *stop_code);

/* The generation the welcome named: >= 0 when the job was already training when
 * this worker registered (it is a joiner). Valid after tide__ctl_start. */
int64_t tide__ctl_job_generation(const tide__ctl_t *ctl);
/* A worker that registers while the job trains is a joiner, and the coordinator
 * holds it outside (deferred) until tide__ctl_join (its first tide_step_begin),
 * so that its own start-up (loading data, building the model) never pauses the
 * members (P4). */
int tide__ctl_deferred(const tide__ctl_t *ctl);
int tide__ctl_join(tide__ctl_t *ctl);

/* A joiner waits for generation gen to re-form. */
int tide__ctl_join_pending(const tide__ctl_t *ctl, int64_t gen);
/* The coordinator gave this worker notice to leave. */
int tide__ctl_notice(const tide__ctl_t *ctl);
/* The coordinator stopped the job: TIDE_OK when training finished, else an error. */
int tide__ctl_stopped(const tide__ctl_t *ctl, int *code);
/* The highest generation the coordinator told this worker to abort, or -1. */
int64_t tide__ctl_aborted_gen(const tide__ctl_t *ctl);

/* Parses a "members" message: every field and bound is checked. my_id picks this
 * worker's entry (NULL: none). */
int tide__membership_parse(const json_t *msg, const char *my_id, tide__membership_t *out);
void tide__membership_free(tide__membership_t *m);

/* This host's identity: hostname, boot id and network namespace, so that two
 * network namespaces on one machine count as two hosts. */
void tide__host_id(char *out, size_t len);

#endif
