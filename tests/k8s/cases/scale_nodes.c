/*
 * scale_nodes.c - the scale figure: a second tide-node-agent registers
 * $TIDE_K8S_SCALE_NODES (default 500) fake nodes on the real control plane; the
 * case reports how long until all are Ready, the agent's memory (VmRSS and
 * peak VmHWM), how long a list + watch of them takes through the client (until
 * the informer has delivered every node and is watching), a plain paginated
 * list, and that every Lease is renewed within one renewal period. The fake
 * nodes are tainted (tide.dev/fake-node=true:NoSchedule) so no other test's pod
 * lands there, and are deleted at the end.
 */
#include "k8s_test.h"

#include <signal.h>
#include <sys/wait.h>

static tide__k8s_client_t *c;
static pid_t agent = -1;
static char statedir[256];

#define SEL "tide.dev/fake-node=true"

static int nodes_count(int *ready)
{
    json_t *items = NULL;
    tide__k8s_resp_t r;
    int n = -1;
    *ready = 0;
    if (tide__k8s_list(c, "/api/v1/nodes", SEL, NULL, 0, &items, NULL, 0, &r) == TIDE_OK) {
        n = (int)json_array_size(items);
        size_t i;
        json_t *it;
        json_array_foreach(items, i, it)
        {
            json_t *cond = kt_condition(it, "Ready");
            if (cond &&
                strcmp(json_string_value(json_object_get(cond, "status")) ?: "", "True") == 0)
                (*ready)++;
        }
    }
    json_decref(items);
    tide__k8s_resp_clear(&r);
    return n;
}

static long proc_kb(pid_t pid, const char *field)
{
    char p[64], line[256];
    snprintf(p, sizeof p, "/proc/%d/status", (int)pid);
    FILE *f = fopen(p, "r");
    long v = -1;
    if (!f) return -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, field, strlen(field)) == 0) v = atol(line + strlen(field) + 1);
    fclose(f);
    return v;
}

typedef struct counts {
    int added, synced;
    double t_synced;
    int leases_renewed;
    json_t *renewed; /* names of the Leases renewed (a set) */
} counts_t;

static int on_node(void *ud, tide__k8s_event_t ev, json_t *obj)
{
    counts_t *k = ud;
    if (ev == TIDE__K8S_ADDED) k->added++;
    if (ev == TIDE__K8S_SYNCED) {
        k->synced = 1;
        k->t_synced = kt_now();
        return 1;
    }
    return 0;
}

static int on_lease(void *ud, tide__k8s_event_t ev, json_t *obj)
{
    counts_t *k = ud;
    if (ev == TIDE__K8S_SYNCED) k->synced = 1;
    if (ev == TIDE__K8S_MODIFIED && k->synced &&
        strncmp(tide__k8s_str(obj, "metadata.name") ?: "", "tide-fake-", 10) == 0) {
        k->leases_renewed++;
        json_object_set_new(k->renewed, tide__k8s_str(obj, "metadata.name"), json_true());
    }
    return 0;
}

static void delete_fake_nodes(void)
{
    tide__k8s_resp_t r;
    char p[256];
    snprintf(p, sizeof p, "/api/v1/nodes?labelSelector=tide.dev%%2Ffake-node%%3Dtrue");
    tide__k8s_delete(c, p, NULL, &r);
    tide__k8s_resp_clear(&r);
}

static void stop_agent(void)
{
    if (agent <= 0) return;
    kill(agent, SIGTERM);
    for (int i = 0; i < 100; i++) {
        if (waitpid(agent, NULL, WNOHANG) == agent) {
            agent = -1;
            return;
        }
        kt_sleep_ms(100);
    }
    kill(agent, SIGKILL);
    waitpid(agent, NULL, 0);
    agent = -1;
}

static void test_fake_nodes(void **st)
{
    const char *bin = getenv("TIDE_NODE_AGENT");
    const char *run = getenv("TIDE_K8S_RUN");
    if (!bin || access(bin, X_OK) != 0 || !run) {
        fprintf(stderr, "TIDE_NODE_AGENT / TIDE_K8S_RUN not set: skipping\n");
        skip();
    }
    int n = getenv("TIDE_K8S_SCALE_NODES") ? atoi(getenv("TIDE_K8S_SCALE_NODES")) : 500;
    char kubeconfig[512], nstr[16], logp[512];
    snprintf(kubeconfig, sizeof kubeconfig, "%s/tide-node-agent.kubeconfig", run);
    snprintf(nstr, sizeof nstr, "%d", n);
    snprintf(statedir, sizeof statedir, "/tmp/tide-k8s-scale-XXXXXX");
    assert_non_null(mkdtemp(statedir));
    snprintf(logp, sizeof logp, "%s/agent.log", statedir);
    delete_fake_nodes(); /* leftovers of an interrupted run */

    double t0 = kt_now();
    agent = fork();
    if (agent == 0) {
        FILE *lf = freopen(logp, "w", stderr);
        (void)lf;
        execl(bin, bin, "--kubeconfig", kubeconfig, "--fake-nodes", nstr, "--no-services",
              "--pod-cidr", "127.0.160.0/24", "--state-dir", statedir, (char *)NULL);
        _exit(127);
    }
    assert_true(agent > 0);
    int ready = 0, total = 0;
    for (double end = kt_now() + 240; kt_now() < end; kt_sleep_ms(500)) {
        total = nodes_count(&ready);
        if (ready == n) break;
        assert_int_equal(waitpid(agent, NULL, WNOHANG), 0); /* still alive */
    }
    double t_ready = kt_now() - t0;
    printf("FIGURE %d fake nodes registered and Ready in %.1f s\n", n, t_ready);
    assert_int_equal(ready, n);
    assert_int_equal(total, n);

    /* Leases: every one renewed within half its 40 s duration (the agent aims at
     * every 10 s; the margin is for a loaded 2-core machine). */
    counts_t lk = {0};
    lk.renewed = json_object();
    tide__k8s_watch_opts_t lo = {0};
    lo.collection = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases";
    lo.run_ms = 20000;
    lo.fn = on_lease;
    lo.ud = &lk;
    tide__k8s_watch(c, &lo, NULL);
    printf("FIGURE lease renewals seen in 20 s: %d, of %zu distinct Leases (%d nodes)\n",
           lk.leases_renewed, json_object_size(lk.renewed), n);
    assert_int_equal(json_object_size(lk.renewed), n);
    json_decref(lk.renewed);

    long rss = proc_kb(agent, "VmRSS:"), hwm = proc_kb(agent, "VmHWM:");
    printf("FIGURE agent with %d nodes: VmRSS %.1f MiB, VmHWM %.1f MiB\n", n + 0, rss / 1024.0,
           hwm / 1024.0);
    assert_true(rss > 0);

    /* list + watch through the client's informer. */
    counts_t k = {0};
    tide__k8s_watch_opts_t o = {0};
    o.collection = "/api/v1/nodes";
    o.label_selector = SEL;
    o.run_ms = 60000;
    o.fn = on_node;
    o.ud = &k;
    double w0 = kt_now();
    assert_int_equal(tide__k8s_watch(c, &o, NULL), TIDE_OK);
    assert_true(k.synced);
    assert_int_equal(k.added, n);
    printf(
        "FIGURE list+watch of %d nodes through the client: %.0f ms to the last ADDED and SYNCED\n",
        n, (k.t_synced - w0) * 1000);
    json_t *items = NULL;
    tide__k8s_resp_t r;
    double l0 = kt_now();
    assert_int_equal(tide__k8s_list(c, "/api/v1/nodes", SEL, NULL, 0, &items, NULL, 0, &r),
                     TIDE_OK);
    printf("FIGURE plain list of %zu nodes (one page of 500): %.0f ms\n", json_array_size(items),
           (kt_now() - l0) * 1000);
    json_decref(items);
    tide__k8s_resp_clear(&r);
}

static int setup(void **st)
{
    c = kt_client();
    return 0;
}

static int teardown(void **st)
{
    stop_agent();
    delete_fake_nodes();
    tide__k8s_client_free(c);
    if (statedir[0]) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", statedir);
        if (system(cmd) != 0) return -1;
    }
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fake_nodes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
