/* api.c - the public collective calls: argument checks, the sticky failure, and
 * the in-order asynchronous engine. Invalid arguments are refused before anything
 * is touched, with TIDE_EINVAL, and do not fail the communicator. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "coll/group.h"
#include "core/error.h"
#include "elastic/comm.h"

size_t tide_dtype_size(tide_dtype_t dtype)
{
    switch (dtype) {
    case TIDE_FLOAT32: return 4;
    case TIDE_FLOAT64: return 8;
    case TIDE_FLOAT16: return 2;
    case TIDE_BFLOAT16: return 2;
    case TIDE_INT32: return 4;
    case TIDE_INT64: return 8;
    case TIDE_UINT8: return 1;
    default: return 0;
    }
}

int tide_rank(const tide_comm_t *comm)
{
    return comm ? comm->rank : -1;
}

int tide_size(const tide_comm_t *comm)
{
    return comm ? comm->size : 0;
}

/* What a collective on a communicator without a group returns: a member that left
 * (or whose job finished) must stop; any other is between generations (re-forming,
 * or a joiner not yet admitted at its first tide_step_begin). Neither is an
 * invalid argument. (tide_comm_status says TIDE_ECLOSED for both: no group.) */
static int no_group_status(const tide_comm_t *comm)
{
    return comm->left || comm->finished ? TIDE_ESTOPPED : TIDE_EABORTED;
}

int tide_comm_status(const tide_comm_t *comm)
{
    if (!comm) return TIDE_EINVAL;
    return comm->group ? tide__group_status(comm->group) : TIDE_ECLOSED;
}

static int prepare(tide_comm_t *comm, enum tide__coll_kind kind, const void *send, void *recv,
                   size_t count, int dtype, int op, int root, tide__call_t *c)
{
    if (!comm) return TIDE_EINVAL;
    if (!comm->group) return no_group_status(comm);
    if ((unsigned)dtype >= TIDE_DTYPE_COUNT || (unsigned)op >= TIDE_OP_COUNT) return TIDE_EINVAL;
    size_t es = tide_dtype_size((tide_dtype_t)dtype);
    if (count > SIZE_MAX / es / (size_t)(comm->size > 0 ? comm->size : 1)) return TIDE_EINVAL;
    if (count && (!send || !recv)) return TIDE_EINVAL;
    if (kind == TIDE__COLL_BROADCAST && (root < 0 || root >= comm->size)) return TIDE_EINVAL;
    memset(c, 0, sizeof *c);
    c->desc.kind = (uint8_t)kind;
    c->desc.dtype = (uint8_t)dtype;
    c->desc.op = (uint8_t)op;
    c->desc.root = root;
    c->desc.count = count;
    c->send = send;
    c->recv = recv;
    c->count = count;
    c->esize = es;
    c->bytes = count * es;
    c->dtype = (tide_dtype_t)dtype;
    c->op = (tide_op_t)op;
    c->root = root;
    return TIDE_OK;
}

int tide_allreduce(tide_comm_t *comm, const void *send, void *recv, size_t count,
                   tide_dtype_t dtype, tide_op_t op)
{
    tide__call_t c;
    TIDE_CHECK(prepare(comm, TIDE__COLL_ALLREDUCE, send, recv, count, (int)dtype, (int)op, 0, &c));
    if (send != recv && count) {
        /* Partial overlap is a caller bug that would silently corrupt data. */
        const char *s = send, *r = recv;
        if (s < r + c.bytes && r < s + c.bytes) return TIDE_EINVAL;
    }
    return tide__comm_run(comm, &c);
}

int tide_broadcast(tide_comm_t *comm, void *buf, size_t count, tide_dtype_t dtype, int root)
{
    tide__call_t c;
    TIDE_CHECK(prepare(comm, TIDE__COLL_BROADCAST, buf, buf, count, (int)dtype, TIDE_SUM, root, &c));
    return tide__comm_run(comm, &c);
}

int tide_allgather(tide_comm_t *comm, const void *send, void *recv, size_t count,
                   tide_dtype_t dtype)
{
    tide__call_t c;
    TIDE_CHECK(prepare(comm, TIDE__COLL_ALLGATHER, send, recv, count, (int)dtype, TIDE_SUM, 0, &c));
    if (count) {
        const char *s = send, *r = recv, *mine = r + (size_t)comm->rank * c.bytes;
        size_t total = c.bytes * (size_t)comm->size;
        if (s != mine && s < r + total && r < s + c.bytes) return TIDE_EINVAL;
    }
    return tide__comm_run(comm, &c);
}

int tide_barrier(tide_comm_t *comm)
{
    tide__call_t c;
    static uint8_t dummy;
    TIDE_CHECK(prepare(comm, TIDE__COLL_BARRIER, &dummy, &dummy, 0, TIDE_UINT8, TIDE_SUM, 0, &c));
    return tide__comm_run(comm, &c);
}

int tide_iallreduce(tide_comm_t *comm, const void *send, void *recv, size_t count,
                    tide_dtype_t dtype, tide_op_t op, tide_request_t **req)
{
    if (!req) return TIDE_EINVAL;
    tide__call_t c;
    TIDE_CHECK(prepare(comm, TIDE__COLL_ALLREDUCE, send, recv, count, (int)dtype, (int)op, 0, &c));
    return tide__comm_submit(comm, &c, req);
}

int tide_wait(tide_request_t *req)
{
    if (!req) return TIDE_EINVAL;
    tide_comm_t *comm = req->comm;
    pthread_mutex_lock(&comm->mu);
    while (!req->done) pthread_cond_wait(&comm->done_cv, &comm->mu);
    int rc = req->rc;
    pthread_mutex_unlock(&comm->mu);
    free(req);
    return rc;
}

static void *engine_main(void *arg)
{
    tide_comm_t *comm = arg;
    pthread_mutex_lock(&comm->mu);
    for (;;) {
        while (!comm->head && !comm->stopping) pthread_cond_wait(&comm->cv, &comm->mu);
        if (!comm->head) break;
        tide_request_t *r = comm->head;
        pthread_mutex_unlock(&comm->mu);
        int rc = tide__group_run(r->group, &r->call);
        pthread_mutex_lock(&comm->mu);
        comm->head = r->next;
        if (!comm->head) comm->tail = NULL;
        r->rc = rc;
        r->done = 1;
        comm->queued--;
        pthread_cond_broadcast(&comm->done_cv);
    }
    pthread_mutex_unlock(&comm->mu);
    return NULL;
}

int tide__comm_submit(tide_comm_t *comm, const tide__call_t *call, tide_request_t **req)
{
    tide_request_t *r = calloc(1, sizeof *r);
    if (!r) return TIDE_ENOMEM;
    r->comm = comm;
    r->group = comm->group;
    r->call = *call;
    pthread_mutex_lock(&comm->mu);
    if (!comm->engine_started) {
        if (pthread_create(&comm->engine, NULL, engine_main, comm) != 0) {
            pthread_mutex_unlock(&comm->mu);
            free(r);
            return TIDE_ESYS;
        }
        comm->engine_started = 1;
    }
    if (comm->tail) comm->tail->next = r;
    else comm->head = r;
    comm->tail = r;
    comm->queued++;
    pthread_cond_signal(&comm->cv);
    pthread_mutex_unlock(&comm->mu);
    *req = r;
    return TIDE_OK;
}

int tide__comm_run(tide_comm_t *comm, tide__call_t *call)
{
    /* Collectives run in the order they were started on every rank: a blocking
     * call waits until the asynchronous ones before it have finished. */
    pthread_mutex_lock(&comm->mu);
    while (comm->queued > 0) pthread_cond_wait(&comm->done_cv, &comm->mu);
    pthread_mutex_unlock(&comm->mu);
    return tide__group_run(comm->group, call);
}

void tide__comm_stop_engine(tide_comm_t *comm)
{
    pthread_mutex_lock(&comm->mu);
    int started = comm->engine_started;
    comm->stopping = 1;
    pthread_cond_broadcast(&comm->cv);
    pthread_mutex_unlock(&comm->mu);
    if (started) pthread_join(comm->engine, NULL);
    comm->engine_started = 0;
}
