/*
 * proto.h - the control protocol between workers and the coordinator: message
 * names, the settings both sides share, and checked accessors for JSON fields.
 *
 * Every control message is one length-prefixed JSON object (core/net.h) with a
 * string "type". Worker to coordinator: register, hb, prepared, running, ready,
 * metric, done, bye. Coordinator to worker: welcome, hb, abort, pending, notice,
 * prepare, members, stop, error. docs/elastic.md walks through a re-formation
 * message by message. Nothing here does I/O.
 */
#ifndef TIDE_ELASTIC_PROTO_H
#define TIDE_ELASTIC_PROTO_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* The largest message either side accepts from the other (a member table of a
 * few thousand workers fits in the coordinator's direction). */
#define TIDE__CTL_MSG_MAX (64u * 1024u)
#define TIDE__WORKER_ID_MAX 64

/* Defaults of DESIGN.md: a heartbeat every 0.5 s, a peer lost after 3 s of silence. */
#define TIDE__HEARTBEAT_MS_DEFAULT 500
#define TIDE__PEER_TIMEOUT_MS_DEFAULT 3000

/* TIDE_HEARTBEAT_MS and TIDE_PEER_TIMEOUT_MS, checked (the timeout must exceed two
 * heartbeats, or a single late one would count as a loss). */
int tide__ctl_timing(int *heartbeat_ms, int *peer_timeout_ms);

/* What a worker says it is doing when it (re)registers. */
enum tide__wstatus {
    TIDE__WS_NEW = 0,  /* no membership yet: a joiner */
    TIDE__WS_MEMBER,   /* training in generation `generation` */
    TIDE__WS_READY,    /* its generation ended; waiting for the next, with `step` */
    TIDE__WS_LEAVING,  /* leaving on notice */
    TIDE__WS_DONE      /* finished training */
};
const char *tide__wstatus_name(int s);
int tide__wstatus_parse(const char *s);

/* Checked field access: TIDE_EPROTO when the field is missing, of another type,
 * out of [lo, hi], or (strings) longer than len - 1 bytes. */
int tide__json_int(const json_t *o, const char *key, long long lo, long long hi, long long *out);
int tide__json_str(const json_t *o, const char *key, char *out, size_t len);
int tide__json_real(const json_t *o, const char *key, double *out);

/* A name made of [A-Za-z0-9._:/-], 1 to max-1 bytes (worker ids, metric names). */
int tide__valid_name(const char *s, size_t max);

#endif
