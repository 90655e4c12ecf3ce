/*
 * unit_kubeconfig.c - kubeconfig and in-cluster loading, no cluster needed:
 * current and named contexts, -data fields and files (relative to the
 * kubeconfig), tokens, and the messages for what goes wrong (unknown context,
 * bad base64, missing file, missing cluster, half a client credential), plus
 * base64 edge cases and bounded file reads.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "k8s/client.h"
#include "k8s/kubeconfig.h"
#include "tide.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256];

static void write_file(const char *name, const char *text, char *path, size_t len)
{
    snprintf(path, len, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int setup(void **st)
{
    snprintf(dir, sizeof dir, "/tmp/tide-kubeconfig-XXXXXX");
    assert_non_null(mkdtemp(dir));
    return 0;
}

static int teardown(void **st)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* "CA PEM\n" "CERT PEM\n" "KEY PEM\n" in base64. */
#define B64_CA "Q0EgUEVNCg=="
#define B64_CERT "Q0VSVCBQRU0K"
#define B64_KEY "S0VZIFBFTQo="

static const char two_contexts[] = "apiVersion: v1\n"
                                   "kind: Config\n"
                                   "current-context: first\n"
                                   "clusters:\n"
                                   "- name: c1\n"
                                   "  cluster:\n"
                                   "    server: https://127.0.0.1:6443/\n"
                                   "    certificate-authority-data: " B64_CA "\n"
                                   "- name: c2\n"
                                   "  cluster:\n"
                                   "    server: https://example.invalid:443\n"
                                   "    certificate-authority: ca.pem\n"
                                   "users:\n"
                                   "- name: u1\n"
                                   "  user:\n"
                                   "    client-certificate-data: " B64_CERT "\n"
                                   "    client-key-data: " B64_KEY "\n"
                                   "- name: u2\n"
                                   "  user:\n"
                                   "    token: sekrit-token\n"
                                   "contexts:\n"
                                   "- name: first\n"
                                   "  context:\n"
                                   "    cluster: c1\n"
                                   "    user: u1\n"
                                   "- name: second\n"
                                   "  context:\n"
                                   "    cluster: c2\n"
                                   "    user: u2\n"
                                   "    namespace: team-a\n";

static void test_current_context(void **st)
{
    char path[512], err[512];
    write_file("config", two_contexts, path, sizeof path);
    tide__k8s_auth_t a;
    assert_int_equal(tide__k8s_kubeconfig_load(path, NULL, &a, err, sizeof err), TIDE_OK);
    assert_string_equal(a.server, "https://127.0.0.1:6443"); /* trailing slash dropped */
    assert_string_equal((char *)a.ca.data, "CA PEM\n");
    assert_string_equal((char *)a.cert.data, "CERT PEM\n");
    assert_string_equal((char *)a.key.data, "KEY PEM\n");
    assert_null(a.token);
    assert_string_equal(a.namespace_, "default");
    tide__k8s_auth_free(&a);
}

static void test_named_context_with_files(void **st)
{
    char path[512], ca[512], err[512];
    write_file("config", two_contexts, path, sizeof path);
    write_file("ca.pem", "FILE CA\n", ca, sizeof ca); /* relative to the kubeconfig's directory */
    tide__k8s_auth_t a;
    assert_int_equal(tide__k8s_kubeconfig_load(path, "second", &a, err, sizeof err), TIDE_OK);
    assert_string_equal(a.server, "https://example.invalid:443");
    assert_string_equal((char *)a.ca.data, "FILE CA\n");
    assert_string_equal(a.token, "sekrit-token");
    assert_null(a.cert.data);
    assert_string_equal(a.namespace_, "team-a");
    tide__k8s_auth_free(&a);
    /* A client made from it has the namespace and server. */
    tide__k8s_client_t *c;
    assert_int_equal(tide__k8s_client_from_kubeconfig(path, "second", &c, err, sizeof err),
                     TIDE_OK);
    assert_string_equal(tide__k8s_client_namespace(c), "team-a");
    assert_string_equal(tide__k8s_client_server(c), "https://example.invalid:443");
    tide__k8s_client_free(c);
}

static void test_unknown_context(void **st)
{
    char path[512], err[512], want[700];
    write_file("config", two_contexts, path, sizeof path);
    tide__k8s_client_t *c = (tide__k8s_client_t *)1;
    assert_int_equal(tide__k8s_client_from_kubeconfig(path, "foo", &c, err, sizeof err),
                     TIDE_ECONFIG);
    assert_null(c);
    snprintf(want, sizeof want, "kubeconfig %s: context \"foo\" not found", path);
    assert_string_equal(err, want);
}

static void test_bad_base64(void **st)
{
    char path[512], err[512], want[700];
    char text[sizeof two_contexts + 16];
    snprintf(text, sizeof text, "%s", two_contexts);
    char *p = strstr(text, B64_CA);
    memcpy(p, "Q0E*UEVNCg==", 12); /* a character outside the alphabet */
    write_file("config", text, path, sizeof path);
    tide__k8s_auth_t a;
    assert_int_equal(tide__k8s_kubeconfig_load(path, NULL, &a, err, sizeof err), TIDE_EINVAL);
    snprintf(want, sizeof want, "kubeconfig %s: certificate-authority-data: not valid base64",
             path);
    assert_string_equal(err, want);
    assert_null(a.server);

    /* Truncated (not a multiple of four) is refused too, for the key. */
    snprintf(text, sizeof text, "%s", two_contexts);
    p = strstr(text, B64_KEY);
    p[strlen(B64_KEY) - 1] = ' ';
    write_file("config", text, path, sizeof path);
    assert_int_equal(tide__k8s_kubeconfig_load(path, NULL, &a, err, sizeof err), TIDE_EINVAL);
    assert_non_null(strstr(err, "client-key-data: not valid base64"));
}

static void test_other_errors(void **st)
{
    char path[512], err[512];
    tide__k8s_auth_t a;
    snprintf(path, sizeof path, "%s/does-not-exist", dir);
    assert_int_equal(tide__k8s_kubeconfig_load(path, NULL, &a, err, sizeof err), TIDE_ENOTFOUND);
    assert_non_null(strstr(err, "no such file"));

    write_file("config",
               "current-context: x\ncontexts:\n- name: x\n  context:\n    cluster: gone\n", path,
               sizeof path);
    assert_int_equal(tide__k8s_kubeconfig_load(path, NULL, &a, err, sizeof err), TIDE_ECONFIG);
    assert_non_null(strstr(err, "cluster \"gone\" (of context \"x\") not found"));

    write_file("config", "current-context: x\n  - : [\n", path, sizeof path);
    assert_int_equal(tide__k8s_kubeconfig_load(path, NULL, &a, err, sizeof err), TIDE_ECONFIG);
    assert_non_null(strstr(err, "line"));

    write_file("config",
               "current-context: x\nclusters:\n- name: c\n  cluster:\n    server: https://h:1\n"
               "users:\n- name: u\n  user:\n    client-certificate-data: " B64_CERT "\n"
               "contexts:\n- name: x\n  context:\n    cluster: c\n    user: u\n",
               path, sizeof path);
    assert_int_equal(tide__k8s_kubeconfig_load(path, NULL, &a, err, sizeof err), TIDE_ECONFIG);
    assert_non_null(strstr(err, "must be given together"));

    write_file("config",
               "current-context: x\nclusters:\n- name: c\n  cluster:\n    server: https://h:1\n"
               "    certificate-authority: /nonexistent/ca.pem\n"
               "contexts:\n- name: x\n  context:\n    cluster: c\n",
               path, sizeof path);
    assert_int_equal(tide__k8s_kubeconfig_load(path, NULL, &a, err, sizeof err), TIDE_ENOTFOUND);
    assert_non_null(strstr(err, "certificate-authority: cannot read /nonexistent/ca.pem"));

    write_file("config",
               "current-context: x\nclusters:\n- name: c\n  cluster:\n    server: ftp://h\n"
               "contexts:\n- name: x\n  context:\n    cluster: c\n",
               path, sizeof path);
    assert_int_equal(tide__k8s_kubeconfig_load(path, NULL, &a, err, sizeof err), TIDE_ECONFIG);
    assert_non_null(strstr(err, "is not an http(s) URL"));
}

static void test_base64(void **st)
{
    tide__k8s_blob_t b;
    assert_int_equal(tide__k8s_base64_decode("aGVsbG8=", 8, &b), TIDE_OK);
    assert_int_equal(b.len, 5);
    assert_memory_equal(b.data, "hello", 5);
    tide__k8s_blob_free(&b);
    /* Line breaks, as in wrapped PEM-ish data, are fine. */
    assert_int_equal(tide__k8s_base64_decode("aGVs\nbG8h\n", 10, &b), TIDE_OK);
    assert_memory_equal(b.data, "hello!", 6);
    tide__k8s_blob_free(&b);
    assert_int_equal(tide__k8s_base64_decode("", 0, &b), TIDE_EINVAL);
    assert_int_equal(tide__k8s_base64_decode("aGVsbG8", 7, &b), TIDE_EINVAL);
    assert_int_equal(tide__k8s_base64_decode("aGVs!G8=", 8, &b), TIDE_EINVAL);
    assert_int_equal(tide__k8s_base64_decode("aGVsbG8=aGVs", 12, &b), TIDE_EINVAL);
    assert_null(b.data);
}

static void test_read_file_bound(void **st)
{
    char path[512];
    write_file("big", "0123456789", path, sizeof path);
    tide__k8s_blob_t b;
    assert_int_equal(tide__k8s_read_file(path, 9, &b), TIDE_EINVAL);
    assert_null(b.data);
    assert_int_equal(tide__k8s_read_file(path, 10, &b), TIDE_OK);
    assert_int_equal(b.len, 10);
    tide__k8s_blob_free(&b);
}

static void test_in_cluster(void **st)
{
    char p[512], sa[300], err[512];
    snprintf(sa, sizeof sa, "%s/sa", dir);
    mkdir(sa, 0700);
    write_file("sa/token", "tok-123\n", p, sizeof p);
    write_file("sa/ca.crt", "SA CA\n", p, sizeof p);
    write_file("sa/namespace", "jobs\n", p, sizeof p);
    setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
    setenv("KUBERNETES_SERVICE_PORT", "443", 1);
    tide__k8s_auth_t a;
    assert_int_equal(tide__k8s_incluster_load(sa, &a, err, sizeof err), TIDE_OK);
    assert_string_equal(a.server, "https://10.96.0.1:443");
    assert_string_equal(a.token, "tok-123");
    assert_string_equal((char *)a.ca.data, "SA CA\n");
    assert_string_equal(a.namespace_, "jobs");
    tide__k8s_auth_free(&a);
    setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
    assert_int_equal(tide__k8s_incluster_load(sa, &a, err, sizeof err), TIDE_OK);
    assert_string_equal(a.server, "https://[fd00::1]:443");
    tide__k8s_auth_free(&a);
    setenv("KUBERNETES_SERVICE_PORT", "44x", 1);
    assert_int_equal(tide__k8s_incluster_load(sa, &a, err, sizeof err), TIDE_ECONFIG);
    unsetenv("KUBERNETES_SERVICE_HOST");
    assert_int_equal(tide__k8s_incluster_load(sa, &a, err, sizeof err), TIDE_ECONFIG);
    assert_non_null(strstr(err, "KUBERNETES_SERVICE_HOST"));
    unsetenv("KUBERNETES_SERVICE_PORT");
}

static void test_paths(void **st)
{
    char p[256];
    assert_int_equal(tide__k8s_path(p, sizeof p, "v1", "ns", "pods", "x", "status"), TIDE_OK);
    assert_string_equal(p, "/api/v1/namespaces/ns/pods/x/status");
    assert_int_equal(
        tide__k8s_path(p, sizeof p, "coordination.k8s.io/v1", NULL, "leases", NULL, NULL), TIDE_OK);
    assert_string_equal(p, "/apis/coordination.k8s.io/v1/leases");
    assert_int_equal(tide__k8s_path(p, 10, "v1", "ns", "pods", "x", NULL), TIDE_EINVAL);
    assert_int_equal(tide__k8s_escape(p, sizeof p, "a=b,c!=d"), TIDE_OK);
    assert_string_equal(p, "a%3Db%2Cc%21%3Dd");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_current_context), cmocka_unit_test(test_named_context_with_files),
        cmocka_unit_test(test_unknown_context), cmocka_unit_test(test_bad_base64),
        cmocka_unit_test(test_other_errors),    cmocka_unit_test(test_base64),
        cmocka_unit_test(test_read_file_bound), cmocka_unit_test(test_in_cluster),
        cmocka_unit_test(test_paths),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
