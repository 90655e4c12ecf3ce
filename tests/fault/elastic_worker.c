/*
 * elastic_worker.c - the worker of the elastic fault tests (elastic_driver.c).
 *
 * It trains a toy model whose every step is exact: the state is C doubles x and
 * the sampler's cursor; a step takes the next global batch from the elastic
 * sampler, each rank sums small integer "gradients" over its slice of it, one
 * allreduce(SUM) adds them up exactly (integers far below 2^53, so the sum does
 * not depend on the order or the world size), and x is updated with integer
 * arithmetic modulo 2^20. So the state after step k is the same bits in any run,
 * whatever happened to the membership (P3, P6): a job of one computes the
 * reference trajectory.
 *
 *   elastic_worker --log FILE --steps N [--count C] [--step-ms MS] [--batch B]
 *                  [--samples S] [--seed X] [--wrapper 1]
 *
 * It runs the step loop by hand (so that a failed step-end agreement is logged
 * too), or through tide_elastic_run with --wrapper.
 *
 * It appends to FILE, one line per event, with CLOCK_MONOTONIC seconds t:
 *   init id=ID rank=R size=N gen=G t=T
 *   begin step=K gen=G rank=R size=N crc=C t=T   first step of a generation (state
 *                                                after the restore, before step K)
 *   step step=K gen=G rank=R size=N crc=C t=T    step K completed (state after it)
 *   error rc=NAME in=WHERE t=T                   a step's allreduce or step-end
 *                                                agreement failed, or the group was
 *                                                found failed between steps
 *   left step=K t=T | done step=K crc=C t=T | fail rc=NAME t=T
 * Exit status: 0 done or left, 1 failure, 2 usage.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tide.h"

typedef struct {
    FILE *log;
    double *x;
    double *grad;
    size_t count;
    uint32_t *idx;
    size_t batch;
    uint64_t steps;
    int step_ms;
    tide_sampler_t *sampler;
    int64_t last_gen;
} job_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void say(job_t *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(job_t *j, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    fprintf(j->log, "%s t=%.6f\n", line, now_s());
    fflush(j->log);
}

static uint64_t mix(uint64_t a, uint64_t b)
{
    uint64_t z = a * 0x9e3779b97f4a7c15ull ^ (b + 0x632be59bd9b4e019ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int step_fn(tide_comm_t *comm, void *arg)
{
    job_t *j = arg;
    int rank = tide_rank(comm), size = tide_size(comm);
    uint64_t k = (uint64_t)tide_step(comm);
    if ((int64_t)tide_generation(comm) != j->last_gen) {
        j->last_gen = tide_generation(comm);
        say(j, "begin step=%" PRIu64 " gen=%u rank=%d size=%d crc=%016" PRIx64, k,
            tide_generation(comm), rank, size, tide_state_checksum(comm));
    }
    size_t n, global;
    int rc = tide_sampler_batch(j->sampler, rank, size, j->idx, j->batch, &n, &global);
    if (rc != TIDE_OK) return rc;
    /* The "gradient": small integers from (sample, element). */
    for (size_t i = 0; i < j->count; i++) j->grad[i] = 0;
    for (size_t s = 0; s < n; s++) {
        uint64_t h = mix(j->idx[s], 17);
        for (size_t i = 0; i < j->count; i++) {
            j->grad[i] += (double)((h >> (i & 31)) & 7);
            if ((i & 31) == 31) h = mix(h, i);
        }
    }
    if (j->step_ms > 0) usleep((useconds_t)j->step_ms * 1000);
    rc = tide_allreduce(comm, j->grad, j->grad, j->count, TIDE_FLOAT64, TIDE_SUM);
    if (rc != TIDE_OK) {
        say(j, "error rc=%s in=allreduce", tide_errname(rc));
        return rc;
    }
    /* The update, applied only once the collective succeeded. */
    for (size_t i = 0; i < j->count; i++) {
        double v = j->x[i] * 3.0 + j->grad[i] + (double)(k % 1000);
        j->x[i] = v - 1048576.0 * (double)(int64_t)(v / 1048576.0);
    }
    tide_sampler_advance(j->sampler);
    say(j, "step step=%" PRIu64 " gen=%u rank=%d size=%d crc=%016" PRIx64, k, tide_generation(comm),
        rank, size, tide_state_checksum(comm));
    if (rank == 0) tide_log_metric(comm, "loss", 1.0 / (double)(k + 1));
    return k + 1 >= j->steps ? TIDE_STEP_LAST : TIDE_OK;
}

static const char *opt(int argc, char **argv, const char *name, const char *dflt)
{
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], name)) return argv[i + 1];
    return dflt;
}

int main(int argc, char **argv)
{
    const char *path = opt(argc, argv, "--log", NULL);
    if (!path) {
        fprintf(stderr, "usage: elastic_worker --log FILE --steps N [--count C] [--step-ms MS] "
                        "[--batch B] [--samples S] [--seed X]\n");
        return 2;
    }
    job_t j = {0};
    j.count = (size_t)strtoull(opt(argc, argv, "--count", "64"), NULL, 10);
    j.steps = strtoull(opt(argc, argv, "--steps", "20"), NULL, 10);
    j.step_ms = atoi(opt(argc, argv, "--step-ms", "20"));
    j.batch = (size_t)strtoull(opt(argc, argv, "--batch", "12"), NULL, 10);
    uint64_t samples = strtoull(opt(argc, argv, "--samples", "100"), NULL, 10);
    uint64_t seed = strtoull(opt(argc, argv, "--seed", "7"), NULL, 10);
    j.log = fopen(path, "a");
    if (!j.log || !j.count || !j.batch || !samples) {
        fprintf(stderr, "elastic_worker: bad arguments or cannot open %s: %s\n", path, strerror(errno));
        return 2;
    }
    j.x = calloc(j.count, sizeof *j.x);
    j.grad = calloc(j.count, sizeof *j.grad);
    j.idx = calloc(j.batch, sizeof *j.idx);
    if (!j.x || !j.grad || !j.idx) return 1;
    for (size_t i = 0; i < j.count; i++) j.x[i] = (double)(mix(seed, i) & 1023);
    j.last_gen = -1;
    tide_comm_t *comm;
    int rc = tide_init(&comm);
    if (rc == TIDE_ESTOPPED) {
        say(&j, "left step=0");
        return 0;
    }
    if (rc != TIDE_OK) {
        say(&j, "fail rc=%s", tide_errname(rc));
        fprintf(stderr, "elastic_worker: tide_init: %s\n", tide_strerror(rc));
        return 1;
    }
    /* A slow start-up (loading data, say) after tide_init: it must cost only this
     * worker, never the members it joins (P4). */
    const char *startup = getenv("ELASTIC_STARTUP_MS");
    if (startup) usleep((useconds_t)atoi(startup) * 1000);
    const char *id = getenv("TIDE_WORKER_ID");
    say(&j, "init id=%s rank=%d size=%d gen=%u", id ? id : "-", tide_rank(comm), tide_size(comm),
        tide_generation(comm));
    if (tide_sampler_create(samples, j.batch, seed, &j.sampler) != TIDE_OK) return 1;
    if (tide_state_register(comm, "x", j.x, j.count * sizeof *j.x) != TIDE_OK ||
        tide_sampler_register(comm, j.sampler, NULL) != TIDE_OK)
        return 1;
    if (opt(argc, argv, "--wrapper", NULL)) {
        rc = tide_elastic_run(comm, step_fn, &j);
    } else {
        /* The loop tide_elastic_run runs, spelled out so that an error in the
         * step-end agreement is logged too. */
        for (;;) {
            int st = tide_comm_status(comm);
            if (st != TIDE_OK && st != TIDE_ESTOPPED && st != TIDE_ECLOSED)
                say(&j, "error rc=%s in=between_steps", tide_errname(st));
            rc = tide_step_begin(comm);
            if (rc != TIDE_OK) break;
            rc = step_fn(comm, &j);
            if (rc < 0) {
                if (tide_comm_status(comm) == TIDE_OK) break;
                continue;
            }
            rc = tide_step_end(comm, rc > 0 ? TIDE_STEP_LAST : 0);
            if (rc == TIDE_STEP_LAST) {
                rc = TIDE_OK;
                break;
            }
            if (rc < 0) {
                say(&j, "error rc=%s in=step_end", tide_errname(rc));
                if (!tide_elastic_recoverable(rc)) break;
            }
        }
    }
    int64_t k = tide_step(comm);
    if (rc == TIDE_OK)
        say(&j, "done step=%" PRId64 " crc=%016" PRIx64, k, tide_state_checksum(comm));
    else if (rc == TIDE_ESTOPPED) {
        /* A member that left has no group: a collective says it must stop (not
         * that its arguments were invalid), and the planned-leave tests see the
         * word "left" only when it does. */
        double one = 1.0;
        int after = tide_allreduce(comm, &one, &one, 1, TIDE_FLOAT64, TIDE_SUM);
        if (after != TIDE_ESTOPPED)
            say(&j, "error rc=%s in=allreduce_after_leaving", tide_errname(after));
        say(&j, "left step=%" PRId64, k);
    }
    else
        say(&j, "fail rc=%s", tide_errname(rc));
    tide_finalize(comm);
    tide_sampler_destroy(j.sampler);
    free(j.x);
    free(j.grad);
    free(j.idx);
    fclose(j.log);
    return rc == TIDE_OK || rc == TIDE_ESTOPPED ? 0 : 1;
}
