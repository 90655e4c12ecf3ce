/*
 * k8s_test.h - helpers shared by the k8s test cases (header-only, so that each
 * case stays one standalone cmocka program): a client from $KUBECONFIG, a fresh
 * namespace per case, bounded polling, and the cluster.sh hooks
 * ($TIDE_K8S_CLUSTER restart-apiserver / compact). Every wait here has a
 * deadline; nothing waits forever.
 */
#ifndef TIDE_K8S_TEST_H
#define TIDE_K8S_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "k8s/client.h"
#include "k8s/watch.h"
#include "tide.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static inline double kt_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static inline double kt_wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static inline void kt_sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static inline tide__k8s_client_t *kt_client(void)
{
    char err[1024];
    tide__k8s_client_t *c = NULL;
    int rc = tide__k8s_client_from_kubeconfig(NULL, NULL, &c, err, sizeof err);
    if (rc != TIDE_OK) fprintf(stderr, "client: %s\n", err);
    assert_int_equal(rc, TIDE_OK);
    return c;
}

/* Parses JSON text (a test's object literal); fails the test on a typo. */
static inline json_t *kt_json(const char *fmt, ...)
{
    char buf[16384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    json_error_t je;
    json_t *j = json_loads(buf, 0, &je);
    if (!j) fprintf(stderr, "bad test JSON (%s): %s\n", je.text, buf);
    assert_non_null(j);
    return j;
}

/* Creates namespace prefix-<pid>-<n> and writes its name to ns. */
static inline void kt_namespace(tide__k8s_client_t *c, const char *prefix, char *ns, size_t len)
{
    static int n;
    snprintf(ns, len, "%s-%d-%d", prefix, (int)getpid(), n++);
    json_t *o = kt_json(
        "{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"%s\"}}", ns);
    tide__k8s_resp_t r;
    int rc = tide__k8s_create(c, "/api/v1/namespaces", o, &r);
    if (rc != TIDE_OK) fprintf(stderr, "namespace %s: %s\n", ns, r.message);
    assert_int_equal(rc, TIDE_OK);
    tide__k8s_resp_clear(&r);
    json_decref(o);
    /* Pods need the namespace's default service account (admission checks it). */
    char p[512];
    snprintf(p, sizeof p, "/api/v1/namespaces/%s/serviceaccounts/default", ns);
    for (double end = kt_now() + 30; kt_now() < end; kt_sleep_ms(200)) {
        rc = tide__k8s_get(c, p, &r);
        tide__k8s_resp_clear(&r);
        if (rc == TIDE_OK) return;
    }
    fail_msg("namespace %s: no default service account after 30 s", ns);
}

static inline void kt_delete_namespace(tide__k8s_client_t *c, const char *ns)
{
    char p[512];
    snprintf(p, sizeof p, "/api/v1/namespaces/%s", ns);
    tide__k8s_resp_t r;
    tide__k8s_delete(c, p, NULL, &r);
    tide__k8s_resp_clear(&r);
}

/* GETs path until pred(obj) holds or timeout_s passes; returns the object (owned)
 * or NULL on timeout. */
typedef int (*kt_pred_fn)(const json_t *obj, void *ud);
static inline json_t *kt_wait(tide__k8s_client_t *c, const char *path, kt_pred_fn pred, void *ud,
                              double timeout_s)
{
    double end = kt_now() + timeout_s;
    do {
        tide__k8s_resp_t r;
        if (tide__k8s_get(c, path, &r) == TIDE_OK && pred(r.body, ud)) {
            json_t *o = json_incref(r.body);
            tide__k8s_resp_clear(&r);
            return o;
        }
        tide__k8s_resp_clear(&r);
        kt_sleep_ms(100);
    } while (kt_now() < end);
    return NULL;
}

static inline int kt_phase_is(const json_t *pod, void *want)
{
    const char *ph = tide__k8s_str(pod, "status.phase");
    return ph && strcmp(ph, (const char *)want) == 0;
}

/* The condition of type in status.conditions, or NULL. */
static inline json_t *kt_condition(const json_t *obj, const char *type)
{
    size_t i;
    json_t *c;
    json_array_foreach(tide__k8s_at(obj, "status.conditions"), i, c)
    {
        const char *t = json_string_value(json_object_get(c, "type"));
        if (t && strcmp(t, type) == 0) return c;
    }
    return NULL;
}

static inline int kt_ready(const json_t *pod, void *ud)
{
    json_t *c = kt_condition(pod, "Ready");
    return c && strcmp(json_string_value(json_object_get(c, "status")) ?: "", "True") == 0;
}

static inline int kt_pod(tide__k8s_client_t *c, const char *ns, json_t *pod)
{
    char p[512];
    snprintf(p, sizeof p, "/api/v1/namespaces/%s/pods", ns);
    tide__k8s_resp_t r;
    int rc = tide__k8s_create(c, p, pod, &r);
    if (rc != TIDE_OK) fprintf(stderr, "create pod: %s\n", r.message);
    tide__k8s_resp_clear(&r);
    json_decref(pod);
    return rc;
}

/* Runs `$TIDE_K8S_CLUSTER args`; skips the calling test when it is not set. */
static inline int kt_cluster(const char *args)
{
    const char *cl = getenv("TIDE_K8S_CLUSTER");
    if (!cl || !*cl) {
        fprintf(stderr, "TIDE_K8S_CLUSTER is not set\n");
        return -1;
    }
    char cmd[1024];
    /* etcdctl refuses --endpoints when ETCDCTL_ENDPOINTS (exported by
     * `cluster.sh env`) is also set; older cluster.sh versions did not unset it. */
    snprintf(cmd, sizeof cmd, "env -u ETCDCTL_ENDPOINTS '%s' %s >&2", cl, args);
    return system(cmd);
}

/* Reads a small file (a pod's output) into buf; "" if absent. */
static inline const char *kt_slurp(const char *path, char *buf, size_t len)
{
    buf[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f) return buf;
    size_t n = fread(buf, 1, len - 1, f);
    buf[n] = 0;
    fclose(f);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
        buf[--n] = 0;
    return buf;
}

#endif
