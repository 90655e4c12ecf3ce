/*
 * eviction_gc.c - the Eviction API and garbage collection on the real control
 * plane: an eviction a PodDisruptionBudget forbids is refused with 429
 * (TIDE_EABORTED), one it allows deletes the pod gracefully (the agent delivers
 * SIGTERM and removes it); children with ownerReferences are removed by
 * kube-controller-manager's garbage collector when their owner is deleted.
 */
#include "k8s_test.h"

static tide__k8s_client_t *c;
static char ns[128];

static int setup(void **st)
{
    c = kt_client();
    kt_namespace(c, "tide-evict", ns, sizeof ns);
    return 0;
}

static int teardown(void **st)
{
    kt_delete_namespace(c, ns);
    tide__k8s_client_free(c);
    return 0;
}

static void sleeper(const char *name)
{
    json_t *p = kt_json(
        "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"%s\",\"labels\":{\"app\":"
        "\"pdb\"}},"
        "\"spec\":{\"terminationGracePeriodSeconds\":5,\"containers\":[{\"name\":\"c\",\"image\":"
        "\"x\","
        "\"command\":[\"sh\",\"-c\",\"trap 'exit 0' TERM; while :; do sleep 0.1; done\"]}]}}",
        name);
    assert_int_equal(kt_pod(c, ns, p), TIDE_OK);
}

static int pdb_observed(const json_t *pdb, void *want)
{
    json_t *cur = tide__k8s_at(pdb, "status.currentHealthy");
    json_t *og = tide__k8s_at(pdb, "status.observedGeneration");
    json_t *g = tide__k8s_at(pdb, "metadata.generation");
    return json_is_integer(cur) && json_integer_value(cur) == *(int *)want && og && g &&
           json_integer_value(og) == json_integer_value(g);
}

static int is_gone(tide__k8s_client_t *cl, const char *path, double timeout_s)
{
    for (double end = kt_now() + timeout_s; kt_now() < end; kt_sleep_ms(100)) {
        tide__k8s_resp_t r;
        int rc = tide__k8s_get(cl, path, &r);
        tide__k8s_resp_clear(&r);
        if (rc == TIDE_ENOTFOUND) return 1;
    }
    return 0;
}

static void test_eviction_respects_pdb(void **st)
{
    char path[512], pdbs[256], pdbp[512];
    sleeper("e0");
    sleeper("e1");
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "/api/v1/namespaces/%s/pods/e%d", ns, i);
        json_t *pod = kt_wait(c, path, kt_ready, NULL, 60);
        assert_non_null(pod);
        json_decref(pod);
    }
    tide__k8s_path(pdbs, sizeof pdbs, "policy/v1", ns, "poddisruptionbudgets", NULL, NULL);
    tide__k8s_path(pdbp, sizeof pdbp, "policy/v1", ns, "poddisruptionbudgets", "keep-two", NULL);
    json_t *pdb =
        kt_json("{\"apiVersion\":\"policy/"
                "v1\",\"kind\":\"PodDisruptionBudget\",\"metadata\":{\"name\":\"keep-two\"},"
                "\"spec\":{\"minAvailable\":2,\"selector\":{\"matchLabels\":{\"app\":\"pdb\"}}}}");
    tide__k8s_resp_t r;
    assert_int_equal(tide__k8s_create(c, pdbs, pdb, &r), TIDE_OK);
    tide__k8s_resp_clear(&r);
    json_decref(pdb);
    int two = 2;
    json_t *seen = kt_wait(c, pdbp, pdb_observed, &two, 60);
    assert_non_null(seen);
    json_decref(seen);

    /* Both pods are needed: the eviction is refused, 429. */
    int rc = tide__k8s_evict(c, ns, "e0", NULL, &r);
    printf("eviction under the PDB: %s\n", r.message);
    assert_int_equal(rc, TIDE_EABORTED);
    assert_int_equal(r.status, 429);
    tide__k8s_resp_clear(&r);

    /* Loosen the budget: now one may go. */
    json_t *patch = kt_json("{\"spec\":{\"minAvailable\":1}}");
    assert_int_equal(tide__k8s_patch_merge(c, pdbp, patch, &r), TIDE_OK);
    tide__k8s_resp_clear(&r);
    json_decref(patch);
    double end = kt_now() + 60;
    do {
        rc = tide__k8s_evict(c, ns, "e0", NULL, &r);
        tide__k8s_resp_clear(&r);
        if (rc == TIDE_OK) break;
        kt_sleep_ms(200); /* the disruption controller recomputes disruptionsAllowed */
    } while (kt_now() < end);
    assert_int_equal(rc, TIDE_OK);
    snprintf(path, sizeof path, "/api/v1/namespaces/%s/pods/e0", ns);
    assert_true(is_gone(c, path, 30));
    /* The other is still needed now. */
    rc = tide__k8s_evict(c, ns, "e1", NULL, &r);
    tide__k8s_resp_clear(&r);
    assert_int_equal(rc, TIDE_EABORTED);
}

static void test_garbage_collection(void **st)
{
    char coll[256], path[512], pods[256];
    tide__k8s_path(coll, sizeof coll, "v1", ns, "configmaps", NULL, NULL);
    tide__k8s_path(pods, sizeof pods, "v1", ns, "pods", NULL, NULL);
    tide__k8s_resp_t r;
    json_t *owner =
        kt_json("{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"owner\"}}");
    assert_int_equal(tide__k8s_create(c, coll, owner, &r), TIDE_OK);
    char uid[64];
    snprintf(uid, sizeof uid, "%s", tide__k8s_str(r.body, "metadata.uid"));
    tide__k8s_resp_clear(&r);
    json_decref(owner);
    for (int i = 0; i < 3; i++) {
        json_t *child = kt_json(
            "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"child-%d\","
            "\"ownerReferences\":[{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"name\":\"owner\","
            "\"uid\":\"%s\"}]}}",
            i, uid);
        assert_int_equal(tide__k8s_create(c, coll, child, &r), TIDE_OK);
        tide__k8s_resp_clear(&r);
        json_decref(child);
    }
    /* A running pod owned by it, too: GC deletes it and the agent stops it. */
    json_t *pod =
        kt_json("{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"child-pod\","
                "\"ownerReferences\":[{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"name\":"
                "\"owner\",\"uid\":\"%s\"}]},"
                "\"spec\":{\"terminationGracePeriodSeconds\":2,\"containers\":[{\"name\":\"c\","
                "\"image\":\"x\","
                "\"command\":[\"sleep\",\"600\"]}]}}",
                uid);
    assert_int_equal(kt_pod(c, ns, pod), TIDE_OK);
    snprintf(path, sizeof path, "%s/child-pod", pods);
    json_t *running = kt_wait(c, path, kt_ready, NULL, 60);
    assert_non_null(running);
    json_decref(running);

    tide__k8s_path(path, sizeof path, "v1", ns, "configmaps", "owner", NULL);
    tide__k8s_delete_opts_t d = TIDE__K8S_DELETE_DEFAULTS;
    d.propagation = "Background";
    assert_int_equal(tide__k8s_delete(c, path, &d, &r), TIDE_OK);
    tide__k8s_resp_clear(&r);
    double t0 = kt_now();
    for (int i = 0; i < 3; i++) {
        char cp[512];
        snprintf(cp, sizeof cp, "%s/child-%d", coll, i);
        assert_true(is_gone(c, cp, 60));
    }
    snprintf(path, sizeof path, "%s/child-pod", pods);
    assert_true(is_gone(c, path, 60));
    printf("garbage collector removed 3 configmaps and a running pod in %.1f s\n", kt_now() - t0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_eviction_respects_pdb),
        cmocka_unit_test(test_garbage_collection),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
