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

/* ---- Elastic training ----------------------------------------------------
 *
 * A job's membership changes while it trains: members are lost (a crash, a
 * preempted node), leave on notice (SIGTERM, TIDE_NOTICE_FILE, the coordinator),
 * and join. Each membership is a numbered generation with ranks 0..size-1; rank
 * and size may change between steps (read them each step). What survives a
 * change is the registered state: named buffers that every member holds
 * identically after each step (parameters, optimizer state, sampler cursor, RNG
 * seeds). When a generation forms, the members that lack the newest state (the
 * laggards of a step in flight, and joiners) receive it in memory from the root,
 * a member with the highest completed step; members that have it move no bytes.
 *
 * The step loop:
 *
 *     while (tide_step(comm) < total) {
 *         int rc = tide_step_begin(comm);   // re-forms and restores if needed
 *         if (rc == TIDE_ESTOPPED) break;   // this member leaves (exit 0)
 *         if (rc != TIDE_OK) fail(rc);
 *         rc = train_one_step(comm);        // collectives, then the update
 *         if (rc == TIDE_OK) rc = tide_step_end(comm, 0);
 *         if (rc < 0 && !tide_elastic_recoverable(rc)) fail(rc);
 *     }
 *
 * or tide_elastic_run(comm, step_fn, arg), which is that loop. A step must not
 * change the registered state until its last collective has succeeded (compute,
 * allreduce, then apply): a step that fails is dropped and redone, on the state
 * the step began with. In an elastic job the first collective after tide_init is
 * the state sync of the first tide_step_begin. */

/* Registers bytes at ptr under name (1..63 bytes of [A-Za-z0-9._:/-]) as part of
 * the elastic state. The memory stays the caller's; it is borrowed until
 * tide_state_unregister or tide_finalize and must keep its address and size.
 * Every member registers the same names with the same sizes in the same order
 * (a difference fails the sync with TIDE_EMISMATCH). Registering a name again
 * replaces its buffer. */
TIDE_API int tide_state_register(tide_comm_t *comm, const char *name, void *ptr, size_t bytes);
TIDE_API int tide_state_unregister(tide_comm_t *comm, const char *name);
/* A 64-bit FNV-1a hash of the registered state, in registration order: equal on
 * every member after each step (for tests and sanity checks). */
TIDE_API uint64_t tide_state_checksum(const tide_comm_t *comm);

/* Steps completed: the index of the step to run next. Restored on a re-form,
 * so it is the same on every member after tide_step_begin. */
TIDE_API int64_t tide_step(const tide_comm_t *comm);
/* The current generation (0 for the first). */
TIDE_API uint32_t tide_generation(const tide_comm_t *comm);

/* Begins a step: if the membership must change (a loss, a notice, a joiner) it
 * re-forms the group first and restores the state from the root; it returns when
 * this member can run step tide_step(comm). TIDE_ESTOPPED: this member leaves (it
 * had notice, or the job finished or stopped without it): finalize and exit 0. */
TIDE_API int tide_step_begin(tide_comm_t *comm);

/* Flags of tide_step_end. */
#define TIDE_STEP_LAST 1 /* this member's training is over after this step */

/* Ends a step whose update has been applied: counts it completed, then agrees
 * with the other members (one small collective) on what happens next. Returns
 * TIDE_OK to go on, TIDE_STEP_LAST when some member passed TIDE_STEP_LAST (every
 * member learns it at the same step), or an error (the step still counts; the
 * next tide_step_begin re-forms). */
TIDE_API int tide_step_end(tide_comm_t *comm, int flags);

/* Whether an error from a collective or tide_step_end is one tide_step_begin can
 * recover from by re-forming (a lost or aborted peer, a timeout). */
TIDE_API int tide_elastic_recoverable(int err);

/* One step of training: returns TIDE_OK, TIDE_STEP_LAST after the last step, or
 * an error (the step did not complete; the registered state is as it began). */
typedef int (*tide_step_fn)(tide_comm_t *comm, void *arg);
/* Runs fn once per step until some member's fn returns TIDE_STEP_LAST, across
 * losses, leaves and joins (hvd.elastic.run). Returns TIDE_OK when training is
 * over, TIDE_ESTOPPED when this member left or the job stopped (exit 0), or an
 * error that no re-formation can cure. */
TIDE_API int tide_elastic_run(tide_comm_t *comm, tide_step_fn fn, void *arg);

/* Called after each re-formation, once the state is restored (not for the first
 * generation): rank and size may have changed. NULL removes it. */
typedef void (*tide_reset_fn)(tide_comm_t *comm, void *arg);
TIDE_API int tide_elastic_on_reset(tide_comm_t *comm, tide_reset_fn fn, void *arg);

/* Gives this member notice: it leaves at its next step boundary (P2). For
 * notice sources the runtime does not watch itself (SIGTERM and TIDE_NOTICE_FILE
 * are watched; TIDE_NOTICE_SIGNAL=none turns the signal off). */
TIDE_API int tide_notice(tide_comm_t *comm);

/* Reports a named value (1..63 bytes of [A-Za-z0-9._:/-]) at the current step to
 * the coordinator: its report, /metrics and `tide status`. Cheap and never
 * blocking for long; dropped while the coordinator is unreachable. */
TIDE_API int tide_log_metric(tide_comm_t *comm, const char *name, double value);

/* ---- The elastic sampler ----------------------------------------------------
 *
 * A fixed global batch (P6): the order in which an epoch visits n samples is a
 * permutation drawn from (seed, epoch) alone, and each step takes the next global
 * batch of B samples from it, split across the current members by rank. Neither
 * depends on the world size, so a run whose membership changes sees exactly the
 * samples of an undisturbed run, each once per epoch; only the samples of a lost
 * in-flight step are used again. The position is a cursor (epoch, step within the
 * epoch); tide_sampler_register makes it part of the elastic state. */
typedef struct tide_sampler tide_sampler_t;

/* n_samples in 1..2^32-1, batch >= 1. *out is owned by the caller. */
TIDE_API int tide_sampler_create(uint64_t n_samples, uint64_t batch, uint64_t seed,
                                 tide_sampler_t **out);
TIDE_API void tide_sampler_destroy(tide_sampler_t *s);
/* Registers the cursor as elastic state under name (NULL: "tide.sampler"); s must
 * outlive the registration. */
TIDE_API int tide_sampler_register(tide_comm_t *comm, tide_sampler_t *s, const char *name);
/* Global batches per epoch: ceil(n / B); the last one of an epoch is short when B
 * does not divide n. */
TIDE_API uint64_t tide_sampler_steps_per_epoch(const tide_sampler_t *s);
TIDE_API void tide_sampler_cursor(const tide_sampler_t *s, uint64_t *epoch, uint64_t *step);
/* Moves to (epoch, step); a step past the epoch's end carries into later epochs. */
TIDE_API void tide_sampler_seek(tide_sampler_t *s, uint64_t epoch, uint64_t step);
/* This rank's part of the current global batch: [rank*g/size, (rank+1)*g/size) of
 * it, g the global batch's size (*global). Writes *count sample indices to idx
 * (room for cap; B always suffices). Does not move the cursor. */
TIDE_API int tide_sampler_batch(tide_sampler_t *s, int rank, int size, uint32_t *idx, size_t cap,
                                size_t *count, size_t *global);
/* Moves the cursor one global batch on (into the next epoch after the last). */
TIDE_API void tide_sampler_advance(tide_sampler_t *s);
/* The slice of `global` items that rank takes of size: *begin, *count. */
TIDE_API void tide_sampler_slice(size_t global, int rank, int size, size_t *begin, size_t *count);

#ifdef __cplusplus
}
#endif
#endif /* TIDE_H */
