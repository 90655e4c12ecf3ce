/* control.c - see control.h.
 *
 * The control thread polls the connection and a wake pipe; it sends a heartbeat
 * every heartbeat_ms, and treats a coordinator silent for peer_timeout_ms as
 * gone (a coordinator that restarted on another machine never sends a FIN). On
 * any failure it closes the connection and reconnects with exponential backoff
 * (100 ms to 2 s), re-registering what the worker is doing, until it is stopped.
 * Sends from the application thread and from this thread are serialized by
 * send_mu; a send that fails half-way shuts the connection down, so the stream
 * never carries a torn message. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/net.h"
#include "core/param.h"
#include "elastic/comm.h"
#include "elastic/control.h"
#include "elastic/proto.h"

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 2000
#define SEND_TIMEOUT_MS 1000
#define MAX_PREPARED 8

struct tide__ctl {
    tide_comm_t *comm;
    char rendezvous[256];
    char host[256];
    int port;
    tide__secret_t secret;
    char id[TIDE__WORKER_ID_MAX];
    char job_id[64];
    char transport[8];
    char host_id[128];
    char addr[64];
    int data_port;
    int pid, rank_hint, size_hint;
    int timeout_ms;

    pthread_t thread;
    int thread_started;
    int wake[2];
    pthread_mutex_t send_mu; /* the fd, for writing */
    int fd;

    pthread_mutex_t mu; /* everything below */
    pthread_cond_t cv;
    int stopping;
    int connected;
    uint64_t disconnected_since;
    int elastic;
    int64_t job_gen; /* the generation the welcome named: >= 0 once the job trains */
    int deferred;    /* registered, but not yet available to join (see tide__ctl_join) */
    int heartbeat_ms, peer_timeout_ms;
    int status;
    int64_t gen;
    int rank, size;
    int64_t step;
    json_t *members; /* the newest member table not yet taken */
    int stopped;
    int stop_code;
    char stop_reason[256];
    int refused;
    char refused_why[256];
    int welcomed;
    int64_t pending_gen;
    int notice;
    int64_t aborted_gen;
    struct {
        int64_t gen;
        int rank;
    } prepared[MAX_PREPARED];
    int nprepared;
};

void tide__host_id(char *out, size_t len)
{
    char host[64] = "?", boot[40] = "?";
    gethostname(host, sizeof host - 1);
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (!fgets(boot, sizeof boot, f)) snprintf(boot, sizeof boot, "?");
        fclose(f);
        boot[strcspn(boot, "\n")] = 0;
    }
    struct stat st;
    unsigned long long ns = stat("/proc/self/ns/net", &st) == 0 ? (unsigned long long)st.st_ino : 0;
    snprintf(out, len, "%s/%s/%llu", host, boot, ns);
}

/* ---- the member table ---- */

void tide__membership_free(tide__membership_t *m)
{
    if (!m) return;
    free(m->members);
    free(m->steps);
    m->members = NULL;
    m->steps = NULL;
}

int tide__membership_parse(const json_t *msg, const char *my_id, tide__membership_t *out)
{
    long long gen, size, root, root_step;
    char tr[8];
    json_t *arr = json_object_get(msg, "members");
    memset(out, 0, sizeof *out);
    if (tide__json_int(msg, "generation", 0, UINT32_MAX, &gen) ||
        tide__json_int(msg, "size", 1, 65536, &size) || !json_is_array(arr) ||
        (long long)json_array_size(arr) != size || tide__json_int(msg, "root", 0, size - 1, &root) ||
        tide__json_int(msg, "root_step", -1, INT64_MAX, &root_step) ||
        tide__json_str(msg, "transport", tr, sizeof tr) || (strcmp(tr, "shm") && strcmp(tr, "tcp"))) {
        TIDE_ERROR("malformed member table from the coordinator");
        return TIDE_EPROTO;
    }
    tide__member_t *m = calloc((size_t)size, sizeof *m);
    int64_t *steps = calloc((size_t)size, sizeof *steps);
    if (!m || !steps) {
        free(m);
        free(steps);
        return TIDE_ENOMEM;
    }
    int mine = -1;
    for (size_t i = 0; i < (size_t)size; i++) {
        json_t *e = json_array_get(arr, i);
        long long rank, pid, port, step;
        char id[TIDE__WORKER_ID_MAX];
        if (tide__json_int(e, "rank", 0, size - 1, &rank) || tide__json_int(e, "pid", 0, INT32_MAX, &pid) ||
            tide__json_int(e, "port", 0, 65535, &port) || m[rank].host_id[0] ||
            tide__json_int(e, "step", -1, INT64_MAX, &step) ||
            tide__json_str(e, "id", id, sizeof id) ||
            tide__json_str(e, "host", m[rank].host_id, sizeof m[rank].host_id) ||
            !m[rank].host_id[0] || tide__json_str(e, "addr", m[rank].addr, sizeof m[rank].addr)) {
            TIDE_ERROR("malformed entry %zu in the member table", i);
            free(m);
            free(steps);
            return TIDE_EPROTO;
        }
        m[rank].rank = (int)rank;
        m[rank].pid = (int)pid;
        m[rank].data_port = (int)port;
        steps[rank] = step;
        if (my_id && !strcmp(id, my_id)) mine = (int)rank;
    }
    out->generation = (uint32_t)gen;
    out->size = (int)size;
    out->my_rank = mine;
    out->root = (int)root;
    out->root_step = root_step;
    out->use_shm = !strcmp(tr, "shm");
    out->members = m;
    out->steps = steps;
    return TIDE_OK;
}

/* ---- the connection ---- */

static int dial(tide__ctl_t *ctl, int timeout_ms, int *fd_out, char *local, size_t local_len)
{
    int fd;
    TIDE_CHECK(tide__net_connect(ctl->host, ctl->port, timeout_ms, -1, &fd));
    int rc = tide__auth_connect(fd, &ctl->secret, TIDE__CONN_CONTROL, 0,
                                (uint32_t)(ctl->rank_hint < 0 ? 0 : ctl->rank_hint), timeout_ms, -1);
    if (rc != TIDE_OK) {
        close(fd);
        return rc;
    }
    if (local) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        getsockname(fd, (struct sockaddr *)&ss, &sl);
        if (ss.ss_family == AF_INET6)
            inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, local, (socklen_t)local_len);
        else
            inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, local, (socklen_t)local_len);
    }
    *fd_out = fd;
    return TIDE_OK;
}

static json_t *register_msg(tide__ctl_t *ctl)
{
    pthread_mutex_lock(&ctl->mu);
    json_t *m = json_pack("{s:s, s:s, s:s, s:s, s:i, s:i, s:i, s:s, s:s, s:I, s:i, s:i, s:I, s:b}",
                          "type", "register", "id", ctl->id, "host", ctl->host_id, "addr", ctl->addr,
                          "pid", ctl->pid, "port", ctl->data_port, "rank_hint", ctl->rank_hint,
                          "transport", ctl->transport, "status", tide__wstatus_name(ctl->status),
                          "generation", (json_int_t)ctl->gen, "rank", ctl->rank, "size", ctl->size,
                          "step", (json_int_t)ctl->step, "deferred", ctl->deferred);
    /* It can wait outside until its first step (a joiner of a running job), and it
     * says which generation of this job it has heard of: a coordinator that
     * restarted must not start the job over while its members reconnect. */
    if (m) {
        json_object_set_new(m, "can_defer", json_true());
        json_object_set_new(m, "seen_generation",
                            json_integer(ctl->job_gen > ctl->gen ? ctl->job_gen : ctl->gen));
    }
    pthread_mutex_unlock(&ctl->mu);
    return m;
}

int tide__ctl_open(const tide__ctl_opts_t *o, char *local_addr, size_t local_len, tide__ctl_t **out)
{
    tide__ctl_t *ctl = calloc(1, sizeof *ctl);
    if (!ctl) return TIDE_ENOMEM;
    if (tide__net_split_addr(o->rendezvous, ctl->host, sizeof ctl->host, &ctl->port) != TIDE_OK) {
        TIDE_ERROR("TIDE_RENDEZVOUS=\"%s\": expected HOST:PORT", o->rendezvous);
        free(ctl);
        return TIDE_ECONFIG;
    }
    ctl->comm = o->comm;
    snprintf(ctl->rendezvous, sizeof ctl->rendezvous, "%s", o->rendezvous);
    ctl->secret = *o->secret;
    snprintf(ctl->id, sizeof ctl->id, "%s", o->worker_id);
    snprintf(ctl->job_id, sizeof ctl->job_id, "%s", o->job_id);
    snprintf(ctl->transport, sizeof ctl->transport, "%s", o->transport ? o->transport : "auto");
    tide__host_id(ctl->host_id, sizeof ctl->host_id);
    ctl->pid = (int)getpid();
    ctl->rank_hint = o->rank_hint;
    ctl->size_hint = o->size_hint;
    ctl->timeout_ms = o->timeout_ms;
    ctl->fd = -1;
    ctl->wake[0] = ctl->wake[1] = -1;
    ctl->status = TIDE__WS_NEW;
    ctl->gen = -1;
    ctl->rank = -1;
    ctl->step = -1;
    ctl->pending_gen = -1;
    ctl->aborted_gen = -1;
    ctl->job_gen = -1;
    pthread_mutex_init(&ctl->mu, NULL);
    pthread_mutex_init(&ctl->send_mu, NULL);
    pthread_cond_init(&ctl->cv, NULL);
    int rc;
    /* The coordinator may still be starting: retry until the deadline. */
    uint64_t deadline = tide__now_ns() + (uint64_t)o->timeout_ms * 1000000ull;
    for (;;) {
        rc = dial(ctl, 2000, &ctl->fd, local_addr, local_len);
        if (rc == TIDE_OK || rc == TIDE_EAUTH || rc == TIDE_EPROTO || tide__now_ns() >= deadline) break;
        usleep(50000);
    }
    if (rc != TIDE_OK) {
        if (rc != TIDE_EAUTH)
            TIDE_ERROR("cannot reach the coordinator at %s: %s", o->rendezvous, tide_strerror(rc));
        tide__ctl_close(ctl, NULL, 0);
        return rc;
    }
    *out = ctl;
    return TIDE_OK;
}

/* Handles one message from the coordinator (control thread, or the start). */
static void handle(tide__ctl_t *ctl, json_t *msg)
{
    const char *type = json_string_value(json_object_get(msg, "type"));
    long long gen, v;
    if (!strcmp(type, "hb")) return;
    if (!strcmp(type, "welcome")) {
        long long hb = TIDE__HEARTBEAT_MS_DEFAULT, to = TIDE__PEER_TIMEOUT_MS_DEFAULT;
        tide__json_int(msg, "heartbeat_ms", 10, 60000, &hb);
        tide__json_int(msg, "peer_timeout_ms", 20, 3600000, &to);
        pthread_mutex_lock(&ctl->mu);
        long long g = -1;
        tide__json_int(msg, "generation", -1, UINT32_MAX, &g);
        ctl->welcomed = 1;
        if (g > ctl->job_gen) ctl->job_gen = g;
        ctl->deferred = json_is_true(json_object_get(msg, "deferred"));
        ctl->elastic = json_is_true(json_object_get(msg, "elastic"));
        ctl->heartbeat_ms = (int)hb;
        ctl->peer_timeout_ms = (int)to;
        pthread_cond_broadcast(&ctl->cv);
        pthread_mutex_unlock(&ctl->mu);
    } else if (!strcmp(type, "abort")) {
        if (tide__json_int(msg, "generation", -1, UINT32_MAX, &gen)) return;
        if (tide__json_int(msg, "code", -1000, -1, &v)) v = TIDE_EABORTED;
        pthread_mutex_lock(&ctl->mu);
        if (gen > ctl->aborted_gen) ctl->aborted_gen = gen;
        pthread_cond_broadcast(&ctl->cv);
        pthread_mutex_unlock(&ctl->mu);
        TIDE_DEBUG("the coordinator aborts generation %lld: %s", gen, tide_errname((int)v));
        tide__comm_abort_gen(ctl->comm, gen, (int)v);
    } else if (!strcmp(type, "pending")) {
        if (tide__json_int(msg, "generation", 0, UINT32_MAX, &gen)) return;
        pthread_mutex_lock(&ctl->mu);
        ctl->pending_gen = gen;
        pthread_mutex_unlock(&ctl->mu);
    } else if (!strcmp(type, "notice")) {
        pthread_mutex_lock(&ctl->mu);
        ctl->notice = 1;
        pthread_cond_broadcast(&ctl->cv);
        pthread_mutex_unlock(&ctl->mu);
        TIDE_INFO("the coordinator gave this worker notice to leave");
    } else if (!strcmp(type, "prepare")) {
        long long rank, size;
        if (tide__json_int(msg, "generation", 0, UINT32_MAX, &gen) ||
            tide__json_int(msg, "size", 1, 65536, &size) ||
            tide__json_int(msg, "rank", 0, size - 1, &rank))
            return;
        /* Segments of earlier generations are in use by nobody now: either their
         * group is up (and the names were unlinked) or it never came up. */
        pthread_mutex_lock(&ctl->mu);
        int keep = 0;
        for (int i = 0; i < ctl->nprepared; i++) {
            if (ctl->prepared[i].gen < gen)
                tide__shm_unlink(ctl->job_id, (uint32_t)ctl->prepared[i].gen, ctl->prepared[i].rank);
            else
                ctl->prepared[keep++] = ctl->prepared[i];
        }
        ctl->nprepared = keep;
        pthread_mutex_unlock(&ctl->mu);
        int rc = tide__shm_prepare(ctl->job_id, (uint32_t)gen, (int)rank, (int)size);
        if (rc == TIDE_OK) {
            pthread_mutex_lock(&ctl->mu);
            if (ctl->nprepared == MAX_PREPARED) {
                tide__shm_unlink(ctl->job_id, (uint32_t)ctl->prepared[0].gen, ctl->prepared[0].rank);
                memmove(ctl->prepared, ctl->prepared + 1, (MAX_PREPARED - 1) * sizeof ctl->prepared[0]);
                ctl->nprepared--;
            }
            ctl->prepared[ctl->nprepared].gen = gen;
            ctl->prepared[ctl->nprepared].rank = (int)rank;
            ctl->nprepared++;
            pthread_mutex_unlock(&ctl->mu);
        }
        tide__ctl_send(ctl, json_pack("{s:s, s:I, s:b}", "type", "prepared", "generation",
                                      (json_int_t)gen, "ok", rc == TIDE_OK));
    } else if (!strcmp(type, "members")) {
        pthread_mutex_lock(&ctl->mu);
        /* A copy, not a second reference: jansson's reference counts are not
         * safe to drop from two threads. */
        json_decref(ctl->members);
        ctl->members = json_deep_copy(msg);
        pthread_cond_broadcast(&ctl->cv);
        pthread_mutex_unlock(&ctl->mu);
    } else if (!strcmp(type, "stop")) {
        char reason[256] = "the job stopped";
        if (tide__json_int(msg, "code", -1000, 0, &v)) v = TIDE_ESTOPPED;
        tide__json_str(msg, "reason", reason, sizeof reason);
        pthread_mutex_lock(&ctl->mu);
        int first = !ctl->stopped;
        ctl->stopped = 1;
        ctl->stop_code = (int)v;
        snprintf(ctl->stop_reason, sizeof ctl->stop_reason, "%s", reason);
        pthread_cond_broadcast(&ctl->cv);
        pthread_mutex_unlock(&ctl->mu);
        if (first) TIDE_INFO("the coordinator stops the job: %s", reason);
        if (v != TIDE_OK) tide__comm_abort_gen(ctl->comm, -1, TIDE_ESTOPPED);
    } else if (!strcmp(type, "error")) {
        char why[256] = "(no reason given)";
        tide__json_str(msg, "message", why, sizeof why);
        pthread_mutex_lock(&ctl->mu);
        ctl->refused = 1;
        snprintf(ctl->refused_why, sizeof ctl->refused_why, "%s", why);
        pthread_cond_broadcast(&ctl->cv);
        pthread_mutex_unlock(&ctl->mu);
    } else {
        TIDE_WARN("unexpected control message \"%.32s\" ignored", type);
    }
}

static void disconnect(tide__ctl_t *ctl, const char *why)
{
    pthread_mutex_lock(&ctl->send_mu);
    if (ctl->fd >= 0) close(ctl->fd);
    ctl->fd = -1;
    pthread_mutex_unlock(&ctl->send_mu);
    pthread_mutex_lock(&ctl->mu);
    if (ctl->connected) {
        ctl->connected = 0;
        ctl->disconnected_since = tide__now_ns();
        TIDE_WARN("lost the coordinator at %s (%s); training goes on, reconnecting", ctl->rendezvous,
                  why);
    }
    pthread_cond_broadcast(&ctl->cv);
    pthread_mutex_unlock(&ctl->mu);
}

static int wait_wake(tide__ctl_t *ctl, int ms)
{
    struct pollfd p = {ctl->wake[0], POLLIN, 0};
    int r = poll(&p, 1, ms);
    if (r > 0) {
        char buf[16];
        ssize_t n = read(ctl->wake[0], buf, sizeof buf);
        (void)n;
    }
    pthread_mutex_lock(&ctl->mu);
    int stop = ctl->stopping;
    pthread_mutex_unlock(&ctl->mu);
    return stop;
}

static void *ctl_main(void *arg)
{
    tide__ctl_t *ctl = arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    int backoff = BACKOFF_MIN_MS;
    uint64_t last_rx = tide__now_ns(), last_hb = 0, up_since = 0;
    for (;;) {
        pthread_mutex_lock(&ctl->mu);
        int stop = ctl->stopping, hb_ms = ctl->heartbeat_ms, to_ms = ctl->peer_timeout_ms;
        pthread_mutex_unlock(&ctl->mu);
        if (stop) break;
        pthread_mutex_lock(&ctl->send_mu);
        int fd = ctl->fd;
        pthread_mutex_unlock(&ctl->send_mu);
        if (fd < 0) {
            if (up_since) {
                /* A connection that did not last: wait before the next dial. */
                up_since = 0;
                if (wait_wake(ctl, backoff)) break;
                backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
            }
            int nfd;
            int rc = dial(ctl, 1000, &nfd, NULL, 0);
            if (rc == TIDE_OK) {
                json_t *reg = register_msg(ctl);
                rc = reg ? tide__msg_send(nfd, reg, tide__now_ns() + SEND_TIMEOUT_MS * 1000000ull)
                         : TIDE_ENOMEM;
                json_decref(reg);
                if (rc != TIDE_OK) close(nfd);
            }
            if (rc != TIDE_OK) {
                if (wait_wake(ctl, backoff)) break;
                backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
                continue;
            }
            /* The backoff resets only once this connection proves itself (a
             * message after the welcome, see below): a coordinator that drops
             * every reconnect at once must not be redialled in a tight loop. */
            up_since = tide__now_ns();
            pthread_mutex_lock(&ctl->send_mu);
            ctl->fd = nfd;
            pthread_mutex_unlock(&ctl->send_mu);
            pthread_mutex_lock(&ctl->mu);
            ctl->connected = 1;
            pthread_cond_broadcast(&ctl->cv);
            pthread_mutex_unlock(&ctl->mu);
            TIDE_INFO("re-registered with the coordinator at %s", ctl->rendezvous);
            last_rx = tide__now_ns();
            fd = nfd;
        }
        uint64_t now = tide__now_ns();
        if ((now - last_hb) / 1000000ull >= (uint64_t)hb_ms) {
            pthread_mutex_lock(&ctl->mu);
            json_t *hb = json_pack("{s:s, s:I, s:I}", "type", "hb", "step", (json_int_t)ctl->step,
                                   "generation", (json_int_t)ctl->gen);
            pthread_mutex_unlock(&ctl->mu);
            tide__ctl_send(ctl, hb);
            last_hb = now;
        }
        if ((now - last_rx) / 1000000ull > (uint64_t)to_ms) {
            disconnect(ctl, "silent");
            continue;
        }
        uint64_t next_hb = last_hb + (uint64_t)hb_ms * 1000000ull;
        int wait_ms = next_hb > now ? (int)((next_hb - now) / 1000000ull) + 1 : 0;
        struct pollfd p[2] = {{ctl->wake[0], POLLIN, 0}, {fd, POLLIN, 0}};
        int pr = poll(p, 2, wait_ms);
        if (pr <= 0) continue;
        if (p[0].revents) {
            char buf[16];
            ssize_t n = read(ctl->wake[0], buf, sizeof buf);
            (void)n;
        }
        if (p[1].revents) {
            json_t *msg;
            int rc = tide__msg_recv(fd, TIDE__MSG_MAX, tide__now_ns() + 2000000000ull, &msg);
            if (rc != TIDE_OK) {
                disconnect(ctl, tide_strerror(rc));
                continue;
            }
            last_rx = tide__now_ns();
            if (up_since && last_rx - up_since > (uint64_t)hb_ms * 2 * 1000000ull) {
                up_since = 0; /* it lasted: the next loss starts the backoff over */
                backoff = BACKOFF_MIN_MS;
            }
            handle(ctl, msg);
            json_decref(msg);
        }
    }
    return NULL;
}

int tide__ctl_start(tide__ctl_t *ctl, const char *addr, int port)
{
    snprintf(ctl->addr, sizeof ctl->addr, "%s", addr);
    ctl->data_port = port;
    json_t *reg = register_msg(ctl);
    uint64_t deadline = tide__now_ns() + (uint64_t)ctl->timeout_ms * 1000000ull;
    int rc = reg ? tide__msg_send(ctl->fd, reg, deadline) : TIDE_ENOMEM;
    json_decref(reg);
    TIDE_CHECK(rc);
    /* The welcome (or a refusal) comes first, before any other message. */
    json_t *msg;
    TIDE_CHECK(tide__msg_recv(ctl->fd, TIDE__MSG_MAX, deadline, &msg));
    handle(ctl, msg);
    json_decref(msg);
    if (ctl->refused) {
        TIDE_ERROR("the coordinator refused this worker: %s", ctl->refused_why);
        return TIDE_ECONFIG;
    }
    if (ctl->stopped) {
        TIDE_INFO("the job is over before this worker joined: %s", ctl->stop_reason);
        return TIDE_ESTOPPED;
    }
    if (!ctl->welcomed) {
        TIDE_ERROR("expected a welcome from the coordinator");
        return TIDE_EPROTO;
    }
    if (pipe2(ctl->wake, O_CLOEXEC | O_NONBLOCK) < 0) return TIDE_ESYS;
    fcntl(ctl->fd, F_SETFL, fcntl(ctl->fd, F_GETFL) | O_NONBLOCK);
    ctl->connected = 1;
    if (pthread_create(&ctl->thread, NULL, ctl_main, ctl) != 0) return TIDE_ESYS;
    ctl->thread_started = 1;
    return TIDE_OK;
}

void tide__ctl_close(tide__ctl_t *ctl, const char *final, int64_t step)
{
    if (!ctl) return;
    if (final) {
        tide__ctl_send(ctl, json_pack("{s:s, s:I}", "type", final, "step", (json_int_t)step));
    }
    pthread_mutex_lock(&ctl->mu);
    ctl->stopping = 1;
    pthread_mutex_unlock(&ctl->mu);
    if (ctl->wake[1] >= 0) {
        ssize_t w = write(ctl->wake[1], "x", 1);
        (void)w;
    }
    if (ctl->thread_started) pthread_join(ctl->thread, NULL);
    if (ctl->fd >= 0) {
        /* A FIN after the last message, so the coordinator reads it before EOF. */
        shutdown(ctl->fd, SHUT_WR);
        close(ctl->fd);
    }
    for (int i = 0; i < ctl->nprepared; i++)
        tide__shm_unlink(ctl->job_id, (uint32_t)ctl->prepared[i].gen, ctl->prepared[i].rank);
    for (int i = 0; i < 2; i++)
        if (ctl->wake[i] >= 0) close(ctl->wake[i]);
    json_decref(ctl->members);
    pthread_mutex_destroy(&ctl->mu);
    pthread_mutex_destroy(&ctl->send_mu);
    pthread_cond_destroy(&ctl->cv);
    free(ctl);
}

int tide__ctl_elastic(const tide__ctl_t *ctl)
{
    return ctl && ctl->elastic;
}

void tide__ctl_timing_of(const tide__ctl_t *ctl, int *heartbeat_ms, int *peer_timeout_ms)
{
    pthread_mutex_lock((pthread_mutex_t *)&ctl->mu);
    *heartbeat_ms = ctl->heartbeat_ms;
    *peer_timeout_ms = ctl->peer_timeout_ms;
    pthread_mutex_unlock((pthread_mutex_t *)&ctl->mu);
}

void tide__ctl_set_status(tide__ctl_t *ctl, int status, int64_t gen, int rank, int size, int64_t step)
{
    pthread_mutex_lock(&ctl->mu);
    ctl->status = status;
    ctl->gen = gen;
    ctl->rank = rank;
    ctl->size = size;
    ctl->step = step;
    pthread_mutex_unlock(&ctl->mu);
}

void tide__ctl_set_step(tide__ctl_t *ctl, int64_t step)
{
    pthread_mutex_lock(&ctl->mu);
    ctl->step = step;
    pthread_mutex_unlock(&ctl->mu);
}

void tide__ctl_set_port(tide__ctl_t *ctl, int port)
{
    pthread_mutex_lock(&ctl->mu);
    ctl->data_port = port;
    pthread_mutex_unlock(&ctl->mu);
}

int tide__ctl_send(tide__ctl_t *ctl, json_t *msg)
{
    if (!msg) return TIDE_ENOMEM;
    int rc = TIDE_ECLOSED;
    pthread_mutex_lock(&ctl->send_mu);
    if (ctl->fd >= 0) {
        rc = tide__msg_send(ctl->fd, msg, tide__now_ns() + SEND_TIMEOUT_MS * 1000000ull);
        if (rc != TIDE_OK) shutdown(ctl->fd, SHUT_RDWR); /* the thread reconnects */
    }
    pthread_mutex_unlock(&ctl->send_mu);
    json_decref(msg);
    return rc;
}

int tide__ctl_wait_members(tide__ctl_t *ctl, int64_t after, int timeout_ms,
                           int (*interrupt)(void *), void *arg, tide__membership_t *out,
                           int *stop_code)
{
    uint64_t deadline = timeout_ms >= 0 ? tide__now_ns() + (uint64_t)timeout_ms * 1000000ull : 0;
    int rc;
    pthread_mutex_lock(&ctl->mu);
    for (;;) {
        if (ctl->members) {
            json_t *msg = ctl->members;
            ctl->members = NULL;
            pthread_mutex_unlock(&ctl->mu);
            tide__membership_t m;
            rc = tide__membership_parse(msg, ctl->id, &m);
            json_decref(msg);
            if (rc == TIDE_OK && (int64_t)m.generation > after && m.my_rank >= 0) {
                *out = m;
                return TIDE_OK;
            }
            if (rc == TIDE_OK) tide__membership_free(&m);
            pthread_mutex_lock(&ctl->mu);
            continue;
        }
        if (ctl->stopped) {
            *stop_code = ctl->stop_code;
            rc = TIDE_ESTOPPED;
            break;
        }
        if (ctl->refused) {
            TIDE_ERROR("the coordinator refused this worker: %s", ctl->refused_why);
            rc = TIDE_ECONFIG;
            break;
        }
        uint64_t now = tide__now_ns();
        if (deadline && now >= deadline) {
            rc = TIDE_ETIMEDOUT;
            break;
        }
        if (!ctl->connected && ctl->disconnected_since &&
            (now - ctl->disconnected_since) / 1000000ull > (uint64_t)ctl->timeout_ms) {
            TIDE_ERROR("the coordinator at %s has been unreachable for %d ms", ctl->rendezvous,
                       ctl->timeout_ms);
            rc = TIDE_ETIMEDOUT;
            break;
        }
        if (interrupt) {
            pthread_mutex_unlock(&ctl->mu);
            int stop = interrupt(arg);
            pthread_mutex_lock(&ctl->mu);
            if (stop) {
                rc = TIDE_EABORTED;
                break;
            }
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&ctl->cv, &ctl->mu, &ts);
    }
    pthread_mutex_unlock(&ctl->mu);
    return rc;
}

int64_t tide__ctl_job_generation(const tide__ctl_t *ctl)
{
    return ctl->job_gen;
}

int tide__ctl_deferred(const tide__ctl_t *ctl)
{
    pthread_mutex_lock((pthread_mutex_t *)&ctl->mu);
    int d = ctl->deferred;
    pthread_mutex_unlock((pthread_mutex_t *)&ctl->mu);
    return d;
}

int tide__ctl_join(tide__ctl_t *ctl)
{
    pthread_mutex_lock(&ctl->mu);
    ctl->deferred = 0;
    pthread_mutex_unlock(&ctl->mu);
    return tide__ctl_send(ctl, json_pack("{s:s}", "type", "join"));
}

int tide__ctl_join_pending(const tide__ctl_t *ctl, int64_t gen)
{
    pthread_mutex_lock((pthread_mutex_t *)&ctl->mu);
    int p = ctl->pending_gen == gen;
    pthread_mutex_unlock((pthread_mutex_t *)&ctl->mu);
    return p;
}

int tide__ctl_notice(const tide__ctl_t *ctl)
{
    pthread_mutex_lock((pthread_mutex_t *)&ctl->mu);
    int n = ctl->notice;
    pthread_mutex_unlock((pthread_mutex_t *)&ctl->mu);
    return n;
}

int tide__ctl_stopped(const tide__ctl_t *ctl, int *code)
{
    pthread_mutex_lock((pthread_mutex_t *)&ctl->mu);
    int s = ctl->stopped;
    if (s && code) *code = ctl->stop_code;
    pthread_mutex_unlock((pthread_mutex_t *)&ctl->mu);
    return s;
}

int64_t tide__ctl_aborted_gen(const tide__ctl_t *ctl)
{
    pthread_mutex_lock((pthread_mutex_t *)&ctl->mu);
    int64_t g = ctl->aborted_gen;
    pthread_mutex_unlock((pthread_mutex_t *)&ctl->mu);
    return g;
}
