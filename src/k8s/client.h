/*
 * client.h - a small Kubernetes REST client: one authenticated endpoint (from a
 * kubeconfig or the in-cluster service account), requests that return the HTTP
 * status plus the parsed JSON body, and typed-enough helpers for the verbs a
 * controller needs (get, list, create, replace, merge/strategic patch,
 * server-side apply, delete with preconditions, status and eviction
 * subresources). Long-running list + watch lives in watch.h.
 *
 * It must never allocate what the network asks it to: every response body is
 * bounded by the client's cap (default TIDE__K8S_DEFAULT_MAX_RESPONSE) and a
 * response over the cap is refused (TIDE_ENOMEM) before it is allocated, whether
 * the server announced its length or not.
 *
 * Results. Each call returns a TIDE_* code and fills a tide__k8s_resp_t:
 *   2xx                  TIDE_OK
 *   404 NotFound         TIDE_ENOTFOUND
 *   409 Conflict/AlreadyExists  TIDE_ESTALE  (distinct so callers re-read and
 *                        retry; resp.reason tells "Conflict" from "AlreadyExists")
 *   410 Gone/Expired     TIDE_ENOTFOUND with resp.status == 410 (watch.c re-lists)
 *   429 TooManyRequests  TIDE_EABORTED  (e.g. an eviction a PodDisruptionBudget
 *                        refuses; retry later)
 *   401/403              TIDE_EAUTH
 *   400/422 and others   TIDE_EINVAL
 *   5xx, connection      TIDE_EIO;  timeouts TIDE_ETIMEDOUT;  TLS verification
 *                        failure TIDE_EAUTH with a message naming the server.
 * resp.message holds the apiserver's Status message (or the transport error).
 *
 * Thread safety: a client may be used from many threads at once; it keeps a small
 * pool of connections. It must outlive every request and watch that uses it.
 */
#ifndef TIDE_K8S_CLIENT_H
#define TIDE_K8S_CLIENT_H

#include "k8s/kubeconfig.h"

#include <jansson.h>
#include <stdatomic.h>
#include <stddef.h>

#define TIDE__K8S_DEFAULT_MAX_RESPONSE ((size_t)64 << 20)
#define TIDE__K8S_DEFAULT_TIMEOUT_MS 30000L

typedef struct tide__k8s_client tide__k8s_client_t;

typedef struct tide__k8s_resp {
    long status;       /* HTTP status; 0 when no response came (transport error) */
    json_t *body;      /* parsed JSON body (owned; tide__k8s_resp_clear frees it), or NULL */
    char reason[64];   /* Status.reason ("Conflict", "NotFound", "Expired", ...) or "" */
    char message[640]; /* Status.message, or what went wrong, with the method and path */
} tide__k8s_resp_t;

/* Frees resp->body and zeroes resp; safe on a zeroed or already cleared resp. */
void tide__k8s_resp_clear(tide__k8s_resp_t *resp);

/* Makes a client from auth, taking ownership of its contents (auth is zeroed). */
int tide__k8s_client_new(tide__k8s_auth_t *auth, tide__k8s_client_t **out, char *err,
                         size_t errlen);
/* tide__k8s_kubeconfig_load + tide__k8s_client_new. */
int tide__k8s_client_from_kubeconfig(const char *path, const char *context,
                                     tide__k8s_client_t **out, char *err, size_t errlen);
/* In-cluster service account (root NULL: the standard path). */
int tide__k8s_client_in_cluster(const char *root, tide__k8s_client_t **out, char *err,
                                size_t errlen);
/* $KUBECONFIG when set, else in-cluster when KUBERNETES_SERVICE_HOST is set, else
 * ~/.kube/config. */
int tide__k8s_client_from_env(tide__k8s_client_t **out, char *err, size_t errlen);
void tide__k8s_client_free(tide__k8s_client_t *c);

const char *tide__k8s_client_namespace(const tide__k8s_client_t *c);
const char *tide__k8s_client_server(const tide__k8s_client_t *c);
/* Cap on one response body (and on the sum of a paginated list). 0 restores the default. */
void tide__k8s_client_set_max_response(tide__k8s_client_t *c, size_t bytes);
size_t tide__k8s_client_max_response(const tide__k8s_client_t *c);
/* Whole-request timeout for ordinary (non-watch) requests. */
void tide__k8s_client_set_timeout_ms(tide__k8s_client_t *c, long ms);

/* One request. path is "/api/..." or "/apis/...", with any query already in it
 * (escape values with tide__k8s_escape). body may be NULL; content_type NULL
 * means application/json. */
int tide__k8s_request(tide__k8s_client_t *c, const char *method, const char *path,
                      const json_t *body, const char *content_type, tide__k8s_resp_t *resp);

/* A streaming GET (watch): every newline-terminated line of a 200 response is
 * handed to on_line (NUL-terminated, without the newline); a line longer than
 * max_line is refused (TIDE_ENOMEM). on_line returning non-zero ends the stream
 * (TIDE_OK). The stream also ends when *stop becomes non-zero (TIDE_EABORTED), or
 * after timeout_ms (TIDE_ETIMEDOUT; 0 = none). A non-200 response is read whole
 * (bounded by the client's cap) into resp like an ordinary request. */
typedef int (*tide__k8s_line_fn)(void *ud, char *line, size_t len);
int tide__k8s_stream(tide__k8s_client_t *c, const char *path, size_t max_line, long timeout_ms,
                     const atomic_int *stop, tide__k8s_line_fn on_line, void *ud,
                     tide__k8s_resp_t *resp);

/* ---- paths ---------------------------------------------------------------- */

/* Writes the REST path of a resource: api_version "v1" gives /api/v1/..., any
 * "group/version" gives /apis/group/version/...; ns NULL for cluster-scoped or
 * all-namespace lists; name and sub (a subresource: "status", "eviction") may be
 * NULL. Returns TIDE_EINVAL if it does not fit. */
int tide__k8s_path(char *buf, size_t len, const char *api_version, const char *ns,
                   const char *resource, const char *name, const char *sub);
/* URL-escapes s into buf (for selectors and field managers in a query). */
int tide__k8s_escape(char *buf, size_t len, const char *s);

/* ---- verbs ---------------------------------------------------------------- */

int tide__k8s_get(tide__k8s_client_t *c, const char *path, tide__k8s_resp_t *resp);
/* POST obj to a collection path. */
int tide__k8s_create(tide__k8s_client_t *c, const char *collection, const json_t *obj,
                     tide__k8s_resp_t *resp);
/* PUT obj (its metadata.resourceVersion, when set, makes it a compare-and-swap:
 * TIDE_ESTALE on a lost race). */
int tide__k8s_replace(tide__k8s_client_t *c, const char *path, const json_t *obj,
                      tide__k8s_resp_t *resp);
/* RFC 7386 merge patch. */
int tide__k8s_patch_merge(tide__k8s_client_t *c, const char *path, const json_t *patch,
                          tide__k8s_resp_t *resp);
/* Strategic merge patch (built-in kinds only; lists such as conditions merge by key). */
int tide__k8s_patch_strategic(tide__k8s_client_t *c, const char *path, const json_t *patch,
                              tide__k8s_resp_t *resp);
/* Server-side apply of obj as field_manager; force takes over conflicting fields. */
int tide__k8s_apply(tide__k8s_client_t *c, const char *path, const json_t *obj,
                    const char *field_manager, int force, tide__k8s_resp_t *resp);

typedef struct tide__k8s_delete_opts {
    long grace_seconds;           /* < 0: the object's default */
    const char *uid;              /* precondition, or NULL */
    const char *resource_version; /* precondition, or NULL */
    const char *propagation;      /* "Foreground", "Background", "Orphan", or NULL */
} tide__k8s_delete_opts_t;
#define TIDE__K8S_DELETE_DEFAULTS                                                                  \
    {                                                                                              \
        -1, NULL, NULL, NULL                                                                       \
    }

int tide__k8s_delete(tide__k8s_client_t *c, const char *path, const tide__k8s_delete_opts_t *opts,
                     tide__k8s_resp_t *resp);
/* PUT obj to path + "/status". */
int tide__k8s_replace_status(tide__k8s_client_t *c, const char *path, const json_t *obj,
                             tide__k8s_resp_t *resp);
/* PATCH path + "/status" (content_type: a merge or strategic patch type). */
int tide__k8s_patch_status(tide__k8s_client_t *c, const char *path, const json_t *patch,
                           const char *content_type, tide__k8s_resp_t *resp);
/* POST a policy/v1 Eviction for pod ns/name. TIDE_EABORTED (429) when a
 * PodDisruptionBudget does not allow it now. */
int tide__k8s_evict(tide__k8s_client_t *c, const char *ns, const char *name,
                    const tide__k8s_delete_opts_t *opts, tide__k8s_resp_t *resp);

/* Lists a collection, following continue tokens in pages of page_size (0: 500),
 * with optional selectors. On success *items is a new JSON array (owned by the
 * caller) and rv the list's resourceVersion. The sum of the pages is bounded by
 * the client's cap. resp describes the last page. */
int tide__k8s_list(tide__k8s_client_t *c, const char *collection, const char *label_selector,
                   const char *field_selector, int page_size, json_t **items, char *rv,
                   size_t rvlen, tide__k8s_resp_t *resp);

/* Small JSON accessors for object fields by dotted path ("metadata.name"). NULL
 * when absent or not a string. */
const char *tide__k8s_str(const json_t *obj, const char *dotted);
json_t *tide__k8s_at(const json_t *obj, const char *dotted);

#endif
