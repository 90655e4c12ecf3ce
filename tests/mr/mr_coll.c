/*
 * mr_coll.c - broadcast, allgather, barrier, rank/size and argument checking, one
 * worker of a `tide run -n N` job.
 *
 * Sections, in this order on every rank:
 *   identity   tide_rank/tide_size agree with the launcher, ranks are 0..N-1 once each
 *   broadcast  every root x counts {0,1,7,1023,2^20+3} x dtypes; non-roots start from
 *              garbage, the root's buffer stays as it was
 *   allgather  counts x dtypes, out of place and in place (send = recv + rank*count)
 *   barrier    a late rank (a different one each round) sleeps first; nobody leaves
 *              before the last one entered (timestamps on the system-wide monotonic
 *              clock, gathered with allgather)
 *   invalid    NULL buffers with count > 0, unknown dtype/op, root out of range,
 *              NULL comm/request: TIDE_EINVAL, buffers untouched, comm still OK.
 *              Only even ranks make these calls, so a library that communicated
 *              (or counted a sequence number) on an invalid call would desync the
 *              collective that follows, which every rank checks.
 *   empty      count 0 with NULL buffers is a valid no-op (an assumption: the header
 *              only rules out NULL "with count > 0"; MPI and NCCL accept it)
 * The large count runs for a subset of (root, dtype) and (dtype, placement) pairs:
 * both collectives only move bytes, so element sizes 1, 2, 4, 8 matter at large
 * sizes, not every dtype (see the loops).
 *
 * Usage: mr_coll --np N [--seed S]
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tt.h"

typedef struct {
    tide_comm_t *comm;
    int rank, size;
    uint64_t seed;
    bool broken;
} ctx_t;

static const tide_dtype_t all_dtypes[] = {TIDE_FLOAT32, TIDE_FLOAT64, TIDE_FLOAT16, TIDE_BFLOAT16,
                                          TIDE_INT32,   TIDE_INT64,   TIDE_UINT8};
#define NDTYPES ((int)(sizeof all_dtypes / sizeof all_dtypes[0]))

static bool ok_or_break(ctx_t *c, int rc, const char *what)
{
    if (tt_expect_rc(rc, TIDE_OK, what)) return true;
    c->broken = true;
    return false;
}

/* ------------------------------------------------------------------ identity */

static void test_identity(ctx_t *c, long np)
{
    if (np > 0 && c->size != np) tt_fail("tide_size is %d, want %ld", c->size, np);
    if (c->rank < 0 || c->rank >= c->size)
        tt_fail("tide_rank is %d, outside [0, %d)", c->rank, c->size);
    int32_t *ranks = malloc(sizeof(int32_t) * (size_t)c->size);
    int32_t mine = c->rank;
    tt_watchdog(60, "identity allgather");
    int rc = tide_allgather(c->comm, &mine, ranks, 1, TIDE_INT32);
    if (ok_or_break(c, rc, "identity allgather")) {
        for (int r = 0; r < c->size; r++)
            if (ranks[r] != r)
                tt_fail("identity: allgather of ranks: slot %d holds %d", r, ranks[r]);
    }
    free(ranks);
}

/* ----------------------------------------------------------------- broadcast */

static void bcast_case(ctx_t *c, int root, size_t count, tide_dtype_t dt)
{
    size_t bytes = count * tt_esize(dt);
    uint64_t cs = tt_hash4(c->seed, 0xbca57, count * 64 + (size_t)dt, (uint64_t)root);
    char what[128];
    snprintf(what, sizeof what, "broadcast n=%d root=%d count=%zu %s", c->size, root, count,
             tt_dtype_name(dt));
    tt_buf_t b, want;
    if (tt_buf_alloc(&b, bytes) || tt_buf_alloc(&want, bytes)) {
        tt_fail("%s: out of memory", what);
        c->broken = true;
        return;
    }
    tt_gen(want.data, dt, TIDE_MIN, TT_EXACT, cs, root, c->size, count);
    if (c->rank == root)
        memcpy(b.data, want.data, bytes);
    else
        tt_buf_fill_pattern(&b, cs + (uint64_t)c->rank);
    tt_watchdog(120, what);
    int rc = tide_broadcast(c->comm, b.data, count, dt, root);
    if (ok_or_break(c, rc, what)) {
        if (memcmp(b.data, want.data, bytes) != 0) {
            size_t es = tt_esize(dt), i = 0;
            while (memcmp((char *)b.data + i * es, (char *)want.data + i * es, es) == 0)
                i++;
            tt_fail("%s: %s buffer differs from the root's, first at element %zu", what,
                    c->rank == root ? "the root's own" : "the received", i);
        }
        if (!tt_buf_guards_ok(&b)) tt_fail("%s: bytes outside the buffer were written", what);
    }
    tt_buf_free(&b);
    tt_buf_free(&want);
}

static void test_broadcast(ctx_t *c, const size_t *counts, int ncounts, size_t large)
{
    for (int root = 0; root < c->size && !c->broken; root++)
        for (int ci = 0; ci < ncounts && !c->broken; ci++)
            for (int d = 0; d < NDTYPES && !c->broken; d++) {
                tide_dtype_t dt = all_dtypes[d];
                if (counts[ci] == large) {
                    /* Element sizes 1, 2, 4, 8 from the first and last root; one
                     * dtype, rotating, from the others. */
                    bool edge = root == 0 || root == c->size - 1;
                    bool sized = dt == TIDE_UINT8 || dt == TIDE_FLOAT16 || dt == TIDE_FLOAT32 ||
                                 dt == TIDE_FLOAT64;
                    if (!(edge ? sized : d == root % NDTYPES)) continue;
                }
                bcast_case(c, root, counts[ci], dt);
            }
}

/* ----------------------------------------------------------------- allgather */

static void allgather_case(ctx_t *c, size_t count, tide_dtype_t dt, bool inplace)
{
    size_t es = tt_esize(dt), bytes = count * es, n = (size_t)c->size;
    uint64_t cs = tt_hash4(c->seed, 0xa11647, count * 64 + (size_t)dt, 0);
    char what[128];
    snprintf(what, sizeof what, "allgather n=%d count=%zu %s %s", c->size, count, tt_dtype_name(dt),
             inplace ? "in-place" : "out-of-place");
    tt_buf_t send, recv, want;
    if (tt_buf_alloc(&send, bytes) || tt_buf_alloc(&recv, bytes * n) ||
        tt_buf_alloc(&want, bytes * n)) {
        tt_fail("%s: out of memory", what);
        c->broken = true;
        return;
    }
    for (int r = 0; r < c->size; r++)
        tt_gen((char *)want.data + (size_t)r * bytes, dt, TIDE_MAX, TT_EXACT, cs, r, c->size,
               count);
    char *mine = (char *)want.data + (size_t)c->rank * bytes;
    tt_buf_fill_pattern(&recv, cs + 1 + (uint64_t)c->rank);
    const void *sendp;
    if (inplace) {
        memcpy((char *)recv.data + (size_t)c->rank * bytes, mine, bytes);
        sendp = (char *)recv.data + (size_t)c->rank * bytes;
    } else {
        memcpy(send.data, mine, bytes);
        sendp = send.data;
    }
    tt_watchdog(120, what);
    int rc = tide_allgather(c->comm, sendp, recv.data, count, dt);
    if (ok_or_break(c, rc, what)) {
        for (int r = 0; r < c->size; r++) {
            const char *got = (const char *)recv.data + (size_t)r * bytes;
            const char *exp = (const char *)want.data + (size_t)r * bytes;
            if (memcmp(got, exp, bytes) != 0) {
                size_t i = 0;
                while (memcmp(got + i * es, exp + i * es, es) == 0)
                    i++;
                tt_fail("%s: the block of rank %d differs, first at element %zu", what, r, i);
            }
        }
        if (!inplace && memcmp(send.data, mine, bytes) != 0)
            tt_fail("%s: the send buffer was modified", what);
        if (!tt_buf_guards_ok(&send) || !tt_buf_guards_ok(&recv))
            tt_fail("%s: bytes outside the buffers were written", what);
    }
    tt_buf_free(&send);
    tt_buf_free(&recv);
    tt_buf_free(&want);
}

static void test_allgather(ctx_t *c, const size_t *counts, int ncounts, size_t large)
{
    for (int ci = 0; ci < ncounts && !c->broken; ci++)
        for (int d = 0; d < NDTYPES && !c->broken; d++)
            for (int inplace = 0; inplace < 2 && !c->broken; inplace++) {
                tide_dtype_t dt = all_dtypes[d];
                /* Large: element sizes 1 and 4 in both placements, 8 out of place. */
                if (counts[ci] == large &&
                    !(dt == TIDE_UINT8 || dt == TIDE_FLOAT32 || (dt == TIDE_INT64 && !inplace)))
                    continue;
                allgather_case(c, counts[ci], dt, inplace != 0);
            }
}

/* ------------------------------------------------------------------- barrier */

static void test_barrier(ctx_t *c)
{
    int rounds = (c->size < 4 ? c->size : 4) + 1;
    double *times = malloc(sizeof(double) * 2 * (size_t)c->size);
    for (int k = 0; k < rounds && !c->broken; k++) {
        int late = k % c->size;
        char what[96];
        snprintf(what, sizeof what, "barrier n=%d round %d (late rank %d)", c->size, k, late);
        /* Line everyone up first, so that the late rank is late relative to them. */
        tt_watchdog(60, what);
        if (!ok_or_break(c, tide_barrier(c->comm), what)) break;
        if (c->rank == late) tt_sleep(0.05);
        double mine[2];
        mine[0] = tt_now();
        int rc = tide_barrier(c->comm);
        mine[1] = tt_now();
        if (!ok_or_break(c, rc, what)) break;
        rc = tide_allgather(c->comm, mine, times, 2, TIDE_FLOAT64);
        if (!ok_or_break(c, rc, "barrier timestamps allgather")) break;
        double last_in = times[0], first_out = times[1];
        int who_in = 0, who_out = 0;
        for (int r = 0; r < c->size; r++) {
            if (times[2 * r] > last_in) {
                last_in = times[2 * r];
                who_in = r;
            }
            if (times[2 * r + 1] < first_out) {
                first_out = times[2 * r + 1];
                who_out = r;
            }
        }
        if (first_out < last_in)
            tt_fail("%s: rank %d left the barrier %.6f s before rank %d entered it", what, who_out,
                    last_in - first_out, who_in);
    }
    free(times);
}

/* ------------------------------------------------------------------- invalid */

#define POISON_REQ ((tide_request_t *)(uintptr_t)0x5eed)

static void expect_einval(int rc, const char *what, const tt_buf_t *b1, uint64_t t1,
                          const tt_buf_t *b2, uint64_t t2)
{
    tt_expect_rc(rc, TIDE_EINVAL, what);
    if (b1 && !tt_buf_has_pattern(b1, t1))
        tt_fail("%s: a buffer was modified by a rejected call", what);
    if (b2 && !tt_buf_has_pattern(b2, t2))
        tt_fail("%s: a buffer was modified by a rejected call", what);
}

static void check_req_untouched(tide_request_t *req, const char *what)
{
    if (req != POISON_REQ && req != NULL) tt_fail("%s: a rejected call handed out a request", what);
}

static void test_invalid_local(ctx_t *c)
{
    const size_t n = 5;
    const int N = c->size;
    tt_buf_t s, r;
    tt_buf_alloc(&s, n * 8 * (size_t)N);
    tt_buf_alloc(&r, n * 8 * (size_t)N);
    const uint64_t ts = 11, tr = 22;
    tt_buf_fill_pattern(&s, ts);
    tt_buf_fill_pattern(&r, tr);
    const tide_dtype_t bad_dt[] = {(tide_dtype_t)TIDE_DTYPE_COUNT, (tide_dtype_t)-1,
                                   (tide_dtype_t)1000};
    const tide_op_t bad_op[] = {(tide_op_t)TIDE_OP_COUNT, (tide_op_t)-1, (tide_op_t)1000};
    const int bad_root[] = {-1, N, N + 1, INT_MAX, INT_MIN};
    char what[128];
    tt_watchdog(30, "invalid-argument calls (must return at once, without communicating)");

    /* allreduce */
    expect_einval(tide_allreduce(c->comm, NULL, r.data, n, TIDE_FLOAT32, TIDE_SUM),
                  "allreduce(send=NULL, count=5)", &r, tr, NULL, 0);
    expect_einval(tide_allreduce(c->comm, s.data, NULL, n, TIDE_FLOAT32, TIDE_SUM),
                  "allreduce(recv=NULL, count=5)", &s, ts, NULL, 0);
    expect_einval(tide_allreduce(c->comm, NULL, NULL, n, TIDE_FLOAT32, TIDE_SUM),
                  "allreduce(send=recv=NULL, count=5)", NULL, 0, NULL, 0);
    for (size_t i = 0; i < 3; i++) {
        snprintf(what, sizeof what, "allreduce(dtype=%d)", (int)bad_dt[i]);
        expect_einval(tide_allreduce(c->comm, s.data, r.data, n, bad_dt[i], TIDE_SUM), what, &s, ts,
                      &r, tr);
        snprintf(what, sizeof what, "allreduce(dtype=%d, count=0)", (int)bad_dt[i]);
        expect_einval(tide_allreduce(c->comm, s.data, r.data, 0, bad_dt[i], TIDE_SUM), what, &s, ts,
                      &r, tr);
        snprintf(what, sizeof what, "allreduce(op=%d)", (int)bad_op[i]);
        expect_einval(tide_allreduce(c->comm, s.data, r.data, n, TIDE_FLOAT32, bad_op[i]), what, &s,
                      ts, &r, tr);
        snprintf(what, sizeof what, "allreduce in place (op=%d)", (int)bad_op[i]);
        expect_einval(tide_allreduce(c->comm, r.data, r.data, n, TIDE_INT32, bad_op[i]), what, &r,
                      tr, NULL, 0);
    }
    expect_einval(tide_allreduce(NULL, s.data, r.data, n, TIDE_FLOAT32, TIDE_SUM),
                  "allreduce(comm=NULL)", &s, ts, &r, tr);

    /* broadcast */
    expect_einval(tide_broadcast(c->comm, NULL, n, TIDE_FLOAT32, 0), "broadcast(buf=NULL)", NULL, 0,
                  NULL, 0);
    for (size_t i = 0; i < 3; i++) {
        snprintf(what, sizeof what, "broadcast(dtype=%d)", (int)bad_dt[i]);
        expect_einval(tide_broadcast(c->comm, r.data, n, bad_dt[i], 0), what, &r, tr, NULL, 0);
    }
    for (size_t i = 0; i < sizeof bad_root / sizeof bad_root[0]; i++) {
        snprintf(what, sizeof what, "broadcast(root=%d) with %d ranks", bad_root[i], N);
        expect_einval(tide_broadcast(c->comm, r.data, n, TIDE_FLOAT32, bad_root[i]), what, &r, tr,
                      NULL, 0);
        snprintf(what, sizeof what, "broadcast(root=%d, count=0) with %d ranks", bad_root[i], N);
        expect_einval(tide_broadcast(c->comm, r.data, 0, TIDE_FLOAT32, bad_root[i]), what, &r, tr,
                      NULL, 0);
    }
    expect_einval(tide_broadcast(NULL, r.data, n, TIDE_FLOAT32, 0), "broadcast(comm=NULL)", &r, tr,
                  NULL, 0);

    /* allgather */
    expect_einval(tide_allgather(c->comm, NULL, r.data, n, TIDE_FLOAT32),
                  "allgather(send=NULL, count=5)", &r, tr, NULL, 0);
    expect_einval(tide_allgather(c->comm, s.data, NULL, n, TIDE_FLOAT32),
                  "allgather(recv=NULL, count=5)", &s, ts, NULL, 0);
    for (size_t i = 0; i < 3; i++) {
        snprintf(what, sizeof what, "allgather(dtype=%d)", (int)bad_dt[i]);
        expect_einval(tide_allgather(c->comm, s.data, r.data, n, bad_dt[i]), what, &s, ts, &r, tr);
    }
    expect_einval(tide_allgather(NULL, s.data, r.data, n, TIDE_FLOAT32), "allgather(comm=NULL)", &s,
                  ts, &r, tr);

    /* barrier */
    expect_einval(tide_barrier(NULL), "barrier(comm=NULL)", NULL, 0, NULL, 0);

    /* iallreduce / wait */
    tide_request_t *req = POISON_REQ;
    expect_einval(tide_iallreduce(c->comm, NULL, r.data, n, TIDE_FLOAT32, TIDE_SUM, &req),
                  "iallreduce(send=NULL)", &r, tr, NULL, 0);
    check_req_untouched(req, "iallreduce(send=NULL)");
    req = POISON_REQ;
    expect_einval(tide_iallreduce(c->comm, s.data, NULL, n, TIDE_FLOAT32, TIDE_SUM, &req),
                  "iallreduce(recv=NULL)", &s, ts, NULL, 0);
    check_req_untouched(req, "iallreduce(recv=NULL)");
    req = POISON_REQ;
    expect_einval(tide_iallreduce(c->comm, s.data, r.data, n, bad_dt[0], TIDE_SUM, &req),
                  "iallreduce(dtype=TIDE_DTYPE_COUNT)", &s, ts, &r, tr);
    check_req_untouched(req, "iallreduce(bad dtype)");
    req = POISON_REQ;
    expect_einval(tide_iallreduce(c->comm, s.data, r.data, n, TIDE_FLOAT32, bad_op[1], &req),
                  "iallreduce(op=-1)", &s, ts, &r, tr);
    check_req_untouched(req, "iallreduce(bad op)");
    req = POISON_REQ;
    expect_einval(tide_iallreduce(NULL, s.data, r.data, n, TIDE_FLOAT32, TIDE_SUM, &req),
                  "iallreduce(comm=NULL)", &s, ts, &r, tr);
    check_req_untouched(req, "iallreduce(comm=NULL)");
    expect_einval(tide_iallreduce(c->comm, s.data, r.data, n, TIDE_FLOAT32, TIDE_SUM, NULL),
                  "iallreduce(req=NULL)", &s, ts, &r, tr);
    expect_einval(tide_wait(NULL), "wait(NULL)", NULL, 0, NULL, 0);

    /* Queries on NULL, as the header defines them. */
    if (tide_rank(NULL) != -1) tt_fail("tide_rank(NULL) is %d, want -1", tide_rank(NULL));
    if (tide_size(NULL) != 0) tt_fail("tide_size(NULL) is %d, want 0", tide_size(NULL));

    int st = tide_comm_status(c->comm);
    if (st != TIDE_OK)
        tt_fail("tide_comm_status after rejected calls is %d %s, want TIDE_OK (EINVAL must not "
                "fail the communicator)",
                st, tt_rcname(st));
    tt_buf_free(&s);
    tt_buf_free(&r);
}

static void test_invalid(ctx_t *c)
{
    if (c->rank % 2 == 0) test_invalid_local(c);

    /* Every rank: a real allreduce must still line up across ranks. */
    int32_t v[3] = {c->rank + 1, -(c->rank + 1), 7}, out[3] = {0, 0, 0};
    tt_watchdog(60, "allreduce after invalid calls on even ranks (a hang here means an invalid "
                    "call communicated)");
    int rc = tide_allreduce(c->comm, v, out, 3, TIDE_INT32, TIDE_SUM);
    if (ok_or_break(c, rc, "allreduce after invalid calls")) {
        int32_t want = c->size * (c->size + 1) / 2;
        if (out[0] != want || out[1] != -want || out[2] != 7 * c->size)
            tt_fail("allreduce after invalid calls: got {%d, %d, %d}, want {%d, %d, %d}", out[0],
                    out[1], out[2], want, -want, 7 * c->size);
    }
    rc = tide_comm_status(c->comm);
    if (rc != TIDE_OK)
        tt_fail("tide_comm_status is %d %s after the invalid section", rc, tt_rcname(rc));
}

/* count 0 with NULL buffers, called collectively. */
static void test_empty_null(ctx_t *c)
{
    tt_watchdog(60, "count-0 calls with NULL buffers");
    int rc = tide_allreduce(c->comm, NULL, NULL, 0, TIDE_FLOAT32, TIDE_SUM);
    tt_expect_rc(rc, TIDE_OK, "[assumption: count 0 allows NULL] allreduce(NULL, NULL, 0)");
    if (rc != TIDE_OK && tide_comm_status(c->comm) != TIDE_OK) {
        c->broken = true;
        return;
    }
    rc = tide_broadcast(c->comm, NULL, 0, TIDE_INT64, c->size - 1);
    tt_expect_rc(rc, TIDE_OK, "[assumption: count 0 allows NULL] broadcast(NULL, 0)");
    rc = tide_allgather(c->comm, NULL, NULL, 0, TIDE_UINT8);
    tt_expect_rc(rc, TIDE_OK, "[assumption: count 0 allows NULL] allgather(NULL, NULL, 0)");
    tide_request_t *req = NULL;
    rc = tide_iallreduce(c->comm, NULL, NULL, 0, TIDE_FLOAT16, TIDE_MAX, &req);
    tt_expect_rc(rc, TIDE_OK, "[assumption: count 0 allows NULL] iallreduce(NULL, NULL, 0)");
    if (rc == TIDE_OK) tt_expect_rc(tide_wait(req), TIDE_OK, "wait on iallreduce(NULL, NULL, 0)");
    if (tide_comm_status(c->comm) != TIDE_OK) c->broken = true;
}

int main(int argc, char **argv)
{
    ctx_t c;
    memset(&c, 0, sizeof c);
    long np = tt_opt_long(argc, argv, "--np", -1);
    c.seed = (uint64_t)tt_opt_long(argc, argv, "--seed", 777);
    const char *only = tt_opt(argc, argv, "--only", NULL);

    tt_watchdog(60, "tide_init");
    int rc = tide_init(&c.comm);
    if (rc != TIDE_OK) {
        tt_fail("tide_init returned %d %s", rc, tt_rcname(rc));
        return TT_EXIT_FAIL;
    }
    c.rank = tt_rank = tide_rank(c.comm);
    c.size = tide_size(c.comm);
    double t0 = tt_now();

    size_t large = tt_scaled_count(TT_LARGE_COUNT, 4097);
    const size_t counts[] = {0, 1, 7, 1023, large};
    const int ncounts = (int)(sizeof counts / sizeof counts[0]);

#define SECTION(name, call)                                                                        \
    do {                                                                                           \
        if (!c.broken && (!only || strstr(only, name))) {                                          \
            double ts_ = tt_now();                                                                 \
            call;                                                                                  \
            if (c.rank == 0) tt_note("%s: %.2f s", name, tt_now() - ts_);                          \
        }                                                                                          \
    } while (0)

    SECTION("identity", test_identity(&c, np));
    SECTION("broadcast", test_broadcast(&c, counts, ncounts, large));
    SECTION("allgather", test_allgather(&c, counts, ncounts, large));
    SECTION("barrier", test_barrier(&c));
    SECTION("invalid", test_invalid(&c));
    SECTION("empty", test_empty_null(&c));

    if (!c.broken) {
        tt_watchdog(60, "final barrier");
        tt_expect_rc(tide_barrier(c.comm), TIDE_OK, "final barrier");
    }
    tt_watchdog(60, "tide_finalize");
    tt_expect_rc(tide_finalize(c.comm), TIDE_OK, "tide_finalize");
    tt_watchdog(0, NULL);
    if (c.rank == 0 || tt_failures)
        tt_note("mr_coll n=%d: %ld failures, %.2f s", c.size, tt_failures, tt_now() - t0);
    return tt_failures ? TT_EXIT_FAIL : 0;
}
