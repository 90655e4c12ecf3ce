/*
 * watch.h - list + watch of one collection, informer style: the caller gets one
 * callback per change (ADDED, MODIFIED, DELETED, and optionally BOOKMARK) and
 * never sees the mechanics. Internally it lists (paginated), watches from the
 * list's resourceVersion with allowWatchBookmarks=true, tracks the
 * resourceVersion from every event and bookmark, reconnects with capped
 * exponential backoff after a broken connection (an apiserver restart), and
 * re-lists when the resourceVersion has expired (410 Gone, as an HTTP status or
 * as an in-stream ERROR event with Status code 410).
 *
 * A re-list is diffed against the objects seen so far, so no change is lost
 * across it: objects that appeared are ADDED, objects whose resourceVersion moved
 * are MODIFIED, objects that vanished while the watch was down are DELETED (with
 * their last known state), and an object replaced under the same name (new uid)
 * is DELETED then ADDED. Intermediate states inside the gap are, as with any
 * informer, collapsed into the latest one.
 *
 * Every watch line is bounded by max_event_bytes and every list by the client's
 * cap; an oversized event ends the watch with TIDE_ENOMEM rather than being
 * allocated.
 */
#ifndef TIDE_K8S_WATCH_H
#define TIDE_K8S_WATCH_H

#include "k8s/client.h"

#define TIDE__K8S_DEFAULT_MAX_EVENT ((size_t)8 << 20)

typedef enum {
    TIDE__K8S_ADDED = 0,
    TIDE__K8S_MODIFIED,
    TIDE__K8S_DELETED,
    TIDE__K8S_BOOKMARK, /* only when opts.bookmarks; obj carries just the resourceVersion */
    TIDE__K8S_SYNCED,   /* once, after the first list has been delivered; obj is NULL */
} tide__k8s_event_t;

const char *tide__k8s_event_name(tide__k8s_event_t ev);

/* obj is borrowed for the duration of the call (json_incref to keep it).
 * Returning non-zero ends the watch (tide__k8s_watch returns TIDE_OK). */
typedef int (*tide__k8s_watch_fn)(void *ud, tide__k8s_event_t ev, json_t *obj);

typedef struct tide__k8s_watch_opts {
    const char *collection;     /* "/api/v1/pods", "/api/v1/namespaces/x/configmaps", ... */
    const char *label_selector; /* or NULL */
    const char *field_selector; /* or NULL */
    size_t max_event_bytes;     /* 0: TIDE__K8S_DEFAULT_MAX_EVENT */
    long run_ms;                /* stop after this long (TIDE_ETIMEDOUT); 0: until stopped */
    long watch_timeout_s;       /* server-side timeoutSeconds of one watch request; 0: 300 */
    int bookmarks;              /* deliver BOOKMARK events too */
    const atomic_int *stop;     /* set non-zero (from any thread) to stop (TIDE_EABORTED) */
    tide__k8s_watch_fn fn;
    void *ud;
    /* Optional: one line per reconnect / re-list, for the caller's log. */
    void (*log)(void *ud, const char *msg);
} tide__k8s_watch_opts_t;

typedef struct tide__k8s_watch_stats {
    unsigned long lists;      /* lists done (1 + re-lists) */
    unsigned long gone;       /* 410s seen (HTTP or in-stream) */
    unsigned long reconnects; /* watch requests after the first */
    unsigned long events;     /* callbacks made for ADDED/MODIFIED/DELETED */
    unsigned long bookmarks;
    char rv[64]; /* the last resourceVersion seen */
    char last_error[640];
} tide__k8s_watch_stats_t;

/* Runs the watch in the calling thread until fn asks to stop, *stop is set, or
 * run_ms elapses. stats (optional) is updated as it goes and on return, by the
 * watching thread only: read it from fn, or after the call returns. */
int tide__k8s_watch(tide__k8s_client_t *c, const tide__k8s_watch_opts_t *opts,
                    tide__k8s_watch_stats_t *stats);

#endif
