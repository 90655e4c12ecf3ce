/* textfile.c - see textfile.h. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/textfile.h"
#include "tide.h"

void tide__set_file_err(char *err, size_t errlen, const char *name, int line, const char *fmt,
                        ...)
{
    if (!err || errlen == 0) return;
    int n = line > 0 ? snprintf(err, errlen, "%s:%d: ", name, line)
                     : snprintf(err, errlen, "%s: ", name);
    if (n < 0 || (size_t)n >= errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
    va_end(ap);
}

int tide__read_capped(const char *path, size_t cap, char **buf, size_t *len, char *err,
                      size_t errlen)
{
    *buf = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        tide__set_file_err(err, errlen, path, 0, "cannot open: %s", strerror(errno));
        return TIDE_EIO;
    }
    char *b = malloc(cap + 1);
    if (!b) {
        fclose(f);
        return TIDE_ENOMEM;
    }
    size_t n = fread(b, 1, cap + 1, f);
    int rerr = ferror(f) ? errno : 0;
    fclose(f);
    if (rerr) {
        free(b);
        tide__set_file_err(err, errlen, path, 0, "cannot read: %s", strerror(rerr));
        return TIDE_EIO;
    }
    *buf = b;
    *len = n;
    return TIDE_OK;
}
