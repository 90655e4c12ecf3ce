/* broadcast_p2p.c - broadcast over point-to-point exchanges: a binomial tree for
 * small messages (log2(n) hops), a pipelined chain for large ones (each rank
 * forwards segment k to its successor while it receives segment k+1, so the
 * time is about one message transfer plus (n-2) segments). */
#include "coll/group.h"
#include "core/error.h"

static int bcast_tree(tide__group_t *g, const tide__call_t *c)
{
    int n = g->size, vr = (g->rank - c->root + n) % n;
    const tide__transport_ops_t *t = g->transport->ops;
    unsigned char *buf = c->recv;
    int mask = 1;
    while (mask < n) {
        if (vr & mask) {
            int src = (vr - mask + c->root) % n;
            TIDE_CHECK(t->sendrecv(g->transport, &c->desc, -1, NULL, 0, src, buf, c->bytes, NULL,
                                   NULL));
            break;
        }
        mask <<= 1;
    }
    mask >>= 1;
    while (mask > 0) {
        if (vr + mask < n) {
            int dst = (vr + mask + c->root) % n;
            TIDE_CHECK(t->sendrecv(g->transport, &c->desc, dst, buf, c->bytes, -1, NULL, 0, NULL,
                                   NULL));
        }
        mask >>= 1;
    }
    return TIDE_OK;
}

static int bcast_chain(tide__group_t *g, const tide__call_t *c)
{
    int n = g->size, vr = (g->rank - c->root + n) % n;
    int next = vr == n - 1 ? -1 : (g->rank + 1) % n, prev = vr == 0 ? -1 : (g->rank - 1 + n) % n;
    const tide__transport_ops_t *t = g->transport->ops;
    unsigned char *buf = c->recv;
    size_t seg = g->tuning.tcp_chain_seg / c->esize * c->esize;
    if (!seg) seg = c->esize;
    size_t nseg = (c->bytes + seg - 1) / seg;
    /* Step k: send segment k-1 onwards, receive segment k. */
    for (size_t k = 0; k <= nseg; k++) {
        int to = (k >= 1 && next >= 0) ? next : -1, from = (k < nseg && prev >= 0) ? prev : -1;
        if (to < 0 && from < 0) continue;
        size_t so = (k - 1) * seg, ro = k * seg;
        size_t sl = to >= 0 ? (c->bytes - so < seg ? c->bytes - so : seg) : 0;
        size_t rl = from >= 0 ? (c->bytes - ro < seg ? c->bytes - ro : seg) : 0;
        TIDE_CHECK(t->sendrecv(g->transport, &c->desc, to, to >= 0 ? buf + so : NULL, sl, from,
                               from >= 0 ? buf + ro : NULL, rl, NULL, NULL));
    }
    return TIDE_OK;
}

/* Data flows only away from the root, so a rank could finish while another rank
 * called something else: the agreement at the end (whose result depends on every
 * rank, and which carries the broadcast's description) closes that gap. Even two
 * ranks need it: the root only sends, so it would never see its peer's view. */
int tide__broadcast_p2p(tide__group_t *g, const tide__call_t *c)
{
    if (c->bytes <= g->tuning.tcp_bcast_small || g->size == 2) TIDE_CHECK(bcast_tree(g, c));
    else TIDE_CHECK(bcast_chain(g, c));
    return tide__agree_p2p(g, c);
}
