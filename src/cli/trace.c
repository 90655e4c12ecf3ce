/*
 * trace.c - parsing a capacity trace and replaying it (see trace.h).
 *
 * The file is read in two passes over the same text: the first finds the largest
 * capacity (the scale cannot be known before the last line), the second builds the
 * schedule. Both passes run the same line checks, so every error names its line.
 */
#include "cli/trace.h"
#include "cli/textfile.h"
#include "core/error.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "tide.h"

/* Trims blanks off both ends of [*s, *s + *n). */
static void trim(const char **s, size_t *n)
{
    while (*n && isblank((unsigned char)**s)) (*s)++, (*n)--;
    while (*n && isblank((unsigned char)(*s)[*n - 1])) (*n)--;
}

/* Parses a field that must be a non-negative decimal number (digits with an
 * optional fraction; no sign, exponent, hex or "inf", which strtod would take). */
static int parse_ms(const char *s, size_t n, double *out)
{
    char buf[64];
    if (n == 0 || n >= sizeof buf) return -1;
    int dot = 0, digits = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '.' && !dot) dot = 1;
        else if (isdigit((unsigned char)s[i])) digits++;
        else return -1;
    }
    if (!digits) return -1;
    memcpy(buf, s, n);
    buf[n] = '\0';
    double d = strtod(buf, NULL);
    if (!isfinite(d) || d > 1e15) return -1;
    *out = d;
    return 0;
}

static int parse_count(const char *s, size_t n, long *out)
{
    if (n == 0 || n > 9) return -1;
    long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isdigit((unsigned char)s[i])) return -1;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return 0;
}

typedef struct {
    const char *text;
    size_t len, pos;
    int lineno;
    int seen_data;
} reader_t;

/* The next data line as (time_ms, capacity): 1 when there is one, 0 at the end,
 * -1 on a bad line (err filled in). */
static int next_line(reader_t *r, const char *name, double *ms, long *cap, char *err, size_t errlen)
{
    while (r->pos < r->len) {
        r->lineno++;
        const char *line = r->text + r->pos;
        const char *nl = memchr(line, '\n', r->len - r->pos);
        size_t n = nl ? (size_t)(nl - line) : r->len - r->pos;
        r->pos += n + (nl ? 1 : 0);
        if (n > TIDE__TRACE_MAX_LINE) {
            tide__set_file_err(err, errlen, name, r->lineno, "line too long (%zu bytes; the limit is %d)", n,
                    TIDE__TRACE_MAX_LINE);
            return -1;
        }
        if (n && line[n - 1] == '\r') n--;
        trim(&line, &n);
        if (n == 0 || line[0] == '#') continue;
        const char *comma = memchr(line, ',', n);
        if (!comma) {
            tide__set_file_err(err, errlen, name, r->lineno, "expected \"time_ms,capacity\"");
            return -1;
        }
        const char *f1 = line, *f2 = comma + 1;
        size_t n1 = (size_t)(comma - line), n2 = n - n1 - 1;
        if (memchr(f2, ',', n2)) {
            tide__set_file_err(err, errlen, name, r->lineno,
                    "more than two fields (expected \"time_ms,capacity\")");
            return -1;
        }
        trim(&f1, &n1);
        trim(&f2, &n2);
        if (!r->seen_data && n1 == 7 && n2 == 8 && !strncasecmp(f1, "time_ms", 7) &&
            !strncasecmp(f2, "capacity", 8)) {
            r->seen_data = 1; /* the header may only come first */
            continue;
        }
        r->seen_data = 1;
        if (parse_ms(f1, n1, ms)) {
            tide__set_file_err(err, errlen, name, r->lineno,
                    "time \"%.*s\" is not a non-negative number of milliseconds",
                    (int)(n1 > 32 ? 32 : n1), f1);
            return -1;
        }
        if (parse_count(f2, n2, cap) || *cap > TIDE__TRACE_MAX_CAPACITY) {
            tide__set_file_err(err, errlen, name, r->lineno,
                    "capacity \"%.*s\" is not an integer in 0..%d", (int)(n2 > 32 ? 32 : n2), f2,
                    TIDE__TRACE_MAX_CAPACITY);
            return -1;
        }
        return 1;
    }
    return 0;
}

static int scale(long cap, int trace_max, const tide__trace_opts_t *o)
{
    long w = lround((double)cap * o->max_workers / trace_max);
    if (w < o->min_workers) w = o->min_workers;
    if (w > o->max_workers) w = o->max_workers;
    return (int)w;
}

int tide__trace_parse(const char *text, size_t len, const char *name, const tide__trace_opts_t *o,
                      tide__trace_t *out, char *err, size_t errlen)
{
    if (!out || !o) return TIDE_EINVAL;
    memset(out, 0, sizeof *out);
    if (!name) name = "trace";
    if (err && errlen) err[0] = '\0';
    if (!text && len) return TIDE_EINVAL;
    if (!(o->speedup > 0) || !isfinite(o->speedup)) {
        tide__set_file_err(err, errlen, name, 0, "the speed-up must be a positive number (got %g)",
                o->speedup);
        return TIDE_ECONFIG;
    }
    if (o->max_workers < 1 || o->min_workers < 0 || o->min_workers > o->max_workers) {
        tide__set_file_err(err, errlen, name, 0, "bad worker bounds: min %d, max %d", o->min_workers,
                o->max_workers);
        return TIDE_ECONFIG;
    }
    if (!(o->notice_s >= 0) || !isfinite(o->notice_s)) {
        tide__set_file_err(err, errlen, name, 0, "the notice must be a non-negative number of seconds");
        return TIDE_ECONFIG;
    }
    if (len > TIDE__TRACE_MAX_FILE) {
        tide__set_file_err(err, errlen, name, 0, "larger than %d bytes", TIDE__TRACE_MAX_FILE);
        return TIDE_ECONFIG;
    }

    /* Pass 1: check every line, find the scale and the number of events. */
    reader_t r = {.text = text, .len = len};
    double ms, prev_ms = 0, first_ms = 0;
    long cap;
    int rc, lines = 0, trace_max = 0;
    size_t events = 0;
    while ((rc = next_line(&r, name, &ms, &cap, err, errlen)) == 1) {
        if (lines > 0 && ms < prev_ms) {
            tide__set_file_err(err, errlen, name, r.lineno,
                    "time %.0f ms is before the previous line's %.0f ms (times must not "
                    "decrease)",
                    ms, prev_ms);
            return TIDE_ECONFIG;
        }
        if (lines == 0) first_ms = ms;
        if (lines == 0 || ms != prev_ms) events++;
        if (cap > trace_max) trace_max = (int)cap;
        prev_ms = ms;
        lines++;
    }
    if (rc < 0) return TIDE_ECONFIG;
    if (lines == 0) {
        tide__set_file_err(err, errlen, name, 0, "no \"time_ms,capacity\" lines");
        return TIDE_ECONFIG;
    }
    if (trace_max == 0) {
        tide__set_file_err(err, errlen, name, 0, "capacity is never above 0: nothing to scale to --max");
        return TIDE_ECONFIG;
    }

    tide__trace_point_t *pts = malloc(events * sizeof *pts);
    if (!pts) return TIDE_ENOMEM;

    /* Pass 2: one point per event (its last line counts), then drop repeats. */
    r = (reader_t){.text = text, .len = len};
    size_t n = 0;
    int have = 0;
    double ev_ms = 0;
    long ev_cap = 0;
    for (;;) {
        rc = next_line(&r, name, &ms, &cap, NULL, 0);
        if (have && (rc != 1 || ms != ev_ms)) {
            int w = scale(ev_cap, trace_max, o);
            double t = (ev_ms - first_ms) / 1000.0 / o->speedup;
            if (n == 0 || pts[n - 1].world != w) pts[n++] = (tide__trace_point_t){t, w};
        }
        if (rc != 1) break;
        have = 1;
        ev_ms = ms;
        ev_cap = cap;
    }
    out->points = pts;
    out->count = n;
    out->trace_max = trace_max;
    out->lines = lines;
    out->duration_s = (prev_ms - first_ms) / 1000.0 / o->speedup;
    out->notice_s = o->notice_s;
    return TIDE_OK;
}

int tide__trace_load(const char *path, const tide__trace_opts_t *o, tide__trace_t *out, char *err,
                     size_t errlen)
{
    if (!path || !out || !o) return TIDE_EINVAL;
    memset(out, 0, sizeof *out);
    char *buf;
    size_t len;
    TIDE_CHECK(tide__read_capped(path, TIDE__TRACE_MAX_FILE, &buf, &len, err, errlen));
    int rc = tide__trace_parse(buf, len, path, o, out, err, errlen);
    free(buf);
    return rc;
}

void tide__trace_free(tide__trace_t *tr)
{
    if (!tr) return;
    free(tr->points);
    memset(tr, 0, sizeof *tr);
}

int tide__trace_target(const tide__trace_t *tr, double now)
{
    if (!tr || tr->count == 0) return 0;
    /* Binary search for the last point with t <= now. */
    size_t lo = 0, hi = tr->count;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (tr->points[mid].t <= now) lo = mid;
        else hi = mid;
    }
    return tr->points[lo].world;
}

int tide__trace_next(const tide__trace_t *tr, size_t *cursor, double now, int current,
                     tide__trace_change_t *out)
{
    if (!tr || !cursor || !out || *cursor >= tr->count || tr->points[*cursor].t > now) return 0;
    size_t i = *cursor;
    while (i + 1 < tr->count && tr->points[i + 1].t <= now) i++;
    *cursor = i + 1;
    int target = tr->points[i].world;
    if (target == current) return 0;
    out->preempt = current > target ? current - target : 0;
    out->start = target > current ? target - current : 0;
    out->notice_s = tr->notice_s;
    out->target = target;
    out->t = tr->points[i].t;
    return 1;
}
