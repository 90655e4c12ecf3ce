/*
 * group.h - one membership generation's data plane: ranks, a transport, and the
 * collective algorithms that run over it.
 *
 * A group that failed stays failed (STYLE.md 4): its first error is kept, every
 * later collective returns it at once, and recovery builds the next generation's
 * group rather than mending this one. Algorithms are chosen in select.c, one
 * file per algorithm; each is given a validated call and the group.
 */
#ifndef TIDE_COLL_GROUP_H
#define TIDE_COLL_GROUP_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "tide.h"
#include "transport/transport.h"

/* The switch points between algorithms, measured by `tide bench` (see
 * docs/performance.md) and overridable from the environment. */
typedef struct {
    size_t tcp_small_max;   /* allreduce: recursive doubling up to here, ring above */
    size_t tcp_bcast_small; /* broadcast: binomial tree up to here, pipelined chain above */
    size_t tcp_chain_seg;   /* broadcast chain segment */
    size_t shm_flat_max;    /* allreduce: every rank reduces everything, up to here */
    size_t shm_chunk_min;   /* reduce-scatter/allgather chunk floor ... */
    size_t shm_chunk_max;   /* ... and ceiling, when ranks fit the cores */
    int forced_algo;        /* TIDE_ALGO: 0 auto, else enum tide__algo */
    size_t ring_block;      /* ring allreduce: bytes per rank per segment (0: one segment) */
} tide__tuning_t;

enum tide__algo {
    TIDE__ALGO_AUTO = 0,
    TIDE__ALGO_RING,
    TIDE__ALGO_RDOUBLE,
    TIDE__ALGO_SHM_FLAT,
    TIDE__ALGO_SHM_RSAG
};

typedef struct tide__group {
    int rank, size;
    uint32_t generation;
    tide__transport_t *transport;
    uint64_t seq;       /* collectives started on this group */
    _Atomic int status; /* first error, sticky */
    tide__tuning_t tuning;
    void *scratch;      /* small-message scratch, tuning.tcp_small_max bytes */
} tide__group_t;

/* One validated call. send/recv may alias (in place). */
typedef struct {
    tide__coll_desc_t desc;
    const void *send;
    void *recv;
    size_t count; /* elements */
    size_t bytes; /* count * element size */
    size_t esize;
    tide_dtype_t dtype;
    tide_op_t op;
    int root;
} tide__call_t;

/* Takes ownership of transport. */
int tide__group_create(int rank, int size, uint32_t generation, tide__transport_t *transport,
                       tide__group_t **out);
void tide__group_destroy(tide__group_t *g);
/* Fails the group (from any thread): every collective in flight returns code. */
void tide__group_abort(tide__group_t *g, int code);
int tide__group_status(const tide__group_t *g);

/* Runs one collective; on error the group is failed with it. */
int tide__group_run(tide__group_t *g, tide__call_t *call);

int tide__tuning_load(tide__tuning_t *t);

/* The algorithms (one file each). They return TIDE_OK or the error. */
int tide__allreduce_ring(tide__group_t *g, const tide__call_t *c);
int tide__allreduce_rdouble(tide__group_t *g, const tide__call_t *c);
int tide__allreduce_shm_flat(tide__group_t *g, const tide__call_t *c);
int tide__allreduce_shm_rsag(tide__group_t *g, const tide__call_t *c);
int tide__broadcast_p2p(tide__group_t *g, const tide__call_t *c);
int tide__broadcast_shm(tide__group_t *g, const tide__call_t *c);
int tide__allgather_ring(tide__group_t *g, const tide__call_t *c);
int tide__allgather_shm(tide__group_t *g, const tide__call_t *c);
int tide__barrier_shm(tide__group_t *g, const tide__call_t *c);
/* A one-byte allreduce that carries c's description: it returns only once every
 * rank has joined it, and fails every rank if any one described c differently.
 * The point-to-point barrier, and the end of the point-to-point broadcast. */
int tide__agree_p2p(tide__group_t *g, const tide__call_t *c);

/* Which algorithm select.c picks for c (for the benchmark's report). */
enum tide__algo tide__select_allreduce(const tide__group_t *g, const tide__call_t *c);

/* Splits n items into parts nearly equal parts; part i is [*lo, *hi). */
static inline void tide__split(size_t n, int parts, int i, size_t *lo, size_t *hi)
{
    size_t base = n / (size_t)parts, rem = n % (size_t)parts, ui = (size_t)i;
    *lo = ui * base + (ui < rem ? ui : rem);
    *hi = *lo + base + (ui < rem ? 1 : 0);
}

#endif
