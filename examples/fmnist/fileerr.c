/*
 * fileerr.c - file error messages (see fileerr.h).
 */
#include "fileerr.h"

#include <stdarg.h>
#include <stdio.h>

void fm_file_error(char *err, size_t errlen, const char *path, const char *fmt, ...)
{
    if (!err || errlen == 0) return;
    int n = snprintf(err, errlen, "%s: ", path);
    if (n < 0 || (size_t)n >= errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
    va_end(ap);
}
