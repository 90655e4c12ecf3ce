/*
 * pods.c - pods on the real control plane, run by tide-node-agent: scheduled by
 * kube-scheduler, run as processes, reported Succeeded/Failed with their exit
 * codes; an impossible nvidia.com/gpu request stays Pending as Unschedulable; a
 * taint keeps pods without the toleration away; deletion delivers SIGTERM, then
 * SIGKILL after the grace period. Prints the time from pod creation to the
 * process running.
 */
#include "k8s_test.h"

#include <errno.h>
#include <signal.h>

static tide__k8s_client_t *c;
static char ns[128], dir[256];

static int setup(void **st)
{
    c = kt_client();
    kt_namespace(c, "tide-pods", ns, sizeof ns);
    snprintf(dir, sizeof dir, "/tmp/tide-k8s-pods-XXXXXX");
    assert_non_null(mkdtemp(dir));
    return 0;
}

static int teardown(void **st)
{
    kt_delete_namespace(c, ns);
    tide__k8s_client_free(c);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static json_t *sh_pod(const char *name, const char *script, const char *extra_spec)
{
    json_t *cmd = json_pack("[s,s,s]", "sh", "-c", script);
    char *cmds = json_dumps(cmd, 0);
    json_t *p =
        kt_json("{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"%s\"},"
                "\"spec\":{\"restartPolicy\":\"Never\",%s\"containers\":[{\"name\":\"main\","
                "\"image\":\"ignored.invalid/none\",\"command\":%s,"
                "\"env\":[{\"name\":\"OUT\",\"value\":\"%s\"}]}]}}",
                name, extra_spec ? extra_spec : "", cmds, dir);
    free(cmds);
    json_decref(cmd);
    return p;
}

static void pod_path(char *p, size_t len, const char *name)
{
    snprintf(p, len, "/api/v1/namespaces/%s/pods/%s", ns, name);
}

static json_t *terminated(const json_t *pod)
{
    return tide__k8s_at(json_array_get(tide__k8s_at(pod, "status.containerStatuses"), 0),
                        "state.terminated");
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void test_succeeded_with_latency(void **st)
{
    enum { N = 5 };
    double lat[N];
    for (int i = 0; i < N; i++) {
        char name[64], script[512], path[512], out[512], buf[128];
        snprintf(name, sizeof name, "ok-%d", i);
        snprintf(out, sizeof out, "%s/%s.started", dir, name);
        snprintf(script, sizeof script, "date +%%s.%%N > $OUT/%s.started; exit 0", name);
        double t0 = kt_wall();
        assert_int_equal(kt_pod(c, ns, sh_pod(name, script, NULL)), TIDE_OK);
        pod_path(path, sizeof path, name);
        json_t *pod = kt_wait(c, path, kt_phase_is, "Succeeded", 60);
        assert_non_null(pod);
        json_t *t = terminated(pod);
        assert_int_equal(json_integer_value(json_object_get(t, "exitCode")), 0);
        assert_string_equal(json_string_value(json_object_get(t, "reason")), "Completed");
        assert_non_null(tide__k8s_str(pod, "spec.nodeName"));
        const char *ip = tide__k8s_str(pod, "status.podIP");
        assert_non_null(ip);
        assert_int_equal(strncmp(ip, "127.", 4), 0);
        json_decref(pod);
        lat[i] = (atof(kt_slurp(out, buf, sizeof buf)) - t0) * 1000;
        assert_true(lat[i] > 0 && lat[i] < 60000);
    }
    qsort(lat, N, sizeof lat[0], cmp_double);
    printf("FIGURE pod creation -> process running: median %.0f ms, min %.0f ms, max %.0f ms (%d "
           "pods)\n",
           lat[N / 2], lat[0], lat[N - 1], N);
}

static void test_failed_exit_code(void **st)
{
    char path[512];
    assert_int_equal(kt_pod(c, ns, sh_pod("fails", "echo failing >&2; exit 7", NULL)), TIDE_OK);
    pod_path(path, sizeof path, "fails");
    json_t *pod = kt_wait(c, path, kt_phase_is, "Failed", 60);
    assert_non_null(pod);
    json_t *t = terminated(pod);
    assert_int_equal(json_integer_value(json_object_get(t, "exitCode")), 7);
    assert_string_equal(json_string_value(json_object_get(t, "reason")), "Error");
    json_decref(pod);
}

static int unschedulable(const json_t *pod, void *ud)
{
    json_t *cond = kt_condition(pod, "PodScheduled");
    return cond && strcmp(json_string_value(json_object_get(cond, "status")) ?: "", "False") == 0 &&
           strcmp(json_string_value(json_object_get(cond, "reason")) ?: "", "Unschedulable") == 0;
}

static void test_gpu(void **st)
{
    char path[512];
    /* More GPUs than any node has: the scheduler's verdict, not the agent's. */
    json_t *p = sh_pod("gpu-9", "exit 0", NULL);
    json_t *ctr = json_array_get(tide__k8s_at(p, "spec.containers"), 0);
    json_object_set_new(ctr, "resources", kt_json("{\"limits\":{\"nvidia.com/gpu\":\"8\"}}"));
    assert_int_equal(kt_pod(c, ns, p), TIDE_OK);
    pod_path(path, sizeof path, "gpu-9");
    json_t *pod = kt_wait(c, path, unschedulable, NULL, 60);
    assert_non_null(pod);
    assert_string_equal(tide__k8s_str(pod, "status.phase"), "Pending");
    const char *msg =
        json_string_value(json_object_get(kt_condition(pod, "PodScheduled"), "message"));
    printf("scheduler: %s\n", msg ? msg : "(no message)");
    assert_non_null(msg);
    assert_non_null(strstr(msg, "nvidia.com/gpu"));
    json_decref(pod);

    /* Four fit on the GPU node, and only there. */
    p = sh_pod("gpu-4", "exit 0", NULL);
    ctr = json_array_get(tide__k8s_at(p, "spec.containers"), 0);
    json_object_set_new(ctr, "resources", kt_json("{\"limits\":{\"nvidia.com/gpu\":\"4\"}}"));
    assert_int_equal(kt_pod(c, ns, p), TIDE_OK);
    pod_path(path, sizeof path, "gpu-4");
    pod = kt_wait(c, path, kt_phase_is, "Succeeded", 60);
    assert_non_null(pod);
    assert_string_equal(tide__k8s_str(pod, "spec.nodeName"), "tide-gpu-0");
    json_decref(pod);
}

static void test_taints(void **st)
{
    char path[512], name[64];
    /* Asking for a spot node without tolerating its taint: nowhere to go. */
    assert_int_equal(
        kt_pod(c, ns,
               sh_pod("spot-no-tol", "exit 0", "\"nodeSelector\":{\"tide.dev/spot\":\"true\"},")),
        TIDE_OK);
    pod_path(path, sizeof path, "spot-no-tol");
    json_t *pod = kt_wait(c, path, unschedulable, NULL, 60);
    assert_non_null(pod);
    json_decref(pod);
    /* With the toleration it runs there. */
    assert_int_equal(
        kt_pod(
            c, ns,
            sh_pod(
                "spot-tol", "exit 0",
                "\"nodeSelector\":{\"tide.dev/spot\":\"true\"},\"tolerations\":[{\"key\":"
                "\"tide.dev/"
                "spot\",\"operator\":\"Equal\",\"value\":\"true\",\"effect\":\"NoSchedule\"}],")),
        TIDE_OK);
    pod_path(path, sizeof path, "spot-tol");
    pod = kt_wait(c, path, kt_phase_is, "Succeeded", 60);
    assert_non_null(pod);
    assert_int_equal(strncmp(tide__k8s_str(pod, "spec.nodeName"), "tide-spot-", 10), 0);
    json_decref(pod);
    /* Without either, pods spread over the untainted nodes only. */
    for (int i = 0; i < 6; i++) {
        snprintf(name, sizeof name, "plain-%d", i);
        assert_int_equal(kt_pod(c, ns, sh_pod(name, "exit 0", NULL)), TIDE_OK);
    }
    for (int i = 0; i < 6; i++) {
        snprintf(name, sizeof name, "plain-%d", i);
        pod_path(path, sizeof path, name);
        pod = kt_wait(c, path, kt_phase_is, "Succeeded", 60);
        assert_non_null(pod);
        const char *node = tide__k8s_str(pod, "spec.nodeName");
        assert_null(strstr(node, "spot"));
        json_decref(pod);
    }
}

typedef struct term_watch {
    const char *name;
    long exit_code;
    int deleted;
} term_watch_t;

static int on_term(void *ud, tide__k8s_event_t ev, json_t *obj)
{
    term_watch_t *w = ud;
    if (!obj || strcmp(tide__k8s_str(obj, "metadata.name") ?: "", w->name) != 0) return 0;
    json_t *t = terminated(obj);
    if (t) w->exit_code = (long)json_integer_value(json_object_get(t, "exitCode"));
    if (ev == TIDE__K8S_DELETED) w->deleted = 1;
    return w->deleted;
}

static void graceful(const char *name, const char *script, long grace, double min_s, double max_s,
                     long want_exit, int want_term)
{
    char path[512], buf[256], f[512];
    assert_int_equal(kt_pod(c, ns, sh_pod(name, script, NULL)), TIDE_OK);
    pod_path(path, sizeof path, name);
    json_t *pod = kt_wait(c, path, kt_ready, NULL, 60);
    assert_non_null(pod);
    json_decref(pod);
    snprintf(f, sizeof f, "%s/%s.pid", dir, name);
    for (double end = kt_now() + 10; !kt_slurp(f, buf, sizeof buf)[0] && kt_now() < end;)
        kt_sleep_ms(50);
    pid_t pid = (pid_t)atoi(buf);
    assert_true(pid > 0);

    tide__k8s_delete_opts_t o = TIDE__K8S_DELETE_DEFAULTS;
    o.grace_seconds = grace;
    tide__k8s_resp_t r;
    double t0 = kt_now();
    assert_int_equal(tide__k8s_delete(c, path, &o, &r), TIDE_OK);
    tide__k8s_resp_clear(&r);
    term_watch_t w = {name, -1, 0};
    char coll[256];
    snprintf(coll, sizeof coll, "/api/v1/namespaces/%s/pods", ns);
    tide__k8s_watch_opts_t wo = {0};
    wo.collection = coll;
    wo.run_ms = (long)(max_s * 1000) + 5000;
    wo.fn = on_term;
    wo.ud = &w;
    tide__k8s_watch(c, &wo, NULL);
    double took = kt_now() - t0;
    printf("%s: gone after %.1f s (grace %ld s), exit code %ld\n", name, took, grace, w.exit_code);
    assert_true(w.deleted);
    assert_true(took >= min_s);
    assert_true(took <= max_s);
    assert_int_equal(w.exit_code, want_exit);
    snprintf(f, sizeof f, "%s/%s.sig", dir, name);
    if (want_term) assert_string_equal(kt_slurp(f, buf, sizeof buf), "TERM");
    /* The process is gone too, not just the API object. */
    assert_int_equal(kill(pid, 0), -1);
    assert_int_equal(errno, ESRCH);
}

static void test_delete_sigterm_then_sigkill(void **st)
{
    /* ($$$$ is the shell's $$: Kubernetes turns $$ into $ in commands.)
     * Records SIGTERM and ignores it: only SIGKILL, after the grace period, ends it. */
    graceful("stubborn",
             "echo $$$$ > $OUT/stubborn.pid; trap 'echo TERM >> $OUT/stubborn.sig' TERM; "
             "while :; do sleep 0.1; done",
             3, 2.5, 30, 137, 1);
}

static void test_delete_sigterm_honoured(void **st)
{
    /* Exits on SIGTERM: gone long before its 30 s grace period. */
    graceful("polite",
             "echo $$$$ > $OUT/polite.pid; trap 'echo TERM >> $OUT/polite.sig; exit 0' TERM; "
             "while :; do sleep 0.1; done",
             30, 0, 15, 0, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_succeeded_with_latency),
        cmocka_unit_test(test_failed_exit_code),
        cmocka_unit_test(test_gpu),
        cmocka_unit_test(test_taints),
        cmocka_unit_test(test_delete_sigterm_then_sigkill),
        cmocka_unit_test(test_delete_sigterm_honoured),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
