/* comm.c - joining and leaving a job: tide_init reads the TIDE_* environment,
 * opens the control connection, registers with the coordinator, and builds the
 * first generation's group (generation.c); tide_finalize tells the coordinator
 * how this member ends and frees everything. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/error.h"
#include "core/net.h"
#include "core/param.h"
#include "elastic/comm.h"
#include "elastic/control.h"
#include "elastic/proto.h"
#include "transport/shm.h"

static int valid_job_id(const char *s)
{
    size_t n = strlen(s);
    if (!n || n > 32) return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
              (s[i] >= '0' && s[i] <= '9') || s[i] == '-' || s[i] == '_'))
            return 0;
    return 1;
}

static tide_comm_t *comm_alloc(void)
{
    tide_comm_t *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->ctrl_fd = c->listen_fd = -1;
    c->setup_cancel_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (c->setup_cancel_fd < 0) {
        free(c);
        return NULL;
    }
    c->forming_gen = c->aborted_gen = -1;
    c->completed = -1;
    c->root_step = -1;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    pthread_cond_init(&c->done_cv, NULL);
    pthread_mutex_init(&c->gmu, NULL);
    return c;
}

static void comm_free(tide_comm_t *c)
{
    /* The control thread may abort the group: it goes first. */
    tide__ctl_close(c->ctl, NULL, 0);
    c->ctl = NULL;
    tide__group_destroy(c->group);
    if (c->listen_fd >= 0) close(c->listen_fd);
    close(c->setup_cancel_fd);
    tide__state_free(c);
    free(c->steps);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    pthread_cond_destroy(&c->done_cv);
    pthread_mutex_destroy(&c->gmu);
    free(c);
}

static int read_env(tide_comm_t *c, int64_t *rank, int64_t *size, const char **transport)
{
    TIDE_CHECK(tide__env_int("TIDE_SIZE", -1, 1, 65536, size));
    TIDE_CHECK(tide__env_int("TIDE_RANK", -1, 0, 65535, rank));
    if (*size > 0 && *rank >= *size) {
        TIDE_ERROR("TIDE_RANK (%lld) must be below TIDE_SIZE (%lld)", (long long)*rank,
                   (long long)*size);
        return TIDE_ECONFIG;
    }
    int64_t timeout_ms;
    TIDE_CHECK(tide__env_int("TIDE_TIMEOUT_MS", 60000, 100, 3600000, &timeout_ms));
    c->timeout_ms = (int)timeout_ms;
    const char *secret = getenv("TIDE_JOB_SECRET");
    if (!secret || tide__secret_from_hex(secret, &c->secret) != TIDE_OK) {
        TIDE_ERROR("TIDE_JOB_SECRET must hold the job's secret as 32 to 128 hex digits");
        return TIDE_ECONFIG;
    }
    const char *job = getenv("TIDE_JOB_ID");
    if (!job || !valid_job_id(job)) {
        TIDE_ERROR("TIDE_JOB_ID must be 1 to 32 characters of [A-Za-z0-9_-]");
        return TIDE_ECONFIG;
    }
    snprintf(c->job_id, sizeof c->job_id, "%s", job);
    const char *t = getenv("TIDE_TRANSPORT");
    if (!t || !*t || !strcmp(t, "auto")) {
        c->transport_choice = TIDE__CHOOSE_AUTO;
        t = "auto";
    } else if (!strcmp(t, "shm")) {
        c->transport_choice = TIDE__CHOOSE_SHM;
    } else if (!strcmp(t, "tcp")) {
        c->transport_choice = TIDE__CHOOSE_TCP;
    } else {
        TIDE_ERROR("TIDE_TRANSPORT=\"%s\": expected auto, shm or tcp", t);
        return TIDE_ECONFIG;
    }
    *transport = t;
    const char *id = getenv("TIDE_WORKER_ID");
    if (id && *id) {
        if (!tide__valid_name(id, sizeof c->worker_id)) {
            TIDE_ERROR("TIDE_WORKER_ID=\"%s\": expected 1 to 63 characters of [A-Za-z0-9._:/-]", id);
            return TIDE_ECONFIG;
        }
        snprintf(c->worker_id, sizeof c->worker_id, "%s", id);
    } else {
        /* Unique per process and stable across reconnections. */
        unsigned char r[4] = {0};
        tide__random_bytes(r, sizeof r);
        char host[40];
        gethostname(host, sizeof host - 1);
        host[sizeof host - 1] = 0;
        for (char *p = host; *p; p++)
            if (!tide__valid_name((char[]){*p, 0}, 2)) *p = '_';
        snprintf(c->worker_id, sizeof c->worker_id, "%.32s-%d-%02x%02x%02x%02x", host, (int)getpid(),
                 r[0], r[1], r[2], r[3]);
    }
    return TIDE_OK;
}

static int join(tide_comm_t *c, const char *rendezvous)
{
    int64_t rank, size;
    const char *transport;
    TIDE_CHECK(read_env(c, &rank, &size, &transport));
    if (rank >= 0) tide__log_set_rank((int)rank);
    tide__ctl_opts_t o = {rendezvous, &c->secret, c->worker_id, c->job_id, transport,
                          (int)rank, (int)size, c->timeout_ms, c};
    char local[64];
    TIDE_CHECK(tide__ctl_open(&o, local, sizeof local, &c->ctl));
    const char *bind_addr = getenv("TIDE_ADDR");
    if (!bind_addr || !*bind_addr) bind_addr = local;
    snprintf(c->bind_addr, sizeof c->bind_addr, "%s", bind_addr);
    int port;
    TIDE_CHECK(tide__net_listen(c->bind_addr, 0, 128, &c->listen_fd, &port));
    TIDE_CHECK(tide__ctl_start(c->ctl, c->bind_addr, port));
    c->elastic = tide__ctl_elastic(c->ctl);
    if (c->elastic && tide__ctl_deferred(c->ctl)) {
        /* The job trains already: this worker joins at its first step_begin, so
         * that whatever it does before (loading data) costs it alone (P4). */
        c->rank = -1;
        c->size = 0;
        c->need_join = 1;
        return TIDE_OK;
    }
    int rc = tide__gen_join(c, -1, c->elastic ? -1 : c->timeout_ms);
    if (rc == TIDE_OK && !c->elastic && size > 0 && (c->size != size || c->rank != rank)) {
        TIDE_ERROR("the coordinator made this worker rank %d of %d; TIDE_RANK/TIDE_SIZE say %lld of %lld",
                   c->rank, c->size, (long long)rank, (long long)size);
        rc = TIDE_ECONFIG;
    }
    return rc;
}

int tide_init(tide_comm_t **out)
{
    if (!out) return TIDE_EINVAL;
    *out = NULL;
    tide_comm_t *c = comm_alloc();
    if (!c) return TIDE_ENOMEM;
    const char *rendezvous = getenv("TIDE_RENDEZVOUS");
    int rc;
    if (!rendezvous || !*rendezvous) {
        /* A job of one. It is elastic in the one way it can be: a notice makes it
         * leave at a step boundary. */
        c->rank = 0;
        c->size = 1;
        c->elastic = 1;
        c->need_sync = 1;
        c->gen_count = 1;
        c->steps = calloc(1, sizeof *c->steps);
        rc = c->steps ? tide__group_create(0, 1, 0, NULL, &c->group) : TIDE_ENOMEM;
        if (c->steps) c->steps[0] = -1;
    } else {
        rc = join(c, rendezvous);
    }
    if (rc != TIDE_OK) {
        if (rc != TIDE_ESTOPPED) TIDE_ERROR("tide_init failed: %s", tide_strerror(rc));
        comm_free(c);
        return rc;
    }
    *out = c;
    return TIDE_OK;
}

int tide_finalize(tide_comm_t *comm)
{
    if (!comm) return TIDE_EINVAL;
    tide__comm_stop_engine(comm);
    if (comm->ctl) {
        /* "done": this member finished in good standing; "bye": it is simply
         * gone (it left on notice, failed, or gave up). */
        int healthy = comm->group && tide__group_status(comm->group) == TIDE_OK && !comm->left;
        tide__ctl_close(comm->ctl, comm->finished || healthy ? "done" : "bye",
                        comm->completed < 0 ? 0 : comm->completed);
        comm->ctl = NULL;
    }
    tide__notice_stop(comm);
    comm_free(comm);
    return TIDE_OK;
}

void tide__comm_abort_gen(tide_comm_t *c, int64_t gen, int code)
{
    pthread_mutex_lock(&c->gmu);
    if (gen > c->aborted_gen) c->aborted_gen = gen;
    if (c->group && (gen < 0 || (int64_t)c->group->generation == gen)) {
        tide__group_abort(c->group, code);
    }
    if (c->forming_gen >= 0 && (gen < 0 || c->forming_gen == gen)) {
        /* Wakes every wait of the transport's setup: connects and handshakes
         * with a peer that may be frozen, and the accept. */
        uint64_t one = 1;
        if (write(c->setup_cancel_fd, &one, sizeof one) < 0)
            TIDE_WARN("cannot cancel the setup of generation %lld: %s", (long long)c->forming_gen,
                      strerror(errno));
        if (!c->listen_interrupted && c->listen_fd >= 0) {
            /* The accept side also sees its listener shut down; it is replaced
             * once the setup has returned, so that no connection of the aborted
             * generation lingers in its backlog. */
            shutdown(c->listen_fd, SHUT_RDWR);
            c->listen_interrupted = 1;
        }
    }
    pthread_mutex_unlock(&c->gmu);
}
