/*
 * shm.h - the shared window of the shm transport, for the algorithms that work
 * directly in shared memory (the src/coll files named *_shm).
 *
 * Each rank owns one segment: a header with its phase counter, the collective it
 * is in and an abort word, then two staging buffers (double buffering, so one can
 * fill while the other drains). Every rank maps every segment. Progress is told
 * by phase counters that only grow: "rank j has reached phase p" is the only
 * synchronisation, so a collective is a sequence of post/wait steps that all ranks
 * take in the same order.
 *
 * Waits spin briefly, then yield, then sleep on a futex, and while sleeping they
 * check the abort word and whether a peer process has exited (pidfd), so a dead
 * peer or an abort is noticed within TIDE_SHM_POLL_MS (default 20 ms).
 */
#ifndef TIDE_TRANSPORT_SHM_H
#define TIDE_TRANSPORT_SHM_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "core/futex.h"
#include "transport/transport.h"

#define TIDE__SHM_MAX_RANKS 64

struct tide__shm_header {
    _Alignas(64) tide__futex_t phase;
    _Alignas(64) _Atomic int32_t abort_code;
    _Alignas(64) tide__coll_desc_t desc;
    uint32_t magic;
    int32_t pid;
    uint64_t buf_bytes;
};

typedef struct tide__shm_window {
    int rank, size;
    size_t buf_bytes; /* bytes in each of the two staging buffers of a rank */
    unsigned char *buf[TIDE__SHM_MAX_RANKS][2];
    struct tide__shm_header *hdr[TIDE__SHM_MAX_RANKS];
    uint32_t phase; /* the last phase this rank posted */
    int oversubscribed; /* more ranks on this host than cores: syncs are dear */
    tide__transport_t *transport;
} tide__shm_window_t;

/* Posts this rank's phase (release: everything written before is visible to a
 * rank that sees the phase). */
void tide__shm_post(tide__shm_window_t *w, uint32_t phase);

/* Waits until rank j has posted phase >= target. Returns TIDE_OK, or the abort
 * code / TIDE_EPEERLOST. */
int tide__shm_wait(tide__shm_window_t *w, int j, uint32_t target);

/* Waits until every rank has posted phase >= target. */
int tide__shm_wait_all(tide__shm_window_t *w, uint32_t target);

/* Publishes this rank's collective description (before its first post). */
void tide__shm_set_desc(tide__shm_window_t *w, const tide__coll_desc_t *d);

/* After a wait that covers every rank's first post: compares every rank's
 * description with d; on a difference fails the group with TIDE_EMISMATCH. */
int tide__shm_check_desc(tide__shm_window_t *w, const tide__coll_desc_t *d);

#endif
