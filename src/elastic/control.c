/* control.c - see control.h. */
#include <arpa/inet.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/net.h"
#include "core/param.h"
#include "elastic/control.h"

void tide__host_id(char *out, size_t len)
{
    char host[64] = "?", boot[40] = "?";
    gethostname(host, sizeof host - 1);
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (!fgets(boot, sizeof boot, f)) snprintf(boot, sizeof boot, "?");
        fclose(f);
        boot[strcspn(boot, "\n")] = 0;
    }
    struct stat st;
    unsigned long long ns = stat("/proc/self/ns/net", &st) == 0 ? (unsigned long long)st.st_ino : 0;
    snprintf(out, len, "%s/%s/%llu", host, boot, ns);
}

int tide__control_connect(const char *rendezvous, const tide__secret_t *secret, int rank,
                          int timeout_ms, int *fd_out, char *local_addr, size_t local_len)
{
    char host[256];
    int port;
    if (tide__net_split_addr(rendezvous, host, sizeof host, &port) != TIDE_OK) {
        TIDE_ERROR("TIDE_RENDEZVOUS=\"%s\": expected HOST:PORT", rendezvous);
        return TIDE_ECONFIG;
    }
    int fd, rc;
    /* The coordinator may still be starting (or restarting): retry briefly. */
    uint64_t deadline = tide__now_ns() + (uint64_t)timeout_ms * 1000000ull;
    for (;;) {
        rc = tide__net_connect(host, port, 2000, &fd);
        if (rc == TIDE_OK || tide__now_ns() >= deadline) break;
        usleep(50000);
    }
    if (rc != TIDE_OK) {
        TIDE_ERROR("cannot reach the coordinator at %s: %s", rendezvous, tide_strerror(rc));
        return rc;
    }
    rc = tide__auth_connect(fd, secret, TIDE__CONN_CONTROL, 0, (uint32_t)rank, timeout_ms);
    if (rc != TIDE_OK) {
        close(fd);
        return rc;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    if (ss.ss_family == AF_INET6)
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, local_addr, (socklen_t)local_len);
    else
        inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, local_addr, (socklen_t)local_len);
    *fd_out = fd;
    return TIDE_OK;
}

static int get_int(const json_t *o, const char *k, long long lo, long long hi, long long *v)
{
    json_t *x = json_object_get(o, k);
    if (!json_is_integer(x)) return TIDE_EPROTO;
    *v = json_integer_value(x);
    return *v >= lo && *v <= hi ? TIDE_OK : TIDE_EPROTO;
}

static int get_str(const json_t *o, const char *k, char *out, size_t len)
{
    json_t *x = json_object_get(o, k);
    if (!json_is_string(x) || json_string_length(x) >= len) return TIDE_EPROTO;
    memcpy(out, json_string_value(x), json_string_length(x) + 1);
    return TIDE_OK;
}

int tide__membership_parse(const json_t *msg, int expect_size, tide__membership_t *out)
{
    long long gen, size;
    json_t *arr = json_object_get(msg, "members");
    if (get_int(msg, "generation", 0, UINT32_MAX, &gen) || get_int(msg, "size", 1, 65536, &size) ||
        !json_is_array(arr) || (long long)json_array_size(arr) != size ||
        (expect_size > 0 && size != expect_size)) {
        TIDE_ERROR("malformed member table from the coordinator");
        return TIDE_EPROTO;
    }
    tide__member_t *m = calloc((size_t)size, sizeof *m);
    if (!m) return TIDE_ENOMEM;
    for (size_t i = 0; i < (size_t)size; i++) {
        json_t *e = json_array_get(arr, i);
        long long rank, pid, port;
        if (get_int(e, "rank", 0, size - 1, &rank) || get_int(e, "pid", 0, INT32_MAX, &pid) ||
            get_int(e, "port", 0, 65535, &port) || m[rank].host_id[0] ||
            get_str(e, "host", m[rank].host_id, sizeof m[rank].host_id) ||
            get_str(e, "addr", m[rank].addr, sizeof m[rank].addr)) {
            TIDE_ERROR("malformed entry %zu in the member table", i);
            free(m);
            return TIDE_EPROTO;
        }
        m[rank].rank = (int)rank;
        m[rank].pid = (int)pid;
        m[rank].data_port = (int)port;
    }
    out->generation = (uint32_t)gen;
    out->size = (int)size;
    out->members = m;
    return TIDE_OK;
}

int tide__control_register(int fd, const tide__register_t *reg, int timeout_ms,
                           tide__membership_t *out)
{
    json_t *msg = json_pack("{s:s, s:i, s:i, s:i, s:i, s:s, s:s}", "type", "register", "rank",
                            reg->rank, "size", reg->size, "pid", reg->pid, "port", reg->data_port,
                            "host", reg->host_id, "addr", reg->addr);
    if (!msg) return TIDE_ENOMEM;
    uint64_t deadline = tide__now_ns() + (uint64_t)timeout_ms * 1000000ull;
    int rc = tide__msg_send(fd, msg, deadline);
    json_decref(msg);
    TIDE_CHECK(rc);
    json_t *reply;
    TIDE_CHECK(tide__msg_recv(fd, TIDE__MSG_MAX, deadline, &reply));
    const char *type = json_string_value(json_object_get(reply, "type"));
    if (!strcmp(type, "error")) {
        json_t *m = json_object_get(reply, "message");
        TIDE_ERROR("the coordinator refused this worker: %s",
                   json_is_string(m) ? json_string_value(m) : "(no reason given)");
        json_decref(reply);
        return TIDE_ECONFIG;
    }
    if (strcmp(type, "members")) {
        TIDE_ERROR("expected a member table from the coordinator, got \"%.32s\"", type);
        json_decref(reply);
        return TIDE_EPROTO;
    }
    rc = tide__membership_parse(reply, reg->size, out);
    json_decref(reply);
    return rc;
}
