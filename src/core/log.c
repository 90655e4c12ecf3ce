/* log.c - see log.h. One write(2) per line so that lines from ranks never mix. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"

static pthread_once_t level_once = PTHREAD_ONCE_INIT;
static int log_level = TIDE_LOG_WARN;
static char log_prefix[64] = "tide";

static void read_level(void)
{
    const char *v = getenv("TIDE_LOG_LEVEL");
    if (!v) return;
    if (!strcasecmp(v, "error")) log_level = TIDE_LOG_ERROR;
    else if (!strcasecmp(v, "warn")) log_level = TIDE_LOG_WARN;
    else if (!strcasecmp(v, "info")) log_level = TIDE_LOG_INFO;
    else if (!strcasecmp(v, "debug")) log_level = TIDE_LOG_DEBUG;
}

int tide__log_enabled(enum tide__log_level level)
{
    pthread_once(&level_once, read_level);
    return (int)level <= log_level;
}

void tide__log_set_rank(int rank)
{
    if (rank < 0) snprintf(log_prefix, sizeof log_prefix, "tide");
    else snprintf(log_prefix, sizeof log_prefix, "tide rank %d", rank);
}

void tide__log_set_prefix(const char *who)
{
    snprintf(log_prefix, sizeof log_prefix, "%s", who);
}

void tide__log(enum tide__log_level level, const char *fmt, ...)
{
    static const char *names[] = {"error", "warn", "info", "debug"};
    char line[2048];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof line, "%02d:%02d:%02d.%03ld [%s] %s: ", tm.tm_hour, tm.tm_min,
                     tm.tm_sec, ts.tv_nsec / 1000000, log_prefix, names[level]);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof line) n += vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n >= sizeof line - 1) n = (int)sizeof line - 2;
    line[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, (size_t)n);
    (void)w;
}
