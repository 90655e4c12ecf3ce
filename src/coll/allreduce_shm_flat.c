/* allreduce_shm_flat.c - the latency-optimal allreduce in shared memory: every
 * rank stages its whole input, one synchronisation, and every rank reduces all
 * inputs itself (in rank order, so all results are bit-identical).
 *
 * Two phases: "staged" (base+1) and "done reading" (base+2). A rank may stage the
 * next collective only once everyone is done reading this one (the wait on base
 * at entry), which also makes the descriptions safe to compare. */
#include <string.h>

#include "coll/group.h"
#include "coll/reduce.h"
#include "core/error.h"
#include "transport/shm.h"

int tide__allreduce_shm_flat(tide__group_t *g, const tide__call_t *c)
{
    tide__shm_window_t *w = g->transport->ops->window(g->transport);
    int n = w->size, me = w->rank;
    uint32_t base = w->phase;
    TIDE_CHECK(tide__shm_wait_all(w, base));
    tide__shm_set_desc(w, &c->desc);
    if (c->bytes) memcpy(w->buf[me][0], c->send, c->bytes);
    tide__shm_post(w, base + 1);
    TIDE_CHECK(tide__shm_wait_all(w, base + 1));
    TIDE_CHECK(tide__shm_check_desc(w, &c->desc));
    const void *srcs[TIDE__SHM_MAX_RANKS];
    for (int j = 0; j < n; j++) srcs[j] = w->buf[j][0];
    tide__reduce_n(c->recv, NULL, srcs, n, c->count, c->dtype, c->op,
                   c->op == TIDE_AVG ? n : 0);
    tide__shm_post(w, base + 2);
    return TIDE_OK;
}

int tide__barrier_shm(tide__group_t *g, const tide__call_t *c)
{
    tide__shm_window_t *w = g->transport->ops->window(g->transport);
    uint32_t base = w->phase;
    TIDE_CHECK(tide__shm_wait_all(w, base));
    tide__shm_set_desc(w, &c->desc);
    tide__shm_post(w, base + 1);
    TIDE_CHECK(tide__shm_wait_all(w, base + 1));
    TIDE_CHECK(tide__shm_check_desc(w, &c->desc));
    /* A second phase, waited for by the next collective's entry, so that no rank
     * overwrites its description before every rank has checked it. */
    tide__shm_post(w, base + 2);
    return TIDE_OK;
}
