/*
 * tide.h - the public C API of Tide, an elastic runtime for data-parallel training.
 *
 * The shape follows NCCL and MPI: a communicator handle, collectives over typed
 * buffers, int error codes. Everything here is exported from libtide; nothing else
 * is. Error codes are frozen once published: new ones are only ever appended.
 *
 * Ownership: the library allocates every handle (tide_comm_t, tide_request_t) and
 * frees it in the matching call (tide_finalize, tide_wait). Buffers passed to a
 * collective are borrowed for the duration of the call, or, for the asynchronous
 * variants, until tide_wait returns on the request.
 */
#ifndef TIDE_H
#define TIDE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define TIDE_API __attribute__((visibility("default")))
#else
#define TIDE_API
#endif

/*
 * One table gives the enum, the names and the messages (libuv's UV_ERRNO_MAP).
 * X(NAME, value, message). Append only; never renumber.
 */
#define TIDE_ERRNO_MAP(X)                                                                          \
    X(OK, 0, "success")                                                                            \
    X(EINVAL, -1, "invalid argument")                                                              \
    X(ENOMEM, -2, "out of memory")                                                                 \
    X(EPEERLOST, -3, "a peer was lost (closed connection, exited, or timed out)")                  \
    X(EABORTED, -4, "the operation was aborted (the group is re-forming or stopping)")             \
    X(EMISMATCH, -5, "ranks called mismatched collectives (kind, count, dtype, op or root)")       \
    X(ETIMEDOUT, -6, "timed out")                                                                  \
    X(EIO, -7, "I/O error")                                                                        \
    X(EPROTO, -8, "malformed or unexpected message")                                               \
    X(EAUTH, -9, "authentication failed (wrong or missing job secret)")                            \
    X(ECONFIG, -10, "bad configuration (TIDE_* environment or arguments)")                         \
    X(ESTALE, -11, "message from another membership generation")                                   \
    X(ENOTSUP, -12, "operation not supported")                                                     \
    X(ESYS, -13, "system call failed")                                                             \
    X(ECLOSED, -14, "the communicator is finalized")                                               \
    X(ESTOPPED, -15, "the job is stopping; this member must leave")                                \
    X(ECORRUPT, -16, "corrupt data (checksum mismatch)")                                           \
    X(ENOTFOUND, -17, "not found")

typedef enum {
#define TIDE_ERRNO_ENUM(name, value, msg) TIDE_##name = (value),
    TIDE_ERRNO_MAP(TIDE_ERRNO_ENUM)
#undef TIDE_ERRNO_ENUM
} tide_status_t;

typedef enum {
    TIDE_FLOAT32 = 0,
    TIDE_FLOAT64 = 1,
    TIDE_FLOAT16 = 2,  /* IEEE binary16; reduced in float32, rounded to nearest even */
    TIDE_BFLOAT16 = 3, /* reduced in float32, rounded to nearest even */
    TIDE_INT32 = 4,
    TIDE_INT64 = 5,
    TIDE_UINT8 = 6,
    TIDE_DTYPE_COUNT
} tide_dtype_t;

typedef enum {
    TIDE_SUM = 0,
    TIDE_AVG = 1, /* sum divided by the world size; integer types truncate toward zero */
    TIDE_MIN = 2,
    TIDE_MAX = 3,
    TIDE_PROD = 4,
    TIDE_OP_COUNT
} tide_op_t;

typedef struct tide_comm tide_comm_t;
typedef struct tide_request tide_request_t;

/* Joins the job described by the TIDE_* environment that `tide run` (or the
 * operator) sets: TIDE_RENDEZVOUS, TIDE_RANK, TIDE_SIZE, TIDE_JOB_SECRET, ...
 * On success *comm is a new communicator owned by the caller (free it with
 * tide_finalize). With no TIDE_RENDEZVOUS set, the process is a job of one. */
TIDE_API int tide_init(tide_comm_t **comm);

/* Leaves the job and frees comm and everything it owns. Safe on a failed comm.
 * Outstanding requests must have been waited for. */
TIDE_API int tide_finalize(tide_comm_t *comm);

/* Rank and size of the current membership; -1 / 0 for a NULL comm. */
TIDE_API int tide_rank(const tide_comm_t *comm);
TIDE_API int tide_size(const tide_comm_t *comm);

/* The error the communicator failed with, or TIDE_OK. A failed communicator stays
 * failed: every later collective on it returns this code at once. */
TIDE_API int tide_comm_status(const tide_comm_t *comm);

/* Size in bytes of one element of dtype, or 0 for an unknown dtype. */
TIDE_API size_t tide_dtype_size(tide_dtype_t dtype);

/* recv[i] = op over all ranks of send[i], for i < count. send == recv is in place.
 * Buffers must not otherwise overlap. */
TIDE_API int tide_allreduce(tide_comm_t *comm, const void *send, void *recv, size_t count,
                            tide_dtype_t dtype, tide_op_t op);

/* Copies root's buf to every rank's buf. */
TIDE_API int tide_broadcast(tide_comm_t *comm, void *buf, size_t count, tide_dtype_t dtype,
                            int root);

/* recv (count * size elements) = the concatenation of every rank's send (count
 * elements), in rank order. send may alias recv + rank * count elements. */
TIDE_API int tide_allgather(tide_comm_t *comm, const void *send, void *recv, size_t count,
                            tide_dtype_t dtype);

/* Returns once every rank has entered it. */
TIDE_API int tide_barrier(tide_comm_t *comm);

/* Starts an allreduce that runs in the background, in the order started, so that
 * gradient buckets overlap with compute. On success *req is owned by the caller
 * until tide_wait, which frees it. The buffers are borrowed until then. */
TIDE_API int tide_iallreduce(tide_comm_t *comm, const void *send, void *recv, size_t count,
                             tide_dtype_t dtype, tide_op_t op, tide_request_t **req);

/* Waits for req to finish, frees it and returns its result. */
TIDE_API int tide_wait(tide_request_t *req);

/* A static message for err (never NULL), and its symbolic name ("TIDE_EPEERLOST"). */
TIDE_API const char *tide_strerror(int err);
TIDE_API const char *tide_errname(int err);

/* Tide's version as "MAJOR.MINOR.PATCH". */
TIDE_API const char *tide_version(void);

#ifdef __cplusplus
}
#endif
#endif /* TIDE_H */
