/* broadcast_shm.c - broadcast through the root's staging buffers, chunk by
 * chunk: the root fills buffer k%2 and posts, the others copy out and post; the
 * root refills a buffer once every rank has consumed it. Chunk 0 is staged
 * before the first post, so a small broadcast is one synchronisation. */
#include <string.h>

#include "coll/group.h"
#include "core/error.h"
#include "transport/shm.h"

int tide__broadcast_shm(tide__group_t *g, const tide__call_t *c)
{
    tide__shm_window_t *w = g->transport->ops->window(g->transport);
    int me = w->rank, root = c->root;
    unsigned char *buf = c->recv;
    size_t chunk = w->buf_bytes / c->esize * c->esize;
    size_t nchunks = c->bytes ? (c->bytes + chunk - 1) / chunk : 1;
    uint32_t base = w->phase;
    TIDE_CHECK(tide__shm_wait_all(w, base));
    tide__shm_set_desc(w, &c->desc);
    for (size_t k = 0; k < nchunks; k++) {
        uint32_t ph = base + 2 * (uint32_t)k;
        size_t lo = k * chunk, len = c->bytes - lo < chunk ? c->bytes - lo : chunk;
        if (!c->bytes) len = 0;
        unsigned char *stage = w->buf[root][k & 1];
        if (me == root) {
            if (k >= 2) TIDE_CHECK(tide__shm_wait_all(w, ph - 2));
            if (len) memcpy(stage, buf + lo, len);
            tide__shm_post(w, ph + 1);
            if (k == 0) {
                TIDE_CHECK(tide__shm_wait_all(w, ph + 1));
                TIDE_CHECK(tide__shm_check_desc(w, &c->desc));
            }
            tide__shm_post(w, ph + 2);
        } else {
            if (k == 0) {
                tide__shm_post(w, ph + 1);
                TIDE_CHECK(tide__shm_wait_all(w, ph + 1));
                TIDE_CHECK(tide__shm_check_desc(w, &c->desc));
            } else {
                TIDE_CHECK(tide__shm_wait(w, root, ph + 1));
            }
            if (len) memcpy(buf + lo, stage, len);
            tide__shm_post(w, ph + 2);
        }
    }
    return TIDE_OK;
}
