/* tcp.c - the TCP transport: a full mesh of authenticated connections.
 *
 * Every payload travels in frames of at most TIDE_TCP_FRAME bytes, each behind a
 * header that repeats the collective's description, its sequence number and the
 * generation. The receiver checks every header, so mismatched collectives and
 * stale traffic are caught at the first frame, and the framing never depends on
 * trusting a peer's length: a frame's length must be exactly the one this rank
 * expects. A rank that finds a mismatch sends an ABORT frame (at a frame
 * boundary) to every peer before closing, so every rank learns the same reason.
 *
 * Each pair of ranks may share several connections (streams, TIDE_TCP_STREAMS):
 * the frames of one exchange are dealt round-robin, frame i on stream i % K, and
 * every stream is its own framed sequence. Clouds cap the rate of one TCP flow
 * (5 Gbit/s on AWS outside a placement group), and one flow's window stalls on
 * a lossy path; K flows share the link K ways. Between processes of one host the
 * copies, not the flows, are the limit, so there it is one stream. */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <unistd.h>
#include <fcntl.h>

#include "core/auth.h"
#include "core/error.h"
#include "core/net.h"
#include "core/param.h"
#include "transport/transport.h"

#define FRAME_MAGIC 0x54444631u /* "TDF1" */
#define TIDE__TCP_POLL_MAX 256
enum { FRAME_DATA = 1, FRAME_ABORT = 2 };

typedef struct {
    uint32_t magic;
    uint8_t type, kind, dtype, op;
    uint32_t generation;
    int32_t root;
    uint64_t seq;
    uint64_t count;
    uint32_t len;
    int32_t code;
} frame_hdr_t; /* 40 bytes, host byte order: Tide's hosts share an architecture */

#define TIDE__TCP_STREAMS_MAX 8

typedef struct {
    int fd;
    int tx_mid; /* a frame is partly written: an ABORT may not be inserted */
} conn_t;

typedef struct {
    tide__transport_t base;
    conn_t *conn; /* by rank, then stream: conn[rank * streams + s]; our own are fd -1 */
    int streams;
    size_t frame;
    unsigned char *stage; /* receive staging for reduce-on-receive, frame bytes per stream */
    _Atomic int failed;
    int poll_ms;
    int wake_fd;      /* eventfd: readable once the transport failed */
    uint64_t spin_ns; /* an idle exchange retries this long before it sleeps in poll */
} tcp_transport_t;

static tcp_transport_t *of(tide__transport_t *t)
{
    return (tcp_transport_t *)t;
}

static conn_t *conn_of(tcp_transport_t *t, int rank, int stream)
{
    return &t->conn[rank * t->streams + stream];
}

/* The claim of a data connection carries rank, stream and stream count in its
 * one authenticated word: 16, 8 and 8 bits (ranks stay below 4096). */
static uint32_t stream_claim(int rank, int stream, int streams)
{
    return (uint32_t)rank | (uint32_t)stream << 16 | (uint32_t)streams << 24;
}

static void set_nonblock(int fd)
{
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

static void fill_hdr(frame_hdr_t *h, const tcp_transport_t *t, const tide__coll_desc_t *d,
                     int type, uint32_t len, int code)
{
    memset(h, 0, sizeof *h);
    h->magic = FRAME_MAGIC;
    h->type = (uint8_t)type;
    h->generation = t->base.generation;
    if (d) {
        h->kind = d->kind;
        h->dtype = d->dtype;
        h->op = d->op;
        h->root = d->root;
        h->seq = d->seq;
        h->count = d->count;
    }
    h->len = len;
    h->code = code;
}

/* Marks the transport failed and closes every connection. When with_frames is
 * set (the calling thread is the one driving the connections), each peer first
 * gets an ABORT frame carrying code so it fails with the same reason. */
static void fail(tcp_transport_t *t, int code, int with_frames)
{
    int expected = 0;
    if (!atomic_compare_exchange_strong(&t->failed, &expected, code)) return;
    uint64_t one = 1;
    ssize_t w1 = write(t->wake_fd, &one, sizeof one); /* wakes this rank's own waits */
    (void)w1;
    for (int j = 0; j < t->base.size * t->streams; j++) {
        conn_t *c = &t->conn[j];
        if (c->fd < 0) continue;
        if (with_frames && !c->tx_mid) {
            frame_hdr_t h;
            fill_hdr(&h, t, NULL, FRAME_ABORT, 0, code);
            ssize_t w = send(c->fd, &h, sizeof h, MSG_DONTWAIT | MSG_NOSIGNAL);
            (void)w;
        }
        /* Only the sending side: a shutdown for reading would answer data still
         * arriving with a reset, and a reset discards what the peer had not read
         * yet, failing a slower peer's collective that could still complete. */
        shutdown(c->fd, SHUT_WR);
    }
}

static void tcp_abort(tide__transport_t *t, int code)
{
    fail(of(t), code < 0 ? code : TIDE_EABORTED, 0);
}

static int tcp_status(tide__transport_t *t)
{
    return atomic_load(&of(t)->failed);
}

static int check_hdr(tcp_transport_t *t, const frame_hdr_t *h, const tide__coll_desc_t *d,
                     int from, size_t expect_len)
{
    if (h->magic != FRAME_MAGIC) {
        TIDE_ERROR("rank %d sent a malformed frame (magic %08x)", from, h->magic);
        return TIDE_EPROTO;
    }
    if (h->type == FRAME_ABORT) {
        int code = h->code < 0 && h->code > -1000 ? h->code : TIDE_EABORTED;
        TIDE_DEBUG("rank %d aborted the group: %s", from, tide_errname(code));
        return code;
    }
    if (h->type != FRAME_DATA) return TIDE_EPROTO;
    if (h->generation != t->base.generation) {
        TIDE_ERROR("rank %d sent a frame of generation %u (this is %u)", from, h->generation,
                   t->base.generation);
        return TIDE_ESTALE;
    }
    if (h->kind != d->kind || h->dtype != d->dtype || h->op != d->op || h->root != d->root ||
        h->count != d->count || h->seq != d->seq) {
        TIDE_ERROR("collective #%llu: rank %d called kind=%u count=%llu dtype=%u op=%u root=%d "
                   "(#%llu), this rank kind=%u count=%llu dtype=%u op=%u root=%d",
                   (unsigned long long)d->seq, from, h->kind, (unsigned long long)h->count,
                   h->dtype, h->op, h->root, (unsigned long long)h->seq, d->kind,
                   (unsigned long long)d->count, d->dtype, d->op, d->root);
        return TIDE_EMISMATCH;
    }
    if (h->len != expect_len) {
        TIDE_ERROR("rank %d sent a frame of %u bytes, expected %zu", from, h->len, expect_len);
        return TIDE_EMISMATCH;
    }
    return TIDE_OK;
}

/* The send and receive halves of one sendrecv, advanced by poll readiness. */
typedef struct {
    const unsigned char *buf;
    size_t len, off;  /* the current frame's offset in the payload */
    size_t stride;    /* from one of this stream's frames to its next: frame * streams */
    frame_hdr_t hdr;
    size_t hdr_off;   /* bytes of the current header written */
    size_t frame_len; /* payload length of the current frame */
    size_t frame_off;
    int frames_left;
} tx_t;

typedef struct {
    unsigned char *buf;
    size_t len, off, stride; /* as in tx_t */
    unsigned char *stage;    /* this stream's staging */
    frame_hdr_t hdr;
    size_t hdr_off;
    size_t frame_len, frame_off;
    int frames_left;
    tide__recv_fn on_recv;
    void *ctx;
    size_t elem, staged, reduced; /* reduce-on-receive bookkeeping within a frame */
} rx_t;

static size_t nframes(size_t len, size_t frame)
{
    return len ? (len + frame - 1) / frame : 1;
}

/* How many of a payload's frames travel on stream s of k (frame i on i % k). */
static int stream_frames(size_t len, size_t frame, int s, int k)
{
    size_t nf = nframes(len, frame);
    return (size_t)s < nf ? (int)((nf - (size_t)s + (size_t)k - 1) / (size_t)k) : 0;
}

static int tx_progress(tcp_transport_t *t, const tide__coll_desc_t *d, conn_t *c, tx_t *x)
{
    while (x->frames_left > 0) {
        if (x->hdr_off == 0 && x->frame_off == 0) {
            x->frame_len = x->len - x->off < t->frame ? x->len - x->off : t->frame;
            fill_hdr(&x->hdr, t, d, FRAME_DATA, (uint32_t)x->frame_len, 0);
        }
        struct iovec iov[2];
        int n = 0;
        if (x->hdr_off < sizeof x->hdr) {
            iov[n].iov_base = (unsigned char *)&x->hdr + x->hdr_off;
            iov[n++].iov_len = sizeof x->hdr - x->hdr_off;
        }
        if (x->frame_off < x->frame_len) {
            iov[n].iov_base = (void *)(x->buf + x->off + x->frame_off);
            iov[n++].iov_len = x->frame_len - x->frame_off;
        }
        struct msghdr mh = {0};
        mh.msg_iov = iov;
        mh.msg_iovlen = (size_t)n;
        ssize_t w = sendmsg(c->fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) return TIDE_OK;
            if (errno == EINTR) continue;
            return tide__errno_to_status(errno);
        }
        c->tx_mid = 1;
        size_t ww = (size_t)w;
        size_t h = sizeof x->hdr - x->hdr_off;
        if (ww < h) {
            x->hdr_off += ww;
            continue;
        }
        x->hdr_off = sizeof x->hdr;
        x->frame_off += ww - h;
        if (x->frame_off == x->frame_len) {
            x->off += x->stride;
            x->frames_left--;
            x->hdr_off = x->frame_off = 0;
            c->tx_mid = 0;
        }
    }
    return TIDE_OK;
}

static int rx_progress(tcp_transport_t *t, const tide__coll_desc_t *d, conn_t *c, int from,
                       rx_t *x)
{
    while (x->frames_left > 0) {
        if (x->hdr_off < sizeof x->hdr) {
            ssize_t r = recv(c->fd, (unsigned char *)&x->hdr + x->hdr_off,
                             sizeof x->hdr - x->hdr_off, MSG_DONTWAIT);
            if (r == 0) return TIDE_EPEERLOST;
            if (r < 0) {
                if (errno == EAGAIN || errno == EWOULDBLOCK) return TIDE_OK;
                if (errno == EINTR) continue;
                return tide__errno_to_status(errno);
            }
            x->hdr_off += (size_t)r;
            if (x->hdr_off < sizeof x->hdr) continue;
            size_t expect = x->len - x->off < t->frame ? x->len - x->off : t->frame;
            TIDE_CHECK(check_hdr(t, &x->hdr, d, from, expect));
            x->frame_len = expect;
            x->frame_off = 0;
            x->staged = x->reduced = 0;
        }
        if (x->frame_off < x->frame_len) {
            unsigned char *dst = x->on_recv ? x->stage + x->frame_off : x->buf + x->off + x->frame_off;
            ssize_t r = recv(c->fd, dst, x->frame_len - x->frame_off, MSG_DONTWAIT);
            if (r == 0) return TIDE_EPEERLOST;
            if (r < 0) {
                if (errno == EAGAIN || errno == EWOULDBLOCK) return TIDE_OK;
                if (errno == EINTR) continue;
                return tide__errno_to_status(errno);
            }
            x->frame_off += (size_t)r;
            if (x->on_recv) {
                /* Reduce what has arrived while it is still in cache, whole
                 * elements only; the tail waits for the rest of its element. */
                size_t upto = x->frame_off == x->frame_len ? x->frame_len
                                                           : x->frame_off / x->elem * x->elem;
                if (upto > x->reduced) {
                    x->on_recv(x->ctx, x->off + x->reduced, x->stage + x->reduced,
                               upto - x->reduced);
                    x->reduced = upto;
                }
            }
        }
        if (x->frame_off == x->frame_len) {
            x->off += x->stride;
            x->frames_left--;
            x->hdr_off = 0;
            x->frame_off = x->frame_len = 0;
        }
    }
    return TIDE_OK;
}

/* After a connection failed, or a peer hung up: look through what it left in the
 * socket for an ABORT frame, skipping `skip` bytes of a frame in progress first.
 * The group is failing either way; this only recovers the reason, so a rank
 * whose neighbour found a mismatch reports TIDE_EMISMATCH, not TIDE_EPEERLOST. */
static int scan_for_abort(tcp_transport_t *t, int fd, size_t skip)
{
    unsigned char sink[4096];
    uint64_t deadline = tide__now_ns() + 50000000ull;
    for (int frames = 0; frames < 4096; frames++) {
        while (skip) {
            size_t want = skip < sizeof sink ? skip : sizeof sink;
            if (tide__net_read_full(fd, sink, want, deadline, -1) != TIDE_OK) return TIDE_EPEERLOST;
            skip -= want;
        }
        frame_hdr_t h;
        if (tide__net_read_full(fd, &h, sizeof h, deadline, -1) != TIDE_OK || h.magic != FRAME_MAGIC)
            return TIDE_EPEERLOST;
        if (h.type == FRAME_ABORT) return h.code < 0 && h.code > -1000 ? h.code : TIDE_EABORTED;
        if (h.len > t->frame) return TIDE_EPEERLOST;
        skip = h.len;
    }
    return TIDE_EPEERLOST;
}

/* A frame waiting on a connection this exchange does not read: an ABORT, or the
 * same collective described differently (a mismatch that no data path would
 * otherwise reveal: ranks waiting on each other in different patterns). Frames
 * of later collectives are legitimate early arrivals. Returns TIDE_OK when the
 * connection needs no more watching during this exchange. */
static int peek_other(tcp_transport_t *t, const tide__coll_desc_t *d, int j, int fd)
{
    (void)t;
    frame_hdr_t h;
    ssize_t r = recv(fd, &h, sizeof h, MSG_PEEK | MSG_DONTWAIT);
    /* A peer that hung up with nothing to say may simply have finished (it had all
     * it needed from us); only a data path that still needs it makes that a loss. */
    if (r < (ssize_t)sizeof h) return TIDE_OK;
    if (h.magic != FRAME_MAGIC) return TIDE_EPROTO;
    if (h.type == FRAME_ABORT) return h.code < 0 && h.code > -1000 ? h.code : TIDE_EABORTED;
    if (h.seq == d->seq && (h.kind != d->kind || h.dtype != d->dtype || h.op != d->op ||
                            h.root != d->root || h.count != d->count)) {
        TIDE_ERROR("collective #%llu: rank %d called kind=%u count=%llu dtype=%u op=%u root=%d, "
                   "this rank kind=%u count=%llu dtype=%u op=%u root=%d",
                   (unsigned long long)d->seq, j, h.kind, (unsigned long long)h.count, h.dtype,
                   h.op, h.root, d->kind, (unsigned long long)d->count, d->dtype, d->op, d->root);
        return TIDE_EMISMATCH;
    }
    return TIDE_OK;
}

/* Finishes the frame a stream is in the middle of sending, blocking briefly, so
 * that the ABORT that follows lands on a frame boundary. */
static void finish_frame(conn_t *c, const tx_t *x)
{
    if (!c->tx_mid) return;
    fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) & ~O_NONBLOCK);
    struct timeval tv = {0, 200000};
    setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    size_t h = sizeof x->hdr - x->hdr_off;
    int ok = tide__net_write_full(c->fd, (const unsigned char *)&x->hdr + x->hdr_off, h,
                                  tide__now_ns() + 200000000ull, -1) == TIDE_OK;
    if (ok && x->frame_len > x->frame_off)
        ok = tide__net_write_full(c->fd, x->buf + x->off + x->frame_off, x->frame_len - x->frame_off,
                                  tide__now_ns() + 200000000ull, -1) == TIDE_OK;
    if (ok) c->tx_mid = 0;
}

static int tcp_sendrecv(tide__transport_t *tt, const tide__coll_desc_t *d, int to,
                        const void *sbuf, size_t slen, int from, void *rbuf, size_t rlen,
                        tide__recv_fn on_recv, void *ctx)
{
    tcp_transport_t *t = of(tt);
    int rc = atomic_load(&t->failed);
    if (rc) return rc;
    const int k = t->streams;
    tx_t tx[TIDE__TCP_STREAMS_MAX] = {{0}};
    rx_t rx[TIDE__TCP_STREAMS_MAX] = {{0}};
    int tx_left = 0, rx_left = 0; /* frames still to go, all streams */
    for (int s = 0; s < k; s++) {
        if (to >= 0) {
            tx[s] = (tx_t){.buf = sbuf, .len = slen, .off = (size_t)s * t->frame,
                           .stride = (size_t)k * t->frame,
                           .frames_left = stream_frames(slen, t->frame, s, k)};
            tx_left += tx[s].frames_left;
        }
        if (from >= 0) {
            size_t elem = tide_dtype_size((tide_dtype_t)d->dtype);
            rx[s] = (rx_t){.buf = rbuf, .len = rlen, .off = (size_t)s * t->frame,
                           .stride = (size_t)k * t->frame, .stage = t->stage + (size_t)s * t->frame,
                           .frames_left = stream_frames(rlen, t->frame, s, k),
                           .on_recv = on_recv, .ctx = ctx, .elem = elem ? elem : 1};
            rx_left += rx[s].frames_left;
        }
    }
    int n = t->base.size;
    struct pollfd p[TIDE__TCP_POLL_MAX];
    int watch[TIDE__TCP_POLL_MAX], watch_rank[TIDE__TCP_POLL_MAX];
    int nwatch = 0;
    /* Every peer this exchange does not read from is watched for an ABORT, the
     * one it sends to included: a failed peer stops reading, and its ABORT is how
     * a sender blocked on it learns to stop. */
    for (int j = 0; j < n; j++) {
        if (j == t->base.rank || j == from) continue;
        for (int s = 0; s < k && nwatch < TIDE__TCP_POLL_MAX - 2 * k - 1; s++)
            if (conn_of(t, j, s)->fd >= 0) {
                watch_rank[nwatch] = j;
                watch[nwatch++] = conn_of(t, j, s)->fd;
            }
    }
    int bad_stream = -1, bad_is_rx = 0, deferred = TIDE_OK;
    int spin_left = -1;
    uint64_t spin_from = 0;
    uint64_t deferred_until = 0;
    while (rc == TIDE_OK && (tx_left > 0 || rx_left > 0)) {
        for (int s = 0; s < k && rc == TIDE_OK; s++) {
            if (tx[s].frames_left > 0) {
                int before = tx[s].frames_left;
                rc = tx_progress(t, d, conn_of(t, to, s), &tx[s]);
                tx_left -= before - tx[s].frames_left;
                if (rc != TIDE_OK) bad_stream = s, bad_is_rx = 0;
            }
            if (rc == TIDE_OK && rx[s].frames_left > 0) {
                int before = rx[s].frames_left;
                rc = rx_progress(t, d, conn_of(t, from, s), from, &rx[s]);
                rx_left -= before - rx[s].frames_left;
                if (rc != TIDE_OK) bad_stream = s, bad_is_rx = 1;
            }
        }
        if (rc != TIDE_OK || (tx_left <= 0 && rx_left <= 0)) break;
        /* Spin briefly before sleeping: a small message's answer is usually
         * microseconds away, and waking from poll costs more than that (the
         * 4 KiB allreduce took 1.6x Open MPI's time, which polls, without it).
         * The clock restarts whenever a frame completes. Never on an
         * oversubscribed host, where the peer needs this core to answer. */
        if (t->spin_ns) {
            uint64_t now = tide__now_ns();
            if (tx_left + rx_left != spin_left) spin_left = tx_left + rx_left, spin_from = now;
            if (now - spin_from < t->spin_ns) {
                rc = atomic_load(&t->failed); /* TIDE_OK while nobody failed the transport */
                continue;
            }
        }
        int np = 0;
        for (int s = 0; s < k; s++) {
            int tfd = tx[s].frames_left > 0 ? conn_of(t, to, s)->fd : -1;
            int rfd = rx[s].frames_left > 0 ? conn_of(t, from, s)->fd : -1;
            if (tfd >= 0) p[np++] = (struct pollfd){tfd, POLLOUT, 0};
            if (rfd >= 0 && rfd == tfd) p[np - 1].events |= POLLIN;
            else if (rfd >= 0) p[np++] = (struct pollfd){rfd, POLLIN, 0};
        }
        p[np++] = (struct pollfd){t->wake_fd, POLLIN, 0};
        int first_watch = np;
        for (int i = 0; i < nwatch; i++) p[np++] = (struct pollfd){watch[i], POLLIN | POLLRDHUP, 0};
        int pr = poll(p, (nfds_t)np, t->poll_ms);
        if (pr < 0 && errno != EINTR) rc = tide__errno_to_status(errno);
        int f = atomic_load(&t->failed);
        if (f) rc = f;
        for (int i = nwatch - 1; rc == TIDE_OK && pr > 0 && i >= 0; i--) {
            if (!p[first_watch + i].revents) continue;
            int prc = peek_other(t, d, watch_rank[i], watch[i]);
            watch[i] = watch[nwatch - 1];
            watch_rank[i] = watch_rank[--nwatch];
            if (prc != TIDE_OK && deferred == TIDE_OK) {
                /* Another rank failed the group, but this exchange may still
                 * complete (its peers sent their part before failing): finish it
                 * if it can, within a bound; peers that failed close their
                 * connections, so a transfer that cannot finish errs promptly. */
                deferred = prc;
                deferred_until = tide__now_ns() + 1000000000ull;
                nwatch = 0;
                break;
            }
        }
        if (deferred != TIDE_OK && rc == TIDE_OK && tide__now_ns() > deferred_until) rc = deferred;
    }
    if (deferred != TIDE_OK) {
        if (rc == TIDE_OK) {
            fail(t, deferred, 1); /* this exchange completed; the next one fails */
            return TIDE_OK;
        }
        if (rc == TIDE_EPEERLOST || rc == TIDE_ESYS) rc = deferred;
    }
    if (rc != TIDE_OK) {
        int f = atomic_load(&t->failed);
        if (f) return f; /* someone else failed the group first: keep their reason */
        if ((rc == TIDE_EPEERLOST || rc == TIDE_ESYS) && bad_stream >= 0) {
            /* Where the failed stream is also read from, the reader's place in
             * its current frame says how much to skip before the next header. */
            const rx_t *x = &rx[bad_stream];
            int reading = bad_is_rx || to == from;
            size_t skip = 0;
            if (reading && x->hdr_off == sizeof x->hdr) skip = x->frame_len - x->frame_off;
            if (!reading || x->hdr_off == 0 || x->hdr_off == sizeof x->hdr)
                rc = scan_for_abort(t, conn_of(t, bad_is_rx ? from : to, bad_stream)->fd, skip);
        }
        if ((rc == TIDE_EMISMATCH || rc == TIDE_EPROTO || rc == TIDE_ESTALE) && to >= 0)
            for (int s = 0; s < k; s++) finish_frame(conn_of(t, to, s), &tx[s]);
        fail(t, rc, 1);
        return rc;
    }
    return TIDE_OK;
}

static struct tide__shm_window *tcp_window(tide__transport_t *t)
{
    return NULL;
}

static void tcp_destroy(tide__transport_t *tt)
{
    tcp_transport_t *t = of(tt);
    for (int j = 0; j < t->base.size * t->streams; j++)
        if (t->conn[j].fd >= 0) close(t->conn[j].fd);
    if (t->wake_fd >= 0) close(t->wake_fd);
    free(t->conn);
    free(t->stage);
    free(t);
}

static const tide__transport_ops_t tcp_ops = {
    .name = "tcp",
    .sendrecv = tcp_sendrecv,
    .window = tcp_window,
    .abort = tcp_abort,
    .status = tcp_status,
    .destroy = tcp_destroy,
};

/* The number of streams per pair: TIDE_TCP_STREAMS, else 1 where every rank
 * has this rank's address (one host: copies are the limit) and 2 otherwise. */
static int choose_streams(const tide__transport_setup_t *s, int64_t *out)
{
    int across_hosts = 0;
    for (int j = 0; j < s->size; j++)
        if (strcmp(s->members[j].addr, s->members[s->rank].addr) != 0) across_hosts = 1;
    return tide__env_int("TIDE_TCP_STREAMS", across_hosts ? 2 : 1, 1, TIDE__TCP_STREAMS_MAX, out);
}

int tide__tcp_create(const tide__transport_setup_t *s, tide__transport_t **out)
{
    tcp_transport_t *t = calloc(1, sizeof *t);
    if (!t) return TIDE_ENOMEM;
    t->base.ops = &tcp_ops;
    t->base.rank = s->rank;
    t->base.size = s->size;
    t->base.generation = s->generation;
    int64_t v;
    int rc = tide__env_int("TIDE_TCP_FRAME", 256 * 1024, 4096, 64 << 20, &v);
    t->frame = (size_t)v;
    int64_t sockbuf = 4 << 20;
    if (rc == TIDE_OK) rc = tide__env_int("TIDE_TCP_SOCKBUF", 4 << 20, 0, 1 << 30, &sockbuf);
    if (rc == TIDE_OK) rc = tide__env_int("TIDE_TCP_POLL_MS", 100, 1, 10000, &v);
    t->poll_ms = (int)v;
    if (rc == TIDE_OK)
        rc = tide__env_int("TIDE_TCP_SPIN_US", tide__setup_oversubscribed(s) ? 0 : 50, 0, 1000000, &v);
    t->spin_ns = (uint64_t)v * 1000u;
    if (rc == TIDE_OK) rc = choose_streams(s, &v);
    t->streams = rc == TIDE_OK ? (int)v : 1;
    const int k = t->streams;
    t->conn = calloc((size_t)s->size * (size_t)k, sizeof *t->conn);
    t->stage = malloc(t->frame * (size_t)k);
    t->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (rc != TIDE_OK || !t->conn || !t->stage || t->wake_fd < 0) {
        if (t->wake_fd >= 0) close(t->wake_fd);
        free(t->conn);
        free(t->stage);
        free(t);
        return rc != TIDE_OK ? rc : TIDE_ENOMEM;
    }
    for (int j = 0; j < s->size * k; j++) t->conn[j].fd = -1;
    const tide__secret_t *secret = s->secret;
    /* Lower ranks accept, higher ranks connect: every pair once per stream, no
     * deadlock, because a connect completes in the listener's backlog before any
     * accept. */
    for (int j = 0; j < s->rank && rc == TIDE_OK; j++) {
        for (int st = 0; st < k && rc == TIDE_OK; st++) {
            int fd;
            rc = tide__net_connect(s->members[j].addr, s->members[j].data_port, s->timeout_ms,
                                   s->cancel_fd, &fd);
            if (rc == TIDE_OK) {
                rc = tide__auth_connect(fd, secret, TIDE__CONN_DATA, s->generation,
                                        stream_claim(s->rank, st, k), s->timeout_ms, s->cancel_fd);
                if (rc != TIDE_OK) close(fd);
                else conn_of(t, j, st)->fd = fd;
            }
        }
        if (rc == TIDE_EABORTED)
            TIDE_INFO("setup of generation %u cancelled while connecting to rank %d",
                      s->generation, j);
        else if (rc != TIDE_OK)
            TIDE_ERROR("cannot connect to rank %d at %s:%d: %s", j, s->members[j].addr,
                       s->members[j].data_port, tide_strerror(rc));
    }
    int need = (s->size - 1 - s->rank) * k;
    uint64_t deadline = tide__now_ns() + (uint64_t)s->timeout_ms * 1000000ull;
    while (rc == TIDE_OK && need > 0) {
        uint64_t now = tide__now_ns();
        if (now >= deadline) {
            rc = TIDE_ETIMEDOUT;
            TIDE_ERROR("timed out waiting for %d connection(s) from higher ranks", need);
            break;
        }
        int fd;
        rc = tide__net_accept(s->listen_fd, (int)((deadline - now) / 1000000ull) + 1, s->cancel_fd,
                              &fd);
        if (rc != TIDE_OK) break;
        tide__peer_claim_t claim;
        int arc = tide__auth_accept(fd, secret, s->generation, s->timeout_ms, s->cancel_fd, &claim);
        if (arc == TIDE_EABORTED) {
            close(fd);
            rc = arc;
            break;
        }
        int peer = (int)(claim.rank & 0xffff), st = (int)(claim.rank >> 16 & 0xff),
            theirs = (int)(claim.rank >> 24);
        if (arc == TIDE_OK && claim.kind == TIDE__CONN_DATA && theirs >= 1 && theirs != k) {
            /* Both sides must deal frames over the same streams. */
            TIDE_ERROR("rank %d uses %d TCP stream(s) per peer, this rank %d: set TIDE_TCP_STREAMS "
                       "the same on every rank",
                       peer, theirs, k);
            close(fd);
            rc = TIDE_ECONFIG;
            break;
        }
        if (arc != TIDE_OK || claim.kind != TIDE__CONN_DATA || peer <= s->rank || peer >= s->size ||
            st >= k || conn_of(t, peer, st)->fd >= 0) {
            TIDE_WARN("refused a data connection: %s",
                      arc != TIDE_OK ? tide_strerror(arc) : "unexpected rank, stream or kind");
            close(fd);
            continue; /* an impostor or stray connection costs it, not the group */
        }
        conn_of(t, peer, st)->fd = fd;
        need--;
    }
    if (rc != TIDE_OK) {
        tcp_destroy(&t->base);
        return rc;
    }
    for (int j = 0; j < s->size * k; j++) {
        if (t->conn[j].fd < 0) continue;
        tide__net_tune_data_socket(t->conn[j].fd, (int)sockbuf);
        set_nonblock(t->conn[j].fd);
    }
    *out = &t->base;
    return TIDE_OK;
}
