/*
 * watch.c - list + watch through the real apiserver survives an apiserver
 * restart (reconnect from the last resourceVersion) and a forced expiry (etcd
 * compacted past the watcher's resourceVersion, then the apiserver restarted, so
 * the resume gets 410 Gone and the watch re-lists) without losing an event:
 * every object created is seen ADDED, every change MODIFIED, every deletion
 * DELETED, and the watcher's final view equals the server's.
 */
#include "k8s_test.h"

#include <pthread.h>

static tide__k8s_client_t *c;
static char ns[128], coll[256];

enum { MAXO = 64 };
typedef struct seen {
    pthread_mutex_t lock;
    char names[MAXO][64];
    char data[MAXO][32];
    int alive[MAXO], added[MAXO], deleted[MAXO];
    int n, synced;
    atomic_int stop;
    tide__k8s_watch_stats_t stats; /* written by the watch thread */
    tide__k8s_watch_stats_t snap;  /* its copy, taken in the callback, under lock */
    int rc;
} seen_t;

static seen_t S;

static int slot(const char *name)
{
    for (int i = 0; i < S.n; i++)
        if (strcmp(S.names[i], name) == 0) return i;
    if (S.n == MAXO) return -1;
    snprintf(S.names[S.n], sizeof S.names[0], "%s", name);
    return S.n++;
}

static int on_event(void *ud, tide__k8s_event_t ev, json_t *obj)
{
    pthread_mutex_lock(&S.lock);
    S.snap = S.stats; /* the callback runs on the thread that writes stats */
    if (ev == TIDE__K8S_SYNCED) {
        S.synced = 1;
    } else if (obj && ev != TIDE__K8S_BOOKMARK) {
        int i = slot(tide__k8s_str(obj, "metadata.name") ?: "");
        if (i >= 0) {
            if (ev == TIDE__K8S_ADDED) S.added[i]++;
            if (ev == TIDE__K8S_DELETED) S.deleted[i]++;
            S.alive[i] = ev != TIDE__K8S_DELETED;
            snprintf(S.data[i], sizeof S.data[0], "%s", tide__k8s_str(obj, "data.v") ?: "");
        }
    }
    pthread_mutex_unlock(&S.lock);
    return 0;
}

static void wlog(void *ud, const char *msg)
{
    fprintf(stderr, "watch: %s\n", msg);
}

static void *watcher(void *arg)
{
    tide__k8s_watch_opts_t o = {0};
    o.collection = coll;
    o.label_selector = "tide.dev/w=1";
    o.bookmarks = 1;
    o.run_ms = 240000;
    o.stop = &S.stop;
    o.fn = on_event;
    o.log = wlog;
    S.rc = tide__k8s_watch(c, &o, &S.stats);
    return NULL;
}

static void put(const char *name, const char *v)
{
    char path[512];
    tide__k8s_path(path, sizeof path, "v1", ns, "configmaps", name, NULL);
    json_t *o =
        json_pack("{s:s,s:s,s:{s:s,s:{s:s}},s:{s:s}}", "apiVersion", "v1", "kind", "ConfigMap",
                  "metadata", "name", name, "labels", "tide.dev/w", "1", "data", "v", v);
    tide__k8s_resp_t r;
    int rc = TIDE_EIO;
    /* Right after a restart the apiserver may still refuse for a moment. */
    for (int i = 0; i < 50; i++) {
        rc = tide__k8s_apply(c, path, o, "tide-watch-test", 1, &r);
        tide__k8s_resp_clear(&r);
        if (rc == TIDE_OK) break;
        kt_sleep_ms(200);
    }
    assert_int_equal(rc, TIDE_OK);
    json_decref(o);
}

static void del(const char *name)
{
    char path[512];
    tide__k8s_path(path, sizeof path, "v1", ns, "configmaps", name, NULL);
    tide__k8s_resp_t r;
    int rc = TIDE_EIO;
    for (int i = 0; i < 50; i++) {
        rc = tide__k8s_delete(c, path, NULL, &r);
        tide__k8s_resp_clear(&r);
        if (rc == TIDE_OK) break;
        kt_sleep_ms(200);
    }
    assert_int_equal(rc, TIDE_OK);
}

/* Waits until the watcher's view matches the server's list exactly. */
static void converge(double timeout_s)
{
    double end = kt_now() + timeout_s;
    for (;;) {
        json_t *items = NULL;
        tide__k8s_resp_t r;
        int ok = 0;
        if (tide__k8s_list(c, coll, "tide.dev/w=1", NULL, 0, &items, NULL, 0, &r) == TIDE_OK) {
            pthread_mutex_lock(&S.lock);
            int alive = 0;
            for (int i = 0; i < S.n; i++)
                alive += S.alive[i];
            ok = alive == (int)json_array_size(items);
            size_t k;
            json_t *it;
            json_array_foreach(items, k, it)
            {
                int i;
                for (i = 0; i < S.n; i++)
                    if (strcmp(S.names[i], tide__k8s_str(it, "metadata.name")) == 0) break;
                if (i == S.n || !S.alive[i] ||
                    strcmp(S.data[i], tide__k8s_str(it, "data.v") ?: "") != 0)
                    ok = 0;
            }
            pthread_mutex_unlock(&S.lock);
        }
        json_decref(items);
        tide__k8s_resp_clear(&r);
        if (ok) return;
        if (kt_now() > end)
            fail_msg("the watch did not converge on the server's state in %.0f s", timeout_s);
        kt_sleep_ms(100);
    }
}

static tide__k8s_watch_stats_t snapshot(void)
{
    pthread_mutex_lock(&S.lock);
    tide__k8s_watch_stats_t s = S.snap;
    pthread_mutex_unlock(&S.lock);
    return s;
}

static int added_once(const char *name)
{
    pthread_mutex_lock(&S.lock);
    int i = slot(name), v = i >= 0 ? S.added[i] : -1;
    pthread_mutex_unlock(&S.lock);
    return v;
}

static int deleted_count(const char *name)
{
    pthread_mutex_lock(&S.lock);
    int i = slot(name), v = i >= 0 ? S.deleted[i] : -1;
    pthread_mutex_unlock(&S.lock);
    return v;
}

static void test_watch_survives_restart_and_410(void **st)
{
    if (!getenv("TIDE_K8S_CLUSTER")) skip();
    pthread_mutex_init(&S.lock, NULL);
    pthread_t t;
    pthread_create(&t, NULL, watcher, NULL);
    for (double end = kt_now() + 20;; kt_sleep_ms(50)) {
        pthread_mutex_lock(&S.lock);
        int synced = S.synced;
        pthread_mutex_unlock(&S.lock);
        if (synced) break;
        if (kt_now() > end) fail_msg("no initial list");
    }

    char name[32];
    for (int i = 0; i < 5; i++)
        snprintf(name, sizeof name, "a%d", i), put(name, "1");
    converge(20);

    /* 1. The apiserver goes away and comes back: resume from the resourceVersion. */
    assert_int_equal(kt_cluster("restart-apiserver"), 0);
    for (int i = 0; i < 5; i++)
        snprintf(name, sizeof name, "b%d", i), put(name, "1");
    del("a0");
    put("a1", "2");
    converge(60);
    tide__k8s_watch_stats_t sn = snapshot();
    printf("after restart: lists %lu, reconnects %lu, 410s %lu, events %lu, bookmarks %lu\n",
           sn.lists, sn.reconnects, sn.gone, sn.events, sn.bookmarks);
    assert_true(sn.reconnects >= 1);

    /* 2. Compaction alone: the established watch goes on. */
    assert_int_equal(kt_cluster("compact"), 0);
    put("a2", "3");
    converge(30);

    /* 3. Compact past the watcher's resourceVersion and restart, so that its
     * resume is answered 410 Gone: it must re-list and diff. */
    unsigned long gone0 = snapshot().gone;
    for (int i = 0; i < 3; i++)
        snprintf(name, sizeof name, "c%d", i), put(name, "1");
    assert_int_equal(kt_cluster("compact --restart"), 0);
    del("b0");
    del("b1");
    put("b2", "4");
    for (int i = 3; i < 6; i++)
        snprintf(name, sizeof name, "c%d", i), put(name, "1");
    converge(60);
    sn = snapshot();
    printf("after compact+restart: lists %lu, reconnects %lu, 410s %lu, events %lu\n", sn.lists,
           sn.reconnects, sn.gone, sn.events);
    assert_true(sn.gone > gone0);
    assert_true(sn.lists >= 2);

    /* No event lost: every object was added exactly once (a replayed ADDED
     * after a re-list is reported as MODIFIED), every deletion seen once. */
    const char *once[] = {"a0", "a1", "a2", "a3", "a4", "b0", "b1", "b2",
                          "b3", "b4", "c0", "c1", "c2", "c3", "c4", "c5"};
    for (size_t i = 0; i < sizeof once / sizeof once[0]; i++)
        assert_int_equal(added_once(once[i]), 1);
    assert_int_equal(deleted_count("a0"), 1);
    assert_int_equal(deleted_count("b0"), 1);
    assert_int_equal(deleted_count("b1"), 1);
    assert_int_equal(deleted_count("a1"), 0);

    atomic_store(&S.stop, 1);
    pthread_join(t, NULL);
    assert_int_equal(S.rc, TIDE_EABORTED);
}

static int setup(void **st)
{
    c = kt_client();
    kt_namespace(c, "tide-watch", ns, sizeof ns);
    tide__k8s_path(coll, sizeof coll, "v1", ns, "configmaps", NULL, NULL);
    return 0;
}

static int teardown(void **st)
{
    kt_delete_namespace(c, ns);
    tide__k8s_client_free(c);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_watch_survives_restart_and_410),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
