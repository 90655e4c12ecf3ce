/*
 * util.h - small helpers the node agent's modules share: a timestamped log,
 * clocks, Kubernetes time formats, IPv4 ranges, and the agent's global state
 * (struct agent) that ties nodes, pods and services together.
 */
#ifndef TIDE_K8S_AGENT_UTIL_H
#define TIDE_K8S_AGENT_UTIL_H

#include "k8s/client.h"

#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

typedef struct agent_node {
    char name[128];
    char cpu[32], memory[32], pods[16], gpu[16], storage[32]; /* quantities, as given */
    json_t *labels;                                           /* object */
    json_t *taints;                                           /* array of {key, value, effect} */
    char uid[64]; /* of the Node object once registered */
    int fake;
    int registered;
} agent_node_t;

typedef struct agent {
    tide__k8s_client_t *client;
    agent_node_t *nodes;
    int nnodes;
    uint32_t pod_net, pod_bits; /* the pod range, host order: 127.0.100.0 / 24 */
    uint32_t svc_net, svc_bits; /* local addresses for non-loopback ClusterIPs */
    char host_ip[32];           /* nodes' InternalIP and pods' hostIP */
    char state_dir[PATH_MAX];   /* pod logs and the hosts file */
    int lease_seconds;          /* Lease duration; renewed every quarter of it */
    int status_seconds;         /* how often node status is re-posted */
    int services;               /* run the Service forwarder */
    atomic_int stop;
} agent_t;

extern int agent_verbose;

void agent_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void agent_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

long agent_now_ms(void);
/* RFC 3339 in UTC: seconds ("...Z"), or microseconds for MicroTime fields. */
void agent_rfc3339(char *buf, size_t len, time_t t);
void agent_rfc3339_micro(char *buf, size_t len);
/* Sleeps up to ms, returning early (non-zero) when the agent is stopping. */
int agent_sleep(agent_t *a, long ms);

/* "127.0.100.0/24" -> net, bits. Non-zero on a malformed range. */
int agent_parse_cidr(const char *s, uint32_t *net, uint32_t *bits);
void agent_ip_str(uint32_t ip, char *buf, size_t len);
int agent_ip_parse(const char *s, uint32_t *ip);

agent_node_t *agent_find_node(agent_t *a, const char *name);

#endif
