/*
 * client.c - the Kubernetes REST client over libcurl (see client.h). Each request
 * borrows an easy handle from the client's pool, so connections (and TLS
 * sessions) are reused across requests and threads without a lock held during
 * the transfer. Bodies are collected into a bounded buffer: the cap is checked
 * against Content-Length before anything is allocated and again on every chunk,
 * because chunked responses (the apiserver's lists) announce no length.
 */
#include "k8s/client.h"

#include "tide.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define POOL_MAX 16

struct tide__k8s_client {
    tide__k8s_auth_t auth;
    size_t max_response;
    long timeout_ms;
    char *auth_header; /* "Authorization: Bearer ..." or NULL */
    pthread_mutex_t lock;
    CURL *pool[POOL_MAX];
    int npool;
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static int curl_ok;

static void curl_init_once(void)
{
    /* curl_global_init is not thread-safe, so every client funnels through here. */
    curl_ok = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
}

void tide__k8s_resp_clear(tide__k8s_resp_t *r)
{
    if (!r) return;
    json_decref(r->body);
    memset(r, 0, sizeof(*r));
}

int tide__k8s_client_new(tide__k8s_auth_t *auth, tide__k8s_client_t **out, char *err, size_t errlen)
{
    *out = NULL;
    pthread_once(&curl_once, curl_init_once);
    if (!curl_ok) {
        if (err) snprintf(err, errlen, "libcurl failed to initialise");
        tide__k8s_auth_free(auth);
        return TIDE_EIO;
    }
    tide__k8s_client_t *c = calloc(1, sizeof(*c));
    if (!c) {
        tide__k8s_auth_free(auth);
        return TIDE_ENOMEM;
    }
    c->auth = *auth;
    memset(auth, 0, sizeof(*auth));
    c->max_response = TIDE__K8S_DEFAULT_MAX_RESPONSE;
    c->timeout_ms = TIDE__K8S_DEFAULT_TIMEOUT_MS;
    if (c->auth.token) {
        size_t n = strlen(c->auth.token) + 32;
        c->auth_header = malloc(n);
        if (!c->auth_header) {
            tide__k8s_client_free(c);
            return TIDE_ENOMEM;
        }
        snprintf(c->auth_header, n, "Authorization: Bearer %s", c->auth.token);
    }
    pthread_mutex_init(&c->lock, NULL);
    *out = c;
    return TIDE_OK;
}

int tide__k8s_client_from_kubeconfig(const char *path, const char *context,
                                     tide__k8s_client_t **out, char *err, size_t errlen)
{
    tide__k8s_auth_t a;
    *out = NULL;
    int rc = tide__k8s_kubeconfig_load(path, context, &a, err, errlen);
    if (rc != TIDE_OK) return rc;
    return tide__k8s_client_new(&a, out, err, errlen);
}

int tide__k8s_client_in_cluster(const char *root, tide__k8s_client_t **out, char *err,
                                size_t errlen)
{
    tide__k8s_auth_t a;
    *out = NULL;
    int rc = tide__k8s_incluster_load(root, &a, err, errlen);
    if (rc != TIDE_OK) return rc;
    return tide__k8s_client_new(&a, out, err, errlen);
}

int tide__k8s_client_from_env(tide__k8s_client_t **out, char *err, size_t errlen)
{
    const char *kc = getenv("KUBECONFIG");
    const char *host = getenv("KUBERNETES_SERVICE_HOST");
    if ((!kc || !*kc) && host && *host) return tide__k8s_client_in_cluster(NULL, out, err, errlen);
    return tide__k8s_client_from_kubeconfig(NULL, NULL, out, err, errlen);
}

void tide__k8s_client_free(tide__k8s_client_t *c)
{
    if (!c) return;
    for (int i = 0; i < c->npool; i++)
        curl_easy_cleanup(c->pool[i]);
    if (c->auth_header) {
        memset(c->auth_header, 0, strlen(c->auth_header));
        free(c->auth_header);
    }
    tide__k8s_auth_free(&c->auth);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

const char *tide__k8s_client_namespace(const tide__k8s_client_t *c)
{
    return c->auth.namespace_;
}

const char *tide__k8s_client_server(const tide__k8s_client_t *c)
{
    return c->auth.server;
}

void tide__k8s_client_set_max_response(tide__k8s_client_t *c, size_t bytes)
{
    c->max_response = bytes ? bytes : TIDE__K8S_DEFAULT_MAX_RESPONSE;
}

size_t tide__k8s_client_max_response(const tide__k8s_client_t *c)
{
    return c->max_response;
}

void tide__k8s_client_set_timeout_ms(tide__k8s_client_t *c, long ms)
{
    c->timeout_ms = ms > 0 ? ms : TIDE__K8S_DEFAULT_TIMEOUT_MS;
}

static CURL *handle_get(tide__k8s_client_t *c)
{
    CURL *h = NULL;
    pthread_mutex_lock(&c->lock);
    if (c->npool > 0) h = c->pool[--c->npool];
    pthread_mutex_unlock(&c->lock);
    if (h)
        curl_easy_reset(h); /* keeps the live connection, forgets the options */
    else
        h = curl_easy_init();
    return h;
}

static void handle_put(tide__k8s_client_t *c, CURL *h, int reusable)
{
    pthread_mutex_lock(&c->lock);
    if (reusable && c->npool < POOL_MAX) {
        c->pool[c->npool++] = h;
        h = NULL;
    }
    pthread_mutex_unlock(&c->lock);
    if (h) curl_easy_cleanup(h);
}

/* ---- transfer state --------------------------------------------------------- */

typedef struct xfer {
    CURL *h;
    char *buf;
    size_t len, cap, max;
    int overflow;  /* the body went over max: refused */
    int stopped;   /* on_line asked to stop */
    int streaming; /* 1 once a 200 response started: lines go to on_line */
    int decided;   /* streaming decided on the first body byte */
    size_t max_line;
    tide__k8s_line_fn on_line;
    void *ud;
    const atomic_int *stop;
} xfer_t;

static size_t on_header(char *data, size_t size, size_t n, void *ud)
{
    xfer_t *x = ud;
    size_t len = size * n;
    /* Refuse before allocating: a length announced over the cap ends the transfer
     * here, and the body is never read. */
    if (len > 15 && strncasecmp(data, "content-length:", 15) == 0) {
        unsigned long long cl = strtoull(data + 15, NULL, 10);
        long code = 0;
        curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &code);
        size_t limit = x->on_line && code == 200 ? x->max_line : x->max;
        if (cl > limit) {
            x->overflow = 1;
            return 0;
        }
    }
    return len;
}

static int grow(xfer_t *x, size_t need, size_t limit)
{
    if (need > limit) {
        x->overflow = 1;
        return -1;
    }
    if (need + 1 <= x->cap) return 0;
    size_t ncap = x->cap ? x->cap : 16384;
    while (ncap < need + 1)
        ncap *= 2;
    if (ncap > limit + 1) ncap = limit + 1;
    char *nb = realloc(x->buf, ncap);
    if (!nb) {
        x->overflow = 1;
        return -1;
    }
    x->buf = nb;
    x->cap = ncap;
    return 0;
}

static size_t on_body(char *data, size_t size, size_t n, void *ud)
{
    xfer_t *x = ud;
    size_t len = size * n;
    if (!x->decided) {
        long code = 0;
        curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &code);
        x->streaming = x->on_line && code == 200;
        x->decided = 1;
    }
    if (!x->streaming) {
        if (grow(x, x->len + len, x->max) < 0) return 0;
        memcpy(x->buf + x->len, data, len);
        x->len += len;
        x->buf[x->len] = 0;
        return len;
    }
    /* Streaming: append, then hand out every complete line. The pending partial
     * line is what is bounded, so one event can never exceed max_line. */
    size_t off = 0;
    while (off < len) {
        char *nl = memchr(data + off, '\n', len - off);
        size_t chunk = nl ? (size_t)(nl - (data + off)) : len - off;
        if (grow(x, x->len + chunk, x->max_line) < 0) return 0;
        memcpy(x->buf + x->len, data + off, chunk);
        x->len += chunk;
        x->buf[x->len] = 0;
        off += chunk;
        if (!nl) break;
        off++; /* the newline */
        if (x->len > 0) {
            int r = x->on_line(x->ud, x->buf, x->len);
            x->len = 0;
            if (r) {
                x->stopped = 1;
                return 0;
            }
        }
    }
    return len;
}

static int on_progress(void *ud, curl_off_t a, curl_off_t b, curl_off_t c2, curl_off_t d)
{
    xfer_t *x = ud;
    return x->stop && atomic_load(x->stop) ? 1 : 0;
}

static int map_status(long st)
{
    if (st >= 200 && st < 300) return TIDE_OK;
    switch (st) {
    case 404:
    case 410:
        return TIDE_ENOTFOUND;
    case 409:
        return TIDE_ESTALE;
    case 429:
        return TIDE_EABORTED;
    case 401:
    case 403:
        return TIDE_EAUTH;
    case 408:
    case 504:
        return TIDE_ETIMEDOUT;
    default:
        return st >= 500 ? TIDE_EIO : TIDE_EINVAL;
    }
}

static int perform(tide__k8s_client_t *c, const char *method, const char *path, const char *body,
                   size_t bodylen, const char *ctype, xfer_t *x, long timeout_ms,
                   tide__k8s_resp_t *resp)
{
    memset(resp, 0, sizeof(*resp));
    if (!path || path[0] != '/') {
        snprintf(resp->message, sizeof resp->message, "%s %s: path must start with /", method,
                 path ? path : "(null)");
        return TIDE_EINVAL;
    }
    CURL *h = handle_get(c);
    if (!h) return TIDE_ENOMEM;
    x->h = h;
    size_t ulen = strlen(c->auth.server) + strlen(path) + 1;
    char *url = malloc(ulen);
    struct curl_slist *hdrs = NULL;
    char cth[160];
    if (!url) {
        handle_put(c, h, 0);
        return TIDE_ENOMEM;
    }
    snprintf(url, ulen, "%s%s", c->auth.server, path);
    hdrs = curl_slist_append(hdrs, "Accept: application/json");
    if (body) {
        snprintf(cth, sizeof cth, "Content-Type: %s", ctype ? ctype : "application/json");
        hdrs = curl_slist_append(hdrs, cth);
    }
    if (c->auth_header) hdrs = curl_slist_append(hdrs, c->auth_header);
    /* The apiserver answers with 100-continue waits otherwise on large bodies. */
    hdrs = curl_slist_append(hdrs, "Expect:");

    char cerr[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, cerr);
    curl_easy_setopt(h, CURLOPT_USERAGENT,
                     "tide-k8s/"
                     "0.1");
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms > 0 ? timeout_ms : 0L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
    if (x->stop) {
        curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(h, CURLOPT_XFERINFODATA, x);
    }
    if (body) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)bodylen);
    } else if (strcmp(method, "GET") != 0) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, 0L);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, "");
    }
    if (strcmp(method, "GET") == 0) curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    if (c->auth.ca.data) {
        struct curl_blob b = {c->auth.ca.data, c->auth.ca.len, CURL_BLOB_NOCOPY};
        curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &b);
    }
    if (c->auth.cert.data) {
        struct curl_blob b = {c->auth.cert.data, c->auth.cert.len, CURL_BLOB_NOCOPY};
        curl_easy_setopt(h, CURLOPT_SSLCERT_BLOB, &b);
        curl_easy_setopt(h, CURLOPT_SSLCERTTYPE, "PEM");
    }
    if (c->auth.key.data) {
        struct curl_blob b = {c->auth.key.data, c->auth.key.len, CURL_BLOB_NOCOPY};
        curl_easy_setopt(h, CURLOPT_SSLKEY_BLOB, &b);
        curl_easy_setopt(h, CURLOPT_SSLKEYTYPE, "PEM");
    }
    if (c->auth.insecure_skip_verify) {
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
    }

    CURLcode cc = curl_easy_perform(h);
    long code = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    curl_slist_free_all(hdrs);
    free(url);
    resp->status = code;

    int rc;
    if (x->overflow) {
        snprintf(resp->message, sizeof resp->message,
                 "%s %s: response from %s exceeds the %zu-byte cap; refused", method, path,
                 c->auth.server,
                 x->streaming || (x->on_line && code == 200) ? x->max_line : x->max);
        rc = TIDE_ENOMEM;
    } else if (x->stopped) {
        rc = TIDE_OK;
    } else if (cc == CURLE_ABORTED_BY_CALLBACK) {
        snprintf(resp->message, sizeof resp->message, "%s %s: stopped", method, path);
        rc = TIDE_EABORTED;
    } else if (cc == CURLE_OPERATION_TIMEDOUT) {
        snprintf(resp->message, sizeof resp->message, "%s %s: timed out after %ld ms (%s)", method,
                 path, timeout_ms, c->auth.server);
        rc = TIDE_ETIMEDOUT;
    } else if (cc == CURLE_PEER_FAILED_VERIFICATION || cc == CURLE_SSL_CACERT_BADFILE ||
               cc == CURLE_SSL_CERTPROBLEM || cc == CURLE_SSL_CONNECT_ERROR) {
        snprintf(resp->message, sizeof resp->message,
                 "TLS with %s failed (%s; check certificate-authority and client credentials of "
                 "%s%s): %s",
                 c->auth.server,
                 cc == CURLE_PEER_FAILED_VERIFICATION
                     ? "the server's certificate could not be verified"
                 : cc == CURLE_SSL_CERTPROBLEM ? "the client certificate or key is unusable"
                                               : "handshake failed",
                 c->auth.source ? c->auth.source : "the client",
                 c->auth.insecure_skip_verify ? "; insecure-skip-tls-verify is set" : "",
                 cerr[0] ? cerr : curl_easy_strerror(cc));
        rc = TIDE_EAUTH;
    } else if (cc != CURLE_OK && code == 0) {
        snprintf(resp->message, sizeof resp->message, "%s %s: cannot reach %s: %s", method, path,
                 c->auth.server, cerr[0] ? cerr : curl_easy_strerror(cc));
        rc = TIDE_EIO;
    } else {
        rc = cc == CURLE_OK ? map_status(code) : TIDE_EIO;
        if (cc != CURLE_OK)
            snprintf(resp->message, sizeof resp->message, "%s %s: transfer from %s broke: %s",
                     method, path, c->auth.server, cerr[0] ? cerr : curl_easy_strerror(cc));
    }
    /* A handle whose transfer was cut short carries a half-read connection;
     * curl closes such connections itself, so the handle stays reusable. */
    handle_put(c, h, 1);

    if (!x->streaming && x->len > 0 && !x->overflow) {
        json_error_t je;
        resp->body = json_loadb(x->buf, x->len, 0, &je);
        if (!resp->body && rc == TIDE_OK) {
            snprintf(resp->message, sizeof resp->message, "%s %s: response is not JSON: %s", method,
                     path, je.text);
            rc = TIDE_EPROTO;
        }
    }
    if (code >= 300 && !x->stopped) {
        const char *msg = tide__k8s_str(resp->body, "message");
        const char *reason = tide__k8s_str(resp->body, "reason");
        if (reason) snprintf(resp->reason, sizeof resp->reason, "%s", reason);
        if (!resp->message[0] || msg)
            snprintf(resp->message, sizeof resp->message, "%s %s: HTTP %ld%s%s%s%s", method, path,
                     code, reason ? " " : "", reason ? reason : "", msg ? ": " : "",
                     msg ? msg : "");
    }
    return rc;
}

int tide__k8s_request(tide__k8s_client_t *c, const char *method, const char *path,
                      const json_t *body, const char *content_type, tide__k8s_resp_t *resp)
{
    char *text = NULL;
    if (body) {
        text = json_dumps(body, JSON_COMPACT);
        if (!text) {
            memset(resp, 0, sizeof(*resp));
            return TIDE_ENOMEM;
        }
    }
    xfer_t x;
    memset(&x, 0, sizeof x);
    x.max = c->max_response;
    int rc = perform(c, method, path, text, text ? strlen(text) : 0, content_type, &x,
                     c->timeout_ms, resp);
    free(text);
    free(x.buf);
    return rc;
}

int tide__k8s_stream(tide__k8s_client_t *c, const char *path, size_t max_line, long timeout_ms,
                     const atomic_int *stop, tide__k8s_line_fn on_line, void *ud,
                     tide__k8s_resp_t *resp)
{
    xfer_t x;
    memset(&x, 0, sizeof x);
    x.max = c->max_response;
    x.max_line = max_line;
    x.on_line = on_line;
    x.ud = ud;
    x.stop = stop;
    int rc = perform(c, "GET", path, NULL, 0, NULL, &x, timeout_ms, resp);
    free(x.buf);
    return rc;
}

/* ---- paths ---------------------------------------------------------------- */

int tide__k8s_path(char *buf, size_t len, const char *api_version, const char *ns,
                   const char *resource, const char *name, const char *sub)
{
    int core = strchr(api_version, '/') == NULL;
    int n = snprintf(buf, len, "/%s/%s%s%s%s/%s%s%s%s%s", core ? "api" : "apis", api_version,
                     ns ? "/namespaces/" : "", ns ? ns : "", "", resource, name ? "/" : "",
                     name ? name : "", sub ? "/" : "", sub ? sub : "");
    return n < 0 || (size_t)n >= len ? TIDE_EINVAL : TIDE_OK;
}

int tide__k8s_escape(char *buf, size_t len, const char *s)
{
    char *e = curl_easy_escape(NULL, s, 0);
    if (!e) return TIDE_ENOMEM;
    int n = snprintf(buf, len, "%s", e);
    curl_free(e);
    return n < 0 || (size_t)n >= len ? TIDE_EINVAL : TIDE_OK;
}

/* ---- verbs ---------------------------------------------------------------- */

int tide__k8s_get(tide__k8s_client_t *c, const char *path, tide__k8s_resp_t *resp)
{
    return tide__k8s_request(c, "GET", path, NULL, NULL, resp);
}

int tide__k8s_create(tide__k8s_client_t *c, const char *collection, const json_t *obj,
                     tide__k8s_resp_t *resp)
{
    return tide__k8s_request(c, "POST", collection, obj, NULL, resp);
}

int tide__k8s_replace(tide__k8s_client_t *c, const char *path, const json_t *obj,
                      tide__k8s_resp_t *resp)
{
    return tide__k8s_request(c, "PUT", path, obj, NULL, resp);
}

int tide__k8s_patch_merge(tide__k8s_client_t *c, const char *path, const json_t *patch,
                          tide__k8s_resp_t *resp)
{
    return tide__k8s_request(c, "PATCH", path, patch, "application/merge-patch+json", resp);
}

int tide__k8s_patch_strategic(tide__k8s_client_t *c, const char *path, const json_t *patch,
                              tide__k8s_resp_t *resp)
{
    return tide__k8s_request(c, "PATCH", path, patch, "application/strategic-merge-patch+json",
                             resp);
}

int tide__k8s_apply(tide__k8s_client_t *c, const char *path, const json_t *obj,
                    const char *field_manager, int force, tide__k8s_resp_t *resp)
{
    char fm[256], p[2048];
    memset(resp, 0, sizeof(*resp));
    if (!field_manager || tide__k8s_escape(fm, sizeof fm, field_manager) != TIDE_OK)
        return TIDE_EINVAL;
    int n = snprintf(p, sizeof p, "%s%sfieldManager=%s%s", path, strchr(path, '?') ? "&" : "?", fm,
                     force ? "&force=true" : "");
    if (n < 0 || (size_t)n >= sizeof p) return TIDE_EINVAL;
    /* JSON is YAML, so the apply body can be the object as JSON. */
    return tide__k8s_request(c, "PATCH", p, obj, "application/apply-patch+yaml", resp);
}

static json_t *delete_options(const tide__k8s_delete_opts_t *o)
{
    json_t *d = json_pack("{s:s,s:s}", "apiVersion", "v1", "kind", "DeleteOptions");
    if (!d || !o) return d;
    if (o->grace_seconds >= 0)
        json_object_set_new(d, "gracePeriodSeconds", json_integer(o->grace_seconds));
    if (o->uid || o->resource_version) {
        json_t *pre = json_object();
        if (o->uid) json_object_set_new(pre, "uid", json_string(o->uid));
        if (o->resource_version)
            json_object_set_new(pre, "resourceVersion", json_string(o->resource_version));
        json_object_set_new(d, "preconditions", pre);
    }
    if (o->propagation) json_object_set_new(d, "propagationPolicy", json_string(o->propagation));
    return d;
}

int tide__k8s_delete(tide__k8s_client_t *c, const char *path, const tide__k8s_delete_opts_t *opts,
                     tide__k8s_resp_t *resp)
{
    json_t *d = delete_options(opts);
    if (!d) {
        memset(resp, 0, sizeof(*resp));
        return TIDE_ENOMEM;
    }
    int rc = tide__k8s_request(c, "DELETE", path, d, NULL, resp);
    json_decref(d);
    return rc;
}

int tide__k8s_replace_status(tide__k8s_client_t *c, const char *path, const json_t *obj,
                             tide__k8s_resp_t *resp)
{
    char p[2048];
    memset(resp, 0, sizeof(*resp));
    if ((size_t)snprintf(p, sizeof p, "%s/status", path) >= sizeof p) return TIDE_EINVAL;
    return tide__k8s_request(c, "PUT", p, obj, NULL, resp);
}

int tide__k8s_patch_status(tide__k8s_client_t *c, const char *path, const json_t *patch,
                           const char *content_type, tide__k8s_resp_t *resp)
{
    char p[2048];
    memset(resp, 0, sizeof(*resp));
    if ((size_t)snprintf(p, sizeof p, "%s/status", path) >= sizeof p) return TIDE_EINVAL;
    return tide__k8s_request(c, "PATCH", p, patch,
                             content_type ? content_type : "application/merge-patch+json", resp);
}

int tide__k8s_evict(tide__k8s_client_t *c, const char *ns, const char *name,
                    const tide__k8s_delete_opts_t *opts, tide__k8s_resp_t *resp)
{
    char p[1024];
    memset(resp, 0, sizeof(*resp));
    if (tide__k8s_path(p, sizeof p, "v1", ns, "pods", name, "eviction") != TIDE_OK)
        return TIDE_EINVAL;
    json_t *ev = json_pack("{s:s,s:s,s:{s:s,s:s}}", "apiVersion", "policy/v1", "kind", "Eviction",
                           "metadata", "name", name, "namespace", ns);
    if (!ev) return TIDE_ENOMEM;
    if (opts) json_object_set_new(ev, "deleteOptions", delete_options(opts));
    int rc = tide__k8s_request(c, "POST", p, ev, NULL, resp);
    json_decref(ev);
    return rc;
}

int tide__k8s_list(tide__k8s_client_t *c, const char *collection, const char *label_selector,
                   const char *field_selector, int page_size, json_t **items, char *rv,
                   size_t rvlen, tide__k8s_resp_t *resp)
{
    *items = NULL;
    if (rv && rvlen) rv[0] = 0;
    memset(resp, 0, sizeof(*resp));
    json_t *all = json_array();
    if (!all) return TIDE_ENOMEM;
    char ls[1024] = "", fs[1024] = "", cont[4096] = "";
    if ((label_selector && tide__k8s_escape(ls, sizeof ls, label_selector) != TIDE_OK) ||
        (field_selector && tide__k8s_escape(fs, sizeof fs, field_selector) != TIDE_OK)) {
        json_decref(all);
        return TIDE_EINVAL;
    }
    size_t saved = c->max_response, used = 0;
    int rc = TIDE_OK;
    for (;;) {
        char p[8192];
        int n = snprintf(p, sizeof p, "%s%slimit=%d%s%s%s%s%s%s", collection,
                         strchr(collection, '?') ? "&" : "?", page_size > 0 ? page_size : 500,
                         ls[0] ? "&labelSelector=" : "", ls, fs[0] ? "&fieldSelector=" : "", fs,
                         cont[0] ? "&continue=" : "", cont);
        if (n < 0 || (size_t)n >= sizeof p) {
            rc = TIDE_EINVAL;
            break;
        }
        /* The cap bounds the whole list, not each page: a page may only use what
         * the earlier pages left. xfer reads the cap per request. */
        xfer_t x;
        memset(&x, 0, sizeof x);
        x.max = saved - used;
        rc = perform(c, "GET", p, NULL, 0, NULL, &x, c->timeout_ms, resp);
        used += x.len;
        free(x.buf);
        if (rc == TIDE_ENOMEM && x.overflow)
            snprintf(resp->message, sizeof resp->message,
                     "GET %s: list from %s exceeds the %zu-byte cap; refused", collection,
                     c->auth.server, saved);
        if (rc != TIDE_OK) break;
        json_t *page = json_object_get(resp->body, "items");
        if (!json_is_array(page)) {
            if (!json_is_null(page) && page) {
                rc = TIDE_EPROTO;
                break;
            }
        } else {
            json_array_extend(all, page);
        }
        const char *r = tide__k8s_str(resp->body, "metadata.resourceVersion");
        if (r && rv) snprintf(rv, rvlen, "%s", r);
        const char *next = tide__k8s_str(resp->body, "metadata.continue");
        if (!next || !*next) break;
        if (tide__k8s_escape(cont, sizeof cont, next) != TIDE_OK) {
            rc = TIDE_EPROTO;
            break;
        }
        tide__k8s_resp_clear(resp);
    }
    if (rc != TIDE_OK) {
        json_decref(all);
        return rc;
    }
    *items = all;
    return TIDE_OK;
}

json_t *tide__k8s_at(const json_t *obj, const char *dotted)
{
    const json_t *cur = obj;
    const char *p = dotted;
    while (cur && *p) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        char key[128];
        if (n >= sizeof key) return NULL;
        memcpy(key, p, n);
        key[n] = 0;
        cur = json_is_object(cur) ? json_object_get(cur, key) : NULL;
        p += n;
        if (*p == '.') p++;
    }
    return (json_t *)cur;
}

const char *tide__k8s_str(const json_t *obj, const char *dotted)
{
    return json_string_value(tide__k8s_at(obj, dotted));
}
