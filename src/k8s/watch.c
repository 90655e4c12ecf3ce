/*
 * watch.c - the informer loop behind tide__k8s_watch (see watch.h). The store
 * of objects seen so far is a JSON object keyed "namespace/name", which is what
 * makes a re-list diffable and a DELETED after a gap reportable.
 */
#include "k8s/watch.h"

#include "tide.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *tide__k8s_event_name(tide__k8s_event_t ev)
{
    switch (ev) {
    case TIDE__K8S_ADDED:
        return "ADDED";
    case TIDE__K8S_MODIFIED:
        return "MODIFIED";
    case TIDE__K8S_DELETED:
        return "DELETED";
    case TIDE__K8S_BOOKMARK:
        return "BOOKMARK";
    case TIDE__K8S_SYNCED:
        return "SYNCED";
    }
    return "?";
}

typedef struct wstate {
    tide__k8s_client_t *c;
    const tide__k8s_watch_opts_t *o;
    tide__k8s_watch_stats_t *st;
    json_t *store;
    char rv[64];
    int need_list;  /* the resourceVersion expired: list again */
    int done;       /* fn asked to stop */
    int got_event;  /* this watch request delivered something */
    int stream_err; /* an in-stream ERROR other than 410 */
    int bad_line;
} wstate_t;

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

static void wlog(wstate_t *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void wlog(wstate_t *w, const char *fmt, ...)
{
    char msg[sizeof w->st->last_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(w->st->last_error, sizeof w->st->last_error, "%s", msg);
    if (w->o->log) w->o->log(w->o->ud, msg);
}

static int key_of(const json_t *obj, char *key, size_t len)
{
    const char *ns = tide__k8s_str(obj, "metadata.namespace");
    const char *name = tide__k8s_str(obj, "metadata.name");
    if (!name) return -1;
    int n = snprintf(key, len, "%s/%s", ns ? ns : "", name);
    return n < 0 || (size_t)n >= len ? -1 : 0;
}

static int emit(wstate_t *w, tide__k8s_event_t ev, json_t *obj)
{
    if (ev == TIDE__K8S_BOOKMARK) {
        w->st->bookmarks++;
        if (!w->o->bookmarks) return 0;
    } else if (ev != TIDE__K8S_SYNCED) {
        w->st->events++;
    }
    if (w->o->fn(w->o->ud, ev, obj)) w->done = 1;
    return w->done;
}

static int stopped(wstate_t *w)
{
    return w->o->stop && atomic_load(w->o->stop);
}

/* Sleeps ms in slices, so that stop is noticed quickly. Returns non-zero if the
 * watch must end (stop set or deadline passed). */
static int nap(wstate_t *w, long ms, long deadline)
{
    long end = now_ms() + ms;
    for (;;) {
        if (stopped(w)) return 1;
        long t = now_ms();
        if (deadline && t >= deadline) return 1;
        if (t >= end) return 0;
        long left = end - t;
        struct timespec ts = {0, (left > 100 ? 100 : left) * 1000000L};
        nanosleep(&ts, NULL);
    }
}

static int do_list(wstate_t *w)
{
    json_t *items = NULL;
    tide__k8s_resp_t resp;
    char rv[64];
    int rc = tide__k8s_list(w->c, w->o->collection, w->o->label_selector, w->o->field_selector, 500,
                            &items, rv, sizeof rv, &resp);
    if (rc != TIDE_OK) {
        wlog(w, "list %s: %s", w->o->collection,
             resp.message[0] ? resp.message : tide__k8s_strerror(rc));
        tide__k8s_resp_clear(&resp);
        return rc;
    }
    tide__k8s_resp_clear(&resp);
    w->st->lists++;
    json_t *fresh = json_object();
    size_t i;
    json_t *it;
    char key[512];
    json_array_foreach(items, i, it)
    {
        if (key_of(it, key, sizeof key) < 0) continue;
        json_object_set(fresh, key, it);
    }
    json_decref(items);
    /* Deletions first, so that a consumer tracking capacity (pod IPs, ports)
     * frees before it allocates. */
    const char *k;
    json_t *old;
    void *iter;
    json_object_foreach_safe(w->store, iter, k, old)
    {
        json_t *now = json_object_get(fresh, k);
        const char *ou = tide__k8s_str(old, "metadata.uid"),
                   *nu = tide__k8s_str(now, "metadata.uid");
        if (!now || (ou && nu && strcmp(ou, nu) != 0)) {
            json_incref(old);
            json_object_del(w->store, k);
            int stop = emit(w, TIDE__K8S_DELETED, old);
            json_decref(old);
            if (stop) goto out;
        }
    }
    json_object_foreach(fresh, k, it)
    {
        old = json_object_get(w->store, k);
        const char *orv = tide__k8s_str(old, "metadata.resourceVersion");
        const char *nrv = tide__k8s_str(it, "metadata.resourceVersion");
        if (old && orv && nrv && strcmp(orv, nrv) == 0) continue;
        json_object_set(w->store, k, it);
        if (emit(w, old ? TIDE__K8S_MODIFIED : TIDE__K8S_ADDED, it)) goto out;
    }
    snprintf(w->rv, sizeof w->rv, "%s", rv);
    snprintf(w->st->rv, sizeof w->st->rv, "%s", rv);
    w->need_list = 0;
out:
    json_decref(fresh);
    return TIDE_OK;
}

static int on_line(void *ud, char *line, size_t len)
{
    wstate_t *w = ud;
    json_error_t je;
    json_t *ev = json_loadb(line, len, 0, &je);
    const char *type = tide__k8s_str(ev, "type");
    json_t *obj = json_object_get(ev, "object");
    if (!type || !json_is_object(obj)) {
        wlog(w, "watch %s: malformed event (%s)", w->o->collection,
             ev ? "no type/object" : je.text);
        json_decref(ev);
        w->bad_line = 1;
        return 1; /* reconnect from the last good resourceVersion */
    }
    int stop = 0;
    if (strcmp(type, "ERROR") == 0) {
        json_int_t code = json_integer_value(json_object_get(obj, "code"));
        const char *msg = tide__k8s_str(obj, "message");
        if (code == 410) {
            w->st->gone++;
            w->need_list = 1;
            wlog(w, "watch %s: resourceVersion %s expired (410 in stream: %s); re-listing",
                 w->o->collection, w->rv, msg ? msg : "");
        } else {
            w->stream_err = 1;
            wlog(w, "watch %s: ERROR event code %lld: %s", w->o->collection, (long long)code,
                 msg ? msg : "");
        }
        json_decref(ev);
        return 1;
    }
    const char *rv = tide__k8s_str(obj, "metadata.resourceVersion");
    if (rv && strlen(rv) < sizeof w->rv) {
        snprintf(w->rv, sizeof w->rv, "%s", rv);
        snprintf(w->st->rv, sizeof w->st->rv, "%s", rv);
    }
    w->got_event = 1;
    char key[512];
    if (strcmp(type, "BOOKMARK") == 0) {
        stop = emit(w, TIDE__K8S_BOOKMARK, obj);
    } else if (key_of(obj, key, sizeof key) == 0) {
        if (strcmp(type, "DELETED") == 0) {
            json_object_del(w->store, key);
            stop = emit(w, TIDE__K8S_DELETED, obj);
        } else if (strcmp(type, "ADDED") == 0 || strcmp(type, "MODIFIED") == 0) {
            int had = json_object_get(w->store, key) != NULL;
            json_object_set(w->store, key, obj);
            /* After a reconnect the server may replay an ADDED for an object we
             * already hold; what the consumer needs to hear is that it changed. */
            stop = emit(w, had ? TIDE__K8S_MODIFIED : TIDE__K8S_ADDED, obj);
        }
    }
    json_decref(ev);
    return stop;
}

int tide__k8s_watch(tide__k8s_client_t *c, const tide__k8s_watch_opts_t *o,
                    tide__k8s_watch_stats_t *stats)
{
    tide__k8s_watch_stats_t local;
    if (!stats) stats = &local;
    memset(stats, 0, sizeof(*stats));
    if (!c || !o || !o->collection || !o->fn) return TIDE_EINVAL;
    wstate_t w;
    memset(&w, 0, sizeof w);
    w.c = c;
    w.o = o;
    w.st = stats;
    w.store = json_object();
    w.need_list = 1;
    if (!w.store) return TIDE_ENOMEM;
    long deadline = o->run_ms > 0 ? now_ms() + o->run_ms : 0;
    size_t max_event = o->max_event_bytes ? o->max_event_bytes : TIDE__K8S_DEFAULT_MAX_EVENT;
    long wt = o->watch_timeout_s > 0 ? o->watch_timeout_s : 300;
    char ls[1024] = "", fs[1024] = "";
    if ((o->label_selector && tide__k8s_escape(ls, sizeof ls, o->label_selector) != TIDE_OK) ||
        (o->field_selector && tide__k8s_escape(fs, sizeof fs, o->field_selector) != TIDE_OK)) {
        json_decref(w.store);
        return TIDE_EINVAL;
    }
    long backoff = 0;
    int synced = 0, watches = 0, rc = TIDE_OK;
    for (;;) {
        if (w.done) {
            rc = TIDE_OK;
            break;
        }
        if (stopped(&w)) {
            rc = TIDE_EABORTED;
            break;
        }
        if (deadline && now_ms() >= deadline) {
            rc = TIDE_ETIMEDOUT;
            break;
        }
        if (backoff > 0 && nap(&w, backoff + rand() % (backoff / 4 + 1), deadline)) continue;
        if (w.need_list) {
            int lrc = do_list(&w);
            if (lrc == TIDE_ENOMEM) {
                rc = lrc;
                break;
            } /* over the cap: retrying cannot help */
            if (lrc != TIDE_OK) {
                backoff = backoff ? (backoff * 2 > 5000 ? 5000 : backoff * 2) : 200;
                continue;
            }
            if (!synced && !w.done) {
                synced = 1;
                emit(&w, TIDE__K8S_SYNCED, NULL);
            }
            continue;
        }
        char p[4096];
        /* The server ends each watch after timeoutSeconds (jittered, like
         * client-go, so that many watchers do not reconnect in step); the client
         * timeout is a backstop for a server that went silent. */
        long t = wt - (wt > 10 ? rand() % (wt / 10) : 0);
        int n = snprintf(
            p, sizeof p,
            "%s%swatch=1&allowWatchBookmarks=true&resourceVersion=%s&timeoutSeconds=%ld%s%s%s%s",
            o->collection, strchr(o->collection, '?') ? "&" : "?", w.rv, t,
            ls[0] ? "&labelSelector=" : "", ls, fs[0] ? "&fieldSelector=" : "", fs);
        if (n < 0 || (size_t)n >= sizeof p) {
            rc = TIDE_EINVAL;
            break;
        }
        long limit = (t + 30) * 1000;
        if (deadline) {
            long left = deadline - now_ms();
            if (left <= 0) continue;
            if (left < limit) limit = left;
        }
        if (watches++ > 0) stats->reconnects++;
        w.got_event = w.stream_err = w.bad_line = 0;
        tide__k8s_resp_t resp;
        long started = now_ms();
        int src = tide__k8s_stream(c, p, max_event, limit, o->stop, on_line, &w, &resp);
        if (src == TIDE_ENOMEM) {
            wlog(&w, "watch %s: %s", o->collection, resp.message);
            tide__k8s_resp_clear(&resp);
            rc = TIDE_ENOMEM;
            break;
        }
        if (resp.status == 410) {
            stats->gone++;
            w.need_list = 1;
            wlog(&w, "watch %s: resourceVersion %s expired (HTTP 410); re-listing", o->collection,
                 w.rv);
            backoff = 0;
        } else if (w.need_list || w.done) {
            backoff = 0;
        } else if (src == TIDE_OK && resp.status == 200 && !w.stream_err && !w.bad_line) {
            /* A normal end of a watch (the server's timeout): go on at once. */
            backoff = 0;
        } else if (src == TIDE_EABORTED || src == TIDE_ETIMEDOUT) {
            backoff = 0; /* the loop head decides whether we are done */
        } else {
            if (w.got_event || now_ms() - started > 10000) backoff = 0;
            backoff = backoff ? (backoff * 2 > 5000 ? 5000 : backoff * 2) : 200;
            wlog(&w, "watch %s: %s; reconnecting from resourceVersion %s in ~%ld ms", o->collection,
                 resp.message[0] ? resp.message : tide__k8s_strerror(src), w.rv, backoff);
            /* Some errors (a 500 after an etcd restart) cannot be resumed from. */
            if (resp.status >= 500 && !w.got_event && stats->reconnects > 3) w.need_list = 1;
        }
        tide__k8s_resp_clear(&resp);
    }
    json_decref(w.store);
    return rc;
}
