/* elastic.c - the step loop: tide_step_begin re-forms the group when the
 * membership must change and restores the state; tide_step_end counts the step
 * and agrees with the other members on what comes next.
 *
 * The agreement is one allreduce(MAX) of four int32 per rank: notice pending,
 * join pending, last step, and a spare. Every member therefore continues, or
 * re-forms, or stops, after the same step (DESIGN.md "Deciding at the same
 * step"). A member with notice then leaves with no rollback for anyone (P2); the
 * others report the same step, so the next generation needs no transfer among
 * them. After a loss, each survivor reports its last completed step and resumes
 * from the highest (P3). */
#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "core/error.h"
#include "core/param.h"
#include "elastic/comm.h"
#include "elastic/control.h"
#include "elastic/proto.h"

enum { WORD_NOTICE, WORD_JOIN, WORD_LAST, WORD_SPARE, WORDS };

int64_t tide_step(const tide_comm_t *comm)
{
    return comm && comm->completed > 0 ? comm->completed : 0;
}

uint32_t tide_generation(const tide_comm_t *comm)
{
    return comm ? comm->generation : 0;
}

int tide_elastic_on_reset(tide_comm_t *comm, tide_reset_fn fn, void *arg)
{
    if (!comm) return TIDE_EINVAL;
    comm->on_reset = fn;
    comm->on_reset_arg = arg;
    return TIDE_OK;
}

static int listen_port(tide_comm_t *c)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int port = 0;
    pthread_mutex_lock(&c->gmu);
    if (c->listen_fd >= 0 && getsockname(c->listen_fd, (struct sockaddr *)&ss, &sl) == 0)
        port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                              : ((struct sockaddr_in *)&ss)->sin_port);
    pthread_mutex_unlock(&c->gmu);
    return port;
}

static void report_ready(tide_comm_t *c, int64_t gen, const char *reason, int code, int leaving)
{
    tide__ctl_set_status(c->ctl, leaving ? TIDE__WS_LEAVING : TIDE__WS_READY, gen, c->rank, c->size,
                         c->completed);
    tide__ctl_send(c->ctl, json_pack("{s:s, s:I, s:I, s:s, s:i, s:b, s:i, s:b}", "type", "ready",
                                     "generation", (json_int_t)gen, "step", (json_int_t)c->completed,
                                     "reason", reason, "code", code, "leaving", leaving, "port",
                                     listen_port(c), "dropped", c->dropped));
    c->dropped = 0;
}

/* The current generation is over (st: why, or TIDE_OK for an agreed change):
 * report, then wait for and build the next one. */
static int reform(tide_comm_t *c, int st)
{
    int64_t old_gen = c->generation;
    int leaving = c->leave_pending;
    int old_rank = c->rank, old_size = c->size;
    uint64_t t0 = c->failed_at_ns ? c->failed_at_ns : tide__now_ns();
    c->prev_end_ns = 0;
    tide__gen_release(c);
    c->reform_pending = 0;
    if (!c->ctl) {
        /* A job of one only ever leaves. */
        c->left = 1;
        return TIDE_ESTOPPED;
    }
    report_ready(c, old_gen, st != TIDE_OK ? "failed" : leaving ? "leave" : "reform", st, leaving);
    if (leaving) {
        TIDE_INFO("leaving the job after step %lld", (long long)c->completed);
        c->left = 1;
        return TIDE_ESTOPPED;
    }
    int rc = tide__gen_join(c, old_gen, -1);
    if (rc == TIDE_EABORTED && tide__notice_pending(c)) {
        /* Notice while waiting for the next generation: leave from here. */
        report_ready(c, old_gen, "leave", TIDE_OK, 1);
        TIDE_INFO("leaving the job (notice while re-forming) after step %lld", (long long)c->completed);
        c->left = 1;
        return TIDE_ESTOPPED;
    }
    if (rc == TIDE_OK)
        TIDE_INFO("re-formed: generation %u, rank %d of %d (was %d of %d) after %.0f ms",
                  c->generation, c->rank, c->size, old_rank, old_size,
                  (double)(tide__now_ns() - t0) / 1e6);
    c->failed_at_ns = 0;
    return rc;
}

int tide_step_begin(tide_comm_t *comm)
{
    if (!comm) return TIDE_EINVAL;
    if (comm->left) return TIDE_ESTOPPED;
    if (!comm->loop_started) {
        comm->loop_started = 1;
        if (comm->elastic) tide__notice_start(comm);
    }
    if (comm->in_step) comm->dropped = 1; /* begun and never ended: the report counts it */
    comm->in_step = 0;
    if (comm->need_join) {
        /* Ready now (its data loaded, its state registered): the members make room
         * at their next step boundary, and the sync brings the state. */
        tide__ctl_join(comm->ctl);
        int rc = tide__gen_join(comm, -1, -1);
        if (rc == TIDE_EABORTED && tide__notice_pending(comm)) rc = TIDE_ESTOPPED;
        if (rc == TIDE_ESTOPPED) comm->left = 1;
        if (rc != TIDE_OK) return rc;
        comm->need_join = 0;
    }
    for (;;) {
        int code;
        if (comm->ctl && tide__ctl_stopped(comm->ctl, &code)) {
            comm->left = 1;
            return TIDE_ESTOPPED;
        }
        int st = comm->group ? tide__group_status(comm->group) : TIDE_ECLOSED;
        if (st == TIDE_OK && !comm->reform_pending) {
            if (!comm->need_sync) {
                comm->in_step = 1;
                /* A step's time runs from the end of the one before it in this
                 * generation, so the step-end agreement and the trainer's own
                 * work between steps count as training (the report's goodput);
                 * a generation's first step starts here, after the re-formation. */
                uint64_t now = tide__now_ns();
                comm->step_t0 = comm->prev_end_ns && comm->prev_end_ns <= now ? comm->prev_end_ns : now;
                uint64_t g;
                tide__sampler_progress(comm->sampler, &comm->step_batches, &g);
                return TIDE_OK;
            }
            st = tide__state_sync(comm);
            if (st == TIDE_OK) {
                comm->need_sync = 0;
                comm->prev_end_ns = 0;
                /* Steps rank 0 completed but had not yet reported (reports go
                 * out every 20 ms) are still reported when it is rank 0 again
                 * and the sync did not roll them back; any other member drops
                 * what it holds, since a later rank 0 must not report steps
                 * another rank 0 reported. (Those a killed rank 0 held are
                 * lost with it: 20 ms of steps at most.) */
                if (comm->rank != 0 || comm->rep_from < 0 || comm->rep_from > comm->completed) {
                    comm->rep_from = comm->rank == 0 ? comm->completed : -1;
                    comm->rep_samples = 0;
                    comm->rep_seconds = 0;
                }
                if (comm->ctl)
                    tide__ctl_send(comm->ctl, json_pack("{s:s, s:I, s:I}", "type", "running",
                                                        "generation", (json_int_t)comm->generation,
                                                        "step", (json_int_t)comm->completed));
                if (comm->gen_count > 1 && comm->on_reset) comm->on_reset(comm, comm->on_reset_arg);
                continue;
            }
        }
        if (st != TIDE_OK) {
            if (st == TIDE_ESTOPPED) {
                comm->left = 1;
                return TIDE_ESTOPPED;
            }
            if (!comm->elastic || !comm->ctl || !tide__recoverable(st)) return st;
            if (!comm->failed_at_ns) comm->failed_at_ns = tide__now_ns();
            TIDE_WARN("generation %u failed (%s) after step %lld; re-forming", comm->generation,
                      tide_errname(st), (long long)comm->completed);
        }
        int rc = reform(comm, st);
        if (rc != TIDE_OK) return rc;
    }
}

/* Sends rank 0's account of the steps [rep_from, completed), if any. */
static void flush_steps(tide_comm_t *c)
{
    if (c->rep_from < 0 || c->rep_from >= c->completed) return;
    tide__ctl_send(c->ctl, json_pack("{s:s, s:I, s:I, s:I, s:f}", "type", "step", "from",
                                     (json_int_t)c->rep_from, "to", (json_int_t)c->completed,
                                     "samples", (json_int_t)c->rep_samples, "seconds",
                                     c->rep_seconds));
    c->rep_sent_ns = tide__now_ns();
    c->rep_from = c->completed;
    c->rep_samples = 0;
    c->rep_seconds = 0;
}

/* Rank 0 tells the coordinator which steps the group completed, their samples
 * (from the registered sampler) and time: at most one message per 20 ms. */
static void report_step(tide_comm_t *c, int last)
{
    uint64_t now = tide__now_ns(), batches, global;
    tide__sampler_progress(c->sampler, &batches, &global);
    if (batches != c->step_batches) c->rep_samples += (int64_t)global;
    c->rep_seconds += (double)(now - c->step_t0) / 1e9;
    if (c->rep_from < 0 || c->rep_from >= c->completed) c->rep_from = c->completed - 1;
    if (!last && now - c->rep_sent_ns < 20000000ull && c->completed - c->rep_from < 1000) return;
    flush_steps(c);
}

int tide_step_end(tide_comm_t *comm, int flags)
{
    if (!comm || !comm->loop_started) return TIDE_EINVAL;
    if (comm->left) return TIDE_ESTOPPED;
    comm->in_step = 0;
    comm->completed = (comm->completed < 0 ? 0 : comm->completed) + 1;
    if (comm->ctl) tide__ctl_set_step(comm->ctl, comm->completed);
    if (comm->ctl && comm->rank == 0) report_step(comm, flags & TIDE_STEP_LAST);
    comm->prev_end_ns = tide__now_ns();
    int32_t w[WORDS] = {0};
    int mine = comm->elastic && tide__notice_pending(comm);
    w[WORD_NOTICE] = mine;
    w[WORD_JOIN] = comm->ctl && comm->elastic && tide__ctl_join_pending(comm->ctl, comm->generation);
    w[WORD_LAST] = (flags & TIDE_STEP_LAST) != 0;
    int rc = tide_allreduce(comm, w, w, WORDS, TIDE_INT32, TIDE_MAX);
    if (rc != TIDE_OK) return rc;
    if (w[WORD_LAST]) {
        comm->finished = 1;
        return TIDE_STEP_LAST;
    }
    if (w[WORD_NOTICE] || w[WORD_JOIN]) {
        comm->reform_pending = 1;
        comm->leave_pending = mine;
        /* Rank 0 may be the one leaving: its unreported steps go out now. */
        if (comm->ctl && comm->rank == 0) flush_steps(comm);
    }
    return TIDE_OK;
}

int tide_elastic_run(tide_comm_t *comm, tide_step_fn fn, void *arg)
{
    if (!comm || !fn) return TIDE_EINVAL;
    for (;;) {
        int rc = tide_step_begin(comm);
        if (rc != TIDE_OK) return rc;
        rc = fn(comm, arg);
        if (rc < 0) {
            /* A healthy group and an error: the step's own failure, not the
             * membership's; nothing to re-form. */
            if (tide_comm_status(comm) == TIDE_OK) return rc;
            continue;
        }
        rc = tide_step_end(comm, rc > 0 ? TIDE_STEP_LAST : 0);
        if (rc == TIDE_STEP_LAST) return TIDE_OK;
        if (rc < 0 && tide_comm_status(comm) == TIDE_OK) return rc;
    }
}

int tide_log_metric(tide_comm_t *comm, const char *name, double value)
{
    if (!comm || !tide__valid_name(name, 64) || !isfinite(value)) return TIDE_EINVAL;
    if (!comm->ctl) return TIDE_OK;
    tide__ctl_send(comm->ctl, json_pack("{s:s, s:s, s:f, s:I}", "type", "metric", "name", name,
                                        "value", value, "step", (json_int_t)tide_step(comm)));
    return TIDE_OK;
}
