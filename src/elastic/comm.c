/* comm.c - joining and leaving a job: tide_init reads the TIDE_* environment,
 * registers with the coordinator, brings up the transport the member table
 * calls for, and builds generation 0's group. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/net.h"
#include "core/param.h"
#include "elastic/comm.h"
#include "elastic/control.h"
#include "transport/shm.h"

static int valid_job_id(const char *s)
{
    size_t n = strlen(s);
    if (!n || n > 32) return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
              (s[i] >= '0' && s[i] <= '9') || s[i] == '-' || s[i] == '_'))
            return 0;
    return 1;
}

static tide_comm_t *comm_alloc(void)
{
    tide_comm_t *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->ctrl_fd = c->listen_fd = -1;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    pthread_cond_init(&c->done_cv, NULL);
    return c;
}

static void comm_free(tide_comm_t *c)
{
    tide__group_destroy(c->group);
    if (c->ctrl_fd >= 0) close(c->ctrl_fd);
    if (c->listen_fd >= 0) close(c->listen_fd);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    pthread_cond_destroy(&c->done_cv);
    free(c);
}

enum transport_choice { CHOOSE_AUTO, CHOOSE_SHM, CHOOSE_TCP };

static int read_env(tide_comm_t *c, int64_t *rank, int64_t *size, int64_t *timeout_ms,
                    enum transport_choice *tc)
{
    TIDE_CHECK(tide__env_int("TIDE_SIZE", -1, 1, 65536, size));
    TIDE_CHECK(tide__env_int("TIDE_RANK", -1, 0, 65535, rank));
    if (*size < 1 || *rank < 0 || *rank >= *size) {
        TIDE_ERROR("TIDE_RANK and TIDE_SIZE must be set, with 0 <= TIDE_RANK < TIDE_SIZE");
        return TIDE_ECONFIG;
    }
    TIDE_CHECK(tide__env_int("TIDE_TIMEOUT_MS", 60000, 100, 3600000, timeout_ms));
    const char *secret = getenv("TIDE_JOB_SECRET");
    if (!secret || tide__secret_from_hex(secret, &c->secret) != TIDE_OK) {
        TIDE_ERROR("TIDE_JOB_SECRET must hold the job's secret as 32 to 128 hex digits");
        return TIDE_ECONFIG;
    }
    const char *job = getenv("TIDE_JOB_ID");
    if (!job || !valid_job_id(job)) {
        TIDE_ERROR("TIDE_JOB_ID must be 1 to 32 characters of [A-Za-z0-9_-]");
        return TIDE_ECONFIG;
    }
    snprintf(c->job_id, sizeof c->job_id, "%s", job);
    const char *t = getenv("TIDE_TRANSPORT");
    if (!t || !*t || !strcmp(t, "auto")) *tc = CHOOSE_AUTO;
    else if (!strcmp(t, "shm")) *tc = CHOOSE_SHM;
    else if (!strcmp(t, "tcp")) *tc = CHOOSE_TCP;
    else {
        TIDE_ERROR("TIDE_TRANSPORT=\"%s\": expected auto, shm or tcp", t);
        return TIDE_ECONFIG;
    }
    return TIDE_OK;
}

static int join(tide_comm_t *c, const char *rendezvous)
{
    int64_t rank, size, timeout_ms;
    enum transport_choice tc;
    TIDE_CHECK(read_env(c, &rank, &size, &timeout_ms, &tc));
    tide__log_set_rank((int)rank);
    c->rank = (int)rank;
    c->size = (int)size;
    char local[64];
    TIDE_CHECK(tide__control_connect(rendezvous, &c->secret, (int)rank, (int)timeout_ms,
                                     &c->ctrl_fd, local, sizeof local));
    const char *bind_addr = getenv("TIDE_ADDR");
    if (!bind_addr || !*bind_addr) bind_addr = local;
    int port;
    TIDE_CHECK(tide__net_listen(bind_addr, 0, 128, &c->listen_fd, &port));
    uint32_t gen = 0;
    int shm_ready = 0;
    if (tc != CHOOSE_TCP && size > 1) {
        int rc = tide__shm_prepare(c->job_id, gen, (int)rank, (int)size);
        if (rc != TIDE_OK && tc == CHOOSE_SHM) return rc;
        shm_ready = rc == TIDE_OK;
    }
    char host[128];
    tide__host_id(host, sizeof host);
    tide__register_t reg = {(int)rank, (int)size, (int)getpid(), port, host, bind_addr};
    tide__membership_t m;
    int rc = tide__control_register(c->ctrl_fd, &reg, (int)timeout_ms, &m);
    if (rc != TIDE_OK) {
        if (shm_ready) tide__shm_unlink(c->job_id, gen, (int)rank);
        return rc;
    }
    int same_host = 1;
    for (int j = 0; j < m.size; j++)
        if (strcmp(m.members[j].host_id, m.members[0].host_id)) same_host = 0;
    int use_shm = shm_ready && same_host && size > 1;
    if (tc == CHOOSE_SHM && !use_shm && size > 1) {
        TIDE_ERROR("TIDE_TRANSPORT=shm, but the ranks are not all on one host");
        rc = TIDE_ECONFIG;
    }
    if (shm_ready && !use_shm) tide__shm_unlink(c->job_id, gen, (int)rank);
    tide__transport_t *t = NULL;
    tide__transport_setup_t setup = {(int)rank, (int)size, m.generation, m.members, &c->secret,
                                     c->job_id, c->listen_fd, (int)timeout_ms};
    if (rc == TIDE_OK && size > 1)
        rc = use_shm ? tide__shm_create(&setup, &t) : tide__tcp_create(&setup, &t);
    free(m.members);
    if (rc != TIDE_OK) {
        if (use_shm) tide__shm_unlink(c->job_id, gen, (int)rank);
        return rc;
    }
    rc = tide__group_create((int)rank, (int)size, m.generation, t, &c->group);
    if (rc != TIDE_OK) {
        if (t) t->ops->destroy(t);
        return rc;
    }
    if (use_shm) {
        /* Every rank has mapped every segment once this barrier passes; the names
         * can go, and the memory lives exactly as long as the mappings. */
        rc = tide_barrier(c);
        tide__shm_unlink(c->job_id, gen, (int)rank);
    }
    TIDE_INFO("joined generation %u as rank %d of %d over %s", m.generation, c->rank, c->size,
              t ? t->ops->name : "self");
    return rc;
}

int tide_init(tide_comm_t **out)
{
    if (!out) return TIDE_EINVAL;
    *out = NULL;
    tide_comm_t *c = comm_alloc();
    if (!c) return TIDE_ENOMEM;
    const char *rendezvous = getenv("TIDE_RENDEZVOUS");
    int rc;
    if (!rendezvous || !*rendezvous) {
        c->rank = 0;
        c->size = 1;
        rc = tide__group_create(0, 1, 0, NULL, &c->group);
    } else {
        rc = join(c, rendezvous);
    }
    if (rc != TIDE_OK) {
        TIDE_ERROR("tide_init failed: %s", tide_strerror(rc));
        comm_free(c);
        return rc;
    }
    *out = c;
    return TIDE_OK;
}

int tide_finalize(tide_comm_t *comm)
{
    if (!comm) return TIDE_EINVAL;
    tide__comm_stop_engine(comm);
    comm_free(comm);
    return TIDE_OK;
}
