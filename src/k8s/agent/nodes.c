/*
 * nodes.c - Node registration, Leases and status heartbeats (see nodes.h).
 */
#include "k8s/agent/nodes.h"

#include "tide.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#define AGENT_VERSION "v1.36.3-tide"

static int is_quantity(const char *s)
{
    /* A loose check (digits, optional decimal part, optional suffix); the
     * apiserver has the final word and its message names the field. */
    if (!*s) return 0;
    size_t d = strspn(s, "0123456789.");
    if (d == 0) return 0;
    return strlen(s + d) <= 2 && strspn(s + d, "kMGTPEimun") == strlen(s + d);
}

int nodes_parse_spec(const char *spec, agent_node_t *n, char *err, size_t errlen)
{
    memset(n, 0, sizeof(*n));
    snprintf(n->cpu, sizeof n->cpu, "4");
    snprintf(n->memory, sizeof n->memory, "8Gi");
    snprintf(n->pods, sizeof n->pods, "110");
    snprintf(n->storage, sizeof n->storage, "100Gi");
    n->labels = json_object();
    n->taints = json_array();
    char *dup = strdup(spec), *save = NULL;
    int rc = -1;
    char *tok = strtok_r(dup, ",", &save);
    if (!tok || !*tok || strlen(tok) >= sizeof n->name) {
        snprintf(err, errlen, "--node %s: a node name (at most 127 characters) comes first", spec);
        goto out;
    }
    snprintf(n->name, sizeof n->name, "%s", tok);
    while ((tok = strtok_r(NULL, ",", &save))) {
        char *eq = strchr(tok, '=');
        if (!eq) {
            snprintf(err, errlen, "--node %s: \"%s\" is not key=value", spec, tok);
            goto out;
        }
        *eq = 0;
        const char *k = tok, *v = eq + 1;
        char *dst = NULL;
        size_t dlen = 0;
        if (strcmp(k, "cpu") == 0)
            dst = n->cpu, dlen = sizeof n->cpu;
        else if (strcmp(k, "memory") == 0)
            dst = n->memory, dlen = sizeof n->memory;
        else if (strcmp(k, "gpu") == 0)
            dst = n->gpu, dlen = sizeof n->gpu;
        else if (strcmp(k, "pods") == 0)
            dst = n->pods, dlen = sizeof n->pods;
        else if (strcmp(k, "storage") == 0)
            dst = n->storage, dlen = sizeof n->storage;
        if (dst) {
            if (!is_quantity(v) || strlen(v) >= dlen) {
                snprintf(err, errlen, "--node %s: %s=%s is not a quantity", spec, k, v);
                goto out;
            }
            snprintf(dst, dlen, "%s", v);
        } else if (strcmp(k, "label") == 0) {
            char *e2 = strchr(v, '=');
            if (!e2 || e2 == v) {
                snprintf(err, errlen, "--node %s: label=%s is not label=key=value", spec, v);
                goto out;
            }
            *e2 = 0;
            json_object_set_new(n->labels, v, json_string(e2 + 1));
        } else if (strcmp(k, "taint") == 0) {
            /* key[=value]:Effect */
            char *colon = strrchr(v, ':');
            if (!colon || colon == v) {
                snprintf(err, errlen, "--node %s: taint=%s is not taint=key[=value]:Effect", spec,
                         v);
                goto out;
            }
            *colon = 0;
            const char *effect = colon + 1;
            if (strcmp(effect, "NoSchedule") && strcmp(effect, "PreferNoSchedule") &&
                strcmp(effect, "NoExecute")) {
                snprintf(
                    err, errlen,
                    "--node %s: taint effect %s is not NoSchedule, PreferNoSchedule or NoExecute",
                    spec, effect);
                goto out;
            }
            char *e2 = strchr(v, '=');
            if (e2) *e2 = 0;
            json_t *t = json_pack("{s:s,s:s}", "key", v, "effect", effect);
            if (e2) json_object_set_new(t, "value", json_string(e2 + 1));
            json_array_append_new(n->taints, t);
        } else {
            snprintf(err, errlen,
                     "--node %s: unknown key %s (cpu, memory, gpu, pods, storage, label, taint)",
                     spec, k);
            goto out;
        }
    }
    rc = 0;
out:
    free(dup);
    return rc;
}

static json_t *node_object(const agent_node_t *n)
{
    json_t *labels = json_deep_copy(n->labels);
    json_object_set_new(labels, "kubernetes.io/hostname", json_string(n->name));
    json_object_set_new(labels, "kubernetes.io/os", json_string("linux"));
    json_object_set_new(labels, "kubernetes.io/arch", json_string("amd64"));
    json_object_set_new(labels, "node.kubernetes.io/instance-type", json_string("tide-agent"));
    json_object_set_new(labels, "tide.dev/node-agent", json_string("true"));
    if (n->fake) json_object_set_new(labels, "tide.dev/fake-node", json_string("true"));
    return json_pack("{s:s,s:s,s:{s:s,s:o,s:{s:s}},s:{s:O}}", "apiVersion", "v1", "kind", "Node",
                     "metadata", "name", n->name, "labels", labels, "annotations",
                     "node.alpha.kubernetes.io/ttl", "0", "spec", "taints", n->taints);
}

static json_t *resources(const agent_node_t *n)
{
    json_t *r = json_pack("{s:s,s:s,s:s,s:s}", "cpu", n->cpu, "memory", n->memory, "pods", n->pods,
                          "ephemeral-storage", n->storage);
    if (n->gpu[0] && strcmp(n->gpu, "0") != 0)
        json_object_set_new(r, "nvidia.com/gpu", json_string(n->gpu));
    return r;
}

static json_t *node_status(agent_t *a, const agent_node_t *n, int ready)
{
    char now[40];
    agent_rfc3339(now, sizeof now, time(NULL));
    struct utsname u;
    uname(&u);
    json_t *conds = json_array();
    static const char *const pressure[][2] = {{"MemoryPressure", "KubeletHasSufficientMemory"},
                                              {"DiskPressure", "KubeletHasNoDiskPressure"},
                                              {"PIDPressure", "KubeletHasSufficientPID"}};
    for (int i = 0; i < 3; i++)
        json_array_append_new(conds,
                              json_pack("{s:s,s:s,s:s,s:s,s:s,s:s}", "type", pressure[i][0],
                                        "status", "False", "reason", pressure[i][1], "message",
                                        "tide-node-agent does not measure pressure",
                                        "lastHeartbeatTime", now, "lastTransitionTime", now));
    json_array_append_new(
        conds,
        json_pack("{s:s,s:s,s:s,s:s,s:s,s:s}", "type", "Ready", "status", ready ? "True" : "False",
                  "reason", ready ? "KubeletReady" : "KubeletNotReady", "message",
                  ready ? "tide-node-agent is posting ready status" : "tide-node-agent stopped",
                  "lastHeartbeatTime", now, "lastTransitionTime", now));
    /* lastTransitionTime is the same as the heartbeat here; a strategic merge
     * keyed on type keeps the server's older value only if we omitted it, which
     * we cannot without remembering; the schedulers do not read it. */
    return json_pack(
        "{s:{s:o,s:o,s:o,s:[{s:s,s:s},{s:s,s:s}],s:{s:{s:i}},s:{s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:"
        "s}}}",
        "status", "capacity", resources(n), "allocatable", resources(n), "conditions", conds,
        "addresses", "type", "InternalIP", "address", a->host_ip, "type", "Hostname", "address",
        n->name, "daemonEndpoints", "kubeletEndpoint", "Port", 0, "nodeInfo", "machineID", n->name,
        "systemUUID", n->name, "bootID", "tide", "kernelVersion", u.release, "osImage",
        "tide-node-agent (processes on the host)", "containerRuntimeVersion", "tide://0.1",
        "kubeletVersion", AGENT_VERSION, "operatingSystem", "linux", "architecture", "amd64");
}

static int post_status(agent_t *a, agent_node_t *n, int ready)
{
    char path[512];
    tide__k8s_path(path, sizeof path, "v1", NULL, "nodes", n->name, NULL);
    json_t *st = node_status(a, n, ready);
    tide__k8s_resp_t r;
    int rc =
        tide__k8s_patch_status(a->client, path, st, "application/strategic-merge-patch+json", &r);
    json_decref(st);
    if (rc != TIDE_OK && rc != TIDE_ENOTFOUND) agent_log("node %s: status: %s", n->name, r.message);
    tide__k8s_resp_clear(&r);
    return rc;
}

static int put_lease(agent_t *a, agent_node_t *n)
{
    char path[512], coll[256], now[48];
    agent_rfc3339_micro(now, sizeof now);
    tide__k8s_path(coll, sizeof coll, "coordination.k8s.io/v1", "kube-node-lease", "leases", NULL,
                   NULL);
    tide__k8s_path(path, sizeof path, "coordination.k8s.io/v1", "kube-node-lease", "leases",
                   n->name, NULL);
    tide__k8s_resp_t r;
    json_t *patch = json_pack("{s:{s:s,s:s,s:i}}", "spec", "renewTime", now, "holderIdentity",
                              n->name, "leaseDurationSeconds", a->lease_seconds);
    int rc = tide__k8s_patch_merge(a->client, path, patch, &r);
    json_decref(patch);
    if (rc == TIDE_ENOTFOUND) {
        tide__k8s_resp_clear(&r);
        /* Owned by the Node, so deleting the Node removes its Lease (GC). */
        json_t *lease =
            json_pack("{s:s,s:s,s:{s:s,s:s,s:[{s:s,s:s,s:s,s:s}]},s:{s:s,s:i,s:s}}", "apiVersion",
                      "coordination.k8s.io/v1", "kind", "Lease", "metadata", "name", n->name,
                      "namespace", "kube-node-lease", "ownerReferences", "apiVersion", "v1", "kind",
                      "Node", "name", n->name, "uid", n->uid, "spec", "holderIdentity", n->name,
                      "leaseDurationSeconds", a->lease_seconds, "renewTime", now);
        rc = tide__k8s_create(a->client, coll, lease, &r);
        json_decref(lease);
    }
    if (rc != TIDE_OK) agent_log("node %s: lease: %s", n->name, r.message);
    tide__k8s_resp_clear(&r);
    return rc;
}

static int register_node(agent_t *a, agent_node_t *n)
{
    char path[512];
    tide__k8s_resp_t r;
    json_t *obj = node_object(n);
    int rc = tide__k8s_create(a->client, "/api/v1/nodes", obj, &r);
    if (rc == TIDE_ESTALE) {
        /* It exists (an agent restart): make its labels and taints ours again. */
        tide__k8s_resp_clear(&r);
        tide__k8s_path(path, sizeof path, "v1", NULL, "nodes", n->name, NULL);
        json_t *patch = json_pack("{s:{s:O},s:{s:O}}", "metadata", "labels",
                                  json_object_get(json_object_get(obj, "metadata"), "labels"),
                                  "spec", "taints", n->taints);
        rc = tide__k8s_patch_merge(a->client, path, patch, &r);
        json_decref(patch);
    }
    json_decref(obj);
    if (rc != TIDE_OK) {
        agent_log("node %s: register: %s", n->name, r.message);
        tide__k8s_resp_clear(&r);
        return rc;
    }
    const char *uid = tide__k8s_str(r.body, "metadata.uid");
    snprintf(n->uid, sizeof n->uid, "%s", uid ? uid : "");
    tide__k8s_resp_clear(&r);
    if ((rc = post_status(a, n, 1)) != TIDE_OK) return rc;
    if ((rc = put_lease(a, n)) != TIDE_OK) return rc;
    n->registered = 1;
    return TIDE_OK;
}

typedef struct reg_part {
    agent_t *a;
    int first, stride, failed;
} reg_part_t;

static void *register_part(void *arg)
{
    reg_part_t *r = arg;
    for (int i = r->first; i < r->a->nnodes && !atomic_load(&r->a->stop); i += r->stride)
        if (register_node(r->a, &r->a->nodes[i]) != TIDE_OK) r->failed++;
    return NULL;
}

int nodes_register_all(agent_t *a)
{
    /* Each node costs three round trips; with hundreds of (fake) nodes a few
     * requests in flight at once cut the start-up time without loading the
     * apiserver much. */
    enum { PARTS = 4 };
    reg_part_t parts[PARTS];
    pthread_t t[PARTS];
    int n = a->nnodes < PARTS ? (a->nnodes ? a->nnodes : 1) : PARTS, failed = 0;
    long t0 = agent_now_ms();
    for (int i = 0; i < n; i++) {
        parts[i] = (reg_part_t){a, i, n, 0};
        if (pthread_create(&t[i], NULL, register_part, &parts[i]) != 0) {
            register_part(&parts[i]);
            t[i] = 0;
        }
    }
    for (int i = 0; i < n; i++) {
        if (t[i]) pthread_join(t[i], NULL);
        failed += parts[i].failed;
    }
    agent_log("registered %d nodes (%d failed) in %ld ms", a->nnodes - failed, failed,
              agent_now_ms() - t0);
    return failed;
}

/* One share of the heartbeats: nodes first, first + stride, ... The period is
 * kept from start to start, so a slow pass (hundreds of nodes on a loaded
 * apiserver) shortens the sleep instead of stretching the renewal interval. */
static void *heartbeat_part(void *arg)
{
    reg_part_t *part = arg;
    agent_t *a = part->a;
    long renew_ms = a->lease_seconds * 1000L / 4;
    long next = agent_now_ms() + renew_ms, last_status = agent_now_ms();
    for (;;) {
        long wait = next - agent_now_ms();
        if (agent_sleep(a, wait > 0 ? wait : 0)) break;
        next += renew_ms;
        if (next < agent_now_ms()) next = agent_now_ms() + renew_ms; /* fell behind: no burst */
        int do_status = agent_now_ms() - last_status >= a->status_seconds * 1000L;
        for (int i = part->first; i < a->nnodes && !atomic_load(&a->stop); i += part->stride) {
            agent_node_t *n = &a->nodes[i];
            if (!n->registered) {
                register_node(a, n);
                continue;
            }
            int rc = do_status ? post_status(a, n, 1) : TIDE_OK;
            if (rc == TIDE_OK) rc = put_lease(a, n);
            if (rc == TIDE_ENOTFOUND) {
                agent_log("node %s was deleted; registering it again", n->name);
                register_node(a, n);
            } else if (rc == TIDE_ESTALE) {
                /* The Lease came back with an owner uid of a previous Node. */
                n->registered = 0;
            }
        }
        if (do_status) last_status = agent_now_ms();
    }
    return NULL;
}

void *nodes_heartbeat_main(void *arg)
{
    agent_t *a = arg;
    /* Four shares in parallel when there are many nodes, as for registration. */
    enum { PARTS = 4 };
    int n = a->nnodes >= 16 ? PARTS : 1;
    reg_part_t parts[PARTS];
    pthread_t t[PARTS];
    int started[PARTS] = {0};
    for (int i = 1; i < n; i++) {
        parts[i] = (reg_part_t){a, i, n, 0};
        started[i] = pthread_create(&t[i], NULL, heartbeat_part, &parts[i]) == 0;
    }
    parts[0] = (reg_part_t){a, 0, n, 0};
    heartbeat_part(&parts[0]);
    for (int i = 1; i < n; i++)
        if (started[i]) pthread_join(t[i], NULL);
    return NULL;
}

void nodes_mark_not_ready(agent_t *a)
{
    tide__k8s_client_set_timeout_ms(a->client, 3000);
    for (int i = 0; i < a->nnodes; i++)
        if (a->nodes[i].registered && !a->nodes[i].fake) post_status(a, &a->nodes[i], 0);
}
