/*
 * pods.h - runs the pods bound to the agent's nodes as local processes, the part
 * of a kubelet that Tide's tests and demos need. Each container is its command +
 * args (the image is not pulled or run: the command runs on the host), with its
 * env (values, $(VAR) references, downward-API fieldRef and resourceFieldRef,
 * configMapKeyRef, secretKeyRef, envFrom, and the Service link variables), its
 * workingDir, stdout and stderr appended to
 * <state-dir>/pods/<ns>_<name>_<uid>/<container>.log, in its own process group.
 * Every pod gets its own loopback address from --pod-cidr as its pod IP (all of
 * 127/8 is routed to lo on Linux, so any of them can be bound); a program that
 * serves must bind $POD_IP (from the downward API), since pods share the host's
 * ports.
 *
 * It reports phase, conditions and container states through the status
 * subresource, restarts containers as restartPolicy says (with backoff), and on
 * deletion sends SIGTERM to each container's process group, SIGKILL after the
 * grace period, and then removes the pod (delete with gracePeriodSeconds=0 and a
 * uid precondition). Init containers, probes, volumes and resource limits are not
 * implemented.
 */
#ifndef TIDE_K8S_AGENT_PODS_H
#define TIDE_K8S_AGENT_PODS_H

#include "k8s/agent/util.h"

/* Starts the pod watch and the supervisor thread. */
int pods_start(agent_t *a);
/* Waits for both to end (after a->stop is set), then terminates every pod's
 * processes: SIGTERM, up to grace_ms, SIGKILL. */
void pods_stop(agent_t *a, long grace_ms);

#endif
