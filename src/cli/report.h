/*
 * report.h - the run report (`tide run --report FILE`): a builder that the
 * runtime feeds as things happen, which writes one JSON file at the end and prints
 * a one-paragraph summary; and the reader that `tide report` uses on such a file.
 *
 * Every builder call is thread-safe (one mutex), so the coordinator's thread and
 * the launcher can both feed it. Times are seconds since the job started; the
 * builder's own clock (tide__report_elapsed) starts in tide__report_create and is
 * the one to use. Everything it keeps is bounded: past the caps below, entries are
 * dropped and counted in the file's "dropped" object, never grown without end.
 *
 * How an event is resolved. tide__report_event records it; it is *resolved* when
 * its lost_steps and recovery_ms are known. The caller may give them with
 * tide__report_event_resolved; whatever it leaves out (a negative value) the
 * builder works out: the first tide__report_world_size call at or after the
 * event's time marks the new group, and the first step completed after that ends
 * the recovery (recovery_ms = from the event to that step); lost_steps is then the
 * number of steps completed before the new group formed that it had to complete
 * again (a rollback: 0 when it resumes after the newest completed step). The
 * runtime knows better for an in-flight step it dropped (P3), and should say so.
 * Events still unresolved when the report is written have null lost_steps and
 * recovery_ms.
 *
 * The file (version 1):
 *   {"version": 1, "tide_version": "0.1.0", "wall_s": 61.2, "exit_status": 0,
 *    "steps": 1200, "last_step": 1199, "samples": 38400, "samples_per_s": 627.5,
 *    "step_time_s": 55.9, "goodput": 0.913, "median_recovery_ms": 812.0,
 *    "world_size_timeline": [{"t": 0.0, "world_size": 4}, ...],
 *    "rate_timeline": [{"t": 0.25, "samples_per_s": 640.0}, ...],
 *    "events": [{"id": 0, "t": 10.1, "kind": "preempt", "rank": 2,
 *                "lost_steps": 0, "recovery_ms": 812.0}, ...],
 *    "metrics": {"loss": 0.31}, "dropped": {"events": 0, "world_sizes": 0, "metrics": 0}}
 * goodput = time of completed steps / wall time, a step's time being what rank 0
 * measured: from the end of the step before it in the same generation (so the
 * step-end agreement and the trainer's work between steps count), or from its
 * begin for a generation's first step; samples_per_s = samples /
 * wall time; rate_timeline is the rate over consecutive windows of equal width
 * (the width doubles as the run grows, so it never has more than 1024 points).
 *
 * This module never exits and never writes anywhere but the path it is given.
 */
#ifndef TIDE_CLI_REPORT_H
#define TIDE_CLI_REPORT_H

#include <stdint.h>
#include <stdio.h>

#define TIDE__REPORT_MAX_EVENTS 65536
#define TIDE__REPORT_MAX_WORLD_CHANGES 65536
#define TIDE__REPORT_MAX_METRICS 256
#define TIDE__REPORT_MAX_NAME 127        /* bytes in a metric name or an event kind */
#define TIDE__REPORT_MAX_FILE (64 * 1024 * 1024) /* largest report tide__report_read takes */

typedef struct tide__report tide__report_t;
struct json_t; /* jansson's */

/* A new, empty report whose clock starts now. Free it with tide__report_destroy. */
int tide__report_create(tide__report_t **out);
void tide__report_destroy(tide__report_t *r);

/* Seconds since tide__report_create (monotonic clock). */
double tide__report_elapsed(const tide__report_t *r);

/* Records an event: kind is a short name ([a-z0-9_-], at most
 * TIDE__REPORT_MAX_NAME bytes; the chaos names kill, preempt, freeze, join,
 * coordinator-restart, and also loss, leave, ...), rank the member it hit or -1.
 * Returns the event's id (>= 0) or TIDE_EINVAL (bad kind), TIDE_ENOMEM (past the
 * cap: dropped and counted). */
int tide__report_event(tide__report_t *r, double t, const char *kind, int rank);

/* Gives what the event cost: lost_steps (< 0: let the builder work it out) and
 * recovery_ms (< 0: likewise). TIDE_ENOTFOUND for an unknown id. */
int tide__report_event_resolved(tide__report_t *r, int id, int64_t lost_steps,
                                double recovery_ms);

/* A generation formed with n members at t. Call it at every new generation, even
 * one of the same size: it is what ends an event's recovery (see above). Only
 * changes of size go into the timeline. */
int tide__report_world_size(tide__report_t *r, double t, int n);

/* The group completed step `step` at t: `samples` samples (the global batch), in
 * step_seconds of wall time from its start to its end. Call it once per step. */
int tide__report_step(tide__report_t *r, double t, int64_t step, int64_t samples,
                      double step_seconds);

/* The latest value of a metric (tide_log_metric); only the last one is kept.
 * TIDE_EINVAL for an empty or too long name; past the cap, TIDE_ENOMEM. */
int tide__report_metric(tide__report_t *r, const char *name, double value);

/* Writes the report to path (atomically: a temporary file, then rename).
 * TIDE_EIO when it cannot be written. */
int tide__report_write(tide__report_t *r, const char *path, int exit_status);

/* The report as JSON, as tide__report_write would write it; the caller owns the
 * result (json_decref). NULL when out of memory. */
struct json_t *tide__report_json(tide__report_t *r, int exit_status);

/* One paragraph for people: steps, world sizes, each event with its lost steps and
 * recovery, the median recovery, goodput, the final metrics. */
void tide__report_print_summary(tide__report_t *r, FILE *f);

/* Reads and checks a report file (at most TIDE__REPORT_MAX_FILE bytes). On
 * success *out is the parsed report, owned by the caller (json_decref). On failure
 * err holds "PATH: what is wrong" and the result is TIDE_EIO (unreadable),
 * TIDE_EPROTO (malformed), TIDE_ENOMEM. */
int tide__report_read(const char *path, struct json_t **out, char *err, size_t errlen);

/* Checks that a parsed report has the fields and types of version 1: 0, or
 * TIDE_EPROTO with err naming the field ("events[3].t: expected a number"). */
int tide__report_check(const struct json_t *j, char *err, size_t errlen);

/* The summary paragraph of a report already in JSON (checked). */
void tide__report_print_summary_json(const struct json_t *j, FILE *f);

#endif
