/*
 * mr_iallreduce.c - tide_iallreduce + tide_wait with several requests in flight, one
 * worker of a `tide run -n N` job.
 *
 * Rounds, the same on every rank:
 *   A  a batch of mixed requests (sizes 0 .. 2^20+3, every dtype and op, in place and
 *      out of place) started back to back, waited in the order started
 *   B  the same shape with new inputs, waited in reverse order; requests run in the
 *      order started (tide.h), so once the last one is done the earlier ones are
 *      done too and waiting for them must return at once (< 0.25 s for all of them:
 *      a wait that still had to move its data would take longer than that here)
 *   C  a sliding window: 4 in flight, start one, wait the oldest, 24 requests, the
 *      way gradient buckets overlap with backward compute
 *   D  a blocking allreduce and tide_comm_status afterwards: the background work left
 *      the communicator in step and healthy
 * Every result is checked against the reference of tt.h; buffers are only read after
 * tide_wait returned, as the header's borrowing rule says.
 *
 * Usage: mr_iallreduce --np N [--seed S]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tt.h"

typedef struct {
    size_t count;
    tide_dtype_t dt;
    tide_op_t op;
    bool inplace;
} spec_t;

typedef struct {
    spec_t sp;
    uint64_t cs;
    tt_buf_t send, recv;
    void *own;
    tt_refbuf_t rb;
    tide_request_t *req;
    bool started;
    char what[128];
} job_t;

typedef struct {
    tide_comm_t *comm;
    int rank, size;
    uint64_t seed;
    bool broken;
} ctx_t;

static int job_prepare(ctx_t *c, job_t *j, const spec_t *sp, uint64_t salt)
{
    memset(j, 0, sizeof *j);
    j->sp = *sp;
    j->cs = tt_hash4(c->seed, salt, sp->count, (uint64_t)sp->dt * 16 + (uint64_t)sp->op);
    snprintf(j->what, sizeof j->what, "iallreduce #%llu n=%d count=%zu %s %s %s",
             (unsigned long long)salt, c->size, sp->count, tt_dtype_name(sp->dt),
             tt_op_name(sp->op), sp->inplace ? "in-place" : "out-of-place");
    size_t bytes = sp->count * tt_esize(sp->dt);
    j->own = malloc(bytes ? bytes : 1);
    if (!j->own || tt_buf_alloc(&j->send, bytes) || tt_buf_alloc(&j->recv, bytes) ||
        tt_refbuf_reserve(&j->rb, sp->count))
        return -1;
    tt_gen(j->own, sp->dt, sp->op, TT_EXACT, j->cs, c->rank, c->size, sp->count);
    tt_reference(&j->rb, sp->dt, sp->op, TT_EXACT, j->cs, c->size, sp->count);
    /* Only ref and tol are needed from here on. */
    free(j->rb.scratch);
    free(j->rb.acc);
    j->rb.scratch = j->rb.acc = NULL;
    if (sp->inplace) {
        memcpy(j->recv.data, j->own, bytes);
    } else {
        memcpy(j->send.data, j->own, bytes);
        tt_buf_fill_pattern(&j->recv, j->cs);
    }
    return 0;
}

static bool job_start(ctx_t *c, job_t *j)
{
    const void *send = j->sp.inplace ? j->recv.data : j->send.data;
    j->req = NULL;
    int rc = tide_iallreduce(c->comm, send, j->recv.data, j->sp.count, j->sp.dt, j->sp.op, &j->req);
    if (!tt_expect_rc(rc, TIDE_OK, j->what)) {
        c->broken = true;
        return false;
    }
    if (!j->req) {
        tt_fail("%s: TIDE_OK but no request", j->what);
        c->broken = true;
        return false;
    }
    j->started = true;
    return true;
}

static void job_wait_check(ctx_t *c, job_t *j)
{
    if (!j->started) return;
    char w[160];
    snprintf(w, sizeof w, "wait on %s", j->what);
    int rc = tide_wait(j->req);
    j->started = false;
    if (!tt_expect_rc(rc, TIDE_OK, w)) {
        c->broken = true;
        return;
    }
    tt_compare(j->recv.data, &j->rb, j->sp.dt, j->sp.count, j->what);
    if (!j->sp.inplace && memcmp(j->send.data, j->own, j->sp.count * tt_esize(j->sp.dt)) != 0)
        tt_fail("%s: the send buffer was modified", j->what);
    if (!tt_buf_guards_ok(&j->send) || !tt_buf_guards_ok(&j->recv))
        tt_fail("%s: bytes outside the buffers were written", j->what);
}

static void job_free(job_t *j)
{
    tt_buf_free(&j->send);
    tt_buf_free(&j->recv);
    free(j->own);
    j->own = NULL;
    tt_refbuf_free(&j->rb);
}

static void batch_specs(spec_t *sp, int *n, size_t large)
{
    const spec_t s[] = {
        {large, TIDE_FLOAT32, TIDE_SUM, true}, {1023, TIDE_FLOAT16, TIDE_AVG, false},
        {7, TIDE_INT64, TIDE_MAX, true},       {large / 4 | 1, TIDE_BFLOAT16, TIDE_SUM, false},
        {1, TIDE_UINT8, TIDE_MIN, false},      {0, TIDE_FLOAT64, TIDE_PROD, true},
        {65537, TIDE_INT32, TIDE_PROD, false}, {4099, TIDE_FLOAT64, TIDE_AVG, true},
    };
    *n = (int)(sizeof s / sizeof s[0]);
    memcpy(sp, s, sizeof s);
}

/* A or B: start all, then wait in order (A) or in reverse (B). */
static void round_batch(ctx_t *c, size_t large, bool reverse, uint64_t salt0)
{
    spec_t sp[16];
    int n;
    batch_specs(sp, &n, large);
    job_t *jobs = calloc((size_t)n, sizeof *jobs);
    const char *name = reverse ? "round B (wait in reverse order)" : "round A (wait in order)";
    for (int i = 0; i < n; i++)
        if (job_prepare(c, &jobs[i], &sp[i], salt0 + (uint64_t)i) != 0) {
            tt_fail("%s: out of memory", name);
            c->broken = true;
        }
    tt_watchdog(240, name);
    int started = 0;
    for (int i = 0; i < n && !c->broken; i++)
        if (job_start(c, &jobs[i])) started++;
    if (!reverse) {
        for (int i = 0; i < started; i++)
            job_wait_check(c, &jobs[i]);
    } else if (started > 0) {
        job_wait_check(c, &jobs[started - 1]);
        double t0 = tt_now();
        for (int i = started - 2; i >= 0; i--) {
            int rc = tide_wait(jobs[i].req);
            jobs[i].started = false;
            if (!tt_expect_rc(rc, TIDE_OK, jobs[i].what)) c->broken = true;
        }
        double dt = tt_now() - t0;
        if (dt > 0.25)
            tt_fail("%s: after the last request finished, waiting for the %d earlier ones "
                    "took %.3f s: they had not completed, so requests do not complete in the "
                    "order started",
                    name, started - 1, dt);
        for (int i = started - 2; i >= 0 && !c->broken; i--) {
            tt_compare(jobs[i].recv.data, &jobs[i].rb, jobs[i].sp.dt, jobs[i].sp.count,
                       jobs[i].what);
            if (!tt_buf_guards_ok(&jobs[i].send) || !tt_buf_guards_ok(&jobs[i].recv))
                tt_fail("%s: bytes outside the buffers were written", jobs[i].what);
        }
    }
    for (int i = 0; i < n; i++)
        job_free(&jobs[i]);
    free(jobs);
}

/* C: a window of 4 in flight over 24 requests. */
static void round_window(ctx_t *c)
{
    enum { TOTAL = 24, WIN = 4 };
    job_t jobs[TOTAL];
    memset(jobs, 0, sizeof jobs);
    const size_t sizes[] = {1, 7, 1023, 20011, 100003, 3};
    tt_watchdog(240, "round C (sliding window of 4)");
    for (int i = 0; i < TOTAL && !c->broken; i++) {
        spec_t sp = {sizes[i % 6], (tide_dtype_t)(i % TIDE_DTYPE_COUNT),
                     (tide_op_t)((i / 2) % TIDE_OP_COUNT), (i % 3) == 0};
        if (job_prepare(c, &jobs[i], &sp, 1000 + (uint64_t)i) != 0) {
            tt_fail("round C: out of memory");
            c->broken = true;
            break;
        }
        job_start(c, &jobs[i]);
        if (i >= WIN) {
            job_wait_check(c, &jobs[i - WIN]);
            job_free(&jobs[i - WIN]);
        }
    }
    for (int i = 0; i < TOTAL; i++) {
        if (jobs[i].started) job_wait_check(c, &jobs[i]);
        job_free(&jobs[i]);
    }
}

static void round_after(ctx_t *c)
{
    int64_t v = c->rank, out = -1;
    tt_watchdog(60, "round D (blocking allreduce after the requests)");
    int rc = tide_allreduce(c->comm, &v, &out, 1, TIDE_INT64, TIDE_SUM);
    if (tt_expect_rc(rc, TIDE_OK, "round D allreduce")) {
        int64_t want = (int64_t)c->size * (c->size - 1) / 2;
        if (out != want)
            tt_fail("round D: sum of ranks is %lld, want %lld", (long long)out, (long long)want);
    }
    rc = tide_comm_status(c->comm);
    if (rc != TIDE_OK) tt_fail("tide_comm_status is %d %s after the requests", rc, tt_rcname(rc));
}

int main(int argc, char **argv)
{
    ctx_t c;
    memset(&c, 0, sizeof c);
    long np = tt_opt_long(argc, argv, "--np", -1);
    c.seed = (uint64_t)tt_opt_long(argc, argv, "--seed", 4242);

    tt_watchdog(60, "tide_init");
    int rc = tide_init(&c.comm);
    if (rc != TIDE_OK) {
        tt_fail("tide_init returned %d %s", rc, tt_rcname(rc));
        return TT_EXIT_FAIL;
    }
    c.rank = tt_rank = tide_rank(c.comm);
    c.size = tide_size(c.comm);
    if (np > 0 && c.size != np) tt_fail("tide_size is %d, want %ld", c.size, np);
    double t0 = tt_now();
    size_t large = tt_scaled_count(TT_LARGE_COUNT, 4097);

    if (!c.broken) round_batch(&c, large, false, 1);
    if (!c.broken) round_batch(&c, large, true, 100);
    if (!c.broken) round_window(&c);
    if (!c.broken) round_after(&c);

    tt_watchdog(60, "tide_finalize");
    tt_expect_rc(tide_finalize(c.comm), TIDE_OK, "tide_finalize");
    tt_watchdog(0, NULL);
    if (c.rank == 0 || tt_failures)
        tt_note("mr_iallreduce n=%d: %ld failures, %.2f s", c.size, tt_failures, tt_now() - t0);
    return tt_failures ? TT_EXIT_FAIL : 0;
}
