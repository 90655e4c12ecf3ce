/*
 * error.h - Tide's error values and how they travel.
 *
 * Errors are the negative codes of include/tide.h. TIDE_CHECK propagates one and
 * logs the frame it passed through (NCCL's NCCLCHECK), so a failure deep in a
 * transport arrives at the caller with its path written in the debug log.
 * Nothing here exits or aborts.
 */
#ifndef TIDE_CORE_ERROR_H
#define TIDE_CORE_ERROR_H

#include "tide.h"
#include "core/log.h"

#define TIDE_CHECK(call)                                                                           \
    do {                                                                                           \
        int tide__rc = (call);                                                                     \
        if (tide__rc < 0) {                                                                        \
            TIDE_DEBUG("%s:%d %s -> %s", __FILE__, __LINE__, #call, tide_errname(tide__rc));       \
            return tide__rc;                                                                       \
        }                                                                                          \
    } while (0)

/* Maps an errno value to the closest Tide code (ECONNRESET -> TIDE_EPEERLOST, ...). */
int tide__errno_to_status(int err);

#endif
