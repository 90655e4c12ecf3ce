/*
 * chaos.c - parsing and checking `--chaos FILE` (see chaos.h for the format).
 *
 * Every check happens here, before the job starts, so that a typo in the schedule
 * costs a message rather than a half-run experiment. The parser is strict: unknown
 * keys, fields on actions that do not take them and non-integer ranks are errors,
 * because a silently ignored "notice" (for "notice_s") would run a different
 * experiment from the one the user wrote down.
 */
#include "cli/chaos.h"
#include "cli/textfile.h"
#include "core/error.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "tide.h"

static const char *const kind_names[] = {
    [TIDE__CHAOS_KILL] = "kill",
    [TIDE__CHAOS_PREEMPT] = "preempt",
    [TIDE__CHAOS_FREEZE] = "freeze",
    [TIDE__CHAOS_JOIN] = "join",
    [TIDE__CHAOS_COORD_RESTART] = "coordinator-restart",
};
#define NKINDS (sizeof kind_names / sizeof kind_names[0])

const char *tide__chaos_kind_name(tide__chaos_kind_t kind)
{
    if ((unsigned)kind >= NKINDS) return "?";
    return kind_names[kind];
}

/* Copies s into buf for a message, cut short and with unprintable bytes replaced,
 * so that a hostile file cannot put terminal escapes into the user's terminal. */
static const char *printable(const char *s, char *buf, size_t n)
{
    size_t i = 0;
    for (; s[i] && i + 1 < n; i++)
        buf[i] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
    buf[i] = '\0';
    if (s[i] && n > 4) memcpy(buf + n - 4, "...", 4);
    return buf;
}

static int kind_from_name(const char *s, tide__chaos_kind_t *out)
{
    for (size_t i = 0; i < NKINDS; i++) {
        if (!strcmp(s, kind_names[i])) {
            *out = (tide__chaos_kind_t)i;
            return 0;
        }
    }
    return -1;
}

/* A number field in seconds: present-and-valid (0), or an error message (-1). */
static int seconds_field(json_t *v, const char *key, double *out, char *why, size_t whylen)
{
    if (!json_is_number(v)) {
        snprintf(why, whylen, "\"%s\" must be a number of seconds", key);
        return -1;
    }
    double d = json_number_value(v);
    if (!isfinite(d) || d < 0) {
        snprintf(why, whylen, "\"%s\" is %g: it must not be negative", key, d);
        return -1;
    }
    if (d > TIDE__CHAOS_MAX_SECONDS) {
        snprintf(why, whylen, "\"%s\" is %g s: more than a week (%g s) is surely a typo", key, d,
                 TIDE__CHAOS_MAX_SECONDS);
        return -1;
    }
    *out = d;
    return 0;
}

/* Checks one JSON object and fills *a. Returns 0, or -1 with why filled in. */
static int parse_action(json_t *obj, int max_workers, tide__chaos_action_t *a, char *why,
                        size_t whylen)
{
    char buf[48];
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v)
    {
        if (strcmp(key, "t") && strcmp(key, "action") && strcmp(key, "notice_s") &&
            strcmp(key, "target")) {
            snprintf(why, whylen, "unknown key \"%s\" (expected t, action, notice_s, target)",
                     printable(key, buf, sizeof buf));
            return -1;
        }
    }

    json_t *action = json_object_get(obj, "action");
    if (!action) {
        snprintf(why, whylen, "missing \"action\"");
        return -1;
    }
    if (!json_is_string(action)) {
        snprintf(why, whylen, "\"action\" must be a string");
        return -1;
    }
    if (kind_from_name(json_string_value(action), &a->kind)) {
        snprintf(why, whylen,
                 "unknown action \"%s\" (expected kill, preempt, freeze, join or "
                 "coordinator-restart)",
                 printable(json_string_value(action), buf, sizeof buf));
        return -1;
    }
    const char *kname = kind_names[a->kind];

    json_t *t = json_object_get(obj, "t");
    if (!t) {
        snprintf(why, whylen, "missing \"t\" (seconds since the job started)");
        return -1;
    }
    if (seconds_field(t, "t", &a->t, why, whylen)) return -1;

    json_t *notice = json_object_get(obj, "notice_s");
    a->notice_s = 0;
    if (a->kind == TIDE__CHAOS_PREEMPT) {
        if (!notice) {
            snprintf(why, whylen,
                     "preempt needs \"notice_s\" (seconds of notice before SIGKILL; 0 for none)");
            return -1;
        }
        if (seconds_field(notice, "notice_s", &a->notice_s, why, whylen)) return -1;
    } else if (notice) {
        snprintf(why, whylen, "\"notice_s\" is only allowed with preempt, not with %s", kname);
        return -1;
    }

    json_t *target = json_object_get(obj, "target");
    if (a->kind == TIDE__CHAOS_JOIN || a->kind == TIDE__CHAOS_COORD_RESTART) {
        if (target) {
            snprintf(why, whylen, "\"target\" is not allowed with %s", kname);
            return -1;
        }
        a->target = TIDE__CHAOS_TARGET_NONE;
        return 0;
    }
    a->target = TIDE__CHAOS_TARGET_RANDOM;
    if (!target) return 0;
    if (json_is_string(target)) {
        if (strcmp(json_string_value(target), "random")) {
            snprintf(why, whylen, "\"target\" must be a rank or \"random\", not \"%s\"",
                     printable(json_string_value(target), buf, sizeof buf));
            return -1;
        }
        return 0;
    }
    if (!json_is_integer(target)) {
        snprintf(why, whylen, "\"target\" must be a rank (an integer) or \"random\"");
        return -1;
    }
    json_int_t r = json_integer_value(target);
    if (r < 0 || (max_workers > 0 && r >= max_workers)) {
        if (max_workers > 0)
            snprintf(why, whylen, "target %lld is out of range: ranks are 0..%d (--max %d)",
                     (long long)r, max_workers - 1, max_workers);
        else
            snprintf(why, whylen, "target %lld is out of range: ranks are >= 0", (long long)r);
        return -1;
    }
    if (r > 1000000) {
        snprintf(why, whylen, "target %lld is out of range", (long long)r);
        return -1;
    }
    a->target = (int)r;
    return 0;
}

static int by_time(const void *pa, const void *pb)
{
    const tide__chaos_action_t *a = pa, *b = pb;
    if (a->t < b->t) return -1;
    if (a->t > b->t) return 1;
    return (a->line > b->line) - (a->line < b->line); /* qsort is not stable; lines are */
}

int tide__chaos_parse(const char *text, size_t len, const char *name, int max_workers,
                      tide__chaos_t *out, char *err, size_t errlen)
{
    if (!out) return TIDE_EINVAL;
    out->actions = NULL;
    out->count = 0;
    if (!name) name = "chaos";
    if (err && errlen) err[0] = '\0';
    if (!text && len) return TIDE_EINVAL;
    if (len > TIDE__CHAOS_MAX_FILE) {
        tide__set_file_err(err, errlen, name, 0, "larger than %d bytes", TIDE__CHAOS_MAX_FILE);
        return TIDE_ECONFIG;
    }

    tide__chaos_action_t *acts = NULL;
    size_t n = 0, cap = 0;
    int lineno = 0;
    size_t pos = 0;
    while (pos < len) {
        lineno++;
        const char *line = text + pos;
        const char *nl = memchr(line, '\n', len - pos);
        size_t llen = nl ? (size_t)(nl - line) : len - pos;
        pos += llen + (nl ? 1 : 0);
        if (llen > TIDE__CHAOS_MAX_LINE) {
            tide__set_file_err(err, errlen, name, lineno, "line too long (%zu bytes; the limit is %d)",
                    llen, TIDE__CHAOS_MAX_LINE);
            goto bad;
        }
        if (llen && line[llen - 1] == '\r') llen--;
        size_t i = 0;
        while (i < llen && (line[i] == ' ' || line[i] == '\t')) i++;
        if (i == llen || line[i] == '#') continue;

        json_error_t jerr;
        json_t *obj = json_loadb(line, llen, JSON_REJECT_DUPLICATES, &jerr);
        if (!obj) {
            tide__set_file_err(err, errlen, name, lineno, "not valid JSON (column %d: %s)", jerr.column,
                    jerr.text);
            goto bad;
        }
        if (!json_is_object(obj)) {
            json_decref(obj);
            tide__set_file_err(err, errlen, name, lineno,
                    "expected a JSON object {\"t\": ..., \"action\": ...}");
            goto bad;
        }
        if (n == TIDE__CHAOS_MAX_ACTIONS) {
            json_decref(obj);
            tide__set_file_err(err, errlen, name, lineno, "more than %d actions", TIDE__CHAOS_MAX_ACTIONS);
            goto bad;
        }
        tide__chaos_action_t a = {.line = lineno};
        char why[256];
        int rc = parse_action(obj, max_workers, &a, why, sizeof why);
        json_decref(obj);
        if (rc) {
            tide__set_file_err(err, errlen, name, lineno, "%s", why);
            goto bad;
        }
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            tide__chaos_action_t *p = realloc(acts, ncap * sizeof *p);
            if (!p) {
                tide__set_file_err(err, errlen, name, lineno, "out of memory");
                free(acts);
                return TIDE_ENOMEM;
            }
            acts = p;
            cap = ncap;
        }
        acts[n++] = a;
    }
    if (n > 1) qsort(acts, n, sizeof *acts, by_time);
    out->actions = acts;
    out->count = n;
    return TIDE_OK;
bad:
    free(acts);
    return TIDE_ECONFIG;
}

int tide__chaos_load(const char *path, int max_workers, tide__chaos_t *out, char *err,
                     size_t errlen)
{
    if (!path || !out) return TIDE_EINVAL;
    out->actions = NULL;
    out->count = 0;
    char *buf;
    size_t len;
    TIDE_CHECK(tide__read_capped(path, TIDE__CHAOS_MAX_FILE, &buf, &len, err, errlen));
    int rc = tide__chaos_parse(buf, len, path, max_workers, out, err, errlen);
    free(buf);
    return rc;
}

void tide__chaos_free(tide__chaos_t *c)
{
    if (!c) return;
    free(c->actions);
    c->actions = NULL;
    c->count = 0;
}

const tide__chaos_action_t *tide__chaos_next(const tide__chaos_t *c, size_t *cursor, double now)
{
    if (!c || !cursor || *cursor >= c->count) return NULL;
    const tide__chaos_action_t *a = &c->actions[*cursor];
    if (a->t > now) return NULL;
    (*cursor)++;
    return a;
}
