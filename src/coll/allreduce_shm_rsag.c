/* allreduce_shm_rsag.c - the bandwidth allreduce in shared memory: a
 * reduce-scatter and an allgather through the staging buffers, chunk by chunk.
 *
 * Per chunk k (buffer k%2, phases base+3k+1..3):
 *   1 staged:   each rank copies its chunk into its buffer (all but its own slice);
 *   2 reduced:  rank r reduces slice r across every buffer (its own slice straight
 *               from its input), writing the result to its output and to its
 *               buffer's slice r;
 *   3 consumed: each rank copies every other rank's reduced slice to its output.
 * A buffer is refilled (chunk k+2) only after every rank consumed chunk k, so one
 * buffer fills while the other drains. Compared with a ring over point-to-point
 * channels this moves each byte through shared memory once each way and needs 3
 * synchronisations per chunk instead of 2(n-1), which matters most when ranks
 * outnumber cores. Chunks are small enough to stay in the shared cache. */
#include <string.h>

#include "coll/group.h"
#include "coll/reduce.h"
#include "core/error.h"
#include "transport/shm.h"

int tide__allreduce_shm_rsag(tide__group_t *g, const tide__call_t *c)
{
    tide__shm_window_t *w = g->transport->ops->window(g->transport);
    int n = w->size, me = w->rank;
    size_t es = c->esize;
    /* Chunks: small enough that copy-in, reduction and copy-out of consecutive
     * chunks overlap (at least 8 of them), but when ranks outnumber cores every
     * synchronisation may cost a context switch, so there the chunk is the whole
     * buffer. Slices start on 64-byte boundaries where the chunk allows. */
    size_t chunk_bytes = w->buf_bytes;
    if (!w->oversubscribed) {
        /* ... and small enough that both buffers of every rank stay in the
         * shared cache (1 MiB chunks measured best here at 16-64 MiB). */
        size_t want = c->bytes / 8;
        if (want > g->tuning.shm_chunk_max) want = g->tuning.shm_chunk_max;
        if (want < g->tuning.shm_chunk_min) want = g->tuning.shm_chunk_min;
        if (want < chunk_bytes) chunk_bytes = want;
    }
    size_t chunk = chunk_bytes / es / 16 * 16;
    if (!chunk) chunk = w->buf_bytes / es;
    size_t nchunks = c->count ? (c->count + chunk - 1) / chunk : 1;
    const unsigned char *in = c->send;
    unsigned char *out = c->recv;
    uint32_t base = w->phase;
    TIDE_CHECK(tide__shm_wait_all(w, base));
    tide__shm_set_desc(w, &c->desc);
    for (size_t k = 0; k < nchunks; k++) {
        int b = (int)(k & 1);
        uint32_t ph = base + 3 * (uint32_t)k;
        size_t lo = k * chunk, ce = c->count - lo < chunk ? c->count - lo : chunk;
        if (!c->count) ce = 0;
        size_t slo, shi;
        tide__split(ce / 16, n, me, &slo, &shi);
        slo *= 16;
        shi = me == n - 1 ? ce : shi * 16;
        if (k >= 2) TIDE_CHECK(tide__shm_wait_all(w, ph - 3));
        unsigned char *mine = w->buf[me][b];
        memcpy(mine, in + lo * es, slo * es);
        memcpy(mine + shi * es, in + (lo + shi) * es, (ce - shi) * es);
        tide__shm_post(w, ph + 1);
        TIDE_CHECK(tide__shm_wait_all(w, ph + 1));
        if (k == 0) TIDE_CHECK(tide__shm_check_desc(w, &c->desc));
        const void *srcs[TIDE__SHM_MAX_RANKS];
        for (int j = 0; j < n; j++)
            srcs[j] = j == me ? in + (lo + slo) * es : w->buf[j][b] + slo * es;
        tide__reduce_n(out + (lo + slo) * es, mine + slo * es, srcs, n, shi - slo, c->dtype,
                       c->op, c->op == TIDE_AVG ? n : 0);
        tide__shm_post(w, ph + 2);
        /* Copy each slice as soon as its rank has reduced it, starting with the
         * next rank, rather than after all of them. */
        for (int jj = 1; jj < n; jj++) {
            int j = (me + jj) % n;
            TIDE_CHECK(tide__shm_wait(w, j, ph + 2));
            size_t jlo, jhi;
            tide__split(ce / 16, n, j, &jlo, &jhi);
            jlo *= 16;
            jhi = j == n - 1 ? ce : jhi * 16;
            memcpy(out + (lo + jlo) * es, w->buf[j][b] + jlo * es, (jhi - jlo) * es);
        }
        tide__shm_post(w, ph + 3);
    }
    return TIDE_OK;
}
