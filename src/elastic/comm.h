/*
 * comm.h - the communicator a worker holds: its current group (one generation's
 * data plane), its control connection to the coordinator, the elastic state
 * registry and step loop, and the background engine that runs asynchronous
 * collectives in order.
 *
 * tide_init and tide_finalize live in comm.c; the collective entry points in
 * src/coll/api.c; generations are built in generation.c, the step loop and
 * re-formation in elastic.c, the state registry in state.c. A communicator is used
 * by one application thread at a time (like an MPI communicator or an NCCL comm);
 * the engine and control threads are internal. The control thread touches only
 * what gmu guards: the group pointer (to abort it), the listener and the
 * generation being formed.
 */
#ifndef TIDE_ELASTIC_COMM_H
#define TIDE_ELASTIC_COMM_H

#include <pthread.h>

#include "coll/group.h"
#include "core/auth.h"
#include "tide.h"

struct tide__ctl;
struct tide__membership;

struct tide_request {
    tide_comm_t *comm;
    /* The group the request was started on, taken by the application thread;
     * the engine thread runs it there and never reads comm->group. The group
     * outlives the request: a re-formation (tide__gen_release) first waits until
     * no request is queued. */
    tide__group_t *group;
    tide__call_t call;
    int done;
    int rc;
    struct tide_request *next;
};

/* One named piece of the elastic state (borrowed memory). */
typedef struct {
    char name[64];
    void *ptr;
    size_t bytes;
} tide__state_entry_t;

enum tide__transport_choice { TIDE__CHOOSE_AUTO, TIDE__CHOOSE_SHM, TIDE__CHOOSE_TCP };

struct tide_comm {
    tide__group_t *group;
    int rank, size;
    int ctrl_fd; /* unused: the control connection belongs to ctl */
    int listen_fd;
    char job_id[64];
    tide__secret_t secret;

    /* The asynchronous engine: a FIFO run by one thread, started on first use. */
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* work queued, or stop */
    pthread_cond_t done_cv; /* a request finished */
    pthread_t engine;
    int engine_started;
    int stopping;
    int queued; /* requests not yet finished */
    tide_request_t *head, *tail;

    /* Membership. gmu guards group, listen_fd, forming_gen and aborted_gen against
     * the control thread; the application thread changes them only under it. */
    pthread_mutex_t gmu;
    int64_t forming_gen;  /* the generation whose transport is being built, or -1 */
    int64_t aborted_gen;  /* the highest generation the coordinator aborted */
    int listen_interrupted; /* the control thread shut the listener down */
    /* An eventfd the control thread writes when it aborts the generation being
     * formed: the transport's setup watches it in every wait (connect, accept,
     * handshake), so a peer frozen after the member table went out costs the
     * coordinator's detection, not the setup timeout. Reset before each setup. */
    int setup_cancel_fd;
    struct tide__ctl *ctl;  /* NULL in a job of one */
    int elastic;
    int transport_choice;   /* enum tide__transport_choice */
    int timeout_ms;
    char bind_addr[64];
    char worker_id[64];
    uint32_t generation;
    int root;          /* of the current generation's table */
    int64_t root_step;
    int64_t *steps;    /* completed steps of each member when the generation formed */
    int gen_count;     /* generations this worker has been a member of */

    /* The step loop (elastic.c). completed is the number of steps whose update
     * is applied here, or -1 while this worker holds no agreed state (a joiner
     * before its first sync, or a laggard during one). */
    int64_t completed;
    int in_step;
    int dropped; /* a step was begun and never ended in the generation that failed */
    int need_sync;
    int reform_pending;
    int leave_pending;
    int left;     /* this member left (notice, or the job stopped) */
    int finished; /* the members agreed that training is over */
    int loop_started;
    int need_join; /* a joiner of a running job: admitted at its first step_begin */
    int noticed;       /* latched: this member has been given notice */
    int notice_api;    /* tide_notice was called */
    uint64_t notice_file_checked;
    uint64_t failed_at_ns; /* when the current generation failed (for the log) */
    tide_reset_fn on_reset;
    void *on_reset_arg;

    /* Rank 0's account of completed steps for the coordinator's report. */
    tide_sampler_t *sampler; /* the registered sampler, if any (borrowed) */
    uint64_t step_t0;        /* when the step in progress began: when the step before it
                              * ended, within one generation (see tide_step_begin) */
    uint64_t prev_end_ns;    /* when this generation's last step ended (0: none yet) */
    uint64_t step_batches;   /* the sampler's batch count then */
    int64_t rep_from;        /* steps [rep_from, completed) not yet reported */
    int64_t rep_samples;
    double rep_seconds;
    uint64_t rep_sent_ns;

    /* The state registry (state.c). */
    tide__state_entry_t *state;
    int nstate, state_cap;
};

/* Runs a call on the comm's group in order with any queued asynchronous ones. */
int tide__comm_run(tide_comm_t *comm, tide__call_t *call);
/* Queues a call on the engine; *req is owned by the caller until tide_wait. */
int tide__comm_submit(tide_comm_t *comm, const tide__call_t *call, tide_request_t **req);
void tide__comm_stop_engine(tide_comm_t *comm);

/* Control thread: aborts generation gen (-1: whatever is current) with code:
 * fails its group, so every collective in flight returns, or interrupts its
 * formation. */
void tide__comm_abort_gen(tide_comm_t *comm, int64_t gen, int code);

/* generation.c: waits for this worker's next member table (after generation
 * `after`; -1 for the first) and builds the group it describes; failures to build
 * are reported and waited through in an elastic job. TIDE_ESTOPPED when the job
 * stopped (or finished) first, TIDE_EABORTED when this worker was given notice
 * while waiting. */
int tide__gen_join(tide_comm_t *comm, int64_t after, int timeout_ms);
/* Releases the current group (its generation ended). */
void tide__gen_release(tide_comm_t *comm);
/* Whether an error from a collective is one a re-formation can recover from. */
int tide__recoverable(int err);

/* state.c */
int tide__state_sync(tide_comm_t *comm);
void tide__state_free(tide_comm_t *comm);

/* sampler.c: how many batches s handed out, and the last one's global size. */
void tide__sampler_progress(const tide_sampler_t *s, uint64_t *batches, uint64_t *last_global);

/* notice.c: whether this worker has been given notice (SIGTERM, TIDE_NOTICE_FILE,
 * the coordinator, tide_notice). start installs the sources once. */
void tide__notice_start(tide_comm_t *comm);
int tide__notice_pending(tide_comm_t *comm);
void tide__notice_stop(tide_comm_t *comm);

#endif
