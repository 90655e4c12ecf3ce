/* select.c - the one place that decides which algorithm runs a collective.
 *
 * The defaults come from the sweeps in docs/performance.md (this machine class:
 * 2 cores, loopback TCP, one socket's shared cache). Every switch point can be
 * moved with an environment variable, and TIDE_ALGO forces one algorithm for
 * allreduce (the benchmark and the tests use that to cover each path). */
#include <stdlib.h>
#include <string.h>

#include "coll/group.h"
#include "core/error.h"
#include "core/param.h"
#include "transport/shm.h"

int tide__tuning_load(tide__tuning_t *t)
{
    int64_t v;
    TIDE_CHECK(tide__env_int("TIDE_TCP_SMALL_MAX", 32 * 1024, 0, 64 << 20, &v));
    t->tcp_small_max = (size_t)v;
    TIDE_CHECK(tide__env_int("TIDE_TCP_BCAST_SMALL", 64 * 1024, 0, 64 << 20, &v));
    t->tcp_bcast_small = (size_t)v;
    TIDE_CHECK(tide__env_int("TIDE_TCP_CHAIN_SEG", 512 * 1024, 4096, 64 << 20, &v));
    t->tcp_chain_seg = (size_t)v;
    TIDE_CHECK(tide__env_int("TIDE_RING_BLOCK", 256 * 1024, 0, 1 << 30, &v));
    t->ring_block = (size_t)v;
    TIDE_CHECK(tide__env_int("TIDE_SHM_FLAT_MAX", 64 * 1024, 0, 1 << 30, &v));
    t->shm_flat_max = (size_t)v;
    TIDE_CHECK(tide__env_int("TIDE_SHM_CHUNK_MIN", 256 * 1024, 4096, 1 << 30, &v));
    t->shm_chunk_min = (size_t)v;
    TIDE_CHECK(tide__env_int("TIDE_SHM_CHUNK_MAX", 1 << 20, 4096, 1 << 30, &v));
    t->shm_chunk_max = (size_t)v;
    t->forced_algo = TIDE__ALGO_AUTO;
    const char *a = getenv("TIDE_ALGO");
    if (a && *a && strcmp(a, "auto")) {
        if (!strcmp(a, "ring")) t->forced_algo = TIDE__ALGO_RING;
        else if (!strcmp(a, "rdouble")) t->forced_algo = TIDE__ALGO_RDOUBLE;
        else if (!strcmp(a, "shm-flat")) t->forced_algo = TIDE__ALGO_SHM_FLAT;
        else if (!strcmp(a, "shm-rsag")) t->forced_algo = TIDE__ALGO_SHM_RSAG;
        else {
            TIDE_ERROR("TIDE_ALGO=\"%s\": expected auto, ring, rdouble, shm-flat or shm-rsag", a);
            return TIDE_ECONFIG;
        }
    }
    return TIDE_OK;
}

enum tide__algo tide__select_allreduce(const tide__group_t *g, const tide__call_t *c)
{
    tide__shm_window_t *w = g->transport->ops->window(g->transport);
    int f = g->tuning.forced_algo;
    if (w) {
        /* The flat algorithm stages the whole message in one buffer. */
        if (f == TIDE__ALGO_SHM_FLAT && c->bytes <= w->buf_bytes) return TIDE__ALGO_SHM_FLAT;
        if (f == TIDE__ALGO_SHM_RSAG) return TIDE__ALGO_SHM_RSAG;
        if (c->bytes <= g->tuning.shm_flat_max && c->bytes <= w->buf_bytes)
            return TIDE__ALGO_SHM_FLAT;
        return TIDE__ALGO_SHM_RSAG;
    }
    if (f == TIDE__ALGO_RING) return TIDE__ALGO_RING;
    if (f == TIDE__ALGO_RDOUBLE && c->bytes <= g->tuning.tcp_small_max) return TIDE__ALGO_RDOUBLE;
    return c->bytes <= g->tuning.tcp_small_max ? TIDE__ALGO_RDOUBLE : TIDE__ALGO_RING;
}

static int dispatch(tide__group_t *g, tide__call_t *c)
{
    tide__shm_window_t *w = g->transport->ops->window(g->transport);
    switch (c->desc.kind) {
    case TIDE__COLL_ALLREDUCE:
        switch (tide__select_allreduce(g, c)) {
        case TIDE__ALGO_SHM_FLAT: return tide__allreduce_shm_flat(g, c);
        case TIDE__ALGO_SHM_RSAG: return tide__allreduce_shm_rsag(g, c);
        case TIDE__ALGO_RDOUBLE: return tide__allreduce_rdouble(g, c);
        default: return tide__allreduce_ring(g, c);
        }
    case TIDE__COLL_BROADCAST:
        return w ? tide__broadcast_shm(g, c) : tide__broadcast_p2p(g, c);
    case TIDE__COLL_ALLGATHER:
        return w ? tide__allgather_shm(g, c) : tide__allgather_ring(g, c);
    case TIDE__COLL_BARRIER:
        return w ? tide__barrier_shm(g, c) : tide__agree_p2p(g, c);
    default:
        return TIDE_EINVAL;
    }
}

int tide__group_run(tide__group_t *g, tide__call_t *c)
{
    int st = tide__group_status(g);
    if (st) return st;
    c->desc.seq = g->seq++;
    if (g->size == 1) {
        /* A job of one: the result is the input (AVG of one is the value). */
        if (c->desc.kind == TIDE__COLL_ALLREDUCE || c->desc.kind == TIDE__COLL_ALLGATHER)
            if (c->recv != c->send && c->bytes) memmove(c->recv, c->send, c->bytes);
        return TIDE_OK;
    }
    int rc = dispatch(g, c);
    if (rc != TIDE_OK) {
        int ts = g->transport->ops->status(g->transport);
        if (ts) rc = ts; /* the transport's first reason wins over a follow-on error */
        tide__group_abort(g, rc);
        rc = tide__group_status(g);
    }
    return rc;
}
