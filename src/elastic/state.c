/* state.c - the elastic state registry and its sync.
 *
 * The registry is a list of borrowed buffers, in registration order. The sync
 * runs as the first collectives of every new generation: one small allreduce
 * checks that every member registered the same names and sizes in the same order,
 * then, only if some member lacks the newest state, one broadcast per buffer from
 * the root. Members at the root's step already hold identical bytes (data
 * parallelism keeps every member that completed step s bit-identical), so the
 * common recovery moves no state at all. In the first generation nobody has
 * completed a step, and rank 0's state is broadcast so that every member starts
 * from the same one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/param.h"
#include "elastic/comm.h"
#include "elastic/control.h"
#include "elastic/proto.h"

#define FNV_OFFSET 0xcbf29ce484222325ull
#define FNV_PRIME 0x100000001b3ull

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= FNV_PRIME;
    }
    return h;
}

static int find(const tide_comm_t *c, const char *name)
{
    for (int i = 0; i < c->nstate; i++)
        if (!strcmp(c->state[i].name, name)) return i;
    return -1;
}

int tide_state_register(tide_comm_t *comm, const char *name, void *ptr, size_t bytes)
{
    if (!comm || !tide__valid_name(name, sizeof comm->state[0].name) || (bytes && !ptr))
        return TIDE_EINVAL;
    int i = find(comm, name);
    if (i < 0) {
        if (comm->nstate == comm->state_cap) {
            int cap = comm->state_cap ? 2 * comm->state_cap : 8;
            tide__state_entry_t *s = realloc(comm->state, (size_t)cap * sizeof *s);
            if (!s) return TIDE_ENOMEM;
            comm->state = s;
            comm->state_cap = cap;
        }
        i = comm->nstate++;
        snprintf(comm->state[i].name, sizeof comm->state[i].name, "%s", name);
    }
    comm->state[i].ptr = ptr;
    comm->state[i].bytes = bytes;
    return TIDE_OK;
}

int tide_state_unregister(tide_comm_t *comm, const char *name)
{
    if (!comm || !name) return TIDE_EINVAL;
    int i = find(comm, name);
    if (i < 0) return TIDE_ENOTFOUND;
    memmove(comm->state + i, comm->state + i + 1, (size_t)(comm->nstate - i - 1) * sizeof *comm->state);
    comm->nstate--;
    return TIDE_OK;
}

uint64_t tide_state_checksum(const tide_comm_t *comm)
{
    uint64_t h = FNV_OFFSET;
    if (!comm) return h;
    for (int i = 0; i < comm->nstate; i++) h = fnv(h, comm->state[i].ptr, comm->state[i].bytes);
    return h;
}

void tide__state_free(tide_comm_t *comm)
{
    free(comm->state);
    comm->state = NULL;
    comm->nstate = comm->state_cap = 0;
}

/* What the members must agree on: names, sizes and their order. */
static uint64_t layout_hash(const tide_comm_t *c)
{
    uint64_t h = FNV_OFFSET;
    for (int i = 0; i < c->nstate; i++) {
        h = fnv(h, c->state[i].name, strlen(c->state[i].name) + 1);
        uint64_t b = c->state[i].bytes;
        h = fnv(h, &b, sizeof b);
    }
    return h;
}

int tide__state_sync(tide_comm_t *c)
{
    uint64_t t0 = tide__now_ns();
    int64_t mine = (int64_t)(layout_hash(c) >> 1);
    int64_t agree[2] = {mine, -mine};
    TIDE_CHECK(tide_allreduce(c, agree, agree, 2, TIDE_INT64, TIDE_MAX));
    if (agree[0] != mine || -agree[1] != mine) {
        TIDE_ERROR("the members registered different elastic state (names, sizes or order "
                   "differ); this member has %d buffer(s)", c->nstate);
        return TIDE_EMISMATCH;
    }
    int64_t root_step = c->root_step;
    int need = root_step < 0;
    for (int r = 0; r < c->size && !need; r++) need = c->steps[r] < root_step;
    size_t moved = 0;
    if (need) {
        int root = root_step < 0 ? 0 : c->root;
        int receiver = c->rank != root && (root_step < 0 || c->steps[c->rank] < root_step);
        if (receiver) {
            /* Until the last byte arrives this member's state is nobody's. */
            c->completed = -1;
            if (c->ctl) tide__ctl_set_step(c->ctl, -1);
        }
        for (int i = 0; i < c->nstate; i++) {
            TIDE_CHECK(tide_broadcast(c, c->state[i].ptr, c->state[i].bytes, TIDE_UINT8, root));
            moved += c->state[i].bytes;
        }
    }
    c->completed = root_step < 0 ? 0 : root_step;
    if (c->ctl) tide__ctl_set_step(c->ctl, c->completed);
    TIDE_INFO("state synced at step %lld: %s%zu bytes in %.1f ms", (long long)c->completed,
              need ? "broadcast " : "nothing to move, ", moved, (double)(tide__now_ns() - t0) / 1e6);
    return TIDE_OK;
}
