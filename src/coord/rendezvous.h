/*
 * rendezvous.h - the coordinator's rendezvous: workers connect, prove the job
 * secret, register, and once the expected number has registered, each receives
 * the member table of the generation.
 *
 * It runs on its own thread inside `tide run` (and `tide coordinator`). A
 * connection that fails the secret, sends malformed bytes, or claims a taken
 * rank is refused with a log line; the rendezvous goes on (P8).
 */
#ifndef TIDE_COORD_RENDEZVOUS_H
#define TIDE_COORD_RENDEZVOUS_H

#include "core/auth.h"

typedef struct tide__rdzv tide__rdzv_t;

/* Listens on host:port (0: any port) for a job of `size` workers. */
int tide__rdzv_start(const char *host, int port, int size, const tide__secret_t *secret,
                     tide__rdzv_t **out);
/* "host:port" workers should dial. Owned by r. */
const char *tide__rdzv_addr(const tide__rdzv_t *r);
/* Connections refused so far (for tests of P8). */
int tide__rdzv_refused(const tide__rdzv_t *r);
void tide__rdzv_stop(tide__rdzv_t *r);

#endif
