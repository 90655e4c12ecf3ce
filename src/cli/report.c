/*
 * report.c - the run report's builder, writer, reader and summary (see report.h).
 *
 * The builder keeps aggregates rather than a list of steps: a long run completes
 * millions of steps, and what the report needs from them (counts, time inside
 * steps, a rate over time) fits in a fixed number of windows. The summary is
 * printed from the JSON form, so `tide run` and `tide report FILE` print the same
 * paragraph for the same run.
 */
#include "cli/report.h"
#include "cli/textfile.h"
#include "core/error.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "core/param.h"
#include "tide.h"

#define NBUCKETS 1024
#define BUCKET0_S 0.25 /* the rate window at the start; it doubles as the run grows */

typedef struct {
    double t;
    char kind[TIDE__REPORT_MAX_NAME + 1];
    int rank;
    int64_t lost_steps;  /* < 0: not known yet */
    double recovery_ms;  /* < 0: not known yet */
    int64_t step_before; /* the last step completed before the new group formed */
    int armed;           /* a generation formed at or after t */
    double armed_t;
} event_t;

typedef struct {
    double t;
    int n;
} world_t;

typedef struct {
    char name[TIDE__REPORT_MAX_NAME + 1];
    double value;
} metric_t;

struct tide__report {
    pthread_mutex_t mu;
    uint64_t t0_ns;
    double max_t; /* the latest time any call mentioned */

    event_t *events;
    size_t nevents, cap_events, first_pending;
    world_t *worlds;
    size_t nworlds, cap_worlds;
    metric_t *metrics;
    size_t nmetrics;
    size_t dropped_events, dropped_worlds, dropped_metrics;

    int64_t nsteps, last_step, samples;
    double step_time;

    double buckets[NBUCKETS]; /* samples completed in each window */
    size_t nbuckets;
    double bucket_w;
};

int tide__report_create(tide__report_t **out)
{
    if (!out) return TIDE_EINVAL;
    tide__report_t *r = calloc(1, sizeof *r);
    if (!r) return TIDE_ENOMEM;
    if (pthread_mutex_init(&r->mu, NULL)) {
        free(r);
        return TIDE_ESYS;
    }
    r->t0_ns = tide__now_ns();
    r->last_step = -1;
    r->bucket_w = BUCKET0_S;
    *out = r;
    return TIDE_OK;
}

void tide__report_destroy(tide__report_t *r)
{
    if (!r) return;
    pthread_mutex_destroy(&r->mu);
    free(r->events);
    free(r->worlds);
    free(r->metrics);
    free(r);
}

double tide__report_elapsed(const tide__report_t *r)
{
    if (!r) return 0;
    return (double)(tide__now_ns() - r->t0_ns) / 1e9;
}

static double sane_time(tide__report_t *r, double t)
{
    if (!isfinite(t) || t < 0) t = 0;
    if (t > r->max_t) r->max_t = t;
    return t;
}

static int grow(void **p, size_t *cap, size_t elem, size_t max)
{
    size_t ncap = *cap ? *cap * 2 : 16;
    if (ncap > max) ncap = max;
    if (ncap <= *cap) return -1;
    void *q = realloc(*p, ncap * elem);
    if (!q) return -1;
    *p = q;
    *cap = ncap;
    return 0;
}

static int valid_name(const char *s, int allow_any_printable)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > TIDE__REPORT_MAX_NAME) return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (allow_any_printable ? (c < 0x20 || c >= 0x7f)
                                : !((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                                    c == '-' || c == '_'))
            return 0;
    }
    return 1;
}

int tide__report_event(tide__report_t *r, double t, const char *kind, int rank)
{
    if (!r || !valid_name(kind, 0)) return TIDE_EINVAL;
    pthread_mutex_lock(&r->mu);
    int rc;
    if (r->nevents == r->cap_events &&
        grow((void **)&r->events, &r->cap_events, sizeof(event_t), TIDE__REPORT_MAX_EVENTS)) {
        r->dropped_events++;
        rc = TIDE_ENOMEM;
    } else {
        event_t *e = &r->events[r->nevents];
        memset(e, 0, sizeof *e);
        e->t = sane_time(r, t);
        snprintf(e->kind, sizeof e->kind, "%s", kind);
        e->rank = rank < 0 ? -1 : rank;
        e->lost_steps = -1;
        e->recovery_ms = -1;
        rc = (int)r->nevents++;
    }
    pthread_mutex_unlock(&r->mu);
    return rc;
}

static int resolved(const event_t *e)
{
    return e->lost_steps >= 0 && e->recovery_ms >= 0;
}

int tide__report_event_resolved(tide__report_t *r, int id, int64_t lost_steps,
                                double recovery_ms)
{
    if (!r) return TIDE_EINVAL;
    pthread_mutex_lock(&r->mu);
    int rc = TIDE_ENOTFOUND;
    if (id >= 0 && (size_t)id < r->nevents) {
        event_t *e = &r->events[id];
        if (lost_steps >= 0) e->lost_steps = lost_steps;
        if (recovery_ms >= 0 && isfinite(recovery_ms)) e->recovery_ms = recovery_ms;
        rc = TIDE_OK;
    }
    pthread_mutex_unlock(&r->mu);
    return rc;
}

/* Skips first_pending past events with nothing left to work out, so that a long
 * run does not rescan its whole history at every step. */
static void advance_pending(tide__report_t *r)
{
    while (r->first_pending < r->nevents && resolved(&r->events[r->first_pending]))
        r->first_pending++;
}

int tide__report_world_size(tide__report_t *r, double t, int n)
{
    if (!r || n < 0) return TIDE_EINVAL;
    pthread_mutex_lock(&r->mu);
    t = sane_time(r, t);
    for (size_t i = r->first_pending; i < r->nevents; i++) {
        event_t *e = &r->events[i];
        if (!e->armed && !resolved(e) && e->t <= t) {
            e->armed = 1;
            e->armed_t = t;
            e->step_before = r->last_step; /* the old group may have gone on after e->t */
        }
    }
    int rc = TIDE_OK;
    if (r->nworlds == 0 || r->worlds[r->nworlds - 1].n != n) {
        if (r->nworlds == r->cap_worlds && grow((void **)&r->worlds, &r->cap_worlds,
                                                sizeof(world_t), TIDE__REPORT_MAX_WORLD_CHANGES)) {
            r->dropped_worlds++;
            rc = TIDE_ENOMEM;
        } else {
            r->worlds[r->nworlds++] = (world_t){t, n};
        }
    }
    pthread_mutex_unlock(&r->mu);
    return rc;
}

/* Adds samples spread evenly over [t0, t1] to the rate windows, doubling the
 * window width (merging pairs) whenever t1 would fall past the last one. */
static void add_samples(tide__report_t *r, double t0, double t1, double samples)
{
    while (t1 >= NBUCKETS * r->bucket_w) {
        for (size_t i = 0; i < NBUCKETS / 2; i++)
            r->buckets[i] = r->buckets[2 * i] + r->buckets[2 * i + 1];
        memset(r->buckets + NBUCKETS / 2, 0, sizeof(double) * (NBUCKETS / 2));
        r->nbuckets = (r->nbuckets + 1) / 2;
        r->bucket_w *= 2;
    }
    double w = r->bucket_w;
    size_t last = (size_t)(t1 / w);
    if (t1 - t0 <= 0) {
        r->buckets[last] += samples;
    } else {
        for (size_t i = (size_t)(t0 / w); i <= last; i++) {
            double lo = fmax(t0, (double)i * w), hi = fmin(t1, (double)(i + 1) * w);
            if (hi > lo) r->buckets[i] += samples * (hi - lo) / (t1 - t0);
        }
    }
    if (last + 1 > r->nbuckets) r->nbuckets = last + 1;
}

int tide__report_step(tide__report_t *r, double t, int64_t step, int64_t samples,
                      double step_seconds)
{
    if (!r || samples < 0) return TIDE_EINVAL;
    if (!isfinite(step_seconds) || step_seconds < 0) step_seconds = 0;
    pthread_mutex_lock(&r->mu);
    t = sane_time(r, t);
    if (step_seconds > t) step_seconds = t;
    for (size_t i = r->first_pending; i < r->nevents; i++) {
        event_t *e = &r->events[i];
        if (!e->armed || resolved(e) || t < e->armed_t) continue;
        if (e->recovery_ms < 0) e->recovery_ms = (t - e->t) * 1000.0;
        if (e->lost_steps < 0) {
            int64_t redo = e->step_before - (step - 1);
            e->lost_steps = redo > 0 ? redo : 0;
        }
    }
    advance_pending(r);
    r->nsteps++;
    r->last_step = step;
    r->samples += samples;
    r->step_time += step_seconds;
    add_samples(r, t - step_seconds, t, (double)samples);
    pthread_mutex_unlock(&r->mu);
    return TIDE_OK;
}

int tide__report_metric(tide__report_t *r, const char *name, double value)
{
    if (!r || !valid_name(name, 1)) return TIDE_EINVAL;
    pthread_mutex_lock(&r->mu);
    int rc = TIDE_OK;
    size_t i = 0;
    while (i < r->nmetrics && strcmp(r->metrics[i].name, name)) i++;
    if (i == r->nmetrics) {
        if (r->nmetrics == TIDE__REPORT_MAX_METRICS) {
            r->dropped_metrics++;
            rc = TIDE_ENOMEM;
            goto out;
        }
        if (!r->metrics) {
            r->metrics = calloc(TIDE__REPORT_MAX_METRICS, sizeof *r->metrics);
            if (!r->metrics) {
                rc = TIDE_ENOMEM;
                goto out;
            }
        }
        snprintf(r->metrics[i].name, sizeof r->metrics[i].name, "%s", name);
        r->nmetrics++;
    }
    r->metrics[i].value = value;
out:
    pthread_mutex_unlock(&r->mu);
    return rc;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* JSON has no NaN or infinity; a metric that diverged is written as null. */
static json_t *real_or_null(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

/* Builds the JSON under the lock. Returns NULL when out of memory. */
static json_t *build_json(tide__report_t *r, int exit_status)
{
    double wall = fmax(tide__report_elapsed(r), r->max_t);
    json_t *j = json_object();
    json_t *worlds = json_array(), *rates = json_array(), *events = json_array();
    json_t *metrics = json_object(), *dropped = json_object();
    double *rec = malloc((r->nevents ? r->nevents : 1) * sizeof *rec);
    int ok = j && worlds && rates && events && metrics && dropped && rec;
    size_t nrec = 0;

    for (size_t i = 0; ok && i < r->nworlds; i++) {
        json_t *o = json_pack("{s:f,s:i}", "t", r->worlds[i].t, "world_size", r->worlds[i].n);
        ok = o && !json_array_append_new(worlds, o);
    }
    for (size_t i = 0; ok && i < r->nbuckets; i++) {
        double start = (double)i * r->bucket_w;
        double width = fmin(r->bucket_w, wall - start);
        if (width <= 0) width = r->bucket_w;
        json_t *o = json_pack("{s:f,s:f}", "t", start + width / 2, "samples_per_s",
                              r->buckets[i] / width);
        ok = o && !json_array_append_new(rates, o);
    }
    for (size_t i = 0; ok && i < r->nevents; i++) {
        const event_t *e = &r->events[i];
        json_t *o = json_pack("{s:i,s:f,s:s,s:o,s:o,s:o}", "id", (int)i, "t", e->t,
                              "kind", e->kind, "rank",
                              e->rank >= 0 ? json_integer(e->rank) : json_null(), "lost_steps",
                              e->lost_steps >= 0 ? json_integer(e->lost_steps) : json_null(),
                              "recovery_ms",
                              e->recovery_ms >= 0 ? json_real(e->recovery_ms) : json_null());
        ok = o && !json_array_append_new(events, o);
        if (e->recovery_ms >= 0) rec[nrec++] = e->recovery_ms;
    }
    for (size_t i = 0; ok && i < r->nmetrics; i++)
        ok = !json_object_set_new(metrics, r->metrics[i].name, real_or_null(r->metrics[i].value));
    json_t *median = json_null();
    if (ok && nrec) {
        qsort(rec, nrec, sizeof *rec, cmp_double);
        double m = nrec % 2 ? rec[nrec / 2] : (rec[nrec / 2 - 1] + rec[nrec / 2]) / 2;
        json_decref(median);
        median = json_real(m);
    }
    free(rec);
    if (ok) {
        ok = !json_object_set_new(dropped, "events", json_integer((json_int_t)r->dropped_events)) &&
             !json_object_set_new(dropped, "world_sizes",
                                  json_integer((json_int_t)r->dropped_worlds)) &&
             !json_object_set_new(dropped, "metrics", json_integer((json_int_t)r->dropped_metrics));
    }
    if (ok) {
        json_t *top = json_pack(
            "{s:i,s:s,s:f,s:i,s:I,s:I,s:I,s:f,s:f,s:o,s:o,s:o,s:o,s:o,s:o,s:o}", "version", 1,
            "tide_version", tide_version(), "wall_s", wall, "exit_status", exit_status, "steps",
            (json_int_t)r->nsteps, "last_step", (json_int_t)r->last_step, "samples",
            (json_int_t)r->samples, "samples_per_s", wall > 0 ? (double)r->samples / wall : 0.0,
            "step_time_s", r->step_time, "goodput",
            wall > 0 ? json_real(fmin(1.0, r->step_time / wall)) : json_null(),
            "median_recovery_ms", median, "world_size_timeline", worlds, "rate_timeline", rates,
            "events", events, "metrics", metrics, "dropped", dropped);
        json_decref(j);
        return top; /* json_pack's "o" took every reference, even on failure */
    }
    json_decref(j);
    json_decref(worlds);
    json_decref(rates);
    json_decref(events);
    json_decref(metrics);
    json_decref(dropped);
    json_decref(median);
    return NULL;
}

json_t *tide__report_json(tide__report_t *r, int exit_status)
{
    if (!r) return NULL;
    pthread_mutex_lock(&r->mu);
    json_t *j = build_json(r, exit_status);
    pthread_mutex_unlock(&r->mu);
    return j;
}

int tide__report_write(tide__report_t *r, const char *path, int exit_status)
{
    if (!r || !path) return TIDE_EINVAL;
    json_t *j = tide__report_json(r, exit_status);
    if (!j) return TIDE_ENOMEM;
    size_t n = strlen(path);
    char *tmp = malloc(n + 32);
    if (!tmp) {
        json_decref(j);
        return TIDE_ENOMEM;
    }
    snprintf(tmp, n + 32, "%s.tmp.%ld", path, (long)getpid());
    int rc = json_dump_file(j, tmp, JSON_INDENT(1) | JSON_REAL_PRECISION(10) | JSON_PRESERVE_ORDER);
    json_decref(j);
    if (rc == 0 && rename(tmp, path) == 0) {
        free(tmp);
        return TIDE_OK;
    }
    unlink(tmp);
    free(tmp);
    return TIDE_EIO;
}

/* ---- reading and checking ---- */

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

enum { T_NUMBER, T_INT, T_STRING, T_NUMBER_OR_NULL, T_INT_OR_NULL, T_ARRAY, T_OBJECT };

static const char *type_name(int t)
{
    static const char *const names[] = {"a number",          "an integer",
                                        "a string",          "a number or null",
                                        "an integer or null", "an array",
                                        "an object"};
    return names[t];
}

static int has_type(const json_t *v, int t)
{
    switch (t) {
    case T_NUMBER: return json_is_number(v);
    case T_INT: return json_is_integer(v);
    case T_STRING: return json_is_string(v);
    case T_NUMBER_OR_NULL: return json_is_number(v) || json_is_null(v);
    case T_INT_OR_NULL: return json_is_integer(v) || json_is_null(v);
    case T_ARRAY: return json_is_array(v);
    default: return json_is_object(v);
    }
}

/* Checks obj[key]: 0 if it has type t (or is absent and optional). */
static int check_field(const json_t *obj, const char *where, const char *key, int t, int required,
                       char *err, size_t errlen)
{
    const json_t *v = json_object_get(obj, key);
    if (!v) {
        if (!required) return 0;
        set_err(err, errlen, "%s%s: missing", where, key);
        return -1;
    }
    if (!has_type(v, t)) {
        set_err(err, errlen, "%s%s: expected %s", where, key, type_name(t));
        return -1;
    }
    return 0;
}

static int check_array(const json_t *j, const char *key, const char *const *fields,
                       const int *types, const int *required, size_t nfields, char *err,
                       size_t errlen)
{
    const json_t *a = json_object_get(j, key);
    size_t i;
    const json_t *o;
    json_array_foreach(a, i, o)
    {
        char where[96];
        snprintf(where, sizeof where, "%s[%zu].", key, i);
        if (!json_is_object(o)) {
            set_err(err, errlen, "%s[%zu]: expected an object", key, i);
            return -1;
        }
        for (size_t f = 0; f < nfields; f++)
            if (check_field(o, where, fields[f], types[f], required[f], err, errlen)) return -1;
    }
    return 0;
}

int tide__report_check(const json_t *j, char *err, size_t errlen)
{
    if (!json_is_object(j)) {
        set_err(err, errlen, "expected a JSON object (a Tide report)");
        return TIDE_EPROTO;
    }
    const json_t *ver = json_object_get(j, "version");
    if (!json_is_integer(ver)) {
        set_err(err, errlen, "version: missing or not an integer (is this a Tide report?)");
        return TIDE_EPROTO;
    }
    if (json_integer_value(ver) != 1) {
        set_err(err, errlen, "version %lld: this tide reads version 1",
                (long long)json_integer_value(ver));
        return TIDE_EPROTO;
    }
    static const struct {
        const char *key;
        int type, required;
    } top[] = {
        {"wall_s", T_NUMBER, 1},
        {"steps", T_INT, 1},
        {"world_size_timeline", T_ARRAY, 1},
        {"rate_timeline", T_ARRAY, 1},
        {"events", T_ARRAY, 1},
        {"exit_status", T_INT, 0},
        {"last_step", T_INT, 0},
        {"samples", T_INT, 0},
        {"samples_per_s", T_NUMBER, 0},
        {"step_time_s", T_NUMBER, 0},
        {"goodput", T_NUMBER_OR_NULL, 0},
        {"median_recovery_ms", T_NUMBER_OR_NULL, 0},
        {"metrics", T_OBJECT, 0},
    };
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
        if (check_field(j, "", top[i].key, top[i].type, top[i].required, err, errlen))
            return TIDE_EPROTO;

    static const char *const wf[] = {"t", "world_size"};
    static const int wt[] = {T_NUMBER, T_INT}, wr[] = {1, 1};
    static const char *const rf[] = {"t", "samples_per_s"};
    static const int rt[] = {T_NUMBER, T_NUMBER}, rr[] = {1, 1};
    static const char *const ef[] = {"t", "kind", "rank", "lost_steps", "recovery_ms"};
    static const int et[] = {T_NUMBER, T_STRING, T_INT_OR_NULL, T_INT_OR_NULL, T_NUMBER_OR_NULL};
    static const int er[] = {1, 1, 0, 0, 0};
    if (check_array(j, "world_size_timeline", wf, wt, wr, 2, err, errlen) ||
        check_array(j, "rate_timeline", rf, rt, rr, 2, err, errlen) ||
        check_array(j, "events", ef, et, er, 5, err, errlen))
        return TIDE_EPROTO;
    const json_t *m = json_object_get(j, "metrics");
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)m, k, v)
    {
        if (!json_is_number(v) && !json_is_null(v)) {
            set_err(err, errlen, "metrics.%.64s: expected a number", k);
            return TIDE_EPROTO;
        }
    }
    return TIDE_OK;
}

int tide__report_read(const char *path, json_t **out, char *err, size_t errlen)
{
    if (!path || !out) return TIDE_EINVAL;
    *out = NULL;
    char *buf;
    size_t len;
    TIDE_CHECK(tide__read_capped(path, TIDE__REPORT_MAX_FILE, &buf, &len, err, errlen));
    if (len > TIDE__REPORT_MAX_FILE) {
        free(buf);
        set_err(err, errlen, "%s: larger than %d MiB; not a report", path,
                TIDE__REPORT_MAX_FILE >> 20);
        return TIDE_EPROTO;
    }
    json_error_t jerr;
    json_t *j = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
    free(buf);
    if (!j) {
        set_err(err, errlen, "%s: not valid JSON (line %d, column %d: %s)", path, jerr.line,
                jerr.column, jerr.text);
        return TIDE_EPROTO;
    }
    char why[256];
    int rc = tide__report_check(j, why, sizeof why);
    if (rc) {
        json_decref(j);
        set_err(err, errlen, "%s: %s", path, why);
        return rc;
    }
    *out = j;
    return TIDE_OK;
}

/* ---- the summary ---- */

static double num(const json_t *o, const char *key, double def)
{
    const json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : def;
}

/* Writes s to f wrapped at `width` columns on spaces, so the paragraph reads well
 * in a terminal however long the run's story is. */
static void wrap(FILE *f, const char *s, size_t width)
{
    size_t col = 0;
    while (*s) {
        while (*s == ' ') s++;
        size_t w = strcspn(s, " ");
        if (!w) break;
        if (col && col + 1 + w > width) {
            fputc('\n', f);
            col = 0;
        } else if (col) {
            fputc(' ', f);
            col++;
        }
        fwrite(s, 1, w, f);
        col += w;
        s += w;
    }
    fputc('\n', f);
}

/* A string from the file, cut short and made printable: a report may come from
 * anywhere, and must not drive the terminal it is summarized on. */
static const char *clean(const char *s, char *buf, size_t n)
{
    size_t i = 0;
    for (; s && s[i] && i + 1 < n; i++)
        buf[i] = ((unsigned char)s[i] >= 0x20 && (unsigned char)s[i] < 0x7f) ? s[i] : '?';
    buf[i] = '\0';
    return s ? buf : "?";
}

#define SUMMARY_MAX_WORLDS 12
#define SUMMARY_MAX_EVENTS 12 /* listed one by one up to this many, else totals */

static void print_each_event(FILE *m, const json_t *ev)
{
    size_t nev = json_array_size(ev);
    fprintf(m, " %zu event%s:", nev, nev == 1 ? "" : "s");
    for (size_t i = 0; i < nev; i++) {
        const json_t *e = json_array_get(ev, i);
        const json_t *rank = json_object_get(e, "rank");
        const json_t *lost = json_object_get(e, "lost_steps");
        const json_t *rec = json_object_get(e, "recovery_ms");
        char kind[48];
        fprintf(m, " %s", clean(json_string_value(json_object_get(e, "kind")), kind, sizeof kind));
        if (json_is_integer(rank)) fprintf(m, " of rank %lld", (long long)json_integer_value(rank));
        fprintf(m, " at %.1f s (", num(e, "t", 0));
        if (json_is_integer(lost))
            fprintf(m, "%lld lost step%s, ", (long long)json_integer_value(lost),
                    json_integer_value(lost) == 1 ? "" : "s");
        if (json_is_number(rec)) fprintf(m, "recovered in %.0f ms", json_number_value(rec));
        else fprintf(m, "not recovered");
        fprintf(m, ")%s", i + 1 < nev ? ";" : ".");
    }
}

/* Too many events to list (a replayed trace): counts per kind, the lost steps in
 * all, the slowest recovery and how many never recovered. */
static void print_event_totals(FILE *m, const json_t *ev)
{
    enum { MAX_KINDS = 16 };
    const char *kinds[MAX_KINDS];
    size_t counts[MAX_KINDS], nkinds = 0, other = 0, unresolved = 0, i;
    long long lost = 0;
    double slowest = -1, slowest_t = 0;
    const char *slowest_kind = NULL;
    const json_t *e;
    json_array_foreach(ev, i, e)
    {
        const char *k = json_string_value(json_object_get(e, "kind"));
        size_t x = 0;
        while (x < nkinds && strcmp(kinds[x], k ? k : "?")) x++;
        if (x == nkinds && nkinds < MAX_KINDS) {
            kinds[nkinds] = k ? k : "?";
            counts[nkinds++] = 0;
        }
        if (x < nkinds) counts[x]++;
        else other++;
        const json_t *l = json_object_get(e, "lost_steps");
        if (json_is_integer(l)) lost += json_integer_value(l);
        const json_t *rec = json_object_get(e, "recovery_ms");
        if (!json_is_number(rec)) unresolved++;
        else if (json_number_value(rec) > slowest) {
            slowest = json_number_value(rec);
            slowest_t = num(e, "t", 0);
            slowest_kind = k;
        }
    }
    fprintf(m, " %zu events:", json_array_size(ev));
    for (size_t x = 0; x < nkinds; x++) {
        char kind[48];
        fprintf(m, "%s %zu %s", x ? "," : "", counts[x], clean(kinds[x], kind, sizeof kind));
    }
    if (other) fprintf(m, ", %zu of other kinds", other);
    fprintf(m, "; %lld lost step%s in all", lost, lost == 1 ? "" : "s");
    if (slowest >= 0) {
        char kind[48];
        fprintf(m, "; the slowest recovery %.0f ms (%s at %.1f s)", slowest,
                clean(slowest_kind, kind, sizeof kind), slowest_t);
    }
    if (unresolved) fprintf(m, "; %zu not recovered", unresolved);
    fprintf(m, ".");
}

void tide__report_print_summary_json(const json_t *j, FILE *f)
{
    char *text = NULL;
    size_t tlen = 0;
    FILE *m = open_memstream(&text, &tlen);
    if (!m || !json_is_object(j)) {
        if (m) fclose(m);
        free(text);
        return;
    }
    double wall = num(j, "wall_s", 0);
    long long steps = (long long)num(j, "steps", 0);
    long long samples = (long long)num(j, "samples", 0);
    fprintf(m, "Tide run: %lld step%s (%lld samples) in %.1f s: %.1f samples/s", steps,
            steps == 1 ? "" : "s", samples, wall, num(j, "samples_per_s", 0));
    const json_t *g = json_object_get(j, "goodput");
    if (json_is_number(g)) fprintf(m, ", goodput %.1f%%", 100.0 * json_number_value(g));
    fprintf(m, ".");

    const json_t *ws = json_object_get(j, "world_size_timeline");
    size_t nws = json_array_size(ws);
    if (nws) {
        long lo = 0, hi = 0;
        for (size_t i = 0; i < nws; i++) {
            long n = (long)num(json_array_get(ws, i), "world_size", 0);
            if (i == 0 || n < lo) lo = n;
            if (i == 0 || n > hi) hi = n;
        }
        fprintf(m, " World size");
        for (size_t i = 0; i < nws; i++) {
            if (nws > SUMMARY_MAX_WORLDS && i == SUMMARY_MAX_WORLDS / 2) {
                fprintf(m, " -> ... (%zu more)", nws - SUMMARY_MAX_WORLDS);
                i = nws - SUMMARY_MAX_WORLDS / 2;
            }
            long n = (long)num(json_array_get(ws, i), "world_size", 0);
            fprintf(m, "%s%ld", i ? " -> " : " ", n);
        }
        if (nws > 1) fprintf(m, " (between %ld and %ld)", lo, hi);
        fprintf(m, ".");
    }

    const json_t *ev = json_object_get(j, "events");
    size_t nev = json_array_size(ev);
    if (nev == 0) fprintf(m, " No events.");
    else if (nev <= SUMMARY_MAX_EVENTS) print_each_event(m, ev);
    else print_event_totals(m, ev);
    const json_t *med = json_object_get(j, "median_recovery_ms");
    if (json_is_number(med)) fprintf(m, " Median recovery %.0f ms.", json_number_value(med));

    const json_t *metrics = json_object_get(j, "metrics");
    if (json_object_size(metrics)) {
        fprintf(m, " Final metrics:");
        const char *k;
        const json_t *v;
        size_t i = 0;
        json_object_foreach((json_t *)metrics, k, v)
        {
            char name[65];
            clean(k, name, sizeof name);
            if (json_is_number(v))
                fprintf(m, "%s %s %.6g", i ? "," : "", name, json_number_value(v));
            else
                fprintf(m, "%s %s n/a", i ? "," : "", name);
            i++;
        }
        fprintf(m, ".");
    }
    const json_t *st = json_object_get(j, "exit_status");
    if (json_is_integer(st)) fprintf(m, " Exit status %lld.", (long long)json_integer_value(st));
    fclose(m);
    wrap(f, text, 78);
    free(text);
}

void tide__report_print_summary(tide__report_t *r, FILE *f)
{
    json_t *j = tide__report_json(r, 0);
    if (!j) return;
    /* The builder has no exit status until it is written; say nothing about it. */
    json_object_del(j, "exit_status");
    tide__report_print_summary_json(j, f);
    json_decref(j);
}
