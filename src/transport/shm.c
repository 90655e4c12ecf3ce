/* shm.c - the shared-memory transport. See shm.h for the window it exposes.
 *
 * Segments are POSIX shared memory objects named /tide-<job>-g<gen>-r<rank>. Each
 * rank creates its own before the rendezvous, maps everyone's after it, and the
 * names are unlinked once every rank has mapped them, so nothing outlives the
 * processes (tide run also removes leftovers of ranks that were killed first). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/error.h"
#include "core/param.h"
#include "transport/shm.h"

#define SHM_MAGIC 0x7469646573686d31ull /* "tideshm1" */
#define HEADER_BYTES 4096

typedef struct {
    tide__transport_t base;
    tide__shm_window_t win;
    void *map[TIDE__SHM_MAX_RANKS];
    size_t map_bytes;
    int pidfd[TIDE__SHM_MAX_RANKS];
    /* Adaptive spinning: spin_ns is the current budget, between spin_min_ns and
     * spin_max_ns. A wait that ends while spinning earns a longer budget; one
     * that has to sleep shortens it by a quarter. On an idle host the peers answer within the
     * budget and waits never sleep (sub-microsecond latency); when other work
     * holds the cores, spinning would only delay the rank we wait for, and the
     * budget falls to almost nothing within a few waits. */
    uint64_t spin_ns, spin_min_ns, spin_max_ns;
    int yields;
    uint64_t poll_ns;
    _Atomic int failed;
    char job_id[64];
} shm_transport_t;

static size_t buf_bytes_param(void)
{
    int64_t v = 4 << 20;
    if (tide__env_int("TIDE_SHM_BUF", v, 4096, 1ll << 30, &v) != TIDE_OK) v = 4 << 20;
    return (size_t)(v & ~(int64_t)63);
}

static void seg_name(char *out, size_t n, const char *job, uint32_t gen, int rank)
{
    snprintf(out, n, "/tide-%s-g%u-r%d", job, gen, rank);
}

static size_t seg_bytes(size_t buf)
{
    return HEADER_BYTES + 2 * buf;
}

int tide__shm_prepare(const char *job_id, uint32_t generation, int rank, int size)
{
    char name[128];
    seg_name(name, sizeof name, job_id, generation, rank);
    size_t bytes = seg_bytes(buf_bytes_param());
    int fd = shm_open(name, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) {
        TIDE_ERROR("shm_open %s: %s", name, strerror(errno));
        return tide__errno_to_status(errno);
    }
    if (ftruncate(fd, (off_t)bytes) < 0) {
        int e = errno;
        close(fd);
        shm_unlink(name);
        TIDE_ERROR("ftruncate %s to %zu bytes: %s (is /dev/shm large enough?)", name, bytes,
                   strerror(e));
        return tide__errno_to_status(e);
    }
    close(fd);
    return TIDE_OK;
}

void tide__shm_unlink(const char *job_id, uint32_t generation, int rank)
{
    char name[128];
    seg_name(name, sizeof name, job_id, generation, rank);
    shm_unlink(name);
}

static shm_transport_t *of(tide__transport_t *t)
{
    return (shm_transport_t *)t;
}

static void shm_abort(tide__transport_t *t, int code)
{
    shm_transport_t *s = of(t);
    if (code >= 0) code = TIDE_EABORTED;
    atomic_store(&s->failed, code);
    for (int j = 0; j < s->base.size; j++) {
        int32_t zero = 0;
        atomic_compare_exchange_strong(&s->win.hdr[j]->abort_code, &zero, code);
    }
    /* Sleepers wait on some rank's phase futex: wake them all. */
    for (int j = 0; j < s->base.size; j++) tide__futex_wake_all(&s->win.hdr[j]->phase);
}

static int shm_status(tide__transport_t *t)
{
    shm_transport_t *s = of(t);
    int f = atomic_load(&s->failed);
    if (f) return f;
    return atomic_load(&s->win.hdr[s->win.rank]->abort_code);
}

/* A peer whose pidfd is readable has exited. */
static int dead_peer(shm_transport_t *s)
{
    struct pollfd p[TIDE__SHM_MAX_RANKS];
    int map[TIDE__SHM_MAX_RANKS], n = 0;
    for (int j = 0; j < s->base.size; j++) {
        if (s->pidfd[j] < 0) continue;
        p[n].fd = s->pidfd[j];
        p[n].events = POLLIN;
        map[n++] = j;
    }
    if (!n || poll(p, (nfds_t)n, 0) <= 0) return -1;
    for (int i = 0; i < n; i++)
        if (p[i].revents) return map[i];
    return -1;
}

static inline int reached(uint32_t v, uint32_t target)
{
    return (int32_t)(v - target) >= 0;
}

/* Whether waiting may go on: TIDE_OK, or the abort code / TIDE_EPEERLOST. */
static int still_waiting(shm_transport_t *s, tide__shm_window_t *w, uint32_t target,
                         uint64_t now, uint64_t *last_check)
{
    int code = atomic_load(&w->hdr[w->rank]->abort_code);
    if (code) return code;
    if ((code = atomic_load(&s->failed))) return code;
    if (now - *last_check < s->poll_ns) return TIDE_OK;
    *last_check = now;
    int d = dead_peer(s);
    if (d >= 0 && !reached(atomic_load(&w->hdr[d]->phase.value), target)) {
        TIDE_WARN("rank %d exited during a collective", d);
        shm_abort(&s->base, TIDE_EPEERLOST);
        return TIDE_EPEERLOST;
    }
    return TIDE_OK;
}

int tide__shm_wait(tide__shm_window_t *w, int j, uint32_t target)
{
    shm_transport_t *s = of(w->transport);
    tide__futex_t *f = &w->hdr[j]->phase;
    if (reached(atomic_load_explicit(&f->value, memory_order_acquire), target)) return TIDE_OK;
    uint64_t start = tide__now_ns(), last_check = start;
    /* Spinning checks for an abort and dead peers as often as sleeping does. */
    for (unsigned i = 1;; i++) {
        if (reached(atomic_load_explicit(&f->value, memory_order_acquire), target)) {
            uint64_t grown = s->spin_ns + s->spin_ns / 4 + 200;
            s->spin_ns = grown < s->spin_max_ns ? grown : s->spin_max_ns;
            return TIDE_OK;
        }
        tide__cpu_relax();
        if ((i & 15) == 0) {
            uint64_t now = tide__now_ns();
            if (now - start >= s->spin_ns) break;
            TIDE_CHECK(still_waiting(s, w, target, now, &last_check));
        }
    }
    uint64_t shrunk = s->spin_ns - s->spin_ns / 4;
    s->spin_ns = shrunk > s->spin_min_ns ? shrunk : s->spin_min_ns;
    for (int i = 0; i < s->yields; i++) {
        if (reached(atomic_load_explicit(&f->value, memory_order_acquire), target)) return TIDE_OK;
        TIDE_CHECK(still_waiting(s, w, target, tide__now_ns(), &last_check));
        sched_yield();
    }
    for (;;) {
        uint32_t v = atomic_load_explicit(&f->value, memory_order_acquire);
        if (reached(v, target)) return TIDE_OK;
        TIDE_CHECK(still_waiting(s, w, target, tide__now_ns(), &last_check));
        tide__futex_wait(f, v, s->poll_ns);
    }
}

int tide__shm_wait_all(tide__shm_window_t *w, uint32_t target)
{
    for (int j = 0; j < w->size; j++) {
        if (j == w->rank) continue;
        TIDE_CHECK(tide__shm_wait(w, j, target));
    }
    return TIDE_OK;
}

void tide__shm_post(tide__shm_window_t *w, uint32_t phase)
{
    w->phase = phase;
    tide__futex_store(&w->hdr[w->rank]->phase, phase);
}

void tide__shm_set_desc(tide__shm_window_t *w, const tide__coll_desc_t *d)
{
    w->hdr[w->rank]->desc = *d;
}

int tide__shm_check_desc(tide__shm_window_t *w, const tide__coll_desc_t *d)
{
    for (int j = 0; j < w->size; j++) {
        if (j == w->rank) continue;
        const tide__coll_desc_t *o = &w->hdr[j]->desc;
        if (o->kind != d->kind || o->dtype != d->dtype || o->op != d->op || o->root != d->root ||
            o->count != d->count || o->seq != d->seq) {
            TIDE_ERROR("collective #%llu: rank %d called kind=%u count=%llu dtype=%u op=%u "
                       "root=%d, this rank kind=%u count=%llu dtype=%u op=%u root=%d",
                       (unsigned long long)d->seq, j, o->kind, (unsigned long long)o->count,
                       o->dtype, o->op, o->root, d->kind, (unsigned long long)d->count, d->dtype,
                       d->op, d->root);
            shm_abort(w->transport, TIDE_EMISMATCH);
            return TIDE_EMISMATCH;
        }
    }
    return TIDE_OK;
}

static tide__shm_window_t *shm_window(tide__transport_t *t)
{
    return &of(t)->win;
}

static int shm_sendrecv(tide__transport_t *t, const tide__coll_desc_t *desc, int to,
                        const void *sbuf, size_t slen, int from, void *rbuf, size_t rlen,
                        tide__recv_fn on_recv, void *ctx)
{
    return TIDE_ENOTSUP; /* the shm algorithms work in the window instead */
}

static void shm_destroy(tide__transport_t *t)
{
    shm_transport_t *s = of(t);
    for (int j = 0; j < s->base.size; j++) {
        if (s->map[j]) munmap(s->map[j], s->map_bytes);
        if (s->pidfd[j] >= 0) close(s->pidfd[j]);
    }
    tide__shm_unlink(s->job_id, s->base.generation, s->base.rank);
    free(s);
}

static const tide__transport_ops_t shm_ops = {
    .name = "shm",
    .sendrecv = shm_sendrecv,
    .window = shm_window,
    .abort = shm_abort,
    .status = shm_status,
    .destroy = shm_destroy,
};

int tide__shm_create(const tide__transport_setup_t *setup, tide__transport_t **out)
{
    if (setup->size > TIDE__SHM_MAX_RANKS) {
        TIDE_ERROR("shm transport supports at most %d ranks per host", TIDE__SHM_MAX_RANKS);
        return TIDE_ENOTSUP;
    }
    shm_transport_t *s = calloc(1, sizeof *s);
    if (!s) return TIDE_ENOMEM;
    s->base.ops = &shm_ops;
    s->base.rank = setup->rank;
    s->base.size = setup->size;
    s->base.generation = setup->generation;
    snprintf(s->job_id, sizeof s->job_id, "%s", setup->job_id);
    for (int j = 0; j < TIDE__SHM_MAX_RANKS; j++) s->pidfd[j] = -1;
    size_t buf = buf_bytes_param();
    s->map_bytes = seg_bytes(buf);
    s->win.rank = setup->rank;
    s->win.size = setup->size;
    s->win.buf_bytes = buf;
    s->win.transport = &s->base;

    /* Oversubscribed hosts must not spin: the rank we wait for needs this core. */
    int over = tide__setup_oversubscribed(setup); /* every rank is on this host */
    s->win.oversubscribed = over;
    int64_t v;
    int rc = tide__env_int("TIDE_SHM_SPIN_US", over ? 2 : 50000, 0, 10000000, &v);
    s->spin_max_ns = (uint64_t)v * 1000u;
    uint64_t floor_ns = over ? 500 : 10000000;
    s->spin_min_ns = s->spin_max_ns < floor_ns ? s->spin_max_ns : floor_ns;
    s->spin_ns = s->spin_max_ns;
    if (rc == TIDE_OK) rc = tide__env_int("TIDE_SHM_YIELDS", over ? 4 : 0, 0, 1000000, &v);
    s->yields = (int)v;
    if (rc == TIDE_OK) rc = tide__env_int("TIDE_SHM_POLL_MS", 20, 1, 10000, &v);
    s->poll_ns = (uint64_t)v * 1000000ull;
    if (rc != TIDE_OK) {
        free(s);
        return rc;
    }

    for (int j = 0; j < setup->size && rc == TIDE_OK; j++) {
        char name[128];
        seg_name(name, sizeof name, setup->job_id, setup->generation, j);
        int fd = shm_open(name, O_RDWR, 0600);
        if (fd < 0) {
            TIDE_ERROR("shm_open %s (rank %d's segment): %s", name, j, strerror(errno));
            rc = tide__errno_to_status(errno);
            break;
        }
        struct stat st;
        if (fstat(fd, &st) < 0 || (size_t)st.st_size != s->map_bytes) {
            TIDE_ERROR("%s has %lld bytes, expected %zu (TIDE_SHM_BUF differs between ranks?)",
                       name, (long long)st.st_size, s->map_bytes);
            close(fd);
            rc = TIDE_ECONFIG;
            break;
        }
        void *m = mmap(NULL, s->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        if (m == MAP_FAILED) {
            rc = tide__errno_to_status(errno);
            break;
        }
        s->map[j] = m;
        s->win.hdr[j] = m;
        s->win.buf[j][0] = (unsigned char *)m + HEADER_BYTES;
        s->win.buf[j][1] = (unsigned char *)m + HEADER_BYTES + buf;
        if (j != setup->rank) {
            s->pidfd[j] = (int)syscall(SYS_pidfd_open, setup->members[j].pid, 0);
            if (s->pidfd[j] < 0)
                TIDE_WARN("pidfd_open(rank %d, pid %d): %s; its exit is noticed by timeout only",
                          j, setup->members[j].pid, strerror(errno));
        }
    }
    if (rc != TIDE_OK) {
        shm_destroy(&s->base);
        return rc;
    }
    struct tide__shm_header *me = s->win.hdr[setup->rank];
    me->magic = (uint32_t)SHM_MAGIC;
    me->pid = getpid();
    me->buf_bytes = buf;
    s->win.phase = atomic_load(&me->phase.value);
    *out = &s->base;
    return TIDE_OK;
}
