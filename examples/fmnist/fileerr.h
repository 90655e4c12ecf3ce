/*
 * fileerr.h - the one way the example's file readers (idx.c, params.c) word an
 * error: "PATH: reason", into a caller's buffer, so that every message names the
 * file it is about and no reader exits on bad input.
 */
#ifndef FM_FILEERR_H
#define FM_FILEERR_H

#include <stddef.h>

/* Writes "path: " and the formatted reason into err (errlen bytes, always
 * terminated; nothing when err is NULL or errlen 0). */
void fm_file_error(char *err, size_t errlen, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif /* FM_FILEERR_H */
