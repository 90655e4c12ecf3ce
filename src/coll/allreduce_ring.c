/* allreduce_ring.c - bandwidth-optimal ring allreduce: reduce-scatter, then
 * allgather, over point-to-point exchanges, segment by segment.
 *
 * The message is cut into n blocks. In reduce-scatter step s, rank r sends block
 * r-s to its right neighbour while it receives block r-s-1 from its left and
 * reduces it into its own as it arrives (the transport hands over pieces while
 * they are still in cache, so receipt, reduction and sending overlap). After n-1
 * steps rank r holds block r+1 complete; the allgather passes completed blocks
 * round the ring. Each block's final value is computed once, by one rank, so all
 * ranks end bit-identical. The out-of-place call costs no extra copy: a block's
 * local contribution is read from the send buffer the one time it is needed. */
#include "coll/group.h"
#include "coll/reduce.h"
#include "core/error.h"

typedef struct {
    const unsigned char *src; /* local contribution of the receiving block */
    unsigned char *dst;
    size_t esize;
    tide_dtype_t dtype;
    tide_op_t op;
} ring_rx_t;

static void reduce_piece(void *ctx, size_t off, const void *piece, size_t len)
{
    ring_rx_t *r = ctx;
    tide__reduce2(r->dst + off, r->src + off, piece, len / r->esize, r->dtype, r->op);
}

/* One ring allreduce of count elements at element offset base. */
static int ring_pass(tide__group_t *g, const tide__call_t *c, size_t base, size_t count)
{
    int n = g->size, r = g->rank;
    int right = (r + 1) % n, left = (r - 1 + n) % n;
    const tide__transport_ops_t *t = g->transport->ops;
    size_t es = c->esize;
    const unsigned char *in = (const unsigned char *)c->send + base * es;
    unsigned char *out = (unsigned char *)c->recv + base * es;
    for (int s = 0; s < n - 1; s++) {
        int sb = ((r - s) % n + n) % n, rb = ((r - s - 1) % n + n) % n;
        size_t slo, shi, rlo, rhi;
        tide__split(count, n, sb, &slo, &shi);
        tide__split(count, n, rb, &rlo, &rhi);
        const unsigned char *sendp = (s == 0 ? in : out) + slo * es;
        ring_rx_t rx = {in + rlo * es, out + rlo * es, es, c->dtype, c->op};
        TIDE_CHECK(t->sendrecv(g->transport, &c->desc, right, sendp, (shi - slo) * es, left, NULL,
                               (rhi - rlo) * es, reduce_piece, &rx));
    }
    int own = (r + 1) % n;
    size_t olo, ohi;
    tide__split(count, n, own, &olo, &ohi);
    tide__reduce_finish(out + olo * es, ohi - olo, c->dtype, c->op, n);
    for (int s = 0; s < n - 1; s++) {
        int sb = ((r + 1 - s) % n + n) % n, rb = ((r - s) % n + n) % n;
        size_t slo, shi, rlo, rhi;
        tide__split(count, n, sb, &slo, &shi);
        tide__split(count, n, rb, &rlo, &rhi);
        TIDE_CHECK(t->sendrecv(g->transport, &c->desc, right, out + slo * es, (shi - slo) * es,
                               left, out + rlo * es, (rhi - rlo) * es, NULL, NULL));
    }
    return TIDE_OK;
}

/* A large message goes round the ring in segments of n blocks of
 * TIDE_RING_BLOCK bytes (256 KiB), each segment reduce-scattered and gathered
 * before the next: a block is sent on, reduced and sent back while it is still
 * in cache, instead of the whole message streaming through memory three times.
 * Measured (2 ranks, loopback TCP, docs/performance.md): 64 MiB from 2.2-2.3 to
 * 3.9-4.0 GB/s bus bandwidth. Every rank must use the same block size (the
 * frames' lengths would disagree, and the peers would refuse them). */
int tide__allreduce_ring(tide__group_t *g, const tide__call_t *c)
{
    size_t seg = g->tuning.ring_block * (size_t)g->size / c->esize;
    if (!seg || c->count <= seg) return ring_pass(g, c, 0, c->count);
    for (size_t lo = 0; lo < c->count; lo += seg)
        TIDE_CHECK(ring_pass(g, c, lo, c->count - lo < seg ? c->count - lo : seg));
    return TIDE_OK;
}
