/*
 * mr_allreduce.c - the allreduce sweep, one worker of a `tide run -n N` job.
 *
 * Every rank loops over the same cases: counts {0, 1, 7, 1023, 2^20+3} x every dtype
 * x every op x {out of place, in place}, and checks its result against a reference
 * it computes itself from every rank's deterministic inputs (tt.h). Inputs are
 * chosen so that every partial sum or product is exact in the dtype, so the
 * reference does not depend on the library's reduction order; AVG on floats, where a
 * division rounds, is compared within a bound (tt_reference). With one or two ranks
 * the result of any order is the same, so there a second set of cases uses
 * full-range floats (subnormals, overflow to Inf, ties) and checks round-to-nearest-
 * even bit for bit.
 *
 * Batching: one `tide run` per (world size, transport) runs all its cases in this one
 * process per rank, because starting a job costs more than most cases.
 *
 * What is restricted, and why: at world sizes >= 5 the largest count runs only for
 * the (dtype, op) pairs in large_pair() - SUM for every dtype (so every element size
 * 1, 2, 4, 8 goes through the large-message path) and one or two dtypes for each
 * other op. There every rank generates all N ranks' inputs for its reference, so a
 * large case costs N x 2^20 elements of work on each of N processes sharing two
 * cores, about N^2 times a small machine's memory bandwidth; the op kernels
 * themselves are covered by every pair at the smaller counts. Every pair runs at the
 * largest count for world sizes 1-4. TIDE_TEST_SCALE < 1 (sanitizer builds) also
 * shrinks the largest count.
 *
 * --small: counts {0, 1, 7, 1023, 4099} only, every pair. For the runs that force
 * one algorithm with TIDE_ALGO (ring, shm-rsag): the automatic choice only sends
 * large messages through those, so counts below the world size (ranks whose chunk
 * is empty) and odd chunk splits are otherwise never exercised there.
 *
 * Usage: mr_allreduce --np N [--seed S] [--small]
 * Exit: 0 all passed, 1 a check failed, 9 a hang (watchdog).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tt.h"

static bool large_pair(tide_dtype_t dt, tide_op_t op)
{
    switch (op) {
    case TIDE_SUM:
        return true;
    case TIDE_AVG:
        return dt == TIDE_FLOAT32 || dt == TIDE_BFLOAT16 || dt == TIDE_INT64;
    case TIDE_MIN:
        return dt == TIDE_FLOAT16 || dt == TIDE_INT32;
    case TIDE_MAX:
        return dt == TIDE_FLOAT64 || dt == TIDE_UINT8;
    case TIDE_PROD:
        return dt == TIDE_FLOAT64 || dt == TIDE_INT32;
    default:
        return false;
    }
}

typedef struct {
    tide_comm_t *comm;
    int rank, size;
    uint64_t seed;
    tt_buf_t send, recv, inout;
    void *own; /* this rank's input, to check that send is left alone */
    tt_refbuf_t rb;
    long cases;
    bool broken; /* a collective failed: the communicator is unusable */
} sweep_t;

static int reserve(sweep_t *s, size_t bytes)
{
    tt_buf_free(&s->send);
    tt_buf_free(&s->recv);
    tt_buf_free(&s->inout);
    free(s->own);
    s->own = malloc(bytes ? bytes : 1);
    if (!s->own || tt_buf_alloc(&s->send, bytes) || tt_buf_alloc(&s->recv, bytes) ||
        tt_buf_alloc(&s->inout, bytes))
        return -1;
    return 0;
}

static void run_case(sweep_t *s, size_t count, tide_dtype_t dt, tide_op_t op, tt_regime_t regime)
{
    size_t bytes = count * tt_esize(dt);
    uint64_t cs = tt_hash4(s->seed, count, (uint64_t)dt * 16 + (uint64_t)op, regime);
    static char what[160];
    snprintf(what, sizeof what, "allreduce n=%d count=%zu %s %s %s", s->size, count,
             tt_dtype_name(dt), tt_op_name(op), regime == TT_ROUND ? "full-range" : "exact");

    /* Same-sized buffers for every case of this count keep allocation out of it;
     * the guards sit right after `bytes`. */
    if (reserve(s, bytes) != 0 || tt_refbuf_reserve(&s->rb, count) != 0) {
        tt_fail("%s: out of memory", what);
        s->broken = true;
        return;
    }
    tt_gen(s->own, dt, op, regime, cs, s->rank, s->size, count);
    tt_reference(&s->rb, dt, op, regime, cs, s->size, count);

    /* Out of place: recv starts as garbage, send must come back unchanged. */
    memcpy(s->send.data, s->own, bytes);
    tt_buf_fill_pattern(&s->recv, cs);
    tt_watchdog(180, what);
    int rc = tide_allreduce(s->comm, s->send.data, s->recv.data, count, dt, op);
    s->cases++;
    if (!tt_expect_rc(rc, TIDE_OK, what)) {
        s->broken = true;
        return;
    }
    char w2[200];
    snprintf(w2, sizeof w2, "%s out-of-place", what);
    tt_compare(s->recv.data, &s->rb, dt, count, w2);
    if (memcmp(s->send.data, s->own, bytes) != 0) tt_fail("%s: the send buffer was modified", w2);
    if (!tt_buf_guards_ok(&s->send) || !tt_buf_guards_ok(&s->recv))
        tt_fail("%s: bytes outside the buffers were written", w2);

    /* In place. */
    memcpy(s->inout.data, s->own, bytes);
    rc = tide_allreduce(s->comm, s->inout.data, s->inout.data, count, dt, op);
    s->cases++;
    snprintf(w2, sizeof w2, "%s in-place", what);
    if (!tt_expect_rc(rc, TIDE_OK, w2)) {
        s->broken = true;
        return;
    }
    tt_compare(s->inout.data, &s->rb, dt, count, w2);
    if (!tt_buf_guards_ok(&s->inout)) tt_fail("%s: bytes outside the buffer were written", w2);
}

int main(int argc, char **argv)
{
    sweep_t s;
    memset(&s, 0, sizeof s);
    long np = tt_opt_long(argc, argv, "--np", -1);
    s.seed = (uint64_t)tt_opt_long(argc, argv, "--seed", 20240601);

    tt_watchdog(60, "tide_init");
    int rc = tide_init(&s.comm);
    if (rc != TIDE_OK) {
        tt_fail("tide_init returned %d %s", rc, tt_rcname(rc));
        return TT_EXIT_FAIL;
    }
    s.rank = tt_rank = tide_rank(s.comm);
    s.size = tide_size(s.comm);
    if (np > 0 && s.size != np) tt_fail("tide_size is %d, want %ld", s.size, np);
    if (s.rank < 0 || s.rank >= s.size) tt_fail("tide_rank is %d, outside [0, %d)", s.rank, s.size);
    if (tt_failures) {
        tide_finalize(s.comm);
        return TT_EXIT_FAIL;
    }

    bool small = false;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--small") == 0) small = true;
    size_t large = small ? 4099 : tt_scaled_count(TT_LARGE_COUNT, 4097);
    const size_t counts[] = {0, 1, 7, 1023, large};
    double t_all = tt_now();
    for (size_t ci = 0; ci < sizeof counts / sizeof counts[0] && !s.broken; ci++) {
        size_t count = counts[ci];
        double t0 = tt_now();
        long c0 = s.cases;
        for (int d = 0; d < TIDE_DTYPE_COUNT && !s.broken; d++) {
            for (int o = 0; o < TIDE_OP_COUNT && !s.broken; o++) {
                tide_dtype_t dt = (tide_dtype_t)d;
                tide_op_t op = (tide_op_t)o;
                if (!small && count == large && s.size >= 5 && !large_pair(dt, op)) continue;
                run_case(&s, count, dt, op, TT_EXACT);
                /* With <= 2 ranks every order gives the same bits: check rounding. */
                if (s.size <= 2 && tt_is_float(dt) && op != TIDE_MIN && op != TIDE_MAX &&
                    count > 0 && !s.broken)
                    run_case(&s, count, dt, op, TT_ROUND);
            }
        }
        if (s.rank == 0)
            tt_note("count %zu: %ld calls in %.2f s", count, s.cases - c0, tt_now() - t0);
    }

    if (!s.broken) {
        tt_watchdog(60, "final barrier");
        rc = tide_barrier(s.comm);
        tt_expect_rc(rc, TIDE_OK, "final barrier");
    }
    tt_watchdog(60, "tide_finalize");
    rc = tide_finalize(s.comm);
    tt_expect_rc(rc, TIDE_OK, "tide_finalize");
    tt_watchdog(0, NULL);

    tt_buf_free(&s.send);
    tt_buf_free(&s.recv);
    tt_buf_free(&s.inout);
    free(s.own);
    tt_refbuf_free(&s.rb);
    if (s.rank == 0 || tt_failures)
        tt_note("mr_allreduce n=%d: %ld calls, %ld failures, %.2f s", s.size, s.cases, tt_failures,
                tt_now() - t_all);
    return tt_failures ? TT_EXIT_FAIL : 0;
}
