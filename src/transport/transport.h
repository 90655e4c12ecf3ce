/*
 * transport.h - the one interface every transport implements.
 *
 * A transport moves bytes between the ranks of one group (one membership
 * generation). Two exist: tcp (between hosts; forced by TIDE_TRANSPORT=tcp) and
 * shm (same host). Algorithms in src/coll/ are written against this table only:
 * point-to-point exchanges (sendrecv), and, where the transport has one, a shared
 * window that every rank of the host can read (shm), which lets algorithms skip
 * the copies a point-to-point path would make.
 *
 * A transport never retries or recovers: after the first error it is failed, and
 * every later call returns that error (STYLE.md 4). abort() may be called from any
 * thread and wakes every wait at once.
 */
#ifndef TIDE_TRANSPORT_H
#define TIDE_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "tide.h"

/* What every rank claims to be doing; peers compare it field by field, so ranks
 * that call mismatched collectives all fail with TIDE_EMISMATCH. */
typedef struct {
    uint8_t kind; /* enum tide__coll_kind */
    uint8_t dtype;
    uint8_t op;
    uint8_t pad;
    int32_t root;
    uint64_t count;
    uint64_t seq; /* the group's collective sequence number */
} tide__coll_desc_t;

enum tide__coll_kind {
    TIDE__COLL_ALLREDUCE = 1,
    TIDE__COLL_BROADCAST = 2,
    TIDE__COLL_ALLGATHER = 3,
    TIDE__COLL_BARRIER = 4
};

/* Called with each received piece when a sendrecv reduces on receipt:
 * off is the piece's offset within the receive. */
typedef void (*tide__recv_fn)(void *ctx, size_t off, const void *piece, size_t len);

typedef struct tide__transport tide__transport_t;
struct tide__shm_window;

typedef struct {
    const char *name;
    /* Sends slen bytes of sbuf to rank `to` while receiving rlen bytes from rank
     * `from` (either may be -1 for none). Received bytes go to rbuf, or, when
     * on_recv is set, to on_recv piece by piece (rbuf unused). Both sides must
     * describe the same collective (desc); any difference fails the group. */
    int (*sendrecv)(tide__transport_t *t, const tide__coll_desc_t *desc, int to, const void *sbuf,
                    size_t slen, int from, void *rbuf, size_t rlen, tide__recv_fn on_recv,
                    void *ctx);
    /* The shared window, or NULL when the transport has none. */
    struct tide__shm_window *(*window)(tide__transport_t *t);
    /* Fails the transport with code and wakes every waiter, here and, as far as
     * the transport can, on the peers. Idempotent; thread-safe. */
    void (*abort)(tide__transport_t *t, int code);
    /* The code the transport failed with, or TIDE_OK. */
    int (*status)(tide__transport_t *t);
    void (*destroy)(tide__transport_t *t);
} tide__transport_ops_t;

struct tide__transport {
    const tide__transport_ops_t *ops;
    int rank, size;
    uint32_t generation;
};

/* One member of a group, as the rendezvous published it. */
typedef struct {
    int rank;
    int pid;
    int data_port;
    char host_id[128]; /* hostname, boot id and network namespace */
    char addr[64];     /* where its data listener is reachable */
} tide__member_t;

/* What a transport needs to come up. The caller owns everything here. */
typedef struct {
    int rank, size;
    uint32_t generation;
    const tide__member_t *members; /* size entries, by rank */
    const void *secret;            /* tide__secret_t */
    const char *job_id;
    int listen_fd; /* tcp: this rank's data listener, already bound */
    int timeout_ms;
    /* tcp: -1, or a descriptor that becomes readable when this setup is to give
     * up (the generation was aborted): every connect, accept and handshake wait
     * also watches it and ends with TIDE_EABORTED (core/net.h). */
    int cancel_fd;
} tide__transport_setup_t;

/* setup.c: whether this rank's host runs more of the setup's ranks than it has
 * cores. Waits must then not spin: the awaited rank needs the core. */
int tide__setup_oversubscribed(const tide__transport_setup_t *setup);

/* tcp.c, shm.c. Each returns a transport owned by the caller (ops->destroy). */
int tide__tcp_create(const tide__transport_setup_t *setup, tide__transport_t **out);
int tide__shm_create(const tide__transport_setup_t *setup, tide__transport_t **out);

/* shm.c: before the rendezvous, each rank makes its own segment so that once the
 * member table arrives every segment exists. */
int tide__shm_prepare(const char *job_id, uint32_t generation, int rank, int size);
void tide__shm_unlink(const char *job_id, uint32_t generation, int rank);

#endif
