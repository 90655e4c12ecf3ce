/*
 * http.c - the coordinator's HTTP endpoints on libmicrohttpd (see http.h).
 *
 * One internal polling thread serves every connection, so the callback is never
 * called twice at once and the coordinator's lock is held by at most one request.
 * Bodies are built in a capped buffer and handed to libmicrohttpd, which frees
 * them once sent.
 */
#include "coord/http.h"

#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <jansson.h>
#include <microhttpd.h>

#include "core/log.h"
#include "tide.h"

#define CONN_LIMIT 64
#define CONN_TIMEOUT_S 10
#define CONN_MEMORY (32 * 1024) /* per connection: request line, headers, buffers */

struct tide__http_body {
    char *data;
    size_t len, cap;
    int failed;
};

struct tide__http {
    struct MHD_Daemon *d;
    tide__http_handler_fn fn;
    void *ctx;
    int port;
};

int tide__http_append(tide__http_body_t *b, const char *data, size_t len)
{
    if (!b) return TIDE_EINVAL;
    if (b->failed) return TIDE_ENOMEM;
    if (len > TIDE__HTTP_MAX_BODY - b->len) {
        b->failed = 1;
        return TIDE_ENOMEM;
    }
    if (b->len + len + 1 > b->cap) {
        size_t ncap = b->cap ? b->cap : 1024;
        while (ncap < b->len + len + 1) ncap *= 2;
        char *p = realloc(b->data, ncap);
        if (!p) {
            b->failed = 1;
            return TIDE_ENOMEM;
        }
        b->data = p;
        b->cap = ncap;
    }
    memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = '\0';
    return TIDE_OK;
}

int tide__http_printf(tide__http_body_t *b, const char *fmt, ...)
{
    char small[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return TIDE_EINVAL;
    if ((size_t)n < sizeof small) return tide__http_append(b, small, (size_t)n);
    if ((size_t)n > TIDE__HTTP_MAX_BODY) {
        if (b) b->failed = 1;
        return TIDE_ENOMEM;
    }
    char *big = malloc((size_t)n + 1);
    if (!big) {
        if (b) b->failed = 1;
        return TIDE_ENOMEM;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    int rc = tide__http_append(b, big, (size_t)n);
    free(big);
    return rc;
}

static int dump_cb(const char *buf, size_t size, void *data)
{
    return tide__http_append(data, buf, size) ? -1 : 0;
}

int tide__http_json(tide__http_body_t *b, const json_t *j)
{
    if (!b || !j) return TIDE_EINVAL;
    if (json_dump_callback(j, dump_cb, b, JSON_COMPACT | JSON_REAL_PRECISION(10))) {
        b->failed = 1;
        return TIDE_ENOMEM;
    }
    return TIDE_OK;
}

/* Appends prefix+name as a valid Prometheus metric name. */
static int prom_name(tide__http_body_t *b, const char *prefix, const char *name)
{
    char buf[256];
    size_t n = 0;
    for (int part = 0; part < 2; part++) {
        const char *s = part ? name : prefix;
        for (; s && *s && n + 2 < sizeof buf; s++) {
            char c = *s;
            int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
                     (c >= '0' && c <= '9');
            if (n == 0 && c >= '0' && c <= '9') buf[n++] = '_';
            buf[n++] = ok ? c : '_';
        }
    }
    if (n == 0) return TIDE_EINVAL;
    return tide__http_append(b, buf, n);
}

int tide__http_prom_family(tide__http_body_t *b, const char *prefix, const char *name,
                           const char *type, const char *help)
{
    if (!b || !name || !type) return TIDE_EINVAL;
    int rc = TIDE_OK;
    if (help) {
        if ((rc = tide__http_append(b, "# HELP ", 7)) || (rc = prom_name(b, prefix, name)) ||
            (rc = tide__http_append(b, " ", 1)))
            return rc;
        /* HELP text escapes only backslash and newline. */
        for (const char *s = help; *s && !rc; s++) {
            if (*s == '\\') rc = tide__http_append(b, "\\\\", 2);
            else if (*s == '\n') rc = tide__http_append(b, "\\n", 2);
            else rc = tide__http_append(b, s, 1);
        }
        if (rc || (rc = tide__http_append(b, "\n", 1))) return rc;
    }
    if ((rc = tide__http_append(b, "# TYPE ", 7)) || (rc = prom_name(b, prefix, name)))
        return rc;
    return tide__http_printf(b, " %s\n", type);
}

int tide__http_prom_sample(tide__http_body_t *b, const char *prefix, const char *name,
                           const char *labels, double value)
{
    if (!b || !name) return TIDE_EINVAL;
    int rc = prom_name(b, prefix, name);
    if (rc) return rc;
    if (labels && *labels && (rc = tide__http_printf(b, "{%s}", labels))) return rc;
    if (isnan(value)) return tide__http_append(b, " NaN\n", 5);
    if (isinf(value)) return tide__http_printf(b, " %sInf\n", value > 0 ? "+" : "-");
    return tide__http_printf(b, " %.17g\n", value);
}

int tide__http_prom(tide__http_body_t *b, const char *prefix, const char *name, const char *type,
                    const char *help, double value)
{
    int rc = tide__http_prom_family(b, prefix, name, type, help);
    return rc ? rc : tide__http_prom_sample(b, prefix, name, NULL, value);
}

/* ---- the server ---- */

static enum MHD_Result respond(struct MHD_Connection *c, unsigned status, const char *type,
                               char *body, size_t len, int allow_header)
{
    struct MHD_Response *r;
    if (body && len) r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    else {
        free(body);
        r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    }
    if (!r) return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (allow_header) MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result respond_text(struct MHD_Connection *c, unsigned status, const char *text,
                                    int allow_header)
{
    char *body = strdup(text);
    return respond(c, status, "text/plain; charset=utf-8", body, body ? strlen(body) : 0,
                   allow_header);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    tide__http_t *h = cls;
    (void)version;
    (void)upload_data;
    /* Every answer is decided on the first call, from the request line and headers
     * alone: nothing here reads a body, so no body can make the server allocate. */
    if (*upload_data_size) {
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (*con_cls) return MHD_YES;
    *con_cls = h;

    int ep;
    if (!strcmp(url, "/metrics")) ep = TIDE__HTTP_METRICS;
    else if (!strcmp(url, "/healthz")) ep = TIDE__HTTP_HEALTHZ;
    else if (!strcmp(url, "/status")) ep = TIDE__HTTP_STATUS;
    else return respond_text(c, MHD_HTTP_NOT_FOUND, "not found\n", 0);

    if (strcmp(method, MHD_HTTP_METHOD_GET) && strcmp(method, MHD_HTTP_METHOD_HEAD))
        return respond_text(c, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed\n", 1);
    const char *clen = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                   MHD_HTTP_HEADER_CONTENT_LENGTH);
    const char *te = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_TRANSFER_ENCODING);
    if ((clen && strcmp(clen, "0")) || te)
        return respond_text(c, 413 /* Content Too Large */, "a GET takes no body\n", 0);

    static const char *const types[] = {
        [TIDE__HTTP_METRICS] = "text/plain; version=0.0.4; charset=utf-8",
        [TIDE__HTTP_HEALTHZ] = "text/plain; charset=utf-8",
        [TIDE__HTTP_STATUS] = "application/json",
    };
    if (!h->fn) {
        if (ep == TIDE__HTTP_HEALTHZ) return respond_text(c, MHD_HTTP_OK, "ok\n", 0);
        return respond_text(c, MHD_HTTP_NOT_FOUND, "not found\n", 0);
    }
    tide__http_body_t body = {0};
    int status = h->fn(h->ctx, (tide__http_endpoint_t)ep, &body);
    if (body.failed) {
        free(body.data);
        TIDE_WARN("http: the %s body is too large or out of memory", url);
        return respond_text(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal error\n", 0);
    }
    if (status < 100 || status > 599) {
        free(body.data);
        if (status < 0) TIDE_WARN("http: %s failed: %s", url, tide_strerror(status));
        return respond_text(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal error\n", 0);
    }
    if (ep == TIDE__HTTP_HEALTHZ && body.len == 0) {
        free(body.data);
        return respond_text(c, (unsigned)status, status == 200 ? "ok\n" : "unhealthy\n", 0);
    }
    return respond(c, (unsigned)status, types[ep], body.data, body.len, 0);
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    if (!tide__log_enabled(TIDE_LOG_DEBUG)) return;
    char buf[512];
    vsnprintf(buf, sizeof buf, fmt, ap);
    size_t n = strlen(buf);
    while (n && buf[n - 1] == '\n') buf[--n] = '\0';
    tide__log(TIDE_LOG_DEBUG, "http: %s", buf);
}

int tide__http_start(const char *host, int port, tide__http_handler_fn fn, void *ctx,
                     tide__http_t **out)
{
    if (!out || port < 0 || port > 65535) return TIDE_EINVAL;
    *out = NULL;
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
    if (!host || !*host) {
        struct sockaddr_in *sin = (struct sockaddr_in *)&ss;
        sin->sin_family = AF_INET;
        sin->sin_addr.s_addr = htonl(INADDR_ANY);
        sin->sin_port = htons((uint16_t)port);
    } else {
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                                 .ai_flags = AI_PASSIVE};
        struct addrinfo *ai = NULL;
        int gai = getaddrinfo(host, NULL, &hints, &ai);
        if (gai || !ai) {
            TIDE_WARN("http: cannot resolve \"%s\": %s", host, gai_strerror(gai));
            if (ai) freeaddrinfo(ai);
            return TIDE_EINVAL;
        }
        memcpy(&ss, ai->ai_addr, ai->ai_addrlen);
        freeaddrinfo(ai);
        if (ss.ss_family == AF_INET6) {
            ((struct sockaddr_in6 *)&ss)->sin6_port = htons((uint16_t)port);
            flags |= MHD_USE_IPv6;
        } else {
            ((struct sockaddr_in *)&ss)->sin_port = htons((uint16_t)port);
        }
    }

    tide__http_t *h = calloc(1, sizeof *h);
    if (!h) return TIDE_ENOMEM;
    h->fn = fn;
    h->ctx = ctx;

    /* The server thread inherits this thread's mask: block everything while it is
     * created so that no process-directed signal lands on it. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    h->d = MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, on_request, h,
                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)CONN_LIMIT,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)CONN_TIMEOUT_S,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CONN_MEMORY,
                            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL, MHD_OPTION_END);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!h->d) {
        TIDE_WARN("http: cannot listen on %s:%d", host && *host ? host : "*", port);
        free(h);
        return TIDE_ESYS;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    h->port = info ? (int)info->port : port;
    *out = h;
    return TIDE_OK;
}

int tide__http_port(const tide__http_t *h)
{
    return h ? h->port : -1;
}

void tide__http_stop(tide__http_t *h)
{
    if (!h) return;
    MHD_stop_daemon(h->d);
    free(h);
}
