/*
 * util.c - logging, clocks, time formats and IPv4 helpers of the node agent
 * (see util.h).
 */
#include "k8s/agent/util.h"

#include <arpa/inet.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

int agent_verbose;

static void vlog(const char *fmt, va_list ap)
{
    char line[2048];
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    int n = snprintf(line, sizeof line, "%02d:%02d:%02d.%03ld tide-node-agent: ", tm.tm_hour,
                     tm.tm_min, tm.tm_sec, (long)tv.tv_usec / 1000);
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    /* One write per line, so lines from different threads do not interleave. */
    fprintf(stderr, "%s\n", line);
}

void agent_log(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog(fmt, ap);
    va_end(ap);
}

void agent_debug(const char *fmt, ...)
{
    if (!agent_verbose) return;
    va_list ap;
    va_start(ap, fmt);
    vlog(fmt, ap);
    va_end(ap);
}

long agent_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

void agent_rfc3339(char *buf, size_t len, time_t t)
{
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

void agent_rfc3339_micro(char *buf, size_t len)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    char s[32];
    strftime(s, sizeof s, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, len, "%s.%06ldZ", s, (long)tv.tv_usec);
}

int agent_sleep(agent_t *a, long ms)
{
    long end = agent_now_ms() + ms;
    while (!atomic_load(&a->stop)) {
        long left = end - agent_now_ms();
        if (left <= 0) return 0;
        struct timespec ts = {0, (left > 100 ? 100 : left) * 1000000L};
        nanosleep(&ts, NULL);
    }
    return 1;
}

int agent_ip_parse(const char *s, uint32_t *ip)
{
    struct in_addr in;
    if (inet_pton(AF_INET, s, &in) != 1) return -1;
    *ip = ntohl(in.s_addr);
    return 0;
}

void agent_ip_str(uint32_t ip, char *buf, size_t len)
{
    struct in_addr in = {htonl(ip)};
    inet_ntop(AF_INET, &in, buf, (socklen_t)len);
}

int agent_parse_cidr(const char *s, uint32_t *net, uint32_t *bits)
{
    char tmp[64];
    const char *slash = strchr(s, '/');
    if (!slash || (size_t)(slash - s) >= sizeof tmp) return -1;
    memcpy(tmp, s, (size_t)(slash - s));
    tmp[slash - s] = 0;
    char *end;
    long b = strtol(slash + 1, &end, 10);
    if (*end || b < 8 || b > 30) return -1;
    uint32_t ip;
    if (agent_ip_parse(tmp, &ip) < 0) return -1;
    uint32_t mask = b == 0 ? 0 : ~0u << (32 - b);
    *net = ip & mask;
    *bits = (uint32_t)b;
    return 0;
}

agent_node_t *agent_find_node(agent_t *a, const char *name)
{
    if (!name) return NULL;
    for (int i = 0; i < a->nnodes; i++)
        if (strcmp(a->nodes[i].name, name) == 0) return &a->nodes[i];
    return NULL;
}
