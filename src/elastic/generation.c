/* generation.c - from a member table to a working group: the transport the
 * table calls for (shm on one host, else tcp), the group, and for shm the
 * barrier after which the segment names can go.
 *
 * Every data connection is authenticated with the generation number
 * (tide__auth_accept's expected generation), so a connection left over from an
 * older generation is refused (P8). The data listener stays the same across
 * generations, unless the control thread had to shut it down to interrupt a
 * setup that could not finish (a peer died while the group formed); then a new
 * one is opened and its port reported with the next ready. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/error.h"
#include "core/net.h"
#include "core/param.h"
#include "elastic/comm.h"
#include "elastic/control.h"
#include "elastic/proto.h"

int tide__recoverable(int err)
{
    switch (err) {
    case TIDE_EPEERLOST:
    case TIDE_EABORTED:
    case TIDE_ETIMEDOUT:
    case TIDE_EIO:
    case TIDE_ESYS:
    case TIDE_ESTALE:
    case TIDE_EPROTO:
        return 1;
    default:
        return 0;
    }
}

int tide_elastic_recoverable(int err)
{
    return tide__recoverable(err);
}

/* After an interrupted setup: a fresh listener on the same address. Called with
 * gmu held. */
static void replace_listener(tide_comm_t *c)
{
    int fd, port;
    if (c->listen_fd >= 0) close(c->listen_fd);
    c->listen_fd = -1;
    if (tide__net_listen(c->bind_addr, 0, 128, &fd, &port) == TIDE_OK) {
        c->listen_fd = fd;
        tide__ctl_set_port(c->ctl, port);
    } else {
        TIDE_ERROR("cannot open a new data listener on %s", c->bind_addr);
    }
    c->listen_interrupted = 0;
}

/* Empties the setup's cancel eventfd (non-blocking: nothing to read is fine).
 * Called with gmu held. */
static void reset_cancel(tide_comm_t *c)
{
    uint64_t n;
    if (read(c->setup_cancel_fd, &n, sizeof n) < 0 && errno != EAGAIN)
        TIDE_WARN("cannot reset the setup's cancel descriptor: %s", strerror(errno));
}

static int listen_port(int fd)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (fd < 0 || getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) return 0;
    return ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                          : ((struct sockaddr_in *)&ss)->sin_port);
}

static int build(tide_comm_t *c, tide__membership_t *m)
{
    int rank = m->my_rank, size = m->size;
    uint32_t gen = m->generation;
    int use_shm = m->use_shm && size > 1;
    if (c->transport_choice == TIDE__CHOOSE_SHM && !use_shm && size > 1) {
        TIDE_ERROR("TIDE_TRANSPORT=shm, but the ranks are not all on one host");
        return TIDE_ECONFIG;
    }
    pthread_mutex_lock(&c->gmu);
    if (c->aborted_gen >= (int64_t)gen) {
        pthread_mutex_unlock(&c->gmu);
        return TIDE_EABORTED;
    }
    c->forming_gen = gen;
    reset_cancel(c);
    pthread_mutex_unlock(&c->gmu);

    /* Setup waits for peers at most this long; a frozen peer is caught by the
     * coordinator long before, and its abort cancels the setup's waits (the
     * eventfd setup_cancel_fd; the listener's shutdown wakes the accept too). */
    int timeout = c->timeout_ms;
    if (c->gen_count > 0) {
        int hb, to;
        tide__ctl_timing_of(c->ctl, &hb, &to);
        if (timeout > 4 * to) timeout = 4 * to;
    }
    tide__transport_t *t = NULL;
    tide__transport_setup_t setup = {.rank = rank,
                                     .size = size,
                                     .generation = gen,
                                     .members = m->members,
                                     .secret = &c->secret,
                                     .job_id = c->job_id,
                                     .listen_fd = c->listen_fd,
                                     .timeout_ms = timeout,
                                     .cancel_fd = c->setup_cancel_fd};
    int rc = TIDE_OK;
    if (size > 1) rc = use_shm ? tide__shm_create(&setup, &t) : tide__tcp_create(&setup, &t);
    tide__group_t *g = NULL;
    if (rc == TIDE_OK) {
        rc = tide__group_create(rank, size, gen, t, &g);
        if (rc != TIDE_OK && t) t->ops->destroy(t);
    }
    pthread_mutex_lock(&c->gmu);
    c->forming_gen = -1;
    if (c->listen_interrupted) {
        /* The abort shut the listener down under the accept, which then fails
         * with EINVAL: that is this generation's abort, not a bad argument. */
        if (rc != TIDE_OK) rc = TIDE_EABORTED;
        replace_listener(c);
    }
    if (rc == TIDE_OK) {
        c->group = g;
        if (c->aborted_gen >= (int64_t)gen) tide__group_abort(g, TIDE_EABORTED);
    }
    pthread_mutex_unlock(&c->gmu);
    if (rc != TIDE_OK) {
        if (use_shm) tide__shm_unlink(c->job_id, gen, rank);
        return rc;
    }
    c->rank = rank;
    c->size = size;
    c->generation = gen;
    c->root = m->root;
    c->root_step = m->root_step;
    free(c->steps);
    c->steps = m->steps;
    m->steps = NULL;
    if (use_shm) {
        /* Every rank has mapped every segment once this barrier passes; the names
         * can go, and the memory lives exactly as long as the mappings. */
        rc = tide_barrier(c);
        tide__shm_unlink(c->job_id, gen, rank);
    }
    tide__log_set_rank(rank);
    TIDE_INFO("joined generation %u as rank %d of %d over %s", gen, rank, size,
              t ? t->ops->name : "self");
    return rc;
}

void tide__gen_release(tide_comm_t *c)
{
    if (!c->group) return;
    pthread_mutex_lock(&c->mu);
    int queued = c->queued;
    pthread_mutex_unlock(&c->mu);
    if (queued) {
        /* Requests the application left in flight end with an error, not a wait. */
        tide__group_abort(c->group, TIDE_EABORTED);
        pthread_mutex_lock(&c->mu);
        while (c->queued > 0) pthread_cond_wait(&c->done_cv, &c->mu);
        pthread_mutex_unlock(&c->mu);
    }
    pthread_mutex_lock(&c->gmu);
    tide__group_t *g = c->group;
    c->group = NULL;
    pthread_mutex_unlock(&c->gmu);
    tide__group_destroy(g);
}

static int notice_interrupt(void *arg)
{
    tide_comm_t *c = arg;
    return c->loop_started && tide__notice_pending(c);
}

int tide__gen_join(tide_comm_t *c, int64_t after, int timeout_ms)
{
    for (;;) {
        tide__membership_t m;
        int stop_code = TIDE_ESTOPPED;
        int rc = tide__ctl_wait_members(c->ctl, after, timeout_ms, notice_interrupt, c, &m, &stop_code);
        if (rc == TIDE_ESTOPPED) {
            c->left = 1;
            if (stop_code == TIDE_OK) TIDE_INFO("the job finished; this worker is not needed");
            return TIDE_ESTOPPED;
        }
        if (rc == TIDE_ETIMEDOUT && after < 0)
            TIDE_ERROR("no member table from the coordinator within %d ms (are all %s workers "
                       "started?)", timeout_ms, c->elastic ? "--min" : "TIDE_SIZE");
        TIDE_CHECK(rc);
        int64_t gen = m.generation;
        rc = build(c, &m);
        if (rc == TIDE_OK) {
            tide__membership_free(&m);
            c->gen_count++;
            c->need_sync = 1;
            tide__ctl_set_status(c->ctl, TIDE__WS_MEMBER, gen, c->rank, c->size, c->completed);
            return TIDE_OK;
        }
        int rank = m.my_rank, size = m.size;
        tide__membership_free(&m);
        tide__gen_release(c);
        if (!c->elastic || !tide__recoverable(rc)) return rc;
        TIDE_WARN("generation %lld did not come up (%s); waiting for the next", (long long)gen,
                  tide_strerror(rc));
        tide__ctl_set_status(c->ctl, TIDE__WS_READY, gen, rank, size, c->completed);
        pthread_mutex_lock(&c->gmu);
        int port = listen_port(c->listen_fd);
        pthread_mutex_unlock(&c->gmu);
        tide__ctl_send(c->ctl, json_pack("{s:s, s:I, s:I, s:s, s:i, s:b, s:i}", "type", "ready",
                                         "generation", (json_int_t)gen, "step",
                                         (json_int_t)c->completed, "reason", "failed", "code", rc,
                                         "leaving", 0, "port", port));
        after = gen;
    }
}
