/*
 * main.c - tide-node-agent: stands in for kubelets on one machine, for Tide's
 * Kubernetes tests and demos. It registers Nodes, keeps their Leases and Ready
 * condition fresh, runs the pods the real kube-scheduler binds to them as local
 * processes, and makes Services reachable through loopback forwarders. See
 * docs/kubernetes-client.md for the flags and what is and is not emulated.
 */
#include "k8s/agent/nodes.h"
#include "k8s/agent/pods.h"
#include "k8s/agent/services.h"
#include "k8s/agent/util.h"
#include "tide.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char usage[] =
    "usage: tide-node-agent --kubeconfig FILE [--context NAME]\n"
    "         [--node "
    "NAME[,cpu=4,memory=8Gi,gpu=N,pods=110,storage=100Gi,label=k=v,taint=k[=v]:Effect]]...\n"
    "         [--fake-nodes N] [--pod-cidr 127.0.100.0/24] [--service-cidr 127.96.0.0/16]\n"
    "         [--host-ip 127.0.0.1] [--state-dir DIR] [--lease-seconds 40] [--status-seconds 60]\n"
    "         [--no-services] [--verbose]\n"
    "With neither --node nor --fake-nodes: the four default nodes of tests/k8s (tide-ondemand-0, "
    "tide-gpu-0 with\n"
    "nvidia.com/gpu=4, tide-spot-0 and tide-spot-1 tainted tide.dev/spot=true:NoSchedule).\n"
    "--fake-nodes N adds N nodes tide-fake-0000.. (tainted tide.dev/fake-node=true:NoSchedule).\n";

static const char *const default_nodes[] = {
    "tide-ondemand-0,cpu=4,memory=8Gi",
    "tide-gpu-0,cpu=4,memory=8Gi,gpu=4",
    "tide-spot-0,cpu=4,memory=8Gi,label=tide.dev/spot=true,taint=tide.dev/spot=true:NoSchedule",
    "tide-spot-1,cpu=4,memory=8Gi,label=tide.dev/spot=true,taint=tide.dev/spot=true:NoSchedule",
};

static int add_node(agent_t *a, int *cap, const char *spec)
{
    char err[512];
    if (a->nnodes == *cap) {
        *cap = *cap ? *cap * 2 : 8;
        agent_node_t *n = realloc(a->nodes, (size_t)*cap * sizeof *n);
        if (!n) return -1;
        a->nodes = n;
    }
    if (nodes_parse_spec(spec, &a->nodes[a->nnodes], err, sizeof err) < 0) {
        fprintf(stderr, "tide-node-agent: %s\n", err);
        return -1;
    }
    if (agent_find_node(a, a->nodes[a->nnodes].name)) {
        fprintf(stderr, "tide-node-agent: node %s given twice\n", a->nodes[a->nnodes].name);
        return -1;
    }
    a->nnodes++;
    return 0;
}

int main(int argc, char **argv)
{
    agent_t a;
    memset(&a, 0, sizeof a);
    const char *kubeconfig = NULL, *context = NULL, *pod_cidr = "127.0.100.0/24";
    const char *svc_cidr = "127.96.0.0/16";
    int cap = 0, fake = 0;
    snprintf(a.host_ip, sizeof a.host_ip, "127.0.0.1");
    const char *run = getenv("TIDE_K8S_RUN");
    snprintf(a.state_dir, sizeof a.state_dir, "%s", run && *run ? run : "/tmp");
    if (strlen(a.state_dir) + 20 < sizeof a.state_dir)
        strcat(a.state_dir, run && *run ? "/agent" : "/tide-node-agent");
    a.lease_seconds = 40;
    a.status_seconds = 60;
    a.services = 1;

    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEEDV()                                                                                    \
    do {                                                                                           \
        if (!v) {                                                                                  \
            fprintf(stderr, "tide-node-agent: %s needs a value\n%s", f, usage);                    \
            return 2;                                                                              \
        }                                                                                          \
        i++;                                                                                       \
    } while (0)
        if (strcmp(f, "--kubeconfig") == 0) {
            NEEDV();
            kubeconfig = v;
        } else if (strcmp(f, "--context") == 0) {
            NEEDV();
            context = v;
        } else if (strcmp(f, "--node") == 0) {
            NEEDV();
            if (add_node(&a, &cap, v) < 0) return 2;
        } else if (strcmp(f, "--fake-nodes") == 0) {
            NEEDV();
            fake = atoi(v);
            if (fake < 0 || fake > 100000) {
                fprintf(stderr, "tide-node-agent: --fake-nodes %s: 0..100000\n", v);
                return 2;
            }
        } else if (strcmp(f, "--pod-cidr") == 0) {
            NEEDV();
            pod_cidr = v;
        } else if (strcmp(f, "--service-cidr") == 0) {
            NEEDV();
            svc_cidr = v;
        } else if (strcmp(f, "--host-ip") == 0) {
            NEEDV();
            snprintf(a.host_ip, sizeof a.host_ip, "%s", v);
        } else if (strcmp(f, "--state-dir") == 0) {
            NEEDV();
            snprintf(a.state_dir, sizeof a.state_dir, "%s", v);
        } else if (strcmp(f, "--lease-seconds") == 0) {
            NEEDV();
            a.lease_seconds = atoi(v);
        } else if (strcmp(f, "--status-seconds") == 0) {
            NEEDV();
            a.status_seconds = atoi(v);
        } else if (strcmp(f, "--no-services") == 0)
            a.services = 0;
        else if (strcmp(f, "--verbose") == 0 || strcmp(f, "-v") == 0)
            agent_verbose = 1;
        else if (strcmp(f, "--help") == 0 || strcmp(f, "-h") == 0) {
            fputs(usage, stdout);
            return 0;
        } else {
            fprintf(stderr, "tide-node-agent: unknown argument %s\n%s", f, usage);
            return 2;
        }
#undef NEEDV
    }
    if (a.lease_seconds < 4) a.lease_seconds = 4;
    if (a.status_seconds < 1) a.status_seconds = 1;
    if (a.nnodes == 0 && fake == 0)
        for (size_t i = 0; i < sizeof default_nodes / sizeof default_nodes[0]; i++)
            if (add_node(&a, &cap, default_nodes[i]) < 0) return 2;
    for (int i = 0; i < fake; i++) {
        char spec[160];
        snprintf(spec, sizeof spec,
                 "tide-fake-%04d,cpu=4,memory=8Gi,taint=tide.dev/fake-node=true:NoSchedule", i);
        if (add_node(&a, &cap, spec) < 0) return 2;
        a.nodes[a.nnodes - 1].fake = 1;
    }
    if (agent_parse_cidr(pod_cidr, &a.pod_net, &a.pod_bits) < 0 || (a.pod_net >> 24) != 127) {
        fprintf(stderr,
                "tide-node-agent: --pod-cidr %s: want a range inside 127.0.0.0/8, /8../30\n",
                pod_cidr);
        return 2;
    }
    if (agent_parse_cidr(svc_cidr, &a.svc_net, &a.svc_bits) < 0 || (a.svc_net >> 24) != 127) {
        fprintf(stderr, "tide-node-agent: --service-cidr %s: want a range inside 127.0.0.0/8\n",
                svc_cidr);
        return 2;
    }
    uint32_t hip;
    if (agent_ip_parse(a.host_ip, &hip) < 0) {
        fprintf(stderr, "tide-node-agent: --host-ip %s is not an IPv4 address\n", a.host_ip);
        return 2;
    }

    char err[1024];
    int rc = tide__k8s_client_from_kubeconfig(kubeconfig, context, &a.client, err, sizeof err);
    if (rc != TIDE_OK) {
        fprintf(stderr, "tide-node-agent: %s\n", err);
        return 1;
    }
    /* Make the state dir (and parents). */
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s", a.state_dir);
    for (char *s = tmp + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            mkdir(tmp, 0755);
            *s = '/';
        }
    mkdir(tmp, 0755);

    /* Signals are taken by sigwait in this thread only; every thread started
     * below inherits the mask (and pods.c unblocks them again in each child). */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    agent_log(
        "starting: %d nodes (%d fake), pods from %s, services on %s, state in %s, apiserver %s",
        a.nnodes, fake, pod_cidr, svc_cidr, a.state_dir, tide__k8s_client_server(a.client));
    if (a.services && services_start(&a) != TIDE_OK) agent_log("services: could not start");
    if (pods_start(&a) != TIDE_OK) {
        agent_log("pods: could not start");
        return 1;
    }
    nodes_register_all(&a);
    pthread_t hb;
    pthread_create(&hb, NULL, nodes_heartbeat_main, &a);

    int sig = 0;
    sigwait(&set, &sig);
    agent_log("signal %d: stopping", sig);
    atomic_store(&a.stop, 1);
    pthread_join(hb, NULL);
    pods_stop(&a, 5000);
    services_stop();
    nodes_mark_not_ready(&a);
    tide__k8s_client_free(a.client);
    for (int i = 0; i < a.nnodes; i++) {
        json_decref(a.nodes[i].labels);
        json_decref(a.nodes[i].taints);
    }
    free(a.nodes);
    agent_log("stopped");
    return 0;
}
