/*
 * client.c - the REST client against the real apiserver: create/get/list/
 * replace/merge patch, 409 surfaced as TIDE_ESTALE (Conflict and AlreadyExists),
 * server-side apply with field managers and force, delete with uid
 * preconditions, the status subresource, TLS verification failure with a clear
 * message, and responses over the size bound refused (a list, a single object
 * with a Content-Length, a watch event).
 */
#include "k8s_test.h"

#include "k8s/kubeconfig.h"

#include <openssl/evp.h>

static tide__k8s_client_t *c;
static char ns[128];

static int setup(void **st)
{
    c = kt_client();
    kt_namespace(c, "tide-client", ns, sizeof ns);
    return 0;
}

static int teardown(void **st)
{
    kt_delete_namespace(c, ns);
    tide__k8s_client_free(c);
    return 0;
}

static void cm_coll(char *p, size_t len)
{
    tide__k8s_path(p, len, "v1", ns, "configmaps", NULL, NULL);
}

static void test_crud_and_conflicts(void **st)
{
    char coll[256], path[512];
    cm_coll(coll, sizeof coll);
    tide__k8s_path(path, sizeof path, "v1", ns, "configmaps", "one", NULL);
    tide__k8s_resp_t r;
    json_t *o = kt_json("{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":"
                        "\"one\"},\"data\":{\"a\":\"1\"}}");
    assert_int_equal(tide__k8s_create(c, coll, o, &r), TIDE_OK);
    assert_int_equal(r.status, 201);
    char rv[64], uid[64];
    snprintf(rv, sizeof rv, "%s", tide__k8s_str(r.body, "metadata.resourceVersion"));
    snprintf(uid, sizeof uid, "%s", tide__k8s_str(r.body, "metadata.uid"));
    tide__k8s_resp_clear(&r);

    /* Creating it again: 409 AlreadyExists, distinct from other failures. */
    assert_int_equal(tide__k8s_create(c, coll, o, &r), TIDE_ESTALE);
    assert_int_equal(r.status, 409);
    assert_string_equal(r.reason, "AlreadyExists");
    tide__k8s_resp_clear(&r);

    /* Replace with the current resourceVersion works; with the old one it is a
     * lost race: 409 Conflict. */
    json_object_set_new(json_object_get(o, "metadata"), "resourceVersion", json_string(rv));
    json_object_set_new(json_object_get(o, "data"), "a", json_string("2"));
    assert_int_equal(tide__k8s_replace(c, path, o, &r), TIDE_OK);
    tide__k8s_resp_clear(&r);
    assert_int_equal(tide__k8s_replace(c, path, o, &r), TIDE_ESTALE);
    assert_string_equal(r.reason, "Conflict");
    assert_non_null(strstr(r.message, "409"));
    printf("stale replace: %s\n", r.message);
    tide__k8s_resp_clear(&r);
    json_decref(o);

    /* Merge patch. */
    json_t *patch =
        kt_json("{\"metadata\":{\"labels\":{\"tide.dev/x\":\"y\"}},\"data\":{\"b\":\"3\"}}");
    assert_int_equal(tide__k8s_patch_merge(c, path, patch, &r), TIDE_OK);
    assert_string_equal(tide__k8s_str(r.body, "data.b"), "3");
    assert_string_equal(tide__k8s_str(r.body, "data.a"), "2");
    tide__k8s_resp_clear(&r);
    json_decref(patch);

    /* Get and list. */
    assert_int_equal(tide__k8s_get(c, path, &r), TIDE_OK);
    assert_string_equal(tide__k8s_str(r.body, "metadata.uid"), uid);
    tide__k8s_resp_clear(&r);
    json_t *items;
    char lrv[64];
    assert_int_equal(tide__k8s_list(c, coll, "tide.dev/x=y", NULL, 0, &items, lrv, sizeof lrv, &r),
                     TIDE_OK);
    assert_int_equal(json_array_size(items), 1);
    assert_true(lrv[0] != 0);
    json_decref(items);
    tide__k8s_resp_clear(&r);

    /* Delete with a wrong uid precondition: refused (409); with the right one: gone. */
    tide__k8s_delete_opts_t d = TIDE__K8S_DELETE_DEFAULTS;
    d.uid = "00000000-0000-0000-0000-000000000000";
    assert_int_equal(tide__k8s_delete(c, path, &d, &r), TIDE_ESTALE);
    tide__k8s_resp_clear(&r);
    d.uid = uid;
    assert_int_equal(tide__k8s_delete(c, path, &d, &r), TIDE_OK);
    tide__k8s_resp_clear(&r);
    assert_int_equal(tide__k8s_get(c, path, &r), TIDE_ENOTFOUND);
    assert_int_equal(r.status, 404);
    assert_string_equal(r.reason, "NotFound");
    tide__k8s_resp_clear(&r);
}

static void test_server_side_apply(void **st)
{
    char path[512];
    tide__k8s_path(path, sizeof path, "v1", ns, "configmaps", "applied", NULL);
    tide__k8s_resp_t r;
    json_t *o = kt_json("{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":"
                        "\"applied\"},\"data\":{\"k\":\"one\"}}");
    assert_int_equal(tide__k8s_apply(c, path, o, "tide-test-a", 0, &r), TIDE_OK);
    tide__k8s_resp_clear(&r);
    json_object_set_new(json_object_get(o, "data"), "k", json_string("two"));
    /* Another manager claiming the same field: a conflict unless forced. */
    assert_int_equal(tide__k8s_apply(c, path, o, "tide-test-b", 0, &r), TIDE_ESTALE);
    assert_int_equal(r.status, 409);
    tide__k8s_resp_clear(&r);
    assert_int_equal(tide__k8s_apply(c, path, o, "tide-test-b", 1, &r), TIDE_OK);
    assert_string_equal(tide__k8s_str(r.body, "data.k"), "two");
    const char *mgr = json_string_value(json_object_get(
        json_array_get(tide__k8s_at(r.body, "metadata.managedFields"), 0), "manager"));
    assert_non_null(mgr);
    tide__k8s_resp_clear(&r);
    json_decref(o);
}

static void test_status_subresource(void **st)
{
    char coll[256], path[512];
    tide__k8s_path(coll, sizeof coll, "v1", ns, "pods", NULL, NULL);
    tide__k8s_path(path, sizeof path, "v1", ns, "pods", "parked", NULL);
    tide__k8s_resp_t r;
    /* A pod no node will take: only this test writes its status. */
    json_t *p =
        kt_json("{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"parked\"},"
                "\"spec\":{\"nodeSelector\":{\"tide.dev/no-such\":\"node\"},"
                "\"containers\":[{\"name\":\"c\",\"image\":\"x\",\"command\":[\"true\"]}]}}");
    assert_int_equal(tide__k8s_create(c, coll, p, &r), TIDE_OK);
    tide__k8s_resp_clear(&r);
    json_decref(p);
    json_t *patch =
        kt_json("{\"status\":{\"conditions\":"
                "[{\"type\":\"tide.dev/Probe\",\"status\":\"True\",\"reason\":\"Test\"}]}}");
    assert_int_equal(
        tide__k8s_patch_status(c, path, patch, "application/strategic-merge-patch+json", &r),
        TIDE_OK);
    tide__k8s_resp_clear(&r);
    json_decref(patch);
    assert_int_equal(tide__k8s_get(c, path, &r), TIDE_OK);
    assert_non_null(kt_condition(r.body, "tide.dev/Probe"));
    /* replace_status with the object just read (its resourceVersion): the
     * scheduler writes this pod's status too (PodScheduled=False), so a lost
     * race is possible, and is what TIDE_ESTALE is for: re-read and retry. */
    json_t *obj = json_incref(r.body);
    tide__k8s_resp_clear(&r);
    int rc = TIDE_ESTALE;
    for (int i = 0; i < 10 && rc == TIDE_ESTALE; i++) {
        json_object_set_new(kt_condition(obj, "tide.dev/Probe"), "reason", json_string("Replaced"));
        rc = tide__k8s_replace_status(c, path, obj, &r);
        tide__k8s_resp_clear(&r);
        if (rc == TIDE_ESTALE) {
            json_decref(obj);
            assert_int_equal(tide__k8s_get(c, path, &r), TIDE_OK);
            obj = json_incref(r.body);
            tide__k8s_resp_clear(&r);
        }
    }
    assert_int_equal(rc, TIDE_OK);
    json_decref(obj);
    assert_int_equal(tide__k8s_get(c, path, &r), TIDE_OK);
    assert_string_equal(
        json_string_value(json_object_get(kt_condition(r.body, "tide.dev/Probe"), "reason")),
        "Replaced");
    tide__k8s_resp_clear(&r);
}

/* Builds a kubeconfig like $KUBECONFIG but with ca as its certificate authority. */
static void write_kubeconfig_with_ca(const char *out, const tide__k8s_blob_t *ca)
{
    tide__k8s_auth_t a;
    char err[512];
    assert_int_equal(tide__k8s_kubeconfig_load(NULL, NULL, &a, err, sizeof err), TIDE_OK);
    size_t n = 4 * ((ca->len + 2) / 3) + 1, nc = 4 * ((a.cert.len + 2) / 3) + 1,
           nk = 4 * ((a.key.len + 2) / 3) + 1;
    unsigned char *b = malloc(n), *bc = malloc(nc), *bk = malloc(nk);
    EVP_EncodeBlock(b, ca->data, (int)ca->len);
    EVP_EncodeBlock(bc, a.cert.data, (int)a.cert.len);
    EVP_EncodeBlock(bk, a.key.data, (int)a.key.len);
    FILE *f = fopen(out, "w");
    assert_non_null(f);
    fprintf(f,
            "apiVersion: v1\nkind: Config\ncurrent-context: t\nclusters:\n- name: c\n  cluster:\n"
            "    server: %s\n    certificate-authority-data: %s\nusers:\n- name: u\n  user:\n"
            "    client-certificate-data: %s\n    client-key-data: %s\ncontexts:\n- name: t\n"
            "  context:\n    cluster: c\n    user: u\n",
            a.server, b, bc, bk);
    fclose(f);
    free(b);
    free(bc);
    free(bk);
    tide__k8s_auth_free(&a);
}

static void test_bad_ca(void **st)
{
    /* The client's own certificate as "CA": a real certificate that did not sign
     * the server's, so verification must fail, naming the server. */
    tide__k8s_auth_t a;
    char err[512];
    assert_int_equal(tide__k8s_kubeconfig_load(NULL, NULL, &a, err, sizeof err), TIDE_OK);
    char path[] = "/tmp/tide-k8s-badca-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    write_kubeconfig_with_ca(path, &a.cert);
    tide__k8s_client_t *bad = NULL;
    assert_int_equal(tide__k8s_client_from_kubeconfig(path, NULL, &bad, err, sizeof err), TIDE_OK);
    tide__k8s_resp_t r;
    int rc = tide__k8s_get(bad, "/api/v1/namespaces/default", &r);
    printf("bad CA: %s\n", r.message);
    assert_int_equal(rc, TIDE_EAUTH);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.message, a.server));
    assert_non_null(strstr(r.message, "certificate"));
    assert_non_null(strstr(r.message, path));
    tide__k8s_resp_clear(&r);
    tide__k8s_client_free(bad);
    tide__k8s_auth_free(&a);
    unlink(path);
}

static void test_unknown_context(void **st)
{
    char err[512];
    tide__k8s_client_t *x = NULL;
    const char *kc = getenv("KUBECONFIG");
    assert_int_equal(tide__k8s_client_from_kubeconfig(kc, "no-such-context", &x, err, sizeof err),
                     TIDE_ECONFIG);
    assert_null(x);
    char want[1024];
    snprintf(want, sizeof want, "kubeconfig %s: context \"no-such-context\" not found", kc);
    assert_string_equal(err, want);
}

static int big_created;
static tide__k8s_resp_t big_resp;

static int on_event(void *ud, tide__k8s_event_t ev, json_t *obj)
{
    if (ev != TIDE__K8S_SYNCED) return 0;
    /* Once the watch is established, make an object larger than its event cap. */
    json_t *o = (json_t *)ud;
    char coll[256];
    cm_coll(coll, sizeof coll);
    big_created = tide__k8s_create(c, coll, o, &big_resp) == TIDE_OK;
    tide__k8s_resp_clear(&big_resp);
    return 0;
}

static void test_size_bounds(void **st)
{
    char coll[256], path[512];
    cm_coll(coll, sizeof coll);
    tide__k8s_resp_t r;
    /* 40 objects of 8 KiB: a 320 KiB list. */
    char *val = malloc(8193);
    memset(val, 'x', 8192);
    val[8192] = 0;
    for (int i = 0; i < 40; i++) {
        json_t *o =
            json_pack("{s:s,s:s,s:{s:s,s:{s:s}},s:{s:s}}", "apiVersion", "v1", "kind", "ConfigMap",
                      "metadata", "name", "", "labels", "tide.dev/bulk", "1", "data", "v", val);
        char name[32];
        snprintf(name, sizeof name, "bulk-%02d", i);
        json_object_set_new(json_object_get(o, "metadata"), "name", json_string(name));
        assert_int_equal(tide__k8s_create(c, coll, o, &r), TIDE_OK);
        tide__k8s_resp_clear(&r);
        json_decref(o);
    }
    json_t *items = NULL;
    assert_int_equal(tide__k8s_list(c, coll, "tide.dev/bulk=1", NULL, 0, &items, NULL, 0, &r),
                     TIDE_OK);
    assert_int_equal(json_array_size(items), 40);
    json_decref(items);
    tide__k8s_resp_clear(&r);

    /* The same list under a 64 KiB cap (pages of 500: one chunked response). */
    tide__k8s_client_set_max_response(c, 64 << 10);
    assert_int_equal(tide__k8s_list(c, coll, "tide.dev/bulk=1", NULL, 0, &items, NULL, 0, &r),
                     TIDE_ENOMEM);
    assert_null(items);
    printf("over the cap (list): %s\n", r.message);
    assert_non_null(strstr(r.message, "exceeds the 65536-byte cap"));
    tide__k8s_resp_clear(&r);
    /* Also under small pages: the cap is on the sum. */
    assert_int_equal(tide__k8s_list(c, coll, "tide.dev/bulk=1", NULL, 5, &items, NULL, 0, &r),
                     TIDE_ENOMEM);
    tide__k8s_resp_clear(&r);

    /* A single object of 200 KiB under the cap: refused (announced length). */
    char *big = malloc(200001);
    memset(big, 'y', 200000);
    big[200000] = 0;
    json_t *bo = json_pack("{s:s,s:s,s:{s:s},s:{s:s}}", "apiVersion", "v1", "kind", "ConfigMap",
                           "metadata", "name", "big", "data", "v", big);
    tide__k8s_client_set_max_response(c, 0);
    assert_int_equal(tide__k8s_create(c, coll, bo, &r), TIDE_OK);
    tide__k8s_resp_clear(&r);
    tide__k8s_client_set_max_response(c, 64 << 10);
    tide__k8s_path(path, sizeof path, "v1", ns, "configmaps", "big", NULL);
    assert_int_equal(tide__k8s_get(c, path, &r), TIDE_ENOMEM);
    assert_null(r.body);
    printf("over the cap (get): %s\n", r.message);
    tide__k8s_resp_clear(&r);
    tide__k8s_client_set_max_response(c, 0);
    assert_int_equal(tide__k8s_get(c, path, &r), TIDE_OK);
    tide__k8s_resp_clear(&r);

    /* A watch event over the per-event cap ends the watch with TIDE_ENOMEM. */
    json_object_set_new(json_object_get(bo, "metadata"), "name", json_string("big-in-watch"));
    json_object_set_new(json_object_get(bo, "metadata"), "labels",
                        json_pack("{s:s}", "tide.dev/watch", "1"));
    tide__k8s_watch_opts_t wo = {0};
    wo.collection = coll;
    wo.label_selector = "tide.dev/watch=1";
    wo.max_event_bytes = 64 << 10;
    wo.run_ms = 20000;
    wo.fn = on_event;
    wo.ud = bo;
    tide__k8s_watch_stats_t ws;
    int rc = tide__k8s_watch(c, &wo, &ws);
    printf("over the cap (watch event): %s\n", ws.last_error);
    assert_true(big_created);
    assert_int_equal(rc, TIDE_ENOMEM);
    json_decref(bo);
    free(big);
    free(val);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crud_and_conflicts), cmocka_unit_test(test_server_side_apply),
        cmocka_unit_test(test_status_subresource), cmocka_unit_test(test_bad_ca),
        cmocka_unit_test(test_unknown_context),    cmocka_unit_test(test_size_bounds),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
