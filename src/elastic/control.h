/*
 * control.h - the worker's side of the control connection to the coordinator
 * (the rendezvous inside `tide run`, or `tide coordinator`).
 *
 * One authenticated TCP connection per worker carries JSON messages: register,
 * then the member table of the generation it joins. The data plane never
 * travels here; the coordinator never sees tensors.
 */
#ifndef TIDE_ELASTIC_CONTROL_H
#define TIDE_ELASTIC_CONTROL_H

#include "core/auth.h"
#include "transport/transport.h"

typedef struct {
    int rank, size;
    int pid;
    int data_port;
    const char *host_id;
    const char *addr;
} tide__register_t;

typedef struct {
    uint32_t generation;
    int size;
    tide__member_t *members; /* size entries by rank; owned, free() */
} tide__membership_t;

/* Connects and proves the job secret; *fd_out is the control connection. The
 * local address the connection uses is written to local_addr (it is the address
 * peers can reach this worker at, even across network namespaces). */
int tide__control_connect(const char *rendezvous, const tide__secret_t *secret, int rank,
                          int timeout_ms, int *fd_out, char *local_addr, size_t local_len);

/* Registers and waits for the member table. */
int tide__control_register(int fd, const tide__register_t *reg, int timeout_ms,
                           tide__membership_t *out);

/* Parses a "members" message, checking every field and bound (also used by the
 * coordinator's tests). */
int tide__membership_parse(const json_t *msg, int expect_size, tide__membership_t *out);

/* This host's identity: hostname, boot id and network namespace, so that two
 * network namespaces on one machine count as two hosts. */
void tide__host_id(char *out, size_t len);

#endif
