/* proto.c - see proto.h. */
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "core/param.h"
#include "elastic/proto.h"

int tide__ctl_timing(int *heartbeat_ms, int *peer_timeout_ms)
{
    int64_t hb, to;
    TIDE_CHECK(tide__env_int("TIDE_HEARTBEAT_MS", TIDE__HEARTBEAT_MS_DEFAULT, 10, 60000, &hb));
    TIDE_CHECK(tide__env_int("TIDE_PEER_TIMEOUT_MS", TIDE__PEER_TIMEOUT_MS_DEFAULT, 50, 3600000, &to));
    if (to < 2 * hb) {
        TIDE_ERROR("TIDE_PEER_TIMEOUT_MS (%lld) must be at least twice TIDE_HEARTBEAT_MS (%lld)",
                   (long long)to, (long long)hb);
        return TIDE_ECONFIG;
    }
    *heartbeat_ms = (int)hb;
    *peer_timeout_ms = (int)to;
    return TIDE_OK;
}

static const char *const wstatus_names[] = {"new", "member", "ready", "leaving", "done"};

const char *tide__wstatus_name(int s)
{
    return s >= 0 && s <= TIDE__WS_DONE ? wstatus_names[s] : "?";
}

int tide__wstatus_parse(const char *s)
{
    for (int i = 0; s && i <= TIDE__WS_DONE; i++)
        if (!strcmp(s, wstatus_names[i])) return i;
    return -1;
}

int tide__json_int(const json_t *o, const char *key, long long lo, long long hi, long long *out)
{
    json_t *x = json_object_get(o, key);
    if (!json_is_integer(x)) return TIDE_EPROTO;
    long long v = json_integer_value(x);
    if (v < lo || v > hi) return TIDE_EPROTO;
    *out = v;
    return TIDE_OK;
}

int tide__json_str(const json_t *o, const char *key, char *out, size_t len)
{
    json_t *x = json_object_get(o, key);
    if (!json_is_string(x) || json_string_length(x) >= len) return TIDE_EPROTO;
    memcpy(out, json_string_value(x), json_string_length(x) + 1);
    if (strlen(out) != json_string_length(x)) return TIDE_EPROTO; /* an embedded NUL */
    return TIDE_OK;
}

int tide__json_real(const json_t *o, const char *key, double *out)
{
    json_t *x = json_object_get(o, key);
    if (!json_is_number(x)) return TIDE_EPROTO;
    double v = json_number_value(x);
    if (!isfinite(v)) return TIDE_EPROTO;
    *out = v;
    return TIDE_OK;
}

int tide__valid_name(const char *s, size_t max)
{
    size_t n = s ? strlen(s) : 0;
    if (!n || n >= max) return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '.' || ch == '_' || ch == ':' || ch == '/' || ch == '-'))
            return 0;
    }
    return 1;
}
