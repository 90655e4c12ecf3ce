/*
 * textfile.h - reading a small input file (chaos schedule, capacity trace, run
 * report) whole, with a hard cap, and the "PATH:LINE: what" messages the
 * parsers of those files give. It never allocates more than the cap plus one.
 */
#ifndef TIDE_CLI_TEXTFILE_H
#define TIDE_CLI_TEXTFILE_H

#include <stddef.h>

/* Reads path into a new buffer (*buf, owned by the caller, free()) of *len bytes.
 * A file of more than cap bytes is read as cap + 1 bytes, so the caller can tell
 * "too large" from "exactly at the cap". TIDE_EIO (message in err) or TIDE_ENOMEM. */
int tide__read_capped(const char *path, size_t cap, char **buf, size_t *len, char *err,
                      size_t errlen);

/* err = "NAME:LINE: " (or "NAME: " when line <= 0) followed by the message. */
void tide__set_file_err(char *err, size_t errlen, const char *name, int line, const char *fmt,
                        ...) __attribute__((format(printf, 5, 6)));

#endif
