/*
 * nodes.h - the node agent's Nodes: registration (labels, taints, capacity and
 * allocatable for cpu, memory, pods, ephemeral-storage and nvidia.com/gpu), the
 * node Lease in kube-node-lease renewed every quarter of its duration, and the
 * Ready condition re-posted periodically. A Node deleted behind the agent's back
 * is registered again on the next heartbeat, as a kubelet would.
 */
#ifndef TIDE_K8S_AGENT_NODES_H
#define TIDE_K8S_AGENT_NODES_H

#include "k8s/agent/util.h"

/* Parses "NAME[,cpu=4,memory=8Gi,gpu=4,pods=110,storage=100Gi,label=k=v,taint=k=v:Effect]"
 * into n. Returns 0, or -1 with a message in err. */
int nodes_parse_spec(const char *spec, agent_node_t *n, char *err, size_t errlen);

/* Registers every node (create, or patch labels/taints of an existing one), posts
 * its status and creates its Lease. Returns the number that failed. */
int nodes_register_all(agent_t *a);

/* Thread body: renews Leases and re-posts status until a->stop. */
void *nodes_heartbeat_main(void *agent);

/* Marks every node NotReady (the agent is going away). */
void nodes_mark_not_ready(agent_t *a);

#endif
