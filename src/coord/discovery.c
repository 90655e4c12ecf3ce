/* discovery.c - see discovery.h. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "coord/discovery.h"
#include "core/error.h"
#include "core/param.h"

#define OUTPUT_MAX (1 << 20)

static int valid_host(const char *s, size_t n)
{
    if (!n || n >= TIDE__HOST_MAX) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '-' || c == '_'))
            return 0;
    }
    return 1;
}

int tide__hosts_parse(const char *text, tide__host_slots_t *hosts, int cap)
{
    int n = 0, lineno = 0;
    const char *p = text;
    while (*p) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        lineno++;
        /* Trim spaces and a trailing CR. */
        const char *a = p, *b = p + len;
        while (a < b && (*a == ' ' || *a == '\t')) a++;
        while (b > a && (b[-1] == ' ' || b[-1] == '\t' || b[-1] == '\r')) b--;
        if (a < b && *a != '#') {
            const char *colon = memchr(a, ':', (size_t)(b - a));
            size_t hl = colon ? (size_t)(colon - a) : (size_t)(b - a);
            int64_t slots = 1;
            char num[32];
            if (colon) {
                size_t nl = (size_t)(b - colon - 1);
                if (nl == 0 || nl >= sizeof num) slots = -1;
                else {
                    memcpy(num, colon + 1, nl);
                    num[nl] = 0;
                    if (tide__parse_int(num, 0, 1024, &slots) != TIDE_OK) slots = -1;
                }
            }
            if (!valid_host(a, hl) || slots < 0) {
                TIDE_ERROR("hosts script, line %d: \"%.*s\": expected HOST[:SLOTS] with SLOTS in 0..1024",
                           lineno, (int)((size_t)(b - a) > 80 ? 80 : (size_t)(b - a)), a);
                return TIDE_EPROTO;
            }
            int j;
            for (j = 0; j < n; j++)
                if (strlen(hosts[j].name) == hl && !memcmp(hosts[j].name, a, hl)) break;
            if (j == n) {
                if (n == cap) {
                    TIDE_ERROR("hosts script: more than %d hosts", cap);
                    return TIDE_EPROTO;
                }
                memcpy(hosts[n].name, a, hl);
                hosts[n].name[hl] = 0;
                hosts[n].slots = 0;
                n++;
            }
            hosts[j].slots += (int)slots;
            if (hosts[j].slots > 1024) hosts[j].slots = 1024;
        }
        if (!e) break;
        p = e + 1;
    }
    return n;
}

int tide__hosts_run(const char *path, int timeout_ms, tide__host_slots_t *hosts, int cap)
{
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) < 0) return TIDE_ESYS;
    pid_t pid = fork();
    if (pid < 0) {
        close(pfd[0]);
        close(pfd[1]);
        return TIDE_ESYS;
    }
    if (pid == 0) {
        /* Its own process group, so that a timeout kills what it started too. */
        setpgid(0, 0);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        dup2(pfd[1], STDOUT_FILENO);
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0) dup2(devnull, STDIN_FILENO);
        execl("/bin/sh", "sh", "-c", path, (char *)NULL);
        _exit(127);
    }
    setpgid(pid, pid); /* also here, so that it holds before any kill below */
    close(pfd[1]);
    char *out = malloc(OUTPUT_MAX + 1);
    size_t len = 0;
    int rc = out ? TIDE_OK : TIDE_ENOMEM;
    uint64_t deadline = tide__now_ns() + (uint64_t)timeout_ms * 1000000ull;
    while (rc == TIDE_OK) {
        uint64_t now = tide__now_ns();
        if (now >= deadline) {
            TIDE_ERROR("hosts script %s did not finish within %d ms", path, timeout_ms);
            rc = TIDE_ETIMEDOUT;
            break;
        }
        struct pollfd p = {pfd[0], POLLIN, 0};
        int pr = poll(&p, 1, (int)((deadline - now) / 1000000ull) + 1);
        if (pr < 0 && errno == EINTR) continue;
        if (pr <= 0) continue;
        ssize_t r = read(pfd[0], out + len, OUTPUT_MAX - len);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        len += (size_t)r;
        if (len == OUTPUT_MAX) {
            TIDE_ERROR("hosts script %s printed more than %d bytes", path, OUTPUT_MAX);
            rc = TIDE_EPROTO;
        }
    }
    close(pfd[0]);
    if (rc != TIDE_OK) kill(-pid, SIGKILL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (rc == TIDE_OK && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
        TIDE_ERROR("hosts script %s failed (%s %d)", path, WIFEXITED(status) ? "exit status" : "signal",
                   WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
        rc = TIDE_EIO;
    }
    if (rc == TIDE_OK) {
        out[len] = 0;
        if (strlen(out) != len) {
            TIDE_ERROR("hosts script %s printed a NUL byte", path);
            rc = TIDE_EPROTO;
        } else {
            rc = tide__hosts_parse(out, hosts, cap);
        }
    }
    free(out);
    return rc;
}

void tide__blacklist_init(tide__blacklist_t *b, int base_ms, int max_ms)
{
    memset(b, 0, sizeof *b);
    b->base_ms = base_ms > 0 ? base_ms : 1000;
    b->max_ms = max_ms >= b->base_ms ? max_ms : b->base_ms;
}

void tide__blacklist_free(tide__blacklist_t *b)
{
    free(b->e);
    memset(b, 0, sizeof *b);
}

static tide__blacklist_entry_t *entry(tide__blacklist_t *b, const char *host, int create)
{
    for (int i = 0; i < b->n; i++)
        if (!strcmp(b->e[i].name, host)) return &b->e[i];
    if (!create) return NULL;
    if (b->n == b->cap) {
        int cap = b->cap ? 2 * b->cap : 16;
        tide__blacklist_entry_t *e = realloc(b->e, (size_t)cap * sizeof *e);
        if (!e) return NULL;
        b->e = e;
        b->cap = cap;
    }
    tide__blacklist_entry_t *e = &b->e[b->n++];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", host);
    return e;
}

int tide__blacklist_fail(tide__blacklist_t *b, const char *host)
{
    tide__blacklist_entry_t *e = entry(b, host, 1);
    if (!e) return 0;
    e->fails++;
    int64_t ms = b->base_ms;
    for (int i = 1; i < e->fails && ms < b->max_ms; i++) ms *= 2;
    if (ms > b->max_ms) ms = b->max_ms;
    e->until_ns = tide__now_ns() + (uint64_t)ms * 1000000ull;
    return (int)ms;
}

void tide__blacklist_ok(tide__blacklist_t *b, const char *host)
{
    tide__blacklist_entry_t *e = entry(b, host, 0);
    if (e) {
        e->fails = 0;
        e->until_ns = 0;
    }
}

int tide__blacklisted(const tide__blacklist_t *b, const char *host)
{
    for (int i = 0; i < b->n; i++)
        if (!strcmp(b->e[i].name, host)) return tide__now_ns() < b->e[i].until_ns;
    return 0;
}
