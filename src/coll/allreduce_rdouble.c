/* allreduce_rdouble.c - recursive doubling, the latency-optimal allreduce for
 * small messages: log2(n) exchanges of the whole message with partners at
 * distance 1, 2, 4, ...
 *
 * For a world size that is not a power of two, the first 2*extra ranks pair up:
 * each even one hands its data to its odd neighbour and sits out, and gets the
 * result back at the end. Partners combine commutatively (a op b == b op a), so
 * every rank ends bit-identical. */
#include <string.h>

#include "coll/group.h"
#include "coll/reduce.h"
#include "core/error.h"

static int real_rank(int v, int extra)
{
    return v < extra ? 2 * v + 1 : v + extra;
}

int tide__allreduce_rdouble(tide__group_t *g, const tide__call_t *c)
{
    int n = g->size, r = g->rank;
    const tide__transport_ops_t *t = g->transport->ops;
    tide__transport_t *tr = g->transport;
    unsigned char *out = c->recv, *tmp = g->scratch;
    size_t bytes = c->bytes;
    if (bytes > g->tuning.tcp_small_max) return TIDE_EINVAL; /* select.c never does this */
    if (out != c->send && bytes) memcpy(out, c->send, bytes);
    int p = 1;
    while (p * 2 <= n) p *= 2;
    int extra = n - p, v;
    if (r < 2 * extra) {
        if (r % 2 == 0) {
            TIDE_CHECK(t->sendrecv(tr, &c->desc, r + 1, out, bytes, -1, NULL, 0, NULL, NULL));
            TIDE_CHECK(t->sendrecv(tr, &c->desc, -1, NULL, 0, r + 1, out, bytes, NULL, NULL));
            return TIDE_OK;
        }
        TIDE_CHECK(t->sendrecv(tr, &c->desc, -1, NULL, 0, r - 1, tmp, bytes, NULL, NULL));
        tide__reduce2(out, out, tmp, c->count, c->dtype, c->op);
        v = r / 2;
    } else {
        v = r - extra;
    }
    for (int d = 1; d < p; d *= 2) {
        int partner = real_rank(v ^ d, extra);
        TIDE_CHECK(t->sendrecv(tr, &c->desc, partner, out, bytes, partner, tmp, bytes, NULL, NULL));
        tide__reduce2(out, out, tmp, c->count, c->dtype, c->op);
    }
    tide__reduce_finish(out, c->count, c->dtype, c->op, n);
    if (r < 2 * extra)
        TIDE_CHECK(t->sendrecv(tr, &c->desc, r - 1, out, bytes, -1, NULL, 0, NULL, NULL));
    return TIDE_OK;
}

int tide__agree_p2p(tide__group_t *g, const tide__call_t *c)
{
    static const uint8_t zero = 0;
    uint8_t out;
    tide__call_t a = *c;
    a.send = &zero;
    a.recv = &out;
    a.count = a.bytes = a.esize = 1;
    a.dtype = TIDE_UINT8;
    a.op = TIDE_MAX;
    return tide__allreduce_rdouble(g, &a);
}
