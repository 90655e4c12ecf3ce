/*
 * service.c - a Service name reaches a replaced pod: a client pod finds the
 * Service through the variables Kubernetes injects ({SVC}_SERVICE_HOST/_PORT)
 * and through the agent's hosts file (TIDE_K8S_HOSTS), connects, and gets an
 * answer from the current backend; after the backend pod is deleted and a new
 * one (another name, another pod IP) takes its place, the same name reaches the
 * new one. (Endpoints come from the agent's view of Ready pods: the apiserver
 * refuses loopback addresses in EndpointSlices; see services.h.)
 */
#include "k8s_test.h"

static tide__k8s_client_t *c;
static char ns[128], dir[256];

static int setup(void **st)
{
    c = kt_client();
    kt_namespace(c, "tide-svc", ns, sizeof ns);
    snprintf(dir, sizeof dir, "/tmp/tide-k8s-svc-XXXXXX");
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

/* Answers every connection with its pod name, on $POD_IP:9000 (pods share the
 * host's ports, so a server binds its own pod IP). */
static const char server_py[] = "import os, socket\n"
                                "s = socket.socket()\n"
                                "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
                                "s.bind((os.environ['POD_IP'], 9000))\n"
                                "s.listen(16)\n"
                                "while True:\n"
                                "    c, _ = s.accept()\n"
                                "    c.sendall(os.environ['POD_NAME'].encode())\n"
                                "    c.close()\n";

/* Connects through the env variables and through the hosts-file name; writes
 * "ENVREPLY HOSTSREPLY" to $OUT. */
static const char client_py[] =
    "import os, socket, sys\n"
    "import time\n"
    "def ask(host, port):\n"
    "    for i in range(20):\n"
    "        try:\n"
    "            s = socket.create_connection((host, int(port)), timeout=5)\n"
    "            data = s.recv(100).decode()\n"
    "            s.close()\n"
    "            if data:\n"
    "                return data\n"
    "        except OSError:\n"
    "            pass\n"
    "        time.sleep(0.25)\n"
    "    return 'UNREACHABLE'\n"
    "env = ask(os.environ['ECHO_SERVICE_HOST'], os.environ['ECHO_SERVICE_PORT'])\n"
    "want = 'echo.' + os.environ['NS']\n"
    "addr = None\n"
    "for line in open(os.environ['TIDE_K8S_HOSTS']):\n"
    "    f = line.split()\n"
    "    if len(f) > 1 and not f[0].startswith('#') and want in f[1:]:\n"
    "        addr = f[0]\n"
    "byname = ask(addr, 8080) if addr else 'NOHOSTS'\n"
    "open(os.environ['OUT'], 'w').write(env + ' ' + byname)\n";

static json_t *py_pod(const char *name, const char *app, const char *script, const char *policy,
                      const char *out)
{
    json_t *p = json_pack(
        "{s:s,s:s,s:{s:s,s:{s:s}},s:{s:s,s:i,s:[{s:s,s:s,s:[s,s,s],s:["
        "{s:s,s:{s:{s:s}}},{s:s,s:{s:{s:s}}},{s:s,s:s},{s:s,s:s}]}]}}",
        "apiVersion", "v1", "kind", "Pod", "metadata", "name", name, "labels", "app", app, "spec",
        "restartPolicy", policy, "terminationGracePeriodSeconds", 1, "containers", "name", "c",
        "image", "x", "command", "python3", "-c", script, "env", "name", "POD_IP", "valueFrom",
        "fieldRef", "fieldPath", "status.podIP", "name", "POD_NAME", "valueFrom", "fieldRef",
        "fieldPath", "metadata.name", "name", "NS", "value", ns, "name", "OUT", "value", out);
    assert_non_null(p);
    return p;
}

static void backend(const char *name, char *ip, size_t iplen)
{
    char path[512];
    assert_int_equal(kt_pod(c, ns, py_pod(name, "echo", server_py, "Always", "/dev/null")),
                     TIDE_OK);
    snprintf(path, sizeof path, "/api/v1/namespaces/%s/pods/%s", ns, name);
    json_t *pod = kt_wait(c, path, kt_ready, NULL, 60);
    assert_non_null(pod);
    snprintf(ip, iplen, "%s", tide__k8s_str(pod, "status.podIP"));
    json_decref(pod);
}

static void ask(const char *client, const char *want)
{
    char out[512], path[512], buf[256], expect[256];
    snprintf(out, sizeof out, "%s/%s.out", dir, client);
    assert_int_equal(kt_pod(c, ns, py_pod(client, "client", client_py, "Never", out)), TIDE_OK);
    snprintf(path, sizeof path, "/api/v1/namespaces/%s/pods/%s", ns, client);
    json_t *pod = kt_wait(c, path, kt_phase_is, "Succeeded", 60);
    if (!pod) {
        fprintf(stderr, "client %s did not succeed; its output: %s\n", client,
                kt_slurp(out, buf, sizeof buf));
        fail();
    }
    json_decref(pod);
    snprintf(expect, sizeof expect, "%s %s", want, want);
    assert_string_equal(kt_slurp(out, buf, sizeof buf), expect);
}

static void test_service_reaches_replaced_pod(void **st)
{
    char coll[256], ip1[64], ip2[64], path[512];
    tide__k8s_path(coll, sizeof coll, "v1", ns, "services", NULL, NULL);
    json_t *svc =
        kt_json("{\"apiVersion\":\"v1\",\"kind\":\"Service\",\"metadata\":{\"name\":\"echo\"},"
                "\"spec\":{\"selector\":{\"app\":\"echo\"},\"ports\":[{\"name\":\"tcp\",\"port\":"
                "8080,\"targetPort\":9000}]}}");
    tide__k8s_resp_t r;
    assert_int_equal(tide__k8s_create(c, coll, svc, &r), TIDE_OK);
    printf("Service echo: ClusterIP %s\n", tide__k8s_str(r.body, "spec.clusterIP"));
    tide__k8s_resp_clear(&r);
    json_decref(svc);

    backend("echo-a", ip1, sizeof ip1);
    ask("client-1", "echo-a");

    /* Replace the backend: delete it, start another under a new name. */
    snprintf(path, sizeof path, "/api/v1/namespaces/%s/pods/echo-a", ns);
    assert_int_equal(tide__k8s_delete(c, path, NULL, &r), TIDE_OK);
    tide__k8s_resp_clear(&r);
    for (double end = kt_now() + 30; tide__k8s_get(c, path, &r) != TIDE_ENOTFOUND;
         kt_sleep_ms(100)) {
        tide__k8s_resp_clear(&r);
        if (kt_now() > end) fail_msg("echo-a was not removed");
    }
    tide__k8s_resp_clear(&r);
    backend("echo-b", ip2, sizeof ip2);
    printf("backend pod IPs: echo-a %s, echo-b %s\n", ip1, ip2);
    assert_string_not_equal(ip1, ip2);
    ask("client-2", "echo-b");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_service_reaches_replaced_pod),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
