/*
 * trace.h - replaying a spot-capacity trace (`tide run --trace FILE`): a file of
 * `time_ms,capacity` lines becomes a schedule of target world sizes, and the
 * schedule, asked at any moment, says how many workers to preempt or start.
 *
 * The file: one `time_ms,capacity` line per change (capacity = instances alive
 * after it), times non-decreasing and taken relative to the first line; several
 * lines at the same time are one event whose last line counts. Blank lines, lines
 * starting with '#' and one header line `time_ms,capacity` are skipped. Time is
 * divided by --trace-speedup; capacity is scaled to the job, capacity × max / C
 * rounded to nearest (C = the largest capacity in the file), then raised to --min
 * so that a deep trough shrinks the job to its minimum rather than ending it.
 * Changes that scale to the same world size disappear.
 *
 * This module only computes; starting and signalling workers is the launcher's.
 * It never exits: a bad file gives an error code and a message naming the line.
 */
#ifndef TIDE_CLI_TRACE_H
#define TIDE_CLI_TRACE_H

#include <stddef.h>

#define TIDE__TRACE_MAX_LINE 4096             /* bytes in one line */
#define TIDE__TRACE_MAX_FILE (16 * 1024 * 1024)
#define TIDE__TRACE_MAX_CAPACITY 1000000

typedef struct {
    double speedup;  /* --trace-speedup: > 0; 1 replays in real time, 140 runs the AWS
                        p3 trace (11.4 h) in about 5 minutes */
    int max_workers; /* --max (>= 1): the trace's largest capacity maps to this */
    int min_workers; /* --min (0..max_workers): smaller targets are raised to it */
    double notice_s; /* --trace-notice: notice each preemption gets (0: none, SIGKILL) */
} tide__trace_opts_t;

typedef struct {
    double t;  /* seconds since the job started (after the speed-up) */
    int world; /* the number of workers the job should have from t on */
} tide__trace_point_t;

typedef struct {
    tide__trace_point_t *points; /* owned; t strictly increasing, points[0].t == 0, and
                                    each world differs from the one before */
    size_t count;
    int trace_max;     /* the largest capacity in the file (C above) */
    int lines;         /* data lines read */
    double duration_s; /* from the first line to the last, after the speed-up */
    double notice_s;   /* copied from the options */
} tide__trace_t;

/* What to do now to follow the schedule. */
typedef struct {
    int preempt;     /* members to preempt, each with notice_s of notice (>= 0) */
    int start;       /* new workers to start (>= 0); at most one of the two is > 0 */
    double notice_s; /* the --trace-notice */
    int target;      /* the world size this moves to */
    double t;        /* when the schedule asked for it */
} tide__trace_change_t;

/* Reads and checks the trace at path. On success *out holds the schedule (free it
 * with tide__trace_free). On failure *out is empty, err holds "PATH:LINE: what is
 * wrong" (or "PATH: ..."), and the result is TIDE_ECONFIG (bad content or
 * options), TIDE_EIO (unreadable) or TIDE_ENOMEM. */
int tide__trace_load(const char *path, const tide__trace_opts_t *o, tide__trace_t *out, char *err,
                     size_t errlen);

/* The same over len bytes of text in memory; name stands for the file in messages. */
int tide__trace_parse(const char *text, size_t len, const char *name, const tide__trace_opts_t *o,
                      tide__trace_t *out, char *err, size_t errlen);

void tide__trace_free(tide__trace_t *tr);

/* The world size the schedule asks for at time now (seconds since the job started). */
int tide__trace_target(const tide__trace_t *tr, double now);

/* Edge-triggered replay. Moves *cursor (start it at 0) past every point due by
 * now and, when one was, fills *out with what turns `current` workers into the
 * newest due target and returns 1; returns 0 when nothing is due or nothing needs
 * doing. `current` is the size the job is heading for: members not under notice
 * plus workers started but not yet admitted, so that a preemption in progress is
 * not asked for twice. A worker lost to something else (a crash, a chaos kill) is
 * replaced only at the trace's next change, as a real spot fleet would. A caller
 * that woke late gets the newest target only, not every step on the way. */
int tide__trace_next(const tide__trace_t *tr, size_t *cursor, double now, int current,
                     tide__trace_change_t *out);

#endif
