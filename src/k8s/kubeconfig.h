/*
 * kubeconfig.h - where a Kubernetes client gets its server and credentials from:
 * a kubeconfig file (its current context, or a named one) or the in-cluster service
 * account. The result is plain memory: the server URL, and the CA, client
 * certificate and key as PEM blobs (files named by the kubeconfig are read here, so
 * the HTTP layer only ever sees blobs), or a bearer token.
 *
 * This module never talks to the network, never exits, and bounds every file it
 * reads (TIDE__K8S_MAX_CONFIG_BYTES). Errors come back as a TIDE_* code plus a
 * message in the caller's buffer that names the file and the field at fault.
 */
#ifndef TIDE_K8S_KUBECONFIG_H
#define TIDE_K8S_KUBECONFIG_H

#include <stddef.h>

/* No kubeconfig, certificate, key or token file is allowed to be larger than this;
 * real ones are a few KiB, so anything bigger is a mistake, not a config. */
#define TIDE__K8S_MAX_CONFIG_BYTES (4u << 20)

/* Default root of the service-account files inside a pod. */
#define TIDE__K8S_SA_ROOT "/var/run/secrets/kubernetes.io/serviceaccount"

/* A blob is owned memory: data is NUL-terminated (data[len] == 0) so PEM text can
 * also be used as a C string. An empty blob has data == NULL. */
typedef struct tide__k8s_blob {
    unsigned char *data;
    size_t len;
} tide__k8s_blob_t;

typedef struct tide__k8s_auth {
    char *server;             /* "https://127.0.0.1:6443", no trailing slash */
    tide__k8s_blob_t ca;      /* PEM bundle; empty = the system CA store */
    tide__k8s_blob_t cert;    /* client certificate PEM, or empty */
    tide__k8s_blob_t key;     /* client key PEM, or empty */
    char *token;              /* bearer token, or NULL */
    char *namespace_;         /* the context's namespace, or "default" */
    char *source;             /* "kubeconfig /path (context x)" or "in-cluster"; for messages */
    int insecure_skip_verify; /* the kubeconfig asked for it; honoured, and said in messages */
} tide__k8s_auth_t;

/* Loads path (NULL: $KUBECONFIG, then ~/.kube/config; only the first entry of a
 * colon-separated $KUBECONFIG is used) with context (NULL: current-context).
 * Relative file names in the kubeconfig are relative to its directory, as kubectl
 * does. On success *out is filled and owned by the caller (tide__k8s_auth_free);
 * on error *out is left empty and err holds a message such as
 * `kubeconfig /x: context "foo" not found`. */
int tide__k8s_kubeconfig_load(const char *path, const char *context, tide__k8s_auth_t *out,
                              char *err, size_t errlen);

/* In-cluster auth: KUBERNETES_SERVICE_HOST/PORT and root/{token,ca.crt,namespace}
 * (root NULL: TIDE__K8S_SA_ROOT; tests pass a directory of their own). */
int tide__k8s_incluster_load(const char *root, tide__k8s_auth_t *out, char *err, size_t errlen);

void tide__k8s_auth_free(tide__k8s_auth_t *auth);

/* Decodes standard base64 (whitespace and newlines ignored, padding required as
 * kubeconfig data fields carry it). On success *out is a new blob owned by the
 * caller. Returns TIDE_EINVAL for anything that is not valid base64. */
int tide__k8s_base64_decode(const char *in, size_t inlen, tide__k8s_blob_t *out);

/* Reads a whole file of at most max bytes into *out (NUL-terminated). Returns
 * TIDE_ENOTFOUND, TIDE_EIO, or TIDE_EINVAL when it is larger than max. */
int tide__k8s_read_file(const char *path, size_t max, tide__k8s_blob_t *out);

void tide__k8s_blob_free(tide__k8s_blob_t *b);

/* The message of a TIDE_* code, from include/tide.h's table. The k8s library
 * carries its own copy of this lookup so that it links without libtide. */
const char *tide__k8s_strerror(int err);

#endif
