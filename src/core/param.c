/* param.c - see param.h. */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "core/error.h"
#include "core/param.h"

int tide__parse_int(const char *s, int64_t min, int64_t max, int64_t *out)
{
    if (!s || !*s) return TIDE_EINVAL;
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s) return TIDE_EINVAL;
    int64_t mul = 1;
    switch (*end) {
    case 'k': case 'K': mul = 1024; end++; break;
    case 'm': case 'M': mul = 1024 * 1024; end++; break;
    case 'g': case 'G': mul = 1024 * 1024 * 1024; end++; break;
    default: break;
    }
    if (*end) return TIDE_EINVAL;
    if (v > INT64_MAX / mul || v < INT64_MIN / mul) return TIDE_EINVAL;
    v *= mul;
    if (v < min || v > max) return TIDE_EINVAL;
    *out = v;
    return TIDE_OK;
}

int tide__env_int(const char *name, int64_t def, int64_t min, int64_t max, int64_t *out)
{
    const char *v = getenv(name);
    if (!v || !*v) {
        *out = def;
        return TIDE_OK;
    }
    if (tide__parse_int(v, min, max, out) != TIDE_OK) {
        TIDE_ERROR("%s=\"%s\": expected an integer in [%lld, %lld]", name, v, (long long)min,
                   (long long)max);
        return TIDE_ECONFIG;
    }
    return TIDE_OK;
}

uint64_t tide__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
