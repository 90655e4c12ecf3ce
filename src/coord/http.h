/*
 * http.h - the coordinator's small HTTP server (libmicrohttpd): /metrics in the
 * Prometheus text format, /healthz, and /status as JSON, for people, `tide status`
 * and scrapers.
 *
 * The server knows nothing of the coordinator: every body comes from one callback
 * that the coordinator registers, called on the server's own thread (so it must
 * take whatever lock guards the state it reads, and must not block for long). The
 * server answers GET and HEAD only (405 otherwise, with Allow), 404 for any other
 * path, 500 when the callback fails. Requests are bounded: headers fit in a small
 * per-connection memory limit, a request body is refused (413), connections are
 * capped in number and time out.
 *
 * The thread the server starts blocks every signal, so that signals meant for the
 * launcher's signalfd (SIGCHLD, SIGTERM) are never delivered to it.
 *
 * /status, as `tide status` reads it (every field optional; others are ignored):
 *   {"job": "name", "state": "training", "generation": 3, "step": 1200,
 *    "world_size": 4, "min": 2, "max": 4, "samples_per_s": 612.5,
 *    "pending_joins": 1, "uptime_s": 81.2,
 *    "members": [{"rank": 0, "host": "127.0.0.1", "pid": 4242, "step": 1200,
 *                 "state": "active", "last_heartbeat_ms": 120}, ...]}
 * It also reads the names of tide__coord_snapshot: "size" for "world_size",
 * "waiting" for "pending_joins", "steps_per_s" beside or instead of
 * "samples_per_s", and counts an "events" array; so the snapshot itself may be
 * served as /status.
 *
 * This module never exits and never touches the coordinator's state itself.
 */
#ifndef TIDE_COORD_HTTP_H
#define TIDE_COORD_HTTP_H

#include <stddef.h>

struct json_t; /* jansson's */

#define TIDE__HTTP_MAX_BODY (4 * 1024 * 1024) /* largest body a callback may produce */

typedef enum {
    TIDE__HTTP_METRICS = 0, /* GET /metrics: text/plain; version=0.0.4 */
    TIDE__HTTP_HEALTHZ,     /* GET /healthz: text/plain ("ok" when the callback writes nothing) */
    TIDE__HTTP_STATUS,      /* GET /status: application/json */
} tide__http_endpoint_t;

/* The body being built for one response. Borrowed by the callback for the call. */
typedef struct tide__http_body tide__http_body_t;

/* Fills the body for endpoint ep. Returns the HTTP status to answer with (200;
 * 503 for "not healthy", ...), or a negative Tide error, answered as 500. Called
 * on the server's thread, one request at a time. */
typedef int (*tide__http_handler_fn)(void *ctx, tide__http_endpoint_t ep, tide__http_body_t *body);

typedef struct tide__http tide__http_t;

/* Starts serving on host:port (host NULL or "" for every address, "127.0.0.1",
 * "::1", a name; port 0 for any free port). fn and ctx are borrowed until
 * tide__http_stop returns; fn NULL answers 200 "ok" on /healthz and 404 elsewhere.
 * Returns TIDE_OK with *out set, TIDE_EINVAL, TIDE_ESYS (cannot bind or start),
 * TIDE_ENOMEM. */
int tide__http_start(const char *host, int port, tide__http_handler_fn fn, void *ctx,
                     tide__http_t **out);

/* The port it listens on (the one chosen, for port 0). */
int tide__http_port(const tide__http_t *h);

/* Stops serving (in-flight requests finish first) and frees h. NULL is fine. */
void tide__http_stop(tide__http_t *h);

/* Appends to the body. TIDE_ENOMEM past TIDE__HTTP_MAX_BODY or out of memory,
 * after which the body is failed and the request answered 500. */
int tide__http_append(tide__http_body_t *b, const char *data, size_t len);
int tide__http_printf(tide__http_body_t *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Appends j serialized compactly (for /status). */
int tide__http_json(tide__http_body_t *b, const struct json_t *j);

/* Prometheus helpers. A metric family is written once, with its # HELP (help may
 * be NULL) and # TYPE ("gauge", "counter") lines, then any number of samples of
 * it; labels is the text between the braces (`rank="0"`), or NULL for none. Names
 * are made valid Prometheus names (characters outside [a-zA-Z0-9_:] become '_', a
 * leading digit gets a '_' in front), so a user's tide_log_metric name like
 * "val/loss" may be passed as prefix "tide_metric_" and name "val/loss". A NaN
 * or infinite value is written as Prometheus spells it (NaN, +Inf, -Inf). */
int tide__http_prom_family(tide__http_body_t *b, const char *prefix, const char *name,
                           const char *type, const char *help);
int tide__http_prom_sample(tide__http_body_t *b, const char *prefix, const char *name,
                           const char *labels, double value);
/* Family and one unlabeled sample at once. */
int tide__http_prom(tide__http_body_t *b, const char *prefix, const char *name, const char *type,
                    const char *help, double value);

#endif
