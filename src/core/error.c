/* error.c - the names and messages of Tide's error codes, from one table. */
#include <errno.h>

#include "core/error.h"

const char *tide_strerror(int err)
{
    switch (err) {
#define TIDE_ERRNO_MSG(name, value, msg)                                                           \
    case value:                                                                                    \
        return msg;
        TIDE_ERRNO_MAP(TIDE_ERRNO_MSG)
#undef TIDE_ERRNO_MSG
    }
    return "unknown error";
}

const char *tide_errname(int err)
{
    switch (err) {
#define TIDE_ERRNO_NAME(name, value, msg)                                                          \
    case value:                                                                                    \
        return "TIDE_" #name;
        TIDE_ERRNO_MAP(TIDE_ERRNO_NAME)
#undef TIDE_ERRNO_NAME
    }
    return "TIDE_UNKNOWN";
}

const char *tide_version(void)
{
    return TIDE_VERSION_STRING;
}

int tide__errno_to_status(int err)
{
    switch (err) {
    case 0:
        return TIDE_OK;
    case ECONNRESET:
    case EPIPE:
    case ECONNREFUSED:
    case ECONNABORTED:
    case ENOTCONN:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case ENETDOWN:
        return TIDE_EPEERLOST;
    case ETIMEDOUT:
        return TIDE_ETIMEDOUT;
    case ENOMEM:
        return TIDE_ENOMEM;
    case EINVAL:
        return TIDE_EINVAL;
    case EIO:
        return TIDE_EIO;
    case ENOENT:
        return TIDE_ENOTFOUND;
    default:
        return TIDE_ESYS;
    }
}
