/*
 * discovery.h - where workers can run: a hosts script in Horovod's format, and
 * the blacklist that keeps a failing host out for a while.
 *
 * The script prints one `host[:slots]` per line (slots default 1; blank lines
 * and lines starting with # are ignored) and is polled; its output is the job's
 * capacity. A host whose workers keep failing is blacklisted with an
 * exponential cooldown (base, 2 base, 4 base, ... up to a maximum); a worker
 * that ran for a while, or exited 0, clears its host's record.
 */
#ifndef TIDE_COORD_DISCOVERY_H
#define TIDE_COORD_DISCOVERY_H

#include <stddef.h>
#include <stdint.h>

#define TIDE__HOST_MAX 256
#define TIDE__HOSTS_MAX 1024

typedef struct {
    char name[TIDE__HOST_MAX];
    int slots;
} tide__host_slots_t;

/* Runs path (through /bin/sh) with a deadline, reads at most 1 MiB of its output
 * and parses it into hosts (at most cap entries; a host named twice adds up).
 * Returns the number of hosts, or a negative error: the script failed, timed out
 * or printed a malformed line (named in the log). */
int tide__hosts_run(const char *path, int timeout_ms, tide__host_slots_t *hosts, int cap);
/* Parses a script's output (for tests). */
int tide__hosts_parse(const char *text, tide__host_slots_t *hosts, int cap);

typedef struct {
    char name[TIDE__HOST_MAX];
    int fails;
    uint64_t until_ns; /* blacklisted until (tide__now_ns clock) */
} tide__blacklist_entry_t;

typedef struct {
    tide__blacklist_entry_t *e;
    int n, cap;
    int base_ms, max_ms;
} tide__blacklist_t;

void tide__blacklist_init(tide__blacklist_t *b, int base_ms, int max_ms);
void tide__blacklist_free(tide__blacklist_t *b);
/* A worker on host failed: returns the cooldown in ms now applied to it. */
int tide__blacklist_fail(tide__blacklist_t *b, const char *host);
/* A worker on host did well: forget its failures. */
void tide__blacklist_ok(tide__blacklist_t *b, const char *host);
/* Whether host is cooling down now. */
int tide__blacklisted(const tide__blacklist_t *b, const char *host);

#endif
