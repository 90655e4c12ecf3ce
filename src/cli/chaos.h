/*
 * chaos.h - the `tide run --chaos FILE` schedule: faults to inject into a running
 * job at chosen times, read from a file of JSON lines and checked before the job
 * starts.
 *
 * One line is one action:
 *
 *   {"t": 12.5, "action": "preempt", "notice_s": 30, "target": 2}
 *   {"t": 20,   "action": "kill", "target": "random"}
 *   {"t": 25,   "action": "freeze", "target": 1}
 *   {"t": 30,   "action": "join"}
 *   {"t": 40,   "action": "coordinator-restart"}
 *
 * t is seconds since the job started. kill is SIGKILL; preempt is a notice and then
 * SIGKILL notice_s seconds later; freeze is SIGSTOP (never continued: a frozen
 * member looks like a cut-off host); join starts one more worker, up to --max;
 * coordinator-restart kills the coordinator and starts it again. target is a rank
 * or "random" (the default) and is only allowed on kill, preempt and freeze.
 * Blank lines and lines whose first non-blank character is '#' are skipped. Lines
 * need not be in time order: the schedule is sorted by t, and actions with the same
 * t keep their order in the file.
 *
 * This module only parses and orders; carrying the actions out is the launcher's.
 * It never touches a process and never exits: a bad file gives an error code and a
 * message naming the file, the line and what is wrong.
 */
#ifndef TIDE_CLI_CHAOS_H
#define TIDE_CLI_CHAOS_H

#include <stddef.h>

/* Caps on what a chaos file may hold; longer or larger input is refused. */
#define TIDE__CHAOS_MAX_LINE 4096              /* bytes in one line, without its '\n' */
#define TIDE__CHAOS_MAX_FILE (1024 * 1024)     /* bytes in the whole file */
#define TIDE__CHAOS_MAX_ACTIONS 10000
#define TIDE__CHAOS_MAX_SECONDS (7.0 * 86400)  /* largest t and notice_s: a week */

typedef enum {
    TIDE__CHAOS_KILL = 0,
    TIDE__CHAOS_PREEMPT,
    TIDE__CHAOS_FREEZE,
    TIDE__CHAOS_JOIN,
    TIDE__CHAOS_COORD_RESTART,
} tide__chaos_kind_t;

/* target of an action that picks a member at random when it fires */
#define TIDE__CHAOS_TARGET_RANDOM (-1)
/* target of join and coordinator-restart, which take none */
#define TIDE__CHAOS_TARGET_NONE (-2)

typedef struct {
    double t;                /* seconds since the job started, >= 0 */
    tide__chaos_kind_t kind;
    double notice_s;         /* preempt: seconds from notice to SIGKILL (>= 0); else 0 */
    int target;              /* a rank, TIDE__CHAOS_TARGET_RANDOM or _NONE */
    int line;                /* line of the file it came from, for log messages */
} tide__chaos_action_t;

typedef struct {
    tide__chaos_action_t *actions; /* sorted by t; owned, freed by tide__chaos_free */
    size_t count;
} tide__chaos_t;

/* Reads and checks the chaos file at path. max_workers is the job's --max: a rank
 * target must be in 0..max_workers-1 (max_workers <= 0: any rank >= 0 is taken).
 * On success *out holds the sorted actions (free them with tide__chaos_free) and
 * TIDE_OK is returned. On failure *out is empty, err (errlen bytes, may be NULL)
 * holds "PATH:LINE: what is wrong" (or "PATH: ..." for the file as a whole), and
 * the result is TIDE_ECONFIG for bad content, TIDE_EIO when the file cannot be
 * read, TIDE_ENOMEM. */
int tide__chaos_load(const char *path, int max_workers, tide__chaos_t *out, char *err,
                     size_t errlen);

/* The same over text already in memory (len bytes, need not be NUL-terminated);
 * name stands for the file in messages. */
int tide__chaos_parse(const char *text, size_t len, const char *name, int max_workers,
                      tide__chaos_t *out, char *err, size_t errlen);

/* Frees what a successful load or parse put in c and empties it. NULL is fine. */
void tide__chaos_free(tide__chaos_t *c);

/* The next action due at time now (seconds since the job started), or NULL when
 * none is due yet. *cursor (start it at 0) moves past the returned action, so a
 * loop `while ((a = tide__chaos_next(c, &cur, now)))` fires each action once, in
 * order, even when the caller wakes up late. */
const tide__chaos_action_t *tide__chaos_next(const tide__chaos_t *c, size_t *cursor, double now);

/* "kill", "preempt", "freeze", "join", "coordinator-restart" ("?" otherwise). The
 * names are those of the file and also the `kind` of the report's events. */
const char *tide__chaos_kind_name(tide__chaos_kind_t kind);

#endif
