/*
 * comm.h - the communicator a worker holds: its current group (one generation's
 * data plane), its control connection to the coordinator, and the background
 * engine that runs asynchronous collectives in order.
 *
 * tide_init and tide_finalize live in comm.c; the collective entry points in
 * src/coll/api.c. A communicator is used by one application thread at a time
 * (like an MPI communicator or an NCCL comm); the engine thread is internal.
 */
#ifndef TIDE_ELASTIC_COMM_H
#define TIDE_ELASTIC_COMM_H

#include <pthread.h>

#include "coll/group.h"
#include "core/auth.h"
#include "tide.h"

struct tide_request {
    tide_comm_t *comm;
    tide__call_t call;
    int done;
    int rc;
    struct tide_request *next;
};

struct tide_comm {
    tide__group_t *group;
    int rank, size;
    int ctrl_fd;
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
};

/* Runs a call on the comm's group in order with any queued asynchronous ones. */
int tide__comm_run(tide_comm_t *comm, tide__call_t *call);
/* Queues a call on the engine; *req is owned by the caller until tide_wait. */
int tide__comm_submit(tide_comm_t *comm, const tide__call_t *call, tide_request_t **req);
void tide__comm_stop_engine(tide_comm_t *comm);

#endif
