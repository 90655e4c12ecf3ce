/*
 * param.h - settings read from the TIDE_* environment.
 *
 * Every setting has a name, a default and bounds; a value that does not parse or
 * falls outside its bounds is refused with a message naming the variable, and the
 * caller turns that into TIDE_ECONFIG (never a silent default).
 */
#ifndef TIDE_CORE_PARAM_H
#define TIDE_CORE_PARAM_H

#include <stdint.h>

/* *out = the integer in env var `name`, or def when unset. Accepts k/m/g suffixes
 * (powers of 1024) for sizes. Returns TIDE_OK or TIDE_ECONFIG. */
int tide__env_int(const char *name, int64_t def, int64_t min, int64_t max, int64_t *out);

/* Parses a whole string as an integer with an optional k/m/g suffix. */
int tide__parse_int(const char *s, int64_t min, int64_t max, int64_t *out);

/* Monotonic clock in nanoseconds. */
uint64_t tide__now_ns(void);

#endif
