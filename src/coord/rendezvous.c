/* rendezvous.c - see rendezvous.h. One thread, one poll loop; each new
 * connection is authenticated with a short deadline so that a silent client
 * cannot hold the loop for long. */
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coord/rendezvous.h"
#include "core/error.h"
#include "core/net.h"
#include "core/param.h"

#define AUTH_TIMEOUT_MS 2000
#define MAX_CLIENTS 4096

typedef struct {
    int fd;
    int registered;
    int rank;
    json_t *entry; /* this worker's member-table entry */
} client_t;

struct tide__rdzv {
    int lfd;
    int size;
    tide__secret_t secret;
    char addr[128];
    pthread_t thread;
    int wake[2];
    _Atomic int refused;
    client_t *clients;
    int nclients;
    int published;
};

static void drop(tide__rdzv_t *r, int i)
{
    close(r->clients[i].fd);
    json_decref(r->clients[i].entry);
    r->clients[i] = r->clients[--r->nclients];
}

static void refuse(tide__rdzv_t *r, int fd, const char *why)
{
    atomic_fetch_add(&r->refused, 1);
    json_t *m = json_pack("{s:s, s:s}", "type", "error", "message", why);
    if (m) tide__msg_send(fd, m, tide__now_ns() + 200000000ull);
    json_decref(m);
}

static void publish(tide__rdzv_t *r)
{
    json_t *members = json_array();
    for (int rank = 0; rank < r->size; rank++)
        for (int i = 0; i < r->nclients; i++)
            if (r->clients[i].registered && r->clients[i].rank == rank)
                json_array_append(members, r->clients[i].entry);
    json_t *msg = json_pack("{s:s, s:i, s:i, s:o}", "type", "members", "generation", 0, "size",
                            r->size, "members", members);
    for (int i = 0; i < r->nclients; i++)
        if (r->clients[i].registered) tide__msg_send(r->clients[i].fd, msg, tide__now_ns() + 5000000000ull);
    json_decref(msg);
    r->published = 1;
    TIDE_INFO("all %d workers registered; member table sent", r->size);
}

static void on_register(tide__rdzv_t *r, int i, json_t *msg)
{
    client_t *c = &r->clients[i];
    json_t *rank = json_object_get(msg, "rank"), *size = json_object_get(msg, "size");
    json_t *host = json_object_get(msg, "host"), *addr = json_object_get(msg, "addr");
    json_t *port = json_object_get(msg, "port"), *pid = json_object_get(msg, "pid");
    if (!json_is_integer(rank) || !json_is_integer(size) || !json_is_string(host) ||
        !json_is_string(addr) || !json_is_integer(port) || !json_is_integer(pid) ||
        json_string_length(host) >= 128 || json_string_length(addr) >= 64) {
        TIDE_WARN("malformed register message refused");
        refuse(r, c->fd, "malformed register message");
        drop(r, i);
        return;
    }
    long long rk = json_integer_value(rank);
    if (json_integer_value(size) != r->size || rk < 0 || rk >= r->size) {
        TIDE_WARN("worker claims rank %lld of %lld; this job has %d", rk,
                  json_integer_value(size), r->size);
        refuse(r, c->fd, "rank or size does not match this job");
        drop(r, i);
        return;
    }
    for (int j = 0; j < r->nclients; j++)
        if (r->clients[j].registered && r->clients[j].rank == rk) {
            TIDE_WARN("rank %lld registered twice; the second is refused", rk);
            refuse(r, c->fd, "rank already registered");
            drop(r, i);
            return;
        }
    c->registered = 1;
    c->rank = (int)rk;
    c->entry = json_pack("{s:I, s:O, s:O, s:O, s:O}", "rank", rk, "host", host, "addr", addr,
                         "port", port, "pid", pid);
    int n = 0;
    for (int j = 0; j < r->nclients; j++) n += r->clients[j].registered;
    if (n == r->size && !r->published) publish(r);
}

static void on_accept(tide__rdzv_t *r)
{
    int fd;
    if (tide__net_accept(r->lfd, 0, &fd) != TIDE_OK) return;
    tide__peer_claim_t claim;
    int rc = tide__auth_accept(fd, &r->secret, -1, AUTH_TIMEOUT_MS, &claim);
    if (rc != TIDE_OK || claim.kind != TIDE__CONN_CONTROL || r->nclients >= MAX_CLIENTS) {
        atomic_fetch_add(&r->refused, 1);
        TIDE_WARN("refused a control connection: %s",
                  rc != TIDE_OK ? tide_strerror(rc) : "not a control connection");
        close(fd);
        return;
    }
    r->clients[r->nclients++] = (client_t){fd, 0, -1, NULL};
}

static void on_readable(tide__rdzv_t *r, int i)
{
    json_t *msg;
    int rc = tide__msg_recv(r->clients[i].fd, 64 * 1024, tide__now_ns() + AUTH_TIMEOUT_MS * 1000000ull,
                            &msg);
    if (rc != TIDE_OK) {
        if (rc != TIDE_EPEERLOST) atomic_fetch_add(&r->refused, 1);
        if (!r->published || rc != TIDE_EPEERLOST)
            TIDE_DEBUG("control connection of rank %d closed: %s", r->clients[i].rank,
                       tide_strerror(rc));
        drop(r, i);
        return;
    }
    const char *type = json_string_value(json_object_get(msg, "type"));
    if (!strcmp(type, "register") && !r->clients[i].registered && !r->published)
        on_register(r, i, msg);
    else if (strcmp(type, "leave")) /* "leave" is informational for now */
        TIDE_WARN("unexpected control message \"%.32s\" ignored", type);
    json_decref(msg);
}

static void *rdzv_main(void *arg)
{
    tide__rdzv_t *r = arg;
    struct pollfd *p = calloc(MAX_CLIENTS + 2, sizeof *p);
    if (!p) return NULL;
    for (;;) {
        p[0] = (struct pollfd){r->wake[0], POLLIN, 0};
        p[1] = (struct pollfd){r->lfd, POLLIN, 0};
        int n = r->nclients;
        for (int i = 0; i < n; i++) p[2 + i] = (struct pollfd){r->clients[i].fd, POLLIN, 0};
        if (poll(p, (nfds_t)(n + 2), -1) < 0) continue;
        if (p[0].revents) break;
        /* Walk backwards: drop() moves the last client into the freed slot. */
        for (int i = n - 1; i >= 0; i--)
            if (p[2 + i].revents) on_readable(r, i);
        if (p[1].revents) on_accept(r);
    }
    free(p);
    return NULL;
}

int tide__rdzv_start(const char *host, int port, int size, const tide__secret_t *secret,
                     tide__rdzv_t **out)
{
    tide__rdzv_t *r = calloc(1, sizeof *r);
    if (!r) return TIDE_ENOMEM;
    r->size = size;
    r->secret = *secret;
    r->clients = calloc(MAX_CLIENTS, sizeof *r->clients);
    int bound;
    int rc = r->clients ? tide__net_listen(host, port, 256, &r->lfd, &bound) : TIDE_ENOMEM;
    if (rc == TIDE_OK && pipe(r->wake) < 0) rc = TIDE_ESYS;
    if (rc == TIDE_OK && pthread_create(&r->thread, NULL, rdzv_main, r) != 0) rc = TIDE_ESYS;
    if (rc != TIDE_OK) {
        free(r->clients);
        free(r);
        return rc;
    }
    snprintf(r->addr, sizeof r->addr, "%s:%d", host, bound);
    *out = r;
    return TIDE_OK;
}

const char *tide__rdzv_addr(const tide__rdzv_t *r)
{
    return r->addr;
}

int tide__rdzv_refused(const tide__rdzv_t *r)
{
    return atomic_load(&((tide__rdzv_t *)r)->refused);
}

void tide__rdzv_stop(tide__rdzv_t *r)
{
    if (!r) return;
    ssize_t w = write(r->wake[1], "x", 1);
    (void)w;
    pthread_join(r->thread, NULL);
    while (r->nclients) drop(r, r->nclients - 1);
    close(r->lfd);
    close(r->wake[0]);
    close(r->wake[1]);
    free(r->clients);
    free(r);
}
