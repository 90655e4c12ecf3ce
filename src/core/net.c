/* net.c - see net.h. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/error.h"
#include "core/net.h"
#include "core/param.h"

int tide__net_split_addr(const char *addr, char *host, size_t hostlen, int *port)
{
    if (!addr) return TIDE_EINVAL;
    const char *colon = strrchr(addr, ':');
    if (!colon || colon == addr) return TIDE_EINVAL;
    const char *h = addr;
    size_t hl = (size_t)(colon - addr);
    if (*h == '[' && hl >= 2 && h[hl - 1] == ']') {
        h++;
        hl -= 2;
    }
    if (hl == 0 || hl >= hostlen) return TIDE_EINVAL;
    memcpy(host, h, hl);
    host[hl] = 0;
    int64_t p;
    if (tide__parse_int(colon + 1, 0, 65535, &p) != TIDE_OK) return TIDE_EINVAL;
    *port = (int)p;
    return TIDE_OK;
}

static int resolve(const char *host, int port, int passive, struct addrinfo **res)
{
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    struct addrinfo hints = {0};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = passive ? AI_PASSIVE : 0;
    int rc = getaddrinfo(host, ps, &hints, res);
    if (rc) {
        TIDE_WARN("cannot resolve %s: %s", host, gai_strerror(rc));
        return TIDE_ENOTFOUND;
    }
    return TIDE_OK;
}

int tide__net_listen(const char *host, int port, int backlog, int *fd_out, int *port_out)
{
    struct addrinfo *res;
    TIDE_CHECK(resolve(host, port, 1, &res));
    int fd = -1, err = 0;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) continue;
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, backlog) == 0) break;
        err = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        TIDE_WARN("cannot listen on %s:%d: %s", host, port, strerror(err));
        return tide__errno_to_status(err);
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    *port_out = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                               : ((struct sockaddr_in *)&ss)->sin_port);
    *fd_out = fd;
    return TIDE_OK;
}

static int wait_fd(int fd, short events, uint64_t deadline_ns, int cancel_fd)
{
    for (;;) {
        int timeout = -1;
        if (deadline_ns) {
            /* Past the deadline still polls once, so a zero timeout means "now". */
            uint64_t now = tide__now_ns();
            timeout = now >= deadline_ns ? 0 : (int)((deadline_ns - now + 999999) / 1000000);
        }
        struct pollfd p[2] = {{fd, events, 0}, {cancel_fd, POLLIN, 0}};
        int rc = poll(p, cancel_fd >= 0 ? 2 : 1, timeout);
        if (rc > 0 && cancel_fd >= 0 && p[1].revents) return TIDE_EABORTED;
        if (rc > 0) return TIDE_OK;
        if (rc == 0) return TIDE_ETIMEDOUT;
        if (errno != EINTR) return tide__errno_to_status(errno);
    }
}

int tide__net_connect(const char *host, int port, int timeout_ms, int cancel_fd, int *fd_out)
{
    struct addrinfo *res;
    TIDE_CHECK(resolve(host, port, 0, &res));
    int rc = TIDE_EPEERLOST;
    uint64_t deadline = tide__now_ns() + (uint64_t)timeout_ms * 1000000ull;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) continue;
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0 && errno != EINPROGRESS) {
            rc = tide__errno_to_status(errno);
            close(fd);
            continue;
        }
        rc = wait_fd(fd, POLLOUT, deadline, cancel_fd);
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        if (rc == TIDE_OK) {
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
            if (soerr) rc = tide__errno_to_status(soerr);
        }
        if (rc != TIDE_OK) {
            close(fd);
            if (rc == TIDE_EABORTED) break;
            continue;
        }
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        *fd_out = fd;
        break;
    }
    freeaddrinfo(res);
    return rc;
}

int tide__net_accept(int lfd, int timeout_ms, int cancel_fd, int *fd_out)
{
    uint64_t deadline = timeout_ms < 0 ? 0 : tide__now_ns() + (uint64_t)timeout_ms * 1000000ull;
    TIDE_CHECK(wait_fd(lfd, POLLIN, deadline, cancel_fd));
    int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) return tide__errno_to_status(errno);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    *fd_out = fd;
    return TIDE_OK;
}

int tide__net_read_full(int fd, void *buf, size_t len, uint64_t deadline_ns, int cancel_fd)
{
    unsigned char *p = buf;
    while (len) {
        ssize_t n = recv(fd, p, len, MSG_DONTWAIT);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n == 0) return TIDE_EPEERLOST;
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return tide__errno_to_status(errno);
        TIDE_CHECK(wait_fd(fd, POLLIN, deadline_ns, cancel_fd));
    }
    return TIDE_OK;
}

int tide__net_write_full(int fd, const void *buf, size_t len, uint64_t deadline_ns,
                         int cancel_fd)
{
    const unsigned char *p = buf;
    while (len) {
        ssize_t n = send(fd, p, len, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return tide__errno_to_status(errno);
        TIDE_CHECK(wait_fd(fd, POLLOUT, deadline_ns, cancel_fd));
    }
    return TIDE_OK;
}

int tide__msg_send(int fd, const json_t *msg, uint64_t deadline_ns)
{
    char *body = json_dumps(msg, JSON_COMPACT);
    if (!body) return TIDE_ENOMEM;
    size_t len = strlen(body);
    if (len > TIDE__MSG_MAX) {
        free(body);
        return TIDE_EINVAL;
    }
    uint32_t be = htonl((uint32_t)len);
    int rc = tide__net_write_full(fd, &be, 4, deadline_ns, -1);
    if (rc == TIDE_OK) rc = tide__net_write_full(fd, body, len, deadline_ns, -1);
    free(body);
    return rc;
}

int tide__msg_recv(int fd, size_t max, uint64_t deadline_ns, json_t **msg_out)
{
    uint32_t be;
    TIDE_CHECK(tide__net_read_full(fd, &be, 4, deadline_ns, -1));
    size_t len = ntohl(be);
    if (max > TIDE__MSG_MAX) max = TIDE__MSG_MAX;
    if (len == 0 || len > max) {
        TIDE_WARN("control message of %zu bytes refused (limit %zu)", len, max);
        return TIDE_EPROTO;
    }
    char *body = malloc(len);
    if (!body) return TIDE_ENOMEM;
    int rc = tide__net_read_full(fd, body, len, deadline_ns, -1);
    if (rc != TIDE_OK) {
        free(body);
        return rc;
    }
    json_error_t jerr;
    json_t *msg = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    free(body);
    if (!msg || !json_is_object(msg) || !json_is_string(json_object_get(msg, "type"))) {
        TIDE_WARN("malformed control message: %s", msg ? "no string \"type\"" : jerr.text);
        json_decref(msg);
        return TIDE_EPROTO;
    }
    *msg_out = msg;
    return TIDE_OK;
}

void tide__net_tune_data_socket(int fd, int bufsize)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (bufsize > 0) {
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bufsize, sizeof bufsize);
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bufsize, sizeof bufsize);
    }
}
