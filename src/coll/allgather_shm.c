/* allgather_shm.c - allgather through the staging buffers: each rank stages a
 * chunk of its block, one synchronisation, and every rank copies every block's
 * chunk into place. Two phases per chunk, double-buffered like the others. */
#include <string.h>

#include "coll/group.h"
#include "core/error.h"
#include "transport/shm.h"

int tide__allgather_shm(tide__group_t *g, const tide__call_t *c)
{
    tide__shm_window_t *w = g->transport->ops->window(g->transport);
    int n = w->size, me = w->rank;
    const unsigned char *in = c->send;
    unsigned char *out = c->recv;
    size_t bytes = c->bytes, chunk = w->buf_bytes / c->esize * c->esize;
    size_t nchunks = bytes ? (bytes + chunk - 1) / chunk : 1;
    uint32_t base = w->phase;
    TIDE_CHECK(tide__shm_wait_all(w, base));
    tide__shm_set_desc(w, &c->desc);
    for (size_t k = 0; k < nchunks; k++) {
        uint32_t ph = base + 2 * (uint32_t)k;
        int b = (int)(k & 1);
        size_t lo = k * chunk, len = bytes - lo < chunk ? bytes - lo : chunk;
        if (!bytes) len = 0;
        if (k >= 2) TIDE_CHECK(tide__shm_wait_all(w, ph - 2));
        if (len) memcpy(w->buf[me][b], in + lo, len);
        tide__shm_post(w, ph + 1);
        TIDE_CHECK(tide__shm_wait_all(w, ph + 1));
        if (k == 0) TIDE_CHECK(tide__shm_check_desc(w, &c->desc));
        for (int j = 0; j < n && len; j++) {
            /* memmove: send may alias this rank's block of recv. */
            memmove(out + (size_t)j * bytes + lo, w->buf[j][b], len);
        }
        tide__shm_post(w, ph + 2);
    }
    return TIDE_OK;
}
