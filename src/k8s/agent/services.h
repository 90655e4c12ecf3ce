/*
 * services.h - Services on one machine. Every pod shares the host's network, so
 * a Service is made real by a TCP forwarder: the agent maps each Service's
 * ClusterIP to a loopback address (the ClusterIP itself when it is already in
 * 127/8, otherwise the same host bits inside --service-cidr, default
 * 127.96.0.0/16, so 10.96.3.7 becomes 127.96.3.7: stable for the Service's life
 * and across agent restarts), listens there on each TCP port, and forwards each
 * connection to a ready endpoint (podIP:targetPort), round robin. Endpoints are
 * the Running, Ready, not terminating pods the Service's selector matches, read
 * from the API (a pod informer): the apiserver refuses loopback addresses in
 * EndpointSlices, so the endpointslice controller cannot publish pod IPs from
 * 127/8. Services without a selector use their EndpointSlices. A replaced pod
 * gets a new pod IP; the Service's address stays.
 *
 * Pods find Services by name the way Kubernetes' service links do:
 * {SVC}_SERVICE_HOST/_PORT and the docker-link {SVC}_PORT_* variables (with the
 * loopback address), and through a hosts-format file (TIDE_K8S_HOSTS) listing
 * "address name.ns.svc.cluster.local name.ns.svc name.ns" for every Service.
 * UDP ports are not forwarded.
 */
#ifndef TIDE_K8S_AGENT_SERVICES_H
#define TIDE_K8S_AGENT_SERVICES_H

#include "k8s/agent/util.h"

/* Starts the Service and EndpointSlice watches and the forwarders. */
int services_start(agent_t *a);
void services_stop(void);

/* Appends {name, value} pairs (a JSON array of 2-arrays) for the service links
 * a pod in namespace ns gets. links == 0: only the "kubernetes" Service's. */
void services_env(agent_t *a, const char *ns, int links, json_t *out);

/* The loopback address a ClusterIP is served on, or 0. */
uint32_t services_local_ip(agent_t *a, const char *cluster_ip);

/* The path of the hosts-format name file (TIDE_K8S_HOSTS). */
const char *services_hosts_path(void);

#endif
