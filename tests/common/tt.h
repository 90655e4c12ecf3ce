/*
 * tt.h - helpers shared by Tide's multi-rank and fault tests.
 *
 * The multi-rank tests must not trust the library they test, so everything a test
 * needs to know the right answer lives here: its own element sizes, its own
 * float16/bfloat16 <-> float32 conversions (round to nearest even), a deterministic
 * input generator that every rank can run for every rank, and a reference reduction
 * that follows the header's rules (16-bit floats reduced in float32, integer AVG
 * truncating toward zero). It never calls into libtide except for tide_strerror and
 * tide_errname when it prints a result code.
 *
 * A worker records failures with tt_fail() and keeps going, so that every rank makes
 * the same sequence of collectives; it exits non-zero at the end if any check failed.
 * A watchdog (SIGALRM) turns a hang into a message naming the step that hung.
 */
#ifndef TIDE_TESTS_TT_H
#define TIDE_TESTS_TT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tide.h"

/* The largest count of the sweep: 2^20 + 3, odd so that no chunking divides it. */
#define TT_LARGE_COUNT (((size_t)1 << 20) + 3)

/* Exit codes of the workers, distinct so that a CTest log says what happened. */
#define TT_EXIT_FAIL 1  /* a check failed */
#define TT_EXIT_USAGE 2 /* bad arguments */
#define TT_EXIT_HANG 9  /* the watchdog fired */

/* How a test's inputs are made (see tt_gen). */
typedef enum {
    TT_EXACT = 0, /* every partial result is exact in the dtype: order cannot matter */
    TT_ROUND = 1, /* full-range floats; only deterministic for world size <= 2 */
} tt_regime_t;

/* ---- element types, independent of the library ---- */
size_t tt_esize(tide_dtype_t dt);
const char *tt_dtype_name(tide_dtype_t dt);
const char *tt_op_name(tide_op_t op);
bool tt_is_float(tide_dtype_t dt);

/* IEEE binary16 and bfloat16 <-> binary32, round to nearest, ties to even. */
float tt_f16_to_f32(uint16_t h);
uint16_t tt_f32_to_f16(float f);
float tt_bf16_to_f32(uint16_t b);
uint16_t tt_f32_to_bf16(float f);

/* ---- deterministic inputs and the reference ---- */
uint64_t tt_hash4(uint64_t a, uint64_t b, uint64_t c, uint64_t d);

/* Writes rank's input of a case (count elements of dt) to buf. case_seed names the
 * case; the same arguments give the same bytes on every rank. */
void tt_gen(void *buf, tide_dtype_t dt, tide_op_t op, tt_regime_t regime, uint64_t case_seed,
            int rank, int size, size_t count);

/* A reference allreduce of the inputs tt_gen gives all `size` ranks. ref receives
 * count elements of dt; tol (count doubles, may be NULL unless op is AVG on a float
 * dtype) receives the allowed absolute error per element, 0 meaning bit-exact. */
typedef struct {
    void *ref;
    double *tol;
    void *scratch; /* count elements of dt */
    void *acc;     /* count * 8 bytes */
    size_t cap;    /* elements these buffers hold */
} tt_refbuf_t;
int tt_refbuf_reserve(tt_refbuf_t *rb, size_t count);
void tt_refbuf_free(tt_refbuf_t *rb);
void tt_reference(tt_refbuf_t *rb, tide_dtype_t dt, tide_op_t op, tt_regime_t regime,
                  uint64_t case_seed, int size, size_t count);

/* Compares got with rb->ref (and rb->tol); reports up to a few differing elements
 * under the name what. Returns the number of differing elements. */
size_t tt_compare(const void *got, const tt_refbuf_t *rb, tide_dtype_t dt, size_t count,
                  const char *what);

/* Formats one element of dt at p into out (hex and value). */
void tt_format_elem(char *out, size_t n, const void *p, tide_dtype_t dt);

/* ---- guarded buffers: canaries before and after the data catch overruns ---- */
#define TT_GUARD 64
typedef struct {
    unsigned char *base;
    void *data;
    size_t bytes;
} tt_buf_t;
int tt_buf_alloc(tt_buf_t *b, size_t bytes);
void tt_buf_free(tt_buf_t *b);
/* Fills the data with a pattern derived from tag (to see untouched buffers). */
void tt_buf_fill_pattern(tt_buf_t *b, uint64_t tag);
bool tt_buf_has_pattern(const tt_buf_t *b, uint64_t tag);
bool tt_buf_guards_ok(const tt_buf_t *b);

/* ---- reporting ----
 * Messages go to stderr prefixed "[rN]", deliberately not "rank N": fault_driver
 * looks for the launcher's own words naming a dead rank in the job's stderr, and
 * must not be fooled by what the workers print themselves. */
extern int tt_rank;      /* for messages; -1 before tide_init */
extern long tt_failures; /* number of tt_fail calls */
void tt_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void tt_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* tt_fail unless rc == want; returns rc == want. */
bool tt_expect_rc(int rc, int want, const char *what);
const char *tt_rcname(int rc);

/* ---- time, watchdog, scale ---- */
double tt_now(void); /* CLOCK_MONOTONIC seconds; comparable between processes */
void tt_sleep(double seconds);
/* (Re)arms a watchdog: if it is not re-armed or cleared within seconds, it prints
 * "HANG in <what>" and exits TT_EXIT_HANG. what must stay valid (a literal, or a
 * buffer the caller keeps). seconds == 0 clears it. */
void tt_watchdog(unsigned seconds, const char *what);
/* TIDE_TEST_SCALE in (0, 1] (default 1): sanitizer builds run lighter sweeps. */
double tt_scale(void);
/* A count scaled by tt_scale, kept odd and at least min. */
size_t tt_scaled_count(size_t count, size_t min);

/* Parses "--name value" style options: returns the value after name in argv or dflt. */
const char *tt_opt(int argc, char **argv, const char *name, const char *dflt);
long tt_opt_long(int argc, char **argv, const char *name, long dflt);

#endif /* TIDE_TESTS_TT_H */
