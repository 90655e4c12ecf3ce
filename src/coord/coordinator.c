/* coordinator.c - see coordinator.h.
 *
 * One thread runs one poll loop over the listener and every worker's control
 * connection; all state is guarded by one mutex, which the loop holds while it
 * handles events and which the public calls take briefly. New connections prove
 * the secret on a short-lived thread each (auth.c's handshake is blocking), so a
 * silent or hostile client never stalls the loop; once proven, a connection is
 * read without blocking into a bounded buffer, frame by frame.
 *
 * The generation state machine (phase):
 *   START     no generation yet: waits for min..max registrations (static: all n)
 *   ADOPT     restarted: members re-register with their generation; waits for all
 *   RUNNING   a generation trains; a loss or a failure report breaks it, a joiner
 *             makes its members re-form at their next step boundary
 *   BROKEN    waits until every member has reported ready (with its step), left,
 *             finished or been lost
 *   PAUSED    fewer than min available: waits for joiners (or times out)
 *   PREPARING the next members create their shm segments (same host only)
 * then the member table is published and the phase is RUNNING again. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "coord/coordinator.h"
#include "coord/http.h"
#include "core/error.h"
#include "core/net.h"
#include "core/param.h"
#include "elastic/proto.h"

#define MAX_WORKERS 4096
#define MAX_AUTH 64
#define AUTH_TIMEOUT_MS 2000
#define REGISTER_TIMEOUT_MS 5000
#define SEND_TIMEOUT_MS 200
#define MAX_EVENTS 10000
#define MAX_METRICS 64
#define METRIC_HISTORY 4096
#define RATE_SAMPLES 16
#define W_LOST 100 /* beyond enum tide__wstatus: the coordinator's own verdict */

enum phase { PH_START, PH_ADOPT, PH_RUNNING, PH_BROKEN, PH_PAUSED, PH_PREPARING, PH_DONE, PH_FAILED };
static const char *const phase_names[] = {"start",  "adopt",     "running", "broken",
                                          "paused", "preparing", "done",    "failed"};

typedef struct worker {
    int fd; /* -1 once disconnected */
    int registered;
    int dead; /* to be freed at the end of this turn */
    int broken; /* a send failed: drop it at the next turn */
    char id[TIDE__WORKER_ID_MAX];
    int pid, port, rank_hint;
    char host[128], addr[64];
    int force_tcp;
    uint64_t connected_at, last_rx, last_hb_tx, pool_since;
    int64_t seq;
    int st;       /* enum tide__wstatus, or W_LOST */
    int64_t gen;  /* the generation it is or was last a member of; -1 none */
    int rank;     /* its rank in gen */
    int64_t step; /* completed steps it reported last; -1: holds no state */
    int64_t max_step;
    int prepared, prepare_ok, running;
    int joiner;   /* it joined the current generation (it was no survivor) */
    int deferred; /* a joiner not ready yet: it says "join" when it is */
    unsigned char *rx;
    size_t rx_len;
} worker_t;

typedef struct {
    int fd;
    int rc;
    uint32_t kind;
} handoff_t;

typedef struct {
    double t;
    int64_t step;
    int64_t samples;
} rate_sample_t;

struct tide__coord {
    tide__coord_opts_t o;
    tide__secret_t secret;
    char *events_path;
    FILE *events_f;
    int lfd;
    char addr[160];
    pthread_t thread;
    int wake[2];
    int evfd;
    int auth_pipe[2];
    pthread_mutex_t mu;
    pthread_cond_t auth_cv;
    int auth_inflight;
    int auth_fds[MAX_AUTH];
    int stopping;
    _Atomic int refused;
    uint64_t start_ns;

    worker_t **w;
    int nw;
    int64_t next_seq;

    int phase;
    int64_t gen; /* the current (or last) generation; -1 none */
    int64_t max_gen_seen;
    worker_t **mem; /* members of gen, by rank; NULL for a slot lost in adoption */
    int nmem;
    int root;
    int64_t root_step;
    int all_running;
    int pending_sent;
    int aborted; /* the abort for gen went out */
    uint64_t formed_at, broken_at, paused_at, adopt_deadline, last_reg_at;
    uint64_t resume_until; /* restarted: no fresh generation before this (members reconnect) */
    char cycle_kind[16];
    char cycle_why[200];
    int cycle_lost, cycle_left, cycle_joined;
    int64_t cycle_max_step;
    int gen_dropped;   /* a member of this generation dropped a step in flight */
    int cycle_dropped; /* ... of the generation the current one replaced */
    int prev_size;

    worker_t **next; /* the generation being prepared */
    int nnext;
    int64_t next_gen;
    int next_root;
    int64_t next_root_step;
    int64_t *next_steps;
    int next_shm;

    /* progress */
    int64_t step;
    rate_sample_t rate[RATE_SAMPLES];
    int nrate;
    double last_rate_t;
    double steps_per_s;

    tide__job_status_t status;
    tide__http_t *http;
    char job_name[64];
    int64_t samples;   /* samples in the steps rank 0 reported */
    double samples_per_s;
    int64_t n_lost, n_left, n_joined;
    double last_recovery_ms;
    json_t *events;
    json_t *metrics;
    json_t *recoveries;
};

const char *tide__job_state_name(tide__job_state_t s)
{
    static const char *const n[] = {"starting", "running", "resizing", "paused", "done", "failed"};
    return (unsigned)s <= TIDE__JOB_FAILED ? n[s] : "?";
}

static double now_s(const tide__coord_t *c)
{
    return (double)(tide__now_ns() - c->start_ns) / 1e9;
}

static uint64_t ms_since(uint64_t t)
{
    uint64_t now = tide__now_ns();
    return now > t ? (now - t) / 1000000ull : 0;
}

#define HOOK(c, name, ...)                                                                         \
    do {                                                                                           \
        if ((c)->o.hooks.name) (c)->o.hooks.name((c)->o.hooks.ctx, __VA_ARGS__);                   \
    } while (0)

static void notify(tide__coord_t *c)
{
    uint64_t one = 1;
    ssize_t w = write(c->evfd, &one, sizeof one);
    (void)w;
}

/* ---- events ---- */

/* Records one event: steals ev, adds "t" and "event". */
static void add_event(tide__coord_t *c, const char *type, json_t *ev, const char *words)
{
    if (!ev) ev = json_object();
    if (!ev) return;
    json_object_set_new(ev, "t", json_real((double)(int64_t)(now_s(c) * 1000) / 1000.0));
    json_object_set_new(ev, "event", json_string(type));
    if (c->events_f) {
        char *line = json_dumps(ev, JSON_COMPACT);
        if (line) {
            fprintf(c->events_f, "%s\n", line);
            fflush(c->events_f);
            free(line);
        }
    }
    if (json_array_size(c->events) >= MAX_EVENTS) json_array_remove(c->events, 0);
    json_array_append_new(c->events, ev);
    c->status.events++;
    if (words) snprintf(c->status.message, sizeof c->status.message, "%s", words);
    TIDE_INFO("coordinator: %s", words ? words : type);
    notify(c);
}

/* ---- sending ---- */

/* Sends msg (borrowed) to w. A failure marks the connection broken; the loop
 * drops it at its next turn, so that a send never recurses into loss handling. */
static void send_to(worker_t *w, const json_t *msg)
{
    if (w->fd < 0 || w->broken || !msg) return;
    if (tide__msg_send(w->fd, msg, tide__now_ns() + SEND_TIMEOUT_MS * 1000000ull) != TIDE_OK) {
        w->broken = 1;
        shutdown(w->fd, SHUT_RDWR);
    }
}

static void send_new(worker_t *w, json_t *msg)
{
    send_to(w, msg);
    json_decref(msg);
}

static void send_error(int fd, const char *why)
{
    json_t *m = json_pack("{s:s, s:s}", "type", "error", "message", why);
    if (m) tide__msg_send(fd, m, tide__now_ns() + SEND_TIMEOUT_MS * 1000000ull);
    json_decref(m);
}

/* ---- workers ---- */

static worker_t *find_id(tide__coord_t *c, const char *id)
{
    for (int i = 0; i < c->nw; i++)
        if (c->w[i]->registered && !c->w[i]->dead && !strcmp(c->w[i]->id, id)) return c->w[i];
    return NULL;
}

static int is_member(const tide__coord_t *c, const worker_t *w)
{
    return w->gen == c->gen && c->gen >= 0 && w->rank >= 0 && w->rank < c->nmem &&
           c->mem[w->rank] == w;
}

static int in_next(const tide__coord_t *c, const worker_t *w)
{
    if (c->phase != PH_PREPARING) return 0;
    for (int i = 0; i < c->nnext; i++)
        if (c->next[i] == w) return 1;
    return 0;
}

/* A worker that could be placed in the next generation. */
static int available(const worker_t *w)
{
    return w->registered && !w->dead && w->fd >= 0 && !w->broken && !w->deferred &&
           (w->st == TIDE__WS_NEW || w->st == TIDE__WS_READY);
}

static void close_conn(worker_t *w)
{
    if (w->fd >= 0) close(w->fd);
    w->fd = -1;
    free(w->rx);
    w->rx = NULL;
    w->rx_len = 0;
}

static int count_waiting(const tide__coord_t *c)
{
    int n = 0;
    for (int i = 0; i < c->nw; i++)
        if (available(c->w[i]) && !is_member(c, c->w[i]) && !in_next(c, c->w[i])) n++;
    return n;
}

/* ---- job state ---- */

static void update_state(tide__coord_t *c)
{
    tide__job_state_t s;
    switch (c->phase) {
    case PH_START: s = TIDE__JOB_STARTING; break;
    case PH_RUNNING: s = c->all_running ? TIDE__JOB_RUNNING : TIDE__JOB_RESIZING; break;
    case PH_PAUSED: s = TIDE__JOB_PAUSED; break;
    case PH_DONE: s = TIDE__JOB_DONE; break;
    case PH_FAILED: s = TIDE__JOB_FAILED; break;
    default: s = TIDE__JOB_RESIZING; break;
    }
    int size = c->phase == PH_RUNNING ? c->nmem : 0;
    int waiting = count_waiting(c);
    int finishing = c->phase == PH_DONE;
    for (int r = 0; r < c->nmem && !finishing; r++)
        finishing = c->mem[r] && c->mem[r]->st == TIDE__WS_DONE;
    c->status.finishing = finishing;
    if (s != c->status.state || size != c->status.size || c->gen != c->status.generation ||
        waiting != c->status.waiting) {
        c->status.state = s;
        c->status.size = size;
        c->status.generation = c->gen;
        c->status.waiting = waiting;
        notify(c);
    }
    c->status.step = c->step;
    c->status.steps_per_s = c->steps_per_s;
}

static void stop_all(tide__coord_t *c, int code, const char *reason)
{
    json_t *m = json_pack("{s:s, s:i, s:s}", "type", "stop", "code", code, "reason", reason);
    for (int i = 0; i < c->nw; i++)
        if (c->w[i]->registered) send_to(c->w[i], m);
    json_decref(m);
}

static void fail_job(tide__coord_t *c, const char *why)
{
    if (c->phase == PH_FAILED || c->phase == PH_DONE) return;
    c->phase = PH_FAILED;
    add_event(c, "failed", json_pack("{s:s}", "reason", why), why);
    snprintf(c->status.message, sizeof c->status.message, "%s", why);
    stop_all(c, TIDE_ESTOPPED, why);
    update_state(c);
}

static void job_done(tide__coord_t *c)
{
    if (c->phase == PH_DONE || c->phase == PH_FAILED) return;
    c->phase = PH_DONE;
    add_event(c, "done", json_pack("{s:I, s:I}", "generation", (json_int_t)c->gen, "step", (json_int_t)c->step),
              "training finished");
    stop_all(c, TIDE_OK, "training finished");
    update_state(c);
}

/* ---- generations ---- */

static void send_abort(tide__coord_t *c, int code)
{
    if (c->aborted) return;
    c->aborted = 1;
    json_t *m = json_pack("{s:s, s:I, s:i}", "type", "abort", "generation", (json_int_t)c->gen,
                          "code", code);
    for (int r = 0; r < c->nmem; r++) {
        worker_t *w = c->mem[r];
        if (w && w->st == TIDE__WS_MEMBER) send_to(w, m);
    }
    json_decref(m);
}

/* The current generation ends: a loss or a failure (code < 0: every member is
 * told to abort, which wakes a collective blocked on a frozen peer), or a
 * re-formation its members agreed on at a step boundary (code 0). */
static void break_gen(tide__coord_t *c, int code, const char *kind, const char *why)
{
    if (c->phase != PH_RUNNING && c->phase != PH_BROKEN && c->phase != PH_ADOPT) return;
    if (c->phase != PH_BROKEN) {
        c->phase = PH_BROKEN;
        if (!c->broken_at) {
            c->broken_at = tide__now_ns();
            snprintf(c->cycle_kind, sizeof c->cycle_kind, "%s", kind);
            snprintf(c->cycle_why, sizeof c->cycle_why, "%s", why);
        }
        TIDE_INFO("coordinator: generation %lld ends: %s", (long long)c->gen, why);
    }
    if (code < 0) send_abort(c, code);
}

static void on_lost(tide__coord_t *c, worker_t *w, const char *why)
{
    int was_st = w->st;
    close_conn(w);
    if (!w->registered) {
        w->dead = 1;
        return;
    }
    char words[256];
    if (is_member(c, w) && (was_st == TIDE__WS_MEMBER || was_st == TIDE__WS_READY) &&
        (c->phase == PH_RUNNING || c->phase == PH_BROKEN || c->phase == PH_ADOPT ||
         c->phase == PH_PAUSED || c->phase == PH_PREPARING)) {
        w->st = W_LOST;
        c->cycle_lost++;
        c->n_lost++;
        HOOK(c, member, "loss", w->rank, w->pid);
        snprintf(words, sizeof words, "lost rank %d (pid %d on %s): %s", w->rank, w->pid, w->addr,
                 why);
        add_event(c, "lost",
                  json_pack("{s:I, s:i, s:i, s:s, s:I, s:s}", "generation", (json_int_t)c->gen,
                            "rank", w->rank, "pid", w->pid, "host", w->addr, "step",
                            (json_int_t)w->max_step, "reason", why),
                  words);
        if (c->o.static_ranks) {
            c->status.lost_pid = w->pid;
            c->status.lost_rank = w->rank;
            send_abort(c, TIDE_EPEERLOST);
            fail_job(c, words);
            return;
        }
        if (c->phase == PH_RUNNING || c->phase == PH_ADOPT || c->phase == PH_BROKEN)
            break_gen(c, TIDE_EPEERLOST, "loss", words);
        return;
    }
    if (in_next(c, w)) {
        w->st = W_LOST;
        snprintf(words, sizeof words, "lost pid %d on %s while forming generation %lld: %s", w->pid,
                 w->addr, (long long)c->next_gen, why);
        add_event(c, "lost", json_pack("{s:I, s:i, s:s, s:s}", "generation", (json_int_t)c->next_gen,
                                       "pid", w->pid, "host", w->addr, "reason", why),
                  words);
        return; /* try_publish notices */
    }
    if (!is_member(c, w)) w->dead = 1; /* a waiting joiner, or a stale record */
}

static int cmp_hint(const void *a, const void *b)
{
    const worker_t *x = *(worker_t *const *)a, *y = *(worker_t *const *)b;
    int hx = x->rank_hint >= 0 ? x->rank_hint : 1 << 30, hy = y->rank_hint >= 0 ? y->rank_hint : 1 << 30;
    if (hx != hy) return hx < hy ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int cmp_seq(const void *a, const void *b)
{
    const worker_t *x = *(worker_t *const *)a, *y = *(worker_t *const *)b;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static void publish(tide__coord_t *c);

/* Chooses root and transport for list[0..k) and starts generation formation. A
 * worker's step counts only if it was a member of the generation just ended:
 * only those hold the lineage's state; anyone else receives it. */
static void form(tide__coord_t *c, worker_t **list, int k)
{
    free(c->next);
    free(c->next_steps);
    c->next = calloc((size_t)k, sizeof *c->next);
    c->next_steps = calloc((size_t)k, sizeof *c->next_steps);
    if (!c->next || !c->next_steps) {
        fail_job(c, "out of memory forming a generation");
        return;
    }
    c->nnext = k;
    c->next_gen = (c->gen > c->max_gen_seen ? c->gen : c->max_gen_seen) + 1;
    c->next_root = 0;
    c->next_root_step = -1;
    int shm = k > 1 && k <= 64;
    for (int i = 0; i < k; i++) {
        worker_t *w = list[i];
        c->next[i] = w;
        int survivor = is_member(c, w) && w->st == TIDE__WS_READY && w->gen == c->gen;
        c->next_steps[i] = survivor ? w->step : -1;
        if (c->next_steps[i] > c->next_root_step) {
            c->next_root_step = c->next_steps[i];
            c->next_root = i;
        }
        if (w->force_tcp || strcmp(w->host, list[0]->host)) shm = 0;
        w->prepared = w->prepare_ok = 0;
    }
    c->next_shm = shm;
    if (!shm) {
        publish(c);
        return;
    }
    c->phase = PH_PREPARING;
    for (int i = 0; i < k; i++)
        send_new(c->next[i], json_pack("{s:s, s:I, s:i, s:i}", "type", "prepare", "generation",
                                       (json_int_t)c->next_gen, "rank", i, "size", k));
}

static void publish(tide__coord_t *c)
{
    json_t *arr = json_array();
    for (int i = 0; i < c->nnext; i++) {
        worker_t *w = c->next[i];
        json_array_append_new(arr, json_pack("{s:i, s:s, s:s, s:s, s:i, s:i, s:I}", "rank", i, "id",
                                             w->id, "host", w->host, "addr", w->addr, "port",
                                             w->port, "pid", w->pid, "step",
                                             (json_int_t)c->next_steps[i]));
    }
    json_t *msg = json_pack("{s:s, s:I, s:i, s:i, s:I, s:s, s:o}", "type", "members", "generation",
                            (json_int_t)c->next_gen, "size", c->nnext, "root", c->next_root,
                            "root_step", (json_int_t)c->next_root_step, "transport",
                            c->next_shm ? "shm" : "tcp", "members", arr);
    int left = 0;
    for (int r = 0; r < c->nmem; r++) {
        worker_t *w = c->mem[r];
        if (w && w->st == TIDE__WS_LEAVING) left++;
    }
    c->cycle_joined = 0;
    for (int i = 0; i < c->nnext; i++) {
        c->next[i]->joiner = !is_member(c, c->next[i]) || c->next_steps[i] < 0;
        c->cycle_joined += c->next[i]->joiner;
        send_to(c->next[i], msg);
    }
    json_decref(msg);
    c->cycle_left = left;
    /* Lost steps: the highest step anyone of the old generation was seen to
     * complete, less the step the new one resumes from. */
    int64_t seen = -1;
    for (int r = 0; r < c->nmem; r++)
        if (c->mem[r] && c->mem[r]->max_step > seen) seen = c->mem[r]->max_step;
    c->cycle_max_step = seen;
    c->cycle_dropped = c->gen_dropped;
    c->gen_dropped = 0;
    c->prev_size = c->phase == PH_START ? 0 : c->nmem;

    free(c->mem);
    c->mem = c->next;
    c->nmem = c->nnext;
    c->next = NULL;
    c->nnext = 0;
    c->gen = c->next_gen;
    if (c->gen > c->max_gen_seen) c->max_gen_seen = c->gen;
    c->root = c->next_root;
    c->root_step = c->next_root_step;
    for (int i = 0; i < c->nmem; i++) {
        worker_t *w = c->mem[i];
        w->gen = c->gen;
        w->rank = i;
        w->st = TIDE__WS_MEMBER;
        w->running = 0;
        w->step = c->next_steps[i];
        if (w->step < c->root_step) w->step = c->root_step;
    }
    free(c->next_steps);
    c->next_steps = NULL;
    c->phase = PH_RUNNING;
    c->all_running = 0;
    c->pending_sent = 0;
    c->aborted = 0;
    c->formed_at = tide__now_ns();
    TIDE_INFO("coordinator: generation %lld published: %d members, root %d at step %lld",
              (long long)c->gen, c->nmem, c->root, (long long)c->root_step);
}

/* Survivors of the generation that ended, in their old order, then joiners in
 * arrival order; at most max. Returns how many are in list. */
static int candidates(tide__coord_t *c, worker_t **list)
{
    int k = 0;
    for (int r = 0; r < c->nmem && k < c->o.max; r++) {
        worker_t *w = c->mem[r];
        if (w && available(w) && w->st == TIDE__WS_READY) list[k++] = w;
    }
    int first_joiner = k;
    for (int i = 0; i < c->nw && k < MAX_WORKERS; i++) {
        worker_t *w = c->w[i];
        if (available(w) && !is_member(c, w)) list[k++] = w;
    }
    qsort(list + first_joiner, (size_t)(k - first_joiner), sizeof *list, cmp_seq);
    return k > c->o.max ? c->o.max : k;
}

static void try_form(tide__coord_t *c)
{
    worker_t **list = malloc(MAX_WORKERS * sizeof *list);
    if (!list) return;
    int k = candidates(c, list);
    if (k < c->o.min) {
        if (c->phase != PH_PAUSED) {
            c->phase = PH_PAUSED;
            c->paused_at = tide__now_ns();
            char words[200];
            snprintf(words, sizeof words, "paused: %d worker(s) available, at least %d needed", k,
                     c->o.min);
            add_event(c, "paused", json_pack("{s:i, s:i}", "available", k, "min", c->o.min), words);
        } else if (c->o.pause_timeout_ms > 0 && ms_since(c->paused_at) > (uint64_t)c->o.pause_timeout_ms) {
            char words[200];
            snprintf(words, sizeof words,
                     "fewer than --min %d workers for more than %d ms (%d available)", c->o.min,
                     c->o.pause_timeout_ms, k);
            fail_job(c, words);
        }
        free(list);
        return;
    }
    if (c->phase == PH_PAUSED)
        add_event(c, "resumed", json_pack("{s:i}", "available", k), "capacity returned: resuming");
    form(c, list, k);
    free(list);
}

static void try_first(tide__coord_t *c)
{
    worker_t **list = malloc(MAX_WORKERS * sizeof *list);
    if (!list) return;
    int k = 0;
    for (int i = 0; i < c->nw; i++)
        if (available(c->w[i])) list[k++] = c->w[i];
    qsort(list, (size_t)k, sizeof *list, cmp_hint);
    if (c->o.static_ranks) {
        /* Every rank 0..n-1 exactly once (register refuses duplicates). */
        if (k == c->o.max) {
            int ok = 1;
            for (int i = 0; i < k; i++) ok &= list[i]->rank_hint == i;
            if (ok) form(c, list, k);
        }
    } else {
        if (c->resume_until && tide__now_ns() < c->resume_until) {
            free(list);
            return; /* members of the running job may still re-register */
        }
        if (k < c->o.min && c->o.pause_timeout_ms > 0 &&
            ms_since(c->start_ns) > (uint64_t)c->o.pause_timeout_ms) {
            char words[200];
            snprintf(words, sizeof words, "fewer than --min %d workers registered within %d ms (%d did)",
                     c->o.min, c->o.pause_timeout_ms, k);
            free(list);
            fail_job(c, words);
            return;
        }
        int target = c->o.expect > 0 && c->o.expect < c->o.max ? c->o.expect : c->o.max;
        if (target < c->o.min) target = c->o.min;
        if (k >= target || (k >= c->o.min && ms_since(c->last_reg_at) >= (uint64_t)c->o.settle_ms))
            form(c, list, k > c->o.max ? c->o.max : k);
    }
    free(list);
}

static void try_adopt(tide__coord_t *c)
{
    int present = 0, ready = 0;
    for (int r = 0; r < c->nmem; r++) {
        worker_t *w = c->mem[r];
        if (!w || w->fd < 0) continue;
        present++;
        if (w->st != TIDE__WS_MEMBER) ready++;
    }
    if (present == c->nmem && !ready) {
        c->phase = PH_RUNNING;
        c->all_running = 1;
        c->pending_sent = 0;
        char words[160];
        snprintf(words, sizeof words, "adopted generation %lld: all %d members re-registered",
                 (long long)c->gen, c->nmem);
        add_event(c, "adopted", json_pack("{s:I, s:i}", "generation", (json_int_t)c->gen, "size", c->nmem),
                  words);
        return;
    }
    if (present == c->nmem || tide__now_ns() >= c->adopt_deadline) {
        char words[160];
        snprintf(words, sizeof words, "generation %lld re-registered with %d of %d members (%d ready)",
                 (long long)c->gen, present, c->nmem, ready);
        add_event(c, "adopted", json_pack("{s:I, s:i, s:i}", "generation", (json_int_t)c->gen, "size",
                                          c->nmem, "present", present),
                  words);
        for (int r = 0; r < c->nmem; r++)
            if (c->mem[r] && c->mem[r]->fd < 0) c->mem[r]->st = W_LOST;
        break_gen(c, present < c->nmem ? TIDE_EPEERLOST : TIDE_EABORTED,
                  present < c->nmem ? "loss" : "failure", words);
    }
}

static int resolved(const worker_t *w)
{
    return !w || w->fd < 0 || w->st == TIDE__WS_READY || w->st == TIDE__WS_LEAVING ||
           w->st == TIDE__WS_DONE || w->st == W_LOST;
}

static void try_resolve(tide__coord_t *c)
{
    int done = 0, live = 0;
    for (int r = 0; r < c->nmem; r++) {
        worker_t *w = c->mem[r];
        if (!resolved(w)) return;
        if (w && w->st == TIDE__WS_DONE) done++;
        if (w && w->st == TIDE__WS_READY && w->fd >= 0) live++;
    }
    if (done && !live) {
        job_done(c);
        return;
    }
    try_form(c);
}

static void try_publish(tide__coord_t *c)
{
    int lost = 0, all = 1, ok = 1;
    for (int i = 0; i < c->nnext; i++) {
        worker_t *w = c->next[i];
        if (w->st == W_LOST || w->fd < 0) lost = 1;
        if (!w->prepared) all = 0;
        if (!w->prepare_ok) ok = 0;
    }
    if (lost) {
        /* Nobody has used the segments yet; the survivors of the old generation
         * are still its members and still ready, so form again from scratch. */
        json_t *m = json_pack("{s:s, s:I, s:i}", "type", "abort", "generation", (json_int_t)c->next_gen,
                              "code", TIDE_EPEERLOST);
        for (int i = 0; i < c->nnext; i++) send_to(c->next[i], m);
        json_decref(m);
        if (c->next_gen > c->max_gen_seen) c->max_gen_seen = c->next_gen;
        free(c->next);
        free(c->next_steps);
        c->next = NULL;
        c->next_steps = NULL;
        c->nnext = 0;
        c->phase = PH_BROKEN;
        return;
    }
    if (!all) return;
    if (!ok) c->next_shm = 0;
    publish(c);
}

static void check_running(tide__coord_t *c)
{
    int running = 0, done = 0;
    for (int r = 0; r < c->nmem; r++) {
        worker_t *w = c->mem[r];
        if (w && w->running) running++;
        if (w && w->st == TIDE__WS_DONE) done++;
    }
    if (done == c->nmem && c->nmem > 0) {
        job_done(c);
        return;
    }
    if (!c->all_running && running == c->nmem) {
        c->all_running = 1;
        uint64_t since = c->broken_at ? c->broken_at : c->formed_at;
        double recovery_ms = (double)(tide__now_ns() - since) / 1e6;
        int64_t resumed = c->root_step < 0 ? 0 : c->root_step;
        /* Lost: steps completed before and done again, or else the step a
         * member had begun when the generation failed (P3 allows one). */
        int64_t lost_steps = c->cycle_max_step > resumed ? c->cycle_max_step - resumed : 0;
        if (lost_steps < c->cycle_dropped) lost_steps = c->cycle_dropped;
        if (c->gen > 0 && c->root_step < 0 && c->cycle_max_step > 0) {
            /* Nobody who held the state survived: a whole-job loss. */
            char lost_words[200];
            snprintf(lost_words, sizeof lost_words,
                     "every member holding the state was lost: generation %lld starts over from "
                     "the initial state (%lld step(s) lost; resume from a checkpoint instead, P5)",
                     (long long)c->gen, (long long)lost_steps);
            add_event(c, "state_lost", json_pack("{s:I, s:I}", "generation", (json_int_t)c->gen,
                                                 "lost_steps", (json_int_t)lost_steps),
                      lost_words);
        }
        const char *kind = c->broken_at ? c->cycle_kind : (c->gen == 0 ? "start" : "resume");
        if (!strcmp(kind, "reform")) /* agreed at a step boundary: say why */
            kind = c->cycle_left ? (c->cycle_joined ? "leave+join" : "leave") : "join";
        char words[256];
        snprintf(words, sizeof words,
                 "generation %lld: %d worker(s), resumed at step %lld (%s; lost %lld step(s); %.0f ms)",
                 (long long)c->gen, c->nmem, (long long)(c->root_step < 0 ? 0 : c->root_step), kind,
                 (long long)lost_steps, recovery_ms);
        add_event(c, "generation",
                  json_pack("{s:I, s:i, s:i, s:I, s:I, s:f, s:s, s:i, s:i, s:i, s:s}",
                            "generation", (json_int_t)c->gen, "size", c->nmem, "previous_size",
                            c->prev_size, "root_step", (json_int_t)c->root_step, "lost_steps",
                            (json_int_t)lost_steps, "recovery_ms", recovery_ms, "kind", kind,
                            "lost", c->cycle_lost, "left", c->cycle_left, "joined",
                            c->cycle_joined, "reason", c->cycle_why),
                  words);
        if (c->gen > 0)
            for (int r = 0; r < c->nmem; r++)
                if (c->mem[r]->joiner) {
                    c->n_joined++;
                    HOOK(c, member, "join", r, c->mem[r]->pid);
                }
        c->last_recovery_ms = recovery_ms;
        HOOK(c, generation, c->gen, c->nmem, lost_steps, recovery_ms);
        if (c->gen > 0)
            json_array_append_new(c->recoveries,
                                  json_pack("{s:I, s:s, s:f, s:I, s:i}", "generation",
                                            (json_int_t)c->gen, "kind", kind, "recovery_ms",
                                            recovery_ms, "lost_steps", (json_int_t)lost_steps,
                                            "size", c->nmem));
        c->broken_at = 0;
        c->cycle_lost = c->cycle_left = 0;
        c->cycle_why[0] = 0;
    }
    /* A joiner waits: the members re-form at their next step boundary. */
    if (!c->o.static_ranks && c->all_running && !c->pending_sent && c->nmem < c->o.max &&
        count_waiting(c) > 0) {
        c->pending_sent = 1;
        json_t *m = json_pack("{s:s, s:I}", "type", "pending", "generation", (json_int_t)c->gen);
        for (int r = 0; r < c->nmem; r++)
            if (c->mem[r]) send_to(c->mem[r], m);
        json_decref(m);
        TIDE_INFO("coordinator: a worker waits to join generation %lld's successor", (long long)c->gen);
    }
}

static void advance(tide__coord_t *c)
{
    for (int guard = 0; guard < 8; guard++) {
        int before = c->phase;
        switch (c->phase) {
        case PH_START: try_first(c); break;
        case PH_ADOPT: try_adopt(c); break;
        case PH_RUNNING: check_running(c); break;
        case PH_BROKEN: try_resolve(c); break;
        case PH_PAUSED: try_form(c); break;
        case PH_PREPARING: try_publish(c); break;
        default: break;
        }
        if (c->phase == before) break;
    }
    update_state(c);
}

/* ---- messages ---- */

static void progress_step(tide__coord_t *c, worker_t *w, int64_t step)
{
    w->step = step;
    if (step > w->max_step) w->max_step = step;
    if (is_member(c, w) && step > c->step) c->step = step;
}

/* A restarted coordinator meets a worker that trains in generation gen: the
 * first such worker makes it adopt gen (the highest seen wins). */
static void adopt(tide__coord_t *c, worker_t *w, int64_t gen, int rank, int size)
{
    if (c->phase == PH_START && !c->o.static_ranks) {
        free(c->mem);
        c->mem = calloc((size_t)size, sizeof *c->mem);
        if (!c->mem) {
            c->nmem = 0;
            return;
        }
        c->nmem = size;
        c->gen = gen;
        if (gen > c->max_gen_seen) c->max_gen_seen = gen;
        c->phase = PH_ADOPT;
        c->adopt_deadline = tide__now_ns() + (uint64_t)(c->o.peer_timeout_ms + 2000) * 1000000ull;
        c->all_running = 1;
        c->aborted = 0;
        TIDE_INFO("coordinator: adopting generation %lld of %d (re-registration)", (long long)gen, size);
    }
    if (c->phase == PH_ADOPT && gen == c->gen && size == c->nmem && rank < c->nmem &&
        (!c->mem[rank] || c->mem[rank] == w)) {
        c->mem[rank] = w;
        w->gen = gen;
        w->rank = rank;
        w->running = 1;
        return;
    }
    /* Anything else is a stale membership: that generation is over. */
    w->gen = gen;
    w->rank = -1;
    send_new(w, json_pack("{s:s, s:I, s:i}", "type", "abort", "generation", (json_int_t)gen, "code",
                          TIDE_EABORTED));
    if (w->st == TIDE__WS_MEMBER) w->st = TIDE__WS_READY; /* it will say so itself */
}

static void on_register(tide__coord_t *c, worker_t *w, json_t *msg)
{
    char id[TIDE__WORKER_ID_MAX], host[128], addr[64], tr[8] = "auto", st_name[16] = "new";
    long long pid, port, hint = -1, gen = -1, rank = -1, size = 0, step = -1;
    if (tide__json_str(msg, "id", id, sizeof id) || !tide__valid_name(id, sizeof id) ||
        tide__json_str(msg, "host", host, sizeof host) || tide__json_str(msg, "addr", addr, sizeof addr) ||
        tide__json_int(msg, "pid", 0, INT32_MAX, &pid) || tide__json_int(msg, "port", 0, 65535, &port) ||
        (json_object_get(msg, "rank_hint") && tide__json_int(msg, "rank_hint", -1, 65535, &hint)) ||
        (json_object_get(msg, "transport") && tide__json_str(msg, "transport", tr, sizeof tr)) ||
        (json_object_get(msg, "status") && tide__json_str(msg, "status", st_name, sizeof st_name)) ||
        (json_object_get(msg, "generation") && tide__json_int(msg, "generation", -1, UINT32_MAX, &gen)) ||
        (json_object_get(msg, "rank") && tide__json_int(msg, "rank", -1, MAX_WORKERS - 1, &rank)) ||
        (json_object_get(msg, "size") && tide__json_int(msg, "size", 0, MAX_WORKERS, &size)) ||
        (json_object_get(msg, "step") && tide__json_int(msg, "step", -1, INT64_MAX, &step))) {
        TIDE_WARN("coordinator: malformed register message refused");
        atomic_fetch_add(&c->refused, 1);
        send_error(w->fd, "malformed register message");
        on_lost(c, w, "malformed register message");
        return;
    }
    int st = tide__wstatus_parse(st_name);
    if (st < 0 || (st == TIDE__WS_MEMBER && (gen < 0 || rank < 0 || size < 1 || rank >= size))) {
        atomic_fetch_add(&c->refused, 1);
        send_error(w->fd, "malformed register message (status)");
        on_lost(c, w, "malformed register message");
        return;
    }
    if (c->phase == PH_DONE || c->phase == PH_FAILED) {
        send_new(w, json_pack("{s:s, s:i, s:s}", "type", "stop", "code",
                              c->phase == PH_DONE ? TIDE_OK : TIDE_ESTOPPED, "reason",
                              c->status.message));
        w->registered = 1;
        snprintf(w->id, sizeof w->id, "%s", id);
        w->st = TIDE__WS_DONE;
        return;
    }
    worker_t *old = find_id(c, id);
    if (old && old != w) {
        /* A reconnect: the new connection takes over the record, which keeps its
         * place in the generation. */
        close_conn(old);
        old->fd = w->fd;
        old->rx = w->rx;
        old->rx_len = w->rx_len;
        old->broken = 0;
        /* Its silence is measured from this connection: the old one's last
         * message may be long ago (a healed partition), and tick() would drop
         * the reconnect at once as "no heartbeat". */
        old->connected_at = w->connected_at;
        old->last_rx = w->last_rx;
        old->last_hb_tx = w->last_hb_tx;
        w->fd = -1;
        w->rx = NULL;
        w->dead = 1;
        w = old;
    } else if (c->o.static_ranks) {
        if (st != TIDE__WS_NEW || hint < 0 || hint >= c->o.max) {
            char why[128];
            snprintf(why, sizeof why, "rank %lld does not fit this job of %d workers", hint, c->o.max);
            TIDE_WARN("coordinator: worker %s claims rank %lld of a job of %d; refused", id, hint, c->o.max);
            atomic_fetch_add(&c->refused, 1);
            send_error(w->fd, why);
            on_lost(c, w, why);
            return;
        }
        for (int i = 0; i < c->nw; i++)
            if (c->w[i] != w && c->w[i]->registered && !c->w[i]->dead && c->w[i]->rank_hint == hint) {
                TIDE_WARN("coordinator: rank %lld registered twice; the second is refused", hint);
                atomic_fetch_add(&c->refused, 1);
                send_error(w->fd, "rank already registered");
                on_lost(c, w, "rank already registered");
                return;
            }
        if (c->phase != PH_START) {
            send_error(w->fd, "this static job has already started");
            on_lost(c, w, "late registration");
            return;
        }
    }
    int fresh = !w->registered;
    w->registered = 1;
    snprintf(w->id, sizeof w->id, "%s", id);
    snprintf(w->host, sizeof w->host, "%s", host);
    snprintf(w->addr, sizeof w->addr, "%s", addr);
    w->pid = (int)pid;
    w->port = (int)port;
    w->rank_hint = (int)hint;
    w->force_tcp = !strcmp(tr, "tcp");
    if (fresh) {
        w->seq = c->next_seq++;
        w->gen = -1;
        w->rank = -1;
        w->step = w->max_step = -1;
    }
    w->pool_since = tide__now_ns();
    c->last_reg_at = tide__now_ns();
    long long seen = -1;
    if (json_object_get(msg, "seen_generation")) tide__json_int(msg, "seen_generation", -1, UINT32_MAX, &seen);
    if (seen >= 0 && c->phase == PH_START && !c->o.static_ranks) {
        /* This coordinator is a restart: the job trained before. Its members are
         * reconnecting; wait for them (ADOPT) rather than start over. */
        if (seen > c->max_gen_seen) c->max_gen_seen = seen;
        if (!c->resume_until) {
            c->resume_until = tide__now_ns() + (uint64_t)(c->o.peer_timeout_ms + 2500) * 1000000ull;
            TIDE_INFO("coordinator: the job trained before (generation %lld); waiting for its members",
                      seen);
        }
    }
    /* A joiner of a job that trains already waits outside until it is ready (it
     * says "join"); one that had said so keeps its word across a restart. */
    w->deferred = st == TIDE__WS_NEW && !c->o.static_ranks &&
                  (json_is_true(json_object_get(msg, "deferred")) ||
                   (json_is_true(json_object_get(msg, "can_defer")) && fresh &&
                    (c->phase != PH_START || c->resume_until)));
    json_t *welcome = json_pack("{s:s, s:b, s:i, s:i, s:I, s:b}", "type", "welcome", "elastic",
                                !c->o.static_ranks, "heartbeat_ms", c->o.heartbeat_ms,
                                "peer_timeout_ms", c->o.peer_timeout_ms, "generation",
                                (json_int_t)c->gen, "deferred", w->deferred);
    send_new(w, welcome);
    if (step >= 0) progress_step(c, w, step);
    switch (st) {
    case TIDE__WS_NEW:
        w->st = TIDE__WS_NEW;
        w->step = -1;
        if (is_member(c, w)) {
            /* It was a member and lost everything (restarted in place): its
             * slot is a loss, and it waits like any joiner. */
            c->mem[w->rank] = NULL;
            c->cycle_lost++;
            if (c->o.static_ranks) {
                fail_job(c, "a member restarted");
                return;
            }
            break_gen(c, TIDE_EPEERLOST, "loss", "a member restarted");
            w->gen = -1;
            w->rank = -1;
        }
        break;
    case TIDE__WS_MEMBER:
        w->st = TIDE__WS_MEMBER;
        if (gen > c->max_gen_seen && c->phase != PH_START) c->max_gen_seen = gen;
        if (is_member(c, w) && gen == c->gen && w->rank == rank) {
            /* Reconnected to us: nothing changed, unless its generation ended. */
            if (c->phase == PH_BROKEN)
                send_new(w, json_pack("{s:s, s:I, s:i}", "type", "abort", "generation",
                                      (json_int_t)gen, "code", TIDE_EABORTED));
        } else {
            adopt(c, w, gen, (int)rank, (int)size);
        }
        break;
    case TIDE__WS_READY:
        w->st = TIDE__WS_READY;
        if (gen > c->max_gen_seen) c->max_gen_seen = gen;
        if (c->phase == PH_START && gen >= 0 && size > 0 && rank >= 0 && rank < size &&
            !c->o.static_ranks) {
            adopt(c, w, gen, (int)rank, (int)size);
            w->st = TIDE__WS_READY;
        } else if (!is_member(c, w) || w->gen != gen) {
            w->gen = gen;
            if (!is_member(c, w)) w->rank = -1;
        }
        break;
    case TIDE__WS_LEAVING:
    case TIDE__WS_DONE:
        w->st = st;
        break;
    }
    TIDE_DEBUG("coordinator: worker %s (pid %d, %s) registered as %s", w->id, w->pid, w->addr,
               tide__wstatus_name(st));
}

static void on_ready(tide__coord_t *c, worker_t *w, json_t *msg)
{
    long long gen, step, port = w->port, code = 0, leaving = 0;
    char reason[16] = "failed";
    if (tide__json_int(msg, "generation", -1, UINT32_MAX, &gen) ||
        tide__json_int(msg, "step", -1, INT64_MAX, &step) ||
        (json_object_get(msg, "port") && tide__json_int(msg, "port", 1, 65535, &port)) ||
        (json_object_get(msg, "code") && tide__json_int(msg, "code", -1000, 0, &code)) ||
        (json_object_get(msg, "reason") && tide__json_str(msg, "reason", reason, sizeof reason))) {
        TIDE_WARN("coordinator: malformed ready message from pid %d ignored", w->pid);
        return;
    }
    json_t *lv = json_object_get(msg, "leaving");
    leaving = json_is_true(lv);
    w->port = (int)port;
    progress_step(c, w, step);
    if (is_member(c, w) && gen == c->gen) {
        if (json_is_true(json_object_get(msg, "dropped"))) c->gen_dropped = 1;
        int was = w->st;
        w->st = leaving ? TIDE__WS_LEAVING : TIDE__WS_READY;
        if (leaving && was != TIDE__WS_LEAVING) {
            c->n_left++;
            HOOK(c, member, "leave", w->rank, w->pid);
            char words[160];
            snprintf(words, sizeof words, "rank %d (pid %d) leaves on notice after step %lld", w->rank,
                     w->pid, step);
            add_event(c, "left", json_pack("{s:I, s:i, s:i, s:I}", "generation", (json_int_t)c->gen,
                                           "rank", w->rank, "pid", w->pid, "step", (json_int_t)step),
                      words);
        }
        if (c->o.static_ranks) return;
        char why[160];
        if (!strcmp(reason, "failed")) {
            snprintf(why, sizeof why, "rank %d reported a failed collective (%s)", w->rank,
                     code ? tide_errname((int)code) : "?");
            break_gen(c, code < 0 ? (int)code : TIDE_EABORTED, "failure", why);
        } else {
            snprintf(why, sizeof why, "%s at step %lld", leaving ? "planned leave" : "re-formation",
                     step);
            break_gen(c, 0, "reform", why);
        }
        return;
    }
    /* Not of the current generation (a stale member, or one the coordinator
     * already counted lost): it waits like a joiner. */
    w->gen = gen;
    if (!is_member(c, w)) w->rank = -1;
    w->st = leaving ? TIDE__WS_LEAVING : TIDE__WS_READY;
    if (leaving) {
        close_conn(w);
        w->dead = !is_member(c, w);
    }
}

static void on_metric(tide__coord_t *c, worker_t *w, json_t *msg)
{
    char name[64];
    double v;
    long long step = -1;
    if (tide__json_str(msg, "name", name, sizeof name) || !tide__valid_name(name, sizeof name) ||
        tide__json_real(msg, "value", &v) ||
        (json_object_get(msg, "step") && tide__json_int(msg, "step", -1, INT64_MAX, &step)))
        return;
    json_t *m = json_object_get(c->metrics, name);
    if (!m) {
        if (json_object_size(c->metrics) >= MAX_METRICS) return;
        m = json_pack("{s:I, s:f, s:[]}", "step", (json_int_t)step, "value", v, "history");
        if (!m) return;
        json_object_set_new(c->metrics, name, m);
    }
    json_object_set_new(m, "step", json_integer(step));
    json_object_set_new(m, "value", json_real(v));
    json_t *h = json_object_get(m, "history");
    if (json_array_size(h) >= METRIC_HISTORY) {
        /* Keep the curve's shape in bounded memory: drop every other point. */
        json_t *half = json_array();
        for (size_t i = 0; i < json_array_size(h); i += 2) json_array_append(half, json_array_get(h, i));
        json_object_set_new(m, "history", half);
        h = half;
    }
    json_array_append_new(h, json_pack("[I, f]", (json_int_t)step, v));
    HOOK(c, metric, name, v);
}

/* Rank 0's account of the steps [from, to): their samples and time, in total. */
static void on_step(tide__coord_t *c, worker_t *w, json_t *msg)
{
    long long from, to, samples = 0;
    double seconds = 0;
    if (!is_member(c, w) || tide__json_int(msg, "from", 0, INT64_MAX, &from) ||
        tide__json_int(msg, "to", from + 1, from + 100000, &to) ||
        (json_object_get(msg, "samples") && tide__json_int(msg, "samples", 0, INT64_MAX / 2, &samples)) ||
        (json_object_get(msg, "seconds") && tide__json_real(msg, "seconds", &seconds)) || seconds < 0)
        return;
    c->samples += samples;
    long long n = to - from;
    for (long long k = from; k < to; k++)
        HOOK(c, step, (int64_t)k, (int64_t)(samples / n), seconds / (double)n);
}

static void on_message(tide__coord_t *c, worker_t *w, json_t *msg)
{
    const char *type = json_string_value(json_object_get(msg, "type"));
    if (!w->registered) {
        if (!strcmp(type, "register")) on_register(c, w, msg);
        else {
            atomic_fetch_add(&c->refused, 1);
            TIDE_WARN("coordinator: \"%.32s\" before register; connection dropped", type);
            on_lost(c, w, "protocol violation");
        }
        return;
    }
    long long v;
    if (!strcmp(type, "hb")) {
        if (!tide__json_int(msg, "step", -1, INT64_MAX, &v)) progress_step(c, w, v);
    } else if (!strcmp(type, "prepared")) {
        long long gen;
        if (!tide__json_int(msg, "generation", 0, UINT32_MAX, &gen) && in_next(c, w) &&
            gen == c->next_gen) {
            w->prepared = 1;
            w->prepare_ok = json_is_true(json_object_get(msg, "ok"));
        }
    } else if (!strcmp(type, "running")) {
        long long gen;
        if (!tide__json_int(msg, "generation", 0, UINT32_MAX, &gen) && is_member(c, w) &&
            gen == c->gen) {
            w->running = 1;
            if (!tide__json_int(msg, "step", -1, INT64_MAX, &v)) progress_step(c, w, v);
        }
    } else if (!strcmp(type, "ready")) {
        on_ready(c, w, msg);
    } else if (!strcmp(type, "join")) {
        /* A joiner that registered early is ready now. */
        if (w->deferred) {
            w->deferred = 0;
            w->pool_since = tide__now_ns();
        }
    } else if (!strcmp(type, "metric")) {
        on_metric(c, w, msg);
    } else if (!strcmp(type, "step")) {
        on_step(c, w, msg);
    } else if (!strcmp(type, "done")) {
        if (!tide__json_int(msg, "step", -1, INT64_MAX, &v)) progress_step(c, w, v);
        w->st = TIDE__WS_DONE;
    } else if (!strcmp(type, "bye")) {
        /* tide_finalize of a member that neither finished nor had notice: it is
         * gone, which its peers learn from their data connections too. */
        if (w->st == TIDE__WS_MEMBER && is_member(c, w)) {
            w->st = TIDE__WS_LEAVING;
            if (!c->o.static_ranks) {
                char why[128];
                snprintf(why, sizeof why, "rank %d (pid %d) left without notice", w->rank, w->pid);
                break_gen(c, TIDE_EPEERLOST, "loss", why);
            }
        } else if (w->st == TIDE__WS_NEW || w->st == TIDE__WS_READY) {
            w->st = TIDE__WS_LEAVING;
        }
    } else if (!strcmp(type, "register")) {
        TIDE_WARN("coordinator: pid %d registered twice on one connection; ignored", w->pid);
    } else {
        TIDE_WARN("coordinator: unknown control message \"%.32s\" from pid %d ignored", type, w->pid);
    }
}

/* Reads what is available; handles every whole frame. A frame over the cap or
 * that is not a JSON object with a string "type" costs the connection. */
static void on_readable(tide__coord_t *c, worker_t *w)
{
    const size_t cap = 4 + TIDE__CTL_MSG_MAX;
    if (!w->rx) {
        w->rx = malloc(cap);
        if (!w->rx) {
            on_lost(c, w, "out of memory");
            return;
        }
    }
    for (;;) {
        ssize_t n = recv(w->fd, w->rx + w->rx_len, cap - w->rx_len, MSG_DONTWAIT);
        if (n == 0) {
            on_lost(c, w, "connection closed");
            return;
        }
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) break;
            on_lost(c, w, strerror(errno));
            return;
        }
        w->rx_len += (size_t)n;
        w->last_rx = tide__now_ns();
        for (;;) {
            if (w->rx_len < 4) break;
            uint32_t be;
            memcpy(&be, w->rx, 4);
            size_t len = ntohl(be);
            if (len == 0 || len > TIDE__CTL_MSG_MAX) {
                TIDE_WARN("coordinator: control message of %zu bytes from %s refused (limit %u)", len,
                          w->registered ? w->id : "an unregistered peer", TIDE__CTL_MSG_MAX);
                atomic_fetch_add(&c->refused, 1);
                on_lost(c, w, "oversized message");
                return;
            }
            if (w->rx_len < 4 + len) break;
            json_error_t jerr;
            json_t *msg = json_loadb((const char *)w->rx + 4, len, JSON_REJECT_DUPLICATES, &jerr);
            memmove(w->rx, w->rx + 4 + len, w->rx_len - 4 - len);
            w->rx_len -= 4 + len;
            if (!msg || !json_is_object(msg) || !json_is_string(json_object_get(msg, "type"))) {
                TIDE_WARN("coordinator: malformed control message from %s: %s",
                          w->registered ? w->id : "an unregistered peer",
                          msg ? "no string \"type\"" : jerr.text);
                json_decref(msg);
                atomic_fetch_add(&c->refused, 1);
                on_lost(c, w, "malformed message");
                return;
            }
            on_message(c, w, msg);
            json_decref(msg);
            if (w->fd < 0 || w->dead) return;
            advance(c);
            if (w->fd < 0 || w->dead) return;
        }
        if (w->rx_len == cap) break; /* cannot happen: a frame never exceeds cap */
    }
}

/* ---- connections ---- */

static void *auth_main(void *arg)
{
    tide__coord_t *c = ((void **)arg)[0];
    int fd = (int)(intptr_t)((void **)arg)[1];
    free(arg);
    tide__peer_claim_t claim = {0};
    int rc = tide__auth_accept(fd, &c->secret, -1, AUTH_TIMEOUT_MS, -1, &claim);
    handoff_t h = {fd, rc, claim.kind};
    pthread_mutex_lock(&c->mu);
    ssize_t wr = write(c->auth_pipe[1], &h, sizeof h);
    (void)wr;
    for (int i = 0; i < MAX_AUTH; i++)
        if (c->auth_fds[i] == fd) c->auth_fds[i] = -1;
    c->auth_inflight--;
    pthread_cond_broadcast(&c->auth_cv);
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

static void on_accept(tide__coord_t *c)
{
    int fd;
    if (tide__net_accept(c->lfd, 0, -1, &fd) != TIDE_OK) return;
    if (c->auth_inflight >= MAX_AUTH || c->nw >= MAX_WORKERS) {
        atomic_fetch_add(&c->refused, 1);
        TIDE_WARN("coordinator: too many connections; one refused");
        close(fd);
        return;
    }
    void **arg = malloc(2 * sizeof *arg);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t t;
    if (arg) {
        arg[0] = c;
        arg[1] = (void *)(intptr_t)fd;
    }
    int slot = -1;
    for (int i = 0; i < MAX_AUTH && slot < 0; i++)
        if (c->auth_fds[i] < 0) slot = i;
    if (!arg || slot < 0 || pthread_create(&t, &attr, auth_main, arg) != 0) {
        free(arg);
        close(fd);
        pthread_attr_destroy(&attr);
        return;
    }
    pthread_attr_destroy(&attr);
    c->auth_fds[slot] = fd;
    c->auth_inflight++;
}

static void on_handoff(tide__coord_t *c)
{
    handoff_t h;
    while (read(c->auth_pipe[0], &h, sizeof h) == (ssize_t)sizeof h) {
        if (h.rc != TIDE_OK || h.kind != TIDE__CONN_CONTROL || c->nw >= MAX_WORKERS || c->stopping) {
            atomic_fetch_add(&c->refused, 1);
            TIDE_WARN("coordinator: refused a control connection: %s",
                      h.rc != TIDE_OK ? tide_strerror(h.rc) : "not a control connection");
            close(h.fd);
            continue;
        }
        worker_t *w = calloc(1, sizeof *w);
        if (!w) {
            close(h.fd);
            continue;
        }
        fcntl(h.fd, F_SETFL, fcntl(h.fd, F_GETFL) | O_NONBLOCK);
        w->fd = h.fd;
        w->connected_at = w->last_rx = w->last_hb_tx = tide__now_ns();
        w->gen = -1;
        w->rank = -1;
        w->rank_hint = -1;
        w->step = w->max_step = -1;
        c->w[c->nw++] = w;
    }
}

/* Timers: heartbeats out, silent peers lost, the settle and pause clocks. */
static void tick(tide__coord_t *c)
{
    uint64_t now = tide__now_ns();
    json_t *hb = NULL;
    for (int i = 0; i < c->nw; i++) {
        worker_t *w = c->w[i];
        if (w->dead || w->fd < 0) continue;
        if (w->broken) {
            on_lost(c, w, "send failed");
            continue;
        }
        uint64_t silent = (now - w->last_rx) / 1000000ull;
        if (!w->registered) {
            if (silent > REGISTER_TIMEOUT_MS) {
                atomic_fetch_add(&c->refused, 1);
                TIDE_WARN("coordinator: a connection sent no register within %d ms; dropped",
                          REGISTER_TIMEOUT_MS);
                on_lost(c, w, "no register");
            }
            continue;
        }
        if (silent > (uint64_t)c->o.peer_timeout_ms) {
            char why[96];
            snprintf(why, sizeof why, "no heartbeat for %llu ms", (unsigned long long)silent);
            on_lost(c, w, why);
            continue;
        }
        if ((now - w->last_hb_tx) / 1000000ull >= (uint64_t)c->o.heartbeat_ms) {
            if (!hb) hb = json_pack("{s:s}", "type", "hb");
            send_to(w, hb);
            w->last_hb_tx = now;
        }
    }
    json_decref(hb);
    double t = now_s(c);
    if (t - c->last_rate_t >= 1.0) {
        c->last_rate_t = t;
        if (c->nrate == RATE_SAMPLES) {
            memmove(c->rate, c->rate + 1, (RATE_SAMPLES - 1) * sizeof *c->rate);
            c->nrate--;
        }
        c->rate[c->nrate++] = (rate_sample_t){t, c->step, c->samples};
        int first = c->nrate > 6 ? c->nrate - 6 : 0;
        double dt = c->rate[c->nrate - 1].t - c->rate[first].t;
        int64_t ds = c->rate[c->nrate - 1].step - c->rate[first].step;
        int64_t dsm = c->rate[c->nrate - 1].samples - c->rate[first].samples;
        c->steps_per_s = dt > 0 && ds > 0 ? (double)ds / dt : 0.0;
        c->samples_per_s = dt > 0 && dsm > 0 ? (double)dsm / dt : 0.0;
    }
}

/* Frees the records nobody refers to any more. */
static void gc(tide__coord_t *c)
{
    for (int i = c->nw - 1; i >= 0; i--) {
        worker_t *w = c->w[i];
        int referenced = is_member(c, w) || in_next(c, w);
        if (!w->dead && w->fd < 0 && !referenced) w->dead = 1;
        if (w->dead && !referenced) {
            close_conn(w);
            free(w);
            c->w[i] = c->w[--c->nw];
        }
    }
}

static void *coord_main(void *arg)
{
    tide__coord_t *c = arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    struct pollfd *p = calloc(MAX_WORKERS + 3, sizeof *p);
    worker_t **pw = calloc(MAX_WORKERS, sizeof *pw);
    if (!p || !pw) {
        free(p);
        free(pw);
        return NULL;
    }
    for (;;) {
        pthread_mutex_lock(&c->mu);
        p[0] = (struct pollfd){c->wake[0], POLLIN, 0};
        p[1] = (struct pollfd){c->lfd, POLLIN, 0};
        p[2] = (struct pollfd){c->auth_pipe[0], POLLIN, 0};
        int n = 0;
        for (int i = 0; i < c->nw; i++)
            if (c->w[i]->fd >= 0 && !c->w[i]->dead) {
                pw[n] = c->w[i];
                p[3 + n] = (struct pollfd){c->w[i]->fd, POLLIN, 0};
                n++;
            }
        pthread_mutex_unlock(&c->mu);
        int pr = poll(p, (nfds_t)(n + 3), 100);
        pthread_mutex_lock(&c->mu);
        if (c->stopping) {
            pthread_mutex_unlock(&c->mu);
            break;
        }
        if (pr > 0) {
            if (p[0].revents) {
                char buf[64];
                ssize_t r = read(c->wake[0], buf, sizeof buf);
                (void)r;
            }
            if (p[2].revents) on_handoff(c);
            for (int i = 0; i < n; i++)
                if (p[3 + i].revents && pw[i]->fd >= 0 && !pw[i]->dead) on_readable(c, pw[i]);
            if (p[1].revents) on_accept(c);
        }
        tick(c);
        advance(c);
        gc(c);
        pthread_mutex_unlock(&c->mu);
    }
    free(p);
    free(pw);
    return NULL;
}

/* ---- HTTP: /metrics, /healthz, /status (on the server's thread) ---- */

static int http_handler(void *ctx, tide__http_endpoint_t ep, tide__http_body_t *b)
{
    tide__coord_t *c = ctx;
    int code = 200;
    pthread_mutex_lock(&c->mu);
    int size = c->phase == PH_RUNNING ? c->nmem : 0;
    if (ep == TIDE__HTTP_HEALTHZ) {
        if (c->phase == PH_FAILED) {
            tide__http_printf(b, "failed: %s\n", c->status.message);
            code = 503;
        } else {
            tide__http_printf(b, "ok\n");
        }
    } else if (ep == TIDE__HTTP_METRICS) {
        const char *P = "tide_";
        tide__http_prom(b, P, "generation", "gauge", "the current membership generation", (double)c->gen);
        tide__http_prom(b, P, "world_size", "gauge", "members of the current generation", size);
        tide__http_prom(b, P, "min_workers", "gauge", "--min", c->o.min);
        tide__http_prom(b, P, "max_workers", "gauge", "--max", c->o.max);
        tide__http_prom(b, P, "waiting_workers", "gauge", "registered workers waiting to join",
                        count_waiting(c));
        tide__http_prom(b, P, "step", "gauge", "the highest step a member completed", (double)c->step);
        tide__http_prom(b, P, "steps_per_second", "gauge", "steps per second, recent", c->steps_per_s);
        tide__http_prom(b, P, "samples_per_second", "gauge", "samples per second, recent",
                        c->samples_per_s);
        tide__http_prom(b, P, "paused", "gauge", "1 while below --min", c->phase == PH_PAUSED);
        tide__http_prom(b, P, "failed", "gauge", "1 once the job failed", c->phase == PH_FAILED);
        tide__http_prom(b, P, "events_total", "counter", "events so far", c->status.events);
        tide__http_prom(b, P, "members_lost_total", "counter", "members lost", (double)c->n_lost);
        tide__http_prom(b, P, "members_left_total", "counter", "members that left on notice",
                        (double)c->n_left);
        tide__http_prom(b, P, "members_joined_total", "counter", "workers that joined a running job",
                        (double)c->n_joined);
        tide__http_prom(b, P, "recoveries_total", "counter", "generations formed after the first",
                        (double)json_array_size(c->recoveries));
        tide__http_prom(b, P, "last_recovery_ms", "gauge", "what forming the current generation took",
                        c->last_recovery_ms);
        tide__http_prom(b, P, "connections_refused_total", "counter",
                        "connections refused: wrong secret, malformed input", atomic_load(&c->refused));
        const char *name;
        json_t *m;
        json_object_foreach(c->metrics, name, m) {
            tide__http_prom(b, "tide_metric_", name, "gauge", "tide_log_metric",
                            json_number_value(json_object_get(m, "value")));
        }
    } else {
        json_t *members = json_array();
        uint64_t now = tide__now_ns();
        for (int r = 0; r < size; r++) {
            worker_t *w = c->mem[r];
            if (!w) continue;
            const char *st = w->st == W_LOST ? "lost" : w->st == TIDE__WS_MEMBER ? "active"
                                                                                  : tide__wstatus_name(w->st);
            json_array_append_new(members,
                                  json_pack("{s:i, s:s, s:s, s:i, s:I, s:s, s:I}", "rank", r, "id", w->id,
                                            "host", w->addr, "pid", w->pid, "step", (json_int_t)w->step,
                                            "state", st, "last_heartbeat_ms",
                                            (json_int_t)((now - w->last_rx) / 1000000ull)));
        }
        json_t *j = json_pack("{s:s, s:s, s:I, s:I, s:i, s:i, s:i, s:f, s:f, s:i, s:f, s:i, s:s, s:o}",
                              "job", c->job_name, "state", tide__job_state_name(c->status.state),
                              "generation", (json_int_t)c->gen, "step", (json_int_t)c->step,
                              "world_size", size, "min", c->o.min, "max", c->o.max, "steps_per_s",
                              c->steps_per_s, "samples_per_s", c->samples_per_s, "pending_joins",
                              count_waiting(c), "uptime_s", now_s(c), "events", c->status.events,
                              "message", c->status.message, "members", members);
        pthread_mutex_unlock(&c->mu);
        int rc = j ? tide__http_json(b, j) : TIDE_ENOMEM;
        json_decref(j);
        return rc == TIDE_OK ? 200 : rc;
    }
    pthread_mutex_unlock(&c->mu);
    return code;
}

/* ---- public ---- */

int tide__coord_start(const tide__coord_opts_t *o, tide__coord_t **out)
{
    if (!o || !o->secret || o->min < 1 || o->max < o->min || o->max > MAX_WORKERS) return TIDE_EINVAL;
    tide__coord_t *c = calloc(1, sizeof *c);
    if (!c) return TIDE_ENOMEM;
    c->o = *o;
    c->secret = *o->secret;
    c->o.secret = &c->secret;
    c->lfd = c->evfd = -1;
    c->wake[0] = c->wake[1] = c->auth_pipe[0] = c->auth_pipe[1] = -1;
    for (int i = 0; i < MAX_AUTH; i++) c->auth_fds[i] = -1;
    c->gen = c->max_gen_seen = -1;
    c->status.generation = -1;
    c->start_ns = tide__now_ns();
    if (c->o.settle_ms < 0) c->o.settle_ms = 500;
    int rc = TIDE_OK;
    if (!c->o.heartbeat_ms || !c->o.peer_timeout_ms) {
        int hb, to;
        rc = tide__ctl_timing(&hb, &to);
        if (!c->o.heartbeat_ms) c->o.heartbeat_ms = hb;
        if (!c->o.peer_timeout_ms) c->o.peer_timeout_ms = to;
    }
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->auth_cv, NULL);
    c->w = calloc(MAX_WORKERS, sizeof *c->w);
    c->events = json_array();
    c->metrics = json_object();
    c->recoveries = json_array();
    if (rc == TIDE_OK && (!c->w || !c->events || !c->metrics || !c->recoveries)) rc = TIDE_ENOMEM;
    if (rc == TIDE_OK && o->events_path) {
        c->events_path = strdup(o->events_path);
        c->events_f = fopen(o->events_path, "a");
        if (!c->events_f) {
            TIDE_ERROR("cannot open the events file %s: %s", o->events_path, strerror(errno));
            rc = TIDE_ECONFIG;
        }
    }
    const char *host = o->host ? o->host : "127.0.0.1";
    int bound = 0;
    if (rc == TIDE_OK) rc = tide__net_listen(host, o->port, 512, &c->lfd, &bound);
    if (rc == TIDE_OK && (pipe2(c->wake, O_CLOEXEC | O_NONBLOCK) < 0 ||
                          pipe2(c->auth_pipe, O_CLOEXEC | O_NONBLOCK) < 0))
        rc = TIDE_ESYS;
    if (rc == TIDE_OK && (c->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) rc = TIDE_ESYS;
    if (o->job_name) snprintf(c->job_name, sizeof c->job_name, "%s", o->job_name);
    if (rc == TIDE_OK && o->http) {
        char hh[160];
        int hp;
        if (tide__net_split_addr(o->http, hh, sizeof hh, &hp) != TIDE_OK) {
            TIDE_ERROR("the HTTP address \"%s\": expected HOST:PORT", o->http);
            rc = TIDE_ECONFIG;
        } else if ((rc = tide__http_start(hh, hp, http_handler, c, &c->http)) != TIDE_OK) {
            TIDE_ERROR("cannot serve HTTP on %s", o->http);
        }
    }
    if (rc == TIDE_OK) {
        if (strchr(host, ':')) snprintf(c->addr, sizeof c->addr, "[%s]:%d", host, bound);
        else snprintf(c->addr, sizeof c->addr, "%s:%d", host, bound);
        if (pthread_create(&c->thread, NULL, coord_main, c) != 0) rc = TIDE_ESYS;
    }
    if (rc != TIDE_OK) {
        tide__http_stop(c->http);
        if (c->lfd >= 0) close(c->lfd);
        for (int i = 0; i < 2; i++) {
            if (c->wake[i] >= 0) close(c->wake[i]);
            if (c->auth_pipe[i] >= 0) close(c->auth_pipe[i]);
        }
        if (c->evfd >= 0) close(c->evfd);
        if (c->events_f) fclose(c->events_f);
        free(c->events_path);
        json_decref(c->events);
        json_decref(c->metrics);
        json_decref(c->recoveries);
        free(c->w);
        pthread_mutex_destroy(&c->mu);
        pthread_cond_destroy(&c->auth_cv);
        free(c);
        return rc;
    }
    TIDE_INFO("coordinator listening on %s (%s, %d..%d workers)", c->addr,
              o->static_ranks ? "static" : "elastic", o->min, o->max);
    *out = c;
    return TIDE_OK;
}

void tide__coord_stop(tide__coord_t *c)
{
    if (!c) return;
    /* The server's callback takes c->mu: it goes first. */
    tide__http_stop(c->http);
    c->http = NULL;
    pthread_mutex_lock(&c->mu);
    c->stopping = 1;
    for (int i = 0; i < MAX_AUTH; i++)
        if (c->auth_fds[i] >= 0) shutdown(c->auth_fds[i], SHUT_RDWR);
    pthread_mutex_unlock(&c->mu);
    ssize_t w = write(c->wake[1], "x", 1);
    (void)w;
    pthread_join(c->thread, NULL);
    pthread_mutex_lock(&c->mu);
    while (c->auth_inflight > 0) pthread_cond_wait(&c->auth_cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
    handoff_t h;
    while (read(c->auth_pipe[0], &h, sizeof h) == (ssize_t)sizeof h) close(h.fd);
    for (int i = 0; i < c->nw; i++) {
        close_conn(c->w[i]);
        free(c->w[i]);
    }
    free(c->w);
    free(c->mem);
    free(c->next);
    free(c->next_steps);
    close(c->lfd);
    close(c->wake[0]);
    close(c->wake[1]);
    close(c->auth_pipe[0]);
    close(c->auth_pipe[1]);
    close(c->evfd);
    if (c->events_f) fclose(c->events_f);
    free(c->events_path);
    json_decref(c->events);
    json_decref(c->metrics);
    json_decref(c->recoveries);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->auth_cv);
    free(c);
}

const char *tide__coord_addr(const tide__coord_t *c)
{
    return c->addr;
}

int tide__coord_refused(const tide__coord_t *c)
{
    return atomic_load(&((tide__coord_t *)c)->refused);
}

int tide__coord_notify_fd(const tide__coord_t *c)
{
    return c->evfd;
}

void tide__coord_status(tide__coord_t *c, tide__job_status_t *out)
{
    pthread_mutex_lock(&c->mu);
    *out = c->status;
    pthread_mutex_unlock(&c->mu);
}

json_t *tide__coord_snapshot(tide__coord_t *c)
{
    pthread_mutex_lock(&c->mu);
    json_t *members = json_array();
    if (c->phase == PH_RUNNING)
        for (int r = 0; r < c->nmem; r++) {
            worker_t *w = c->mem[r];
            if (!w) continue;
            json_array_append_new(members,
                                  json_pack("{s:i, s:s, s:i, s:s, s:I, s:s}", "rank", r, "id", w->id,
                                            "pid", w->pid, "host", w->addr, "step",
                                            (json_int_t)w->step, "status",
                                            w->st == W_LOST ? "lost" : tide__wstatus_name(w->st)));
        }
    json_t *s = json_pack("{s:s, s:s, s:I, s:i, s:i, s:i, s:I, s:f, s:i, s:f, s:o, s:O, s:O, s:O, s:s}",
                          "state", tide__job_state_name(c->status.state), "phase",
                          phase_names[c->phase], "generation", (json_int_t)c->gen, "size",
                          c->phase == PH_RUNNING ? c->nmem : 0, "min", c->o.min, "max", c->o.max,
                          "step", (json_int_t)c->step, "steps_per_s", c->steps_per_s, "waiting",
                          count_waiting(c), "uptime_s", now_s(c), "members", members, "events",
                          c->events, "metrics", c->metrics, "recoveries", c->recoveries, "message",
                          c->status.message);
    pthread_mutex_unlock(&c->mu);
    /* The arrays were shared (O); hand out a copy the caller may keep. */
    json_t *copy = json_deep_copy(s);
    json_decref(s);
    return copy;
}

int tide__coord_http_port(const tide__coord_t *c)
{
    return c->http ? tide__http_port(c->http) : 0;
}

int tide__coord_pid_of_rank(tide__coord_t *c, int rank)
{
    int pid = -1;
    pthread_mutex_lock(&c->mu);
    if (c->phase == PH_RUNNING && c->nmem > 0) {
        if (rank < 0) {
            unsigned char r[4];
            tide__random_bytes(r, sizeof r);
            uint32_t v = (uint32_t)r[0] | (uint32_t)r[1] << 8 | (uint32_t)r[2] << 16 | (uint32_t)r[3] << 24;
            rank = (int)(v % (uint32_t)c->nmem);
        }
        if (rank < c->nmem && c->mem[rank] && c->mem[rank]->st == TIDE__WS_MEMBER)
            pid = c->mem[rank]->pid;
    }
    pthread_mutex_unlock(&c->mu);
    return pid;
}

int tide__coord_rank_of_pid(tide__coord_t *c, int pid)
{
    int rank = -1;
    pthread_mutex_lock(&c->mu);
    for (int r = 0; r < c->nmem; r++)
        if (c->mem[r] && c->mem[r]->pid == pid) rank = r;
    pthread_mutex_unlock(&c->mu);
    return rank;
}

int tide__coord_notice_pid(tide__coord_t *c, int pid)
{
    int rc = TIDE_ENOTFOUND;
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < c->nw; i++) {
        worker_t *w = c->w[i];
        if (w->registered && !w->dead && w->fd >= 0 && w->pid == pid) {
            send_new(w, json_pack("{s:s}", "type", "notice"));
            rc = TIDE_OK;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

void tide__coord_stop_job(tide__coord_t *c, const char *reason)
{
    pthread_mutex_lock(&c->mu);
    fail_job(c, reason ? reason : "stopped");
    pthread_mutex_unlock(&c->mu);
}
