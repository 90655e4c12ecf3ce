/*
 * services.c - the Service forwarder (see services.h). Informers (Services,
 * EndpointSlices) keep JSON stores under one lock; after every Service change the
 * set of listeners is reconciled; a third informer (running pods) gives the
 * endpoints. Each listener is a thread that accepts and
 * hands each connection to a short-lived thread that picks an endpoint at
 * connect time, so a connection made after a pod's replacement reaches the new
 * pod. Connections already open to a pod that goes away break, as they would
 * through kube-proxy.
 */
#include "k8s/agent/services.h"

#include "k8s/watch.h"
#include "tide.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct listener {
    uint32_t ip;
    int port;
    char ns[128], svc[256], port_name[64];
    int target_port; /* numeric targetPort of the Service port, for the apiserver fallback */
    int fd;
    atomic_int closing; /* set (under lock) only once unlinked from listeners */
    int dead;           /* its thread ended while still linked (agent stopping) */
    int seen;           /* reconcile mark */
    struct listener *next;
} listener_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static json_t *svc_store;   /* "ns/name" -> Service */
static json_t *slice_store; /* "ns/name" -> EndpointSlice */
static json_t *pod_store;   /* "ns/name" -> running Pod */
static listener_t *listeners;
static agent_t *ag;
static unsigned rr;
static char hosts_path[PATH_MAX + 16];
static pthread_t svc_thread, slice_thread, pod_thread;
static int started;
static char api_host[256];
static int api_port;

const char *services_hosts_path(void)
{
    return hosts_path;
}

uint32_t services_local_ip(agent_t *a, const char *cluster_ip)
{
    uint32_t ip;
    if (!cluster_ip || agent_ip_parse(cluster_ip, &ip) < 0) return 0;
    if ((ip >> 24) == 127) return ip;
    uint32_t host = a->svc_bits >= 32 ? 0 : ip & ~(~0u << (32 - a->svc_bits));
    return a->svc_net | host;
}

static void env_name(char *out, size_t len, const char *svc)
{
    size_t i = 0;
    for (; svc[i] && i + 1 < len; i++) {
        char ch = svc[i];
        out[i] = ch == '-' || ch == '.' ? '_' : (ch >= 'a' && ch <= 'z') ? (char)(ch - 32) : ch;
    }
    out[i] = 0;
}

static void add(json_t *out, const char *k, const char *v)
{
    json_array_append_new(out, json_pack("[s,s]", k, v));
}

static void links_for(agent_t *a, json_t *svc, json_t *out)
{
    const char *name = tide__k8s_str(svc, "metadata.name");
    const char *cip = tide__k8s_str(svc, "spec.clusterIP");
    uint32_t lip = services_local_ip(a, cip);
    json_t *ports = tide__k8s_at(svc, "spec.ports");
    if (!name || !lip || !json_array_size(ports)) return;
    char up[300], ip[32], k[512], v[128];
    env_name(up, sizeof up, name);
    agent_ip_str(lip, ip, sizeof ip);
    snprintf(k, sizeof k, "%s_SERVICE_HOST", up);
    add(out, k, ip);
    size_t i;
    json_t *p;
    json_array_foreach(ports, i, p)
    {
        json_int_t port = json_integer_value(json_object_get(p, "port"));
        const char *pn = json_string_value(json_object_get(p, "name"));
        const char *proto = json_string_value(json_object_get(p, "protocol"));
        char lproto[8], uproto[8];
        snprintf(uproto, sizeof uproto, "%s", proto ? proto : "TCP");
        for (int j = 0; uproto[j]; j++)
            lproto[j] = (char)(uproto[j] | 0x20), lproto[j + 1] = 0;
        snprintf(v, sizeof v, "%lld", (long long)port);
        if (i == 0) {
            snprintf(k, sizeof k, "%s_SERVICE_PORT", up);
            add(out, k, v);
        }
        if (pn && *pn) {
            char upn[80];
            env_name(upn, sizeof upn, pn);
            snprintf(k, sizeof k, "%s_SERVICE_PORT_%s", up, upn);
            add(out, k, v);
        }
        char url[160];
        snprintf(url, sizeof url, "%s://%s:%lld", lproto, ip, (long long)port);
        if (i == 0) {
            snprintf(k, sizeof k, "%s_PORT", up);
            add(out, k, url);
        }
        snprintf(k, sizeof k, "%s_PORT_%lld_%s", up, (long long)port, uproto);
        add(out, k, url);
        snprintf(k, sizeof k, "%s_PORT_%lld_%s_PROTO", up, (long long)port, uproto);
        add(out, k, lproto);
        snprintf(k, sizeof k, "%s_PORT_%lld_%s_PORT", up, (long long)port, uproto);
        add(out, k, v);
        snprintf(k, sizeof k, "%s_PORT_%lld_%s_ADDR", up, (long long)port, uproto);
        add(out, k, ip);
    }
}

void services_env(agent_t *a, const char *ns, int links, json_t *out)
{
    pthread_mutex_lock(&lock);
    if (svc_store) {
        const char *key;
        json_t *svc;
        json_object_foreach(svc_store, key, svc)
        {
            const char *sns = tide__k8s_str(svc, "metadata.namespace");
            const char *name = tide__k8s_str(svc, "metadata.name");
            if (!sns || !name) continue;
            int master = strcmp(sns, "default") == 0 && strcmp(name, "kubernetes") == 0;
            if (master || (links && strcmp(sns, ns) == 0)) links_for(a, svc, out);
        }
    }
    pthread_mutex_unlock(&lock);
}

/* ---- forwarding --------------------------------------------------------- */

typedef struct conn {
    int fd;
    char ns[128], svc[256], port_name[64];
    int target_port;
} conn_t;

/* The port a pod serves targetPort on: a number as is, a name through the
 * pod's containers' named ports. 0 if it has none of that name. */
static int pod_port(json_t *pod, json_t *target)
{
    if (json_is_integer(target)) return (int)json_integer_value(target);
    const char *tn = json_string_value(target);
    if (!tn) return 0;
    if (strspn(tn, "0123456789") == strlen(tn)) return atoi(tn);
    size_t i, j;
    json_t *c, *p;
    json_array_foreach(tide__k8s_at(pod, "spec.containers"), i, c)
        json_array_foreach(json_object_get(c, "ports"), j, p)
    {
        const char *n = json_string_value(json_object_get(p, "name"));
        if (n && strcmp(n, tn) == 0)
            return (int)json_integer_value(json_object_get(p, "containerPort"));
    }
    return 0;
}

static int pod_ready(json_t *pod)
{
    if (tide__k8s_at(pod, "metadata.deletionTimestamp")) return 0;
    size_t i;
    json_t *c;
    json_array_foreach(tide__k8s_at(pod, "status.conditions"), i, c)
    {
        const char *t = json_string_value(json_object_get(c, "type"));
        if (t && strcmp(t, "Ready") == 0)
            return strcmp(json_string_value(json_object_get(c, "status")) ?: "", "True") == 0;
    }
    return 0;
}

/* Ready endpoints of ns/svc for the Service port named port_name, as ip:port.
 *
 * For a Service with a selector they come from the pods themselves (Ready,
 * not terminating, labels matching), not from EndpointSlices: the apiserver's
 * validation refuses loopback addresses in an EndpointSlice ("may not be in the
 * loopback range"), so the endpointslice controller cannot publish our pod IPs.
 * A Service without a selector uses its (manually managed) EndpointSlices. */
static int endpoints(const conn_t *c, uint32_t *ips, int *ports, int max)
{
    int n = 0;
    char skey[512];
    snprintf(skey, sizeof skey, "%s/%s", c->ns, c->svc);
    json_t *svc = json_object_get(svc_store, skey);
    json_t *sel = tide__k8s_at(svc, "spec.selector");
    const char *key;
    if (json_object_size(sel) > 0) {
        json_t *target = NULL;
        size_t i;
        json_t *sp;
        json_array_foreach(tide__k8s_at(svc, "spec.ports"), i, sp)
        {
            const char *pn = json_string_value(json_object_get(sp, "name"));
            if (strcmp(pn ? pn : "", c->port_name) == 0) {
                target = json_object_get(sp, "targetPort");
                if (!target) target = json_object_get(sp, "port");
            }
        }
        json_t *pod;
        json_object_foreach(pod_store, key, pod)
        {
            if (strcmp(tide__k8s_str(pod, "metadata.namespace") ?: "", c->ns) != 0 ||
                !pod_ready(pod))
                continue;
            json_t *labels = tide__k8s_at(pod, "metadata.labels");
            const char *lk;
            json_t *lv;
            int match = 1;
            json_object_foreach(sel, lk, lv)
            {
                const char *have = json_string_value(json_object_get(labels, lk));
                if (!have || !json_string_value(lv) || strcmp(have, json_string_value(lv)) != 0)
                    match = 0;
            }
            uint32_t ip;
            int port = match ? pod_port(pod, target) : 0;
            if (port <= 0 || agent_ip_parse(tide__k8s_str(pod, "status.podIP") ?: "", &ip) < 0)
                continue;
            if (n < max) {
                ips[n] = ip;
                ports[n] = port;
                n++;
            }
        }
        return n;
    }
    json_t *sl;
    json_object_foreach(slice_store, key, sl)
    {
        const char *sns = tide__k8s_str(sl, "metadata.namespace");
        /* The label key has dots, so it is looked up directly, not by path. */
        json_t *labels = tide__k8s_at(sl, "metadata.labels");
        const char *owner =
            json_string_value(json_object_get(labels, "kubernetes.io/service-name"));
        if (!sns || !owner || strcmp(sns, c->ns) || strcmp(owner, c->svc)) continue;
        const char *at = tide__k8s_str(sl, "addressType");
        if (at && strcmp(at, "IPv4") != 0) continue;
        int port = 0;
        size_t i;
        json_t *p;
        json_array_foreach(json_object_get(sl, "ports"), i, p)
        {
            const char *pn = json_string_value(json_object_get(p, "name"));
            if (strcmp(pn ? pn : "", c->port_name) == 0)
                port = (int)json_integer_value(json_object_get(p, "port"));
        }
        if (port <= 0) continue;
        json_t *e;
        json_array_foreach(json_object_get(sl, "endpoints"), i, e)
        {
            json_t *ready = tide__k8s_at(e, "conditions.ready");
            /* Absent means ready (the EndpointSlice API's own rule). */
            if (ready && json_is_false(ready)) continue;
            const char *addr =
                json_string_value(json_array_get(json_object_get(e, "addresses"), 0));
            uint32_t ip;
            if (!addr || agent_ip_parse(addr, &ip) < 0) continue;
            if (n < max) {
                ips[n] = ip;
                ports[n] = port;
                n++;
            }
        }
    }
    return n;
}

static int connect_to(uint32_t ip, int port, int timeout_ms)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return -1;
    struct sockaddr_in sa = {
        .sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr = {htonl(ip)}};
    int r = connect(fd, (struct sockaddr *)&sa, sizeof sa);
    if (r < 0 && errno == EINPROGRESS) {
        struct pollfd p = {fd, POLLOUT, 0};
        if (poll(&p, 1, timeout_ms) == 1) {
            int err = 0;
            socklen_t el = sizeof err;
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
            r = err ? -1 : 0;
        } else {
            r = -1;
        }
    }
    if (r < 0) {
        close(fd);
        return -1;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return fd;
}

static void pipe_both(int a, int b)
{
    char buf[65536];
    int open_a = 1, open_b = 1; /* whether each side still sends */
    while (open_a || open_b) {
        struct pollfd p[2] = {{a, open_a ? POLLIN : 0, 0}, {b, open_b ? POLLIN : 0, 0}};
        if (poll(p, 2, 1000) < 0) {
            if (errno == EINTR) continue;
            return;
        }
        for (int i = 0; i < 2; i++) {
            int from = i == 0 ? a : b, to = i == 0 ? b : a;
            if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            ssize_t n = read(from, buf, sizeof buf);
            if (n <= 0) {
                if (n < 0 && errno == EINTR) continue;
                if (n < 0) return;
                shutdown(to, SHUT_WR);
                if (i == 0)
                    open_a = 0;
                else
                    open_b = 0;
                continue;
            }
            for (ssize_t off = 0; off < n;) {
                ssize_t w = write(to, buf + off, (size_t)(n - off));
                if (w < 0) {
                    if (errno == EINTR) continue;
                    return;
                }
                off += w;
            }
        }
    }
}

static void *conn_main(void *arg)
{
    conn_t *c = arg;
    uint32_t ips[64];
    int ports[64];
    pthread_mutex_lock(&lock);
    int n = endpoints(c, ips, ports, 64);
    unsigned start = rr++;
    pthread_mutex_unlock(&lock);
    int up = -1;
    for (int k = 0; k < n && up < 0; k++) {
        int j = (int)((start + (unsigned)k) % (unsigned)n);
        up = connect_to(ips[j], ports[j], 3000);
    }
    if (up < 0 && n == 0 && strcmp(c->ns, "default") == 0 && strcmp(c->svc, "kubernetes") == 0 &&
        api_port > 0) {
        /* The test cluster runs the apiserver with --endpoint-reconciler-type=none,
         * so the kubernetes Service has no endpoints; it means the apiserver the
         * agent itself talks to. */
        uint32_t ip;
        if (agent_ip_parse(api_host, &ip) == 0) up = connect_to(ip, api_port, 3000);
    }
    if (up < 0) {
        agent_debug("service %s/%s:%s: no reachable ready endpoint (%d known)", c->ns, c->svc,
                    c->port_name, n);
    } else {
        int one = 1;
        setsockopt(up, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        pipe_both(c->fd, up);
        close(up);
    }
    close(c->fd);
    free(c);
    return NULL;
}

static void *listener_main(void *arg)
{
    listener_t *l = arg;
    while (!atomic_load(&l->closing) && !atomic_load(&ag->stop)) {
        struct pollfd p = {l->fd, POLLIN, 0};
        if (poll(&p, 1, 200) <= 0) continue;
        int fd = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) continue;
        conn_t *c = calloc(1, sizeof *c);
        if (!c) {
            close(fd);
            continue;
        }
        c->fd = fd;
        snprintf(c->ns, sizeof c->ns, "%s", l->ns);
        snprintf(c->svc, sizeof c->svc, "%s", l->svc);
        snprintf(c->port_name, sizeof c->port_name, "%s", l->port_name);
        c->target_port = l->target_port;
        pthread_t t;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &at, conn_main, c) != 0) {
            close(fd);
            free(c);
        }
        pthread_attr_destroy(&at);
    }
    close(l->fd);
    /* Whoever unlinks a listener hands it to its thread to free; a listener
     * still linked when the agent stops is freed by services_stop. */
    pthread_mutex_lock(&lock);
    int mine = atomic_load(&l->closing);
    if (!mine) l->dead = 1;
    pthread_mutex_unlock(&lock);
    if (mine) free(l);
    return NULL;
}

static int open_listener(listener_t *l)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {
        .sin_family = AF_INET, .sin_port = htons((uint16_t)l->port), .sin_addr = {htonl(l->ip)}};
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, 128) < 0) {
        close(fd);
        return -1;
    }
    l->fd = fd;
    return 0;
}

/* Called with lock held after the Service store changed. */
static void reconcile(void)
{
    for (listener_t *l = listeners; l; l = l->next)
        l->seen = 0;
    const char *key;
    json_t *svc;
    FILE *hf = NULL;
    char tmp[PATH_MAX + 32];
    snprintf(tmp, sizeof tmp, "%s.tmp", hosts_path);
    hf = fopen(tmp, "w");
    if (hf)
        fprintf(hf, "# Services as seen by tide-node-agent: address name.ns.svc.cluster.local "
                    "name.ns.svc name.ns\n");
    json_object_foreach(svc_store, key, svc)
    {
        const char *ns = tide__k8s_str(svc, "metadata.namespace");
        const char *name = tide__k8s_str(svc, "metadata.name");
        const char *cip = tide__k8s_str(svc, "spec.clusterIP");
        uint32_t lip = services_local_ip(ag, cip);
        if (!ns || !name || !lip) continue;
        char ip[32];
        agent_ip_str(lip, ip, sizeof ip);
        if (hf)
            fprintf(hf, "%s %s.%s.svc.cluster.local %s.%s.svc %s.%s\n", ip, name, ns, name, ns,
                    name, ns);
        size_t i;
        json_t *p;
        json_array_foreach(tide__k8s_at(svc, "spec.ports"), i, p)
        {
            const char *proto = json_string_value(json_object_get(p, "protocol"));
            if (proto && strcmp(proto, "TCP") != 0) continue;
            int port = (int)json_integer_value(json_object_get(p, "port"));
            const char *pn = json_string_value(json_object_get(p, "name"));
            json_t *tp = json_object_get(p, "targetPort");
            listener_t *l;
            for (l = listeners; l; l = l->next)
                if (l->ip == lip && l->port == port && !atomic_load(&l->closing)) break;
            if (l && (strcmp(l->ns, ns) || strcmp(l->svc, name))) l = NULL;
            if (l) {
                snprintf(l->port_name, sizeof l->port_name, "%s", pn ? pn : "");
                l->seen = 1;
                continue;
            }
            l = calloc(1, sizeof *l);
            if (!l) continue;
            l->ip = lip;
            l->port = port;
            l->target_port = json_is_integer(tp) ? (int)json_integer_value(tp) : port;
            snprintf(l->ns, sizeof l->ns, "%s", ns);
            snprintf(l->svc, sizeof l->svc, "%s", name);
            snprintf(l->port_name, sizeof l->port_name, "%s", pn ? pn : "");
            if (open_listener(l) < 0) {
                agent_log("service %s/%s: cannot listen on %s:%d: %s", ns, name, ip, port,
                          strerror(errno));
                free(l);
                continue;
            }
            l->seen = 1;
            pthread_t t;
            pthread_attr_t at;
            pthread_attr_init(&at);
            pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
            l->next = listeners;
            listeners = l;
            if (pthread_create(&t, &at, listener_main, l) != 0) {
                listeners = l->next;
                close(l->fd);
                free(l);
            } else {
                agent_log("service %s/%s: forwarding %s:%d (ClusterIP %s)", ns, name, ip, port,
                          cip);
            }
            pthread_attr_destroy(&at);
        }
    }
    if (hf) {
        fclose(hf);
        rename(tmp, hosts_path);
    }
    /* Listeners of Services (or ports) that went away: the listener thread owns
     * and frees its struct once it sees closing, so unlink it here first. */
    listener_t **pp = &listeners;
    while (*pp) {
        listener_t *l = *pp;
        if (!l->seen) {
            *pp = l->next;
            atomic_store(&l->closing, 1);
        } else {
            pp = &l->next;
        }
    }
}

static int key_of(json_t *obj, char *key, size_t len)
{
    const char *ns = tide__k8s_str(obj, "metadata.namespace");
    const char *name = tide__k8s_str(obj, "metadata.name");
    if (!ns || !name) return -1;
    snprintf(key, len, "%s/%s", ns, name);
    return 0;
}

static int on_svc(void *ud, tide__k8s_event_t ev, json_t *obj)
{
    char key[512];
    if (ev == TIDE__K8S_SYNCED) return 0;
    if (!obj || key_of(obj, key, sizeof key) < 0) return 0;
    pthread_mutex_lock(&lock);
    if (ev == TIDE__K8S_DELETED)
        json_object_del(svc_store, key);
    else
        json_object_set(svc_store, key, obj);
    reconcile();
    pthread_mutex_unlock(&lock);
    return 0;
}

/* EndpointSlices and running pods: only looked up at connect time. */
static int on_store(void *ud, tide__k8s_event_t ev, json_t *obj)
{
    json_t *store = ud;
    char key[512];
    if (ev == TIDE__K8S_SYNCED) return 0;
    if (!obj || key_of(obj, key, sizeof key) < 0) return 0;
    pthread_mutex_lock(&lock);
    if (ev == TIDE__K8S_DELETED)
        json_object_del(store, key);
    else
        json_object_set(store, key, obj);
    pthread_mutex_unlock(&lock);
    return 0;
}

static void wlog(void *ud, const char *msg)
{
    agent_log("%s", msg);
}

static void *watch_main(void *arg)
{
    int which = (int)(intptr_t)arg;
    tide__k8s_watch_opts_t o = {0};
    o.collection = which == 1   ? "/apis/discovery.k8s.io/v1/endpointslices"
                   : which == 2 ? "/api/v1/pods"
                                : "/api/v1/services";
    /* Only running pods can be endpoints; the server filters the rest out. */
    if (which == 2) o.field_selector = "status.phase=Running";
    o.stop = &ag->stop;
    o.fn = which == 0 ? on_svc : on_store;
    o.ud = which == 1 ? slice_store : which == 2 ? pod_store : NULL;
    o.log = wlog;
    tide__k8s_watch_stats_t st;
    int rc = tide__k8s_watch(ag->client, &o, &st);
    if (rc != TIDE_OK && rc != TIDE_EABORTED)
        agent_log("watch %s ended: %s (%s)", o.collection, tide__k8s_strerror(rc), st.last_error);
    return NULL;
}

int services_start(agent_t *a)
{
    ag = a;
    svc_store = json_object();
    slice_store = json_object();
    pod_store = json_object();
    snprintf(hosts_path, sizeof hosts_path, "%s/hosts", a->state_dir);
    /* The apiserver address, for the kubernetes Service's fallback. */
    const char *srv = tide__k8s_client_server(a->client);
    const char *hp = strstr(srv, "://");
    hp = hp ? hp + 3 : srv;
    const char *colon = strrchr(hp, ':');
    if (colon && (size_t)(colon - hp) < sizeof api_host) {
        memcpy(api_host, hp, (size_t)(colon - hp));
        api_host[colon - hp] = 0;
        api_port = atoi(colon + 1);
    } else {
        snprintf(api_host, sizeof api_host, "%s", hp);
        api_port = 443;
    }
    if (strcmp(api_host, "localhost") == 0) snprintf(api_host, sizeof api_host, "127.0.0.1");
    if (pthread_create(&svc_thread, NULL, watch_main, NULL) != 0) return TIDE_ESYS;
    if (pthread_create(&slice_thread, NULL, watch_main, (void *)1) != 0) return TIDE_ESYS;
    if (pthread_create(&pod_thread, NULL, watch_main, (void *)2) != 0) return TIDE_ESYS;
    started = 1;
    return TIDE_OK;
}

void services_stop(void)
{
    if (!started) return;
    pthread_join(svc_thread, NULL);
    pthread_join(slice_thread, NULL);
    pthread_join(pod_thread, NULL);
    pthread_mutex_lock(&lock);
    listener_t *next;
    for (listener_t *l = listeners; l; l = next) {
        next = l->next;
        if (l->dead)
            free(l);
        else
            atomic_store(&l->closing, 1); /* its thread frees it */
    }
    listeners = NULL;
    pthread_mutex_unlock(&lock);
    started = 0;
}
