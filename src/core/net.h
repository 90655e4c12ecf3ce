/*
 * net.h - TCP sockets with deadlines, and the length-prefixed JSON messages of
 * the control protocol.
 *
 * Every read takes a deadline and every message a size cap, so a silent or
 * hostile peer costs a bounded wait and a bounded allocation. Nothing here
 * knows about ranks or generations.
 */
#ifndef TIDE_CORE_NET_H
#define TIDE_CORE_NET_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* The largest control message accepted (a member table of thousands fits). */
#define TIDE__MSG_MAX (1u << 20)

/* Splits "host:port" (or "[v6]:port"). host must hold hostlen bytes. */
int tide__net_split_addr(const char *addr, char *host, size_t hostlen, int *port);

/* Listens on host:port (port 0: any); *port_out is the port bound. */
int tide__net_listen(const char *host, int port, int backlog, int *fd_out, int *port_out);

/* Every wait below also takes cancel_fd: -1 for none, or a descriptor (an
 * eventfd that another thread writes) whose becoming readable ends the wait with
 * TIDE_EABORTED. It is how an aborted generation wakes a setup that waits on a
 * peer which accepted the connection in its backlog but is frozen. The caller
 * resets it. */

/* Connects with a timeout; the socket is returned blocking, with TCP_NODELAY. */
int tide__net_connect(const char *host, int port, int timeout_ms, int cancel_fd, int *fd_out);

/* Accepts one connection, waiting at most timeout_ms (-1: forever). */
int tide__net_accept(int lfd, int timeout_ms, int cancel_fd, int *fd_out);

/* Reads or writes exactly len bytes before deadline_ns (tide__now_ns clock;
 * 0 means no deadline). EOF while reading is TIDE_EPEERLOST. */
int tide__net_read_full(int fd, void *buf, size_t len, uint64_t deadline_ns, int cancel_fd);
int tide__net_write_full(int fd, const void *buf, size_t len, uint64_t deadline_ns,
                         int cancel_fd);

/* Sends one message: a 4-byte big-endian length, then compact JSON. */
int tide__msg_send(int fd, const json_t *msg, uint64_t deadline_ns);
/* Receives one message of at most max bytes (<= TIDE__MSG_MAX). *msg_out is a new
 * reference owned by the caller. Malformed JSON or an object without a string
 * "type" is TIDE_EPROTO. */
int tide__msg_recv(int fd, size_t max, uint64_t deadline_ns, json_t **msg_out);

/* Sets large socket buffers and TCP_NODELAY on a data connection. */
void tide__net_tune_data_socket(int fd, int bufsize);

#endif
