/* allgather_ring.c - ring allgather over point-to-point exchanges: in step s,
 * rank r passes block r-s to its right while it receives block r-s-1 from its
 * left, straight into place. */
#include <string.h>

#include "coll/group.h"
#include "core/error.h"

int tide__allgather_ring(tide__group_t *g, const tide__call_t *c)
{
    int n = g->size, r = g->rank;
    int right = (r + 1) % n, left = (r - 1 + n) % n;
    const tide__transport_ops_t *t = g->transport->ops;
    unsigned char *out = c->recv;
    size_t b = c->bytes; /* one rank's block */
    if (b && out + (size_t)r * b != (const unsigned char *)c->send)
        memmove(out + (size_t)r * b, c->send, b);
    for (int s = 0; s < n - 1; s++) {
        int sb = ((r - s) % n + n) % n, rb = ((r - s - 1) % n + n) % n;
        TIDE_CHECK(t->sendrecv(g->transport, &c->desc, right, out + (size_t)sb * b, b, left,
                               out + (size_t)rb * b, b, NULL, NULL));
    }
    return TIDE_OK;
}
