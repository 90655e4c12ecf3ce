/* group.c - group lifetime and the sticky failure status. See group.h. */
#include <stdlib.h>
#include <string.h>

#include "coll/group.h"
#include "core/error.h"

int tide__group_create(int rank, int size, uint32_t generation, tide__transport_t *transport,
                       tide__group_t **out)
{
    tide__group_t *g = calloc(1, sizeof *g);
    if (!g) return TIDE_ENOMEM;
    g->rank = rank;
    g->size = size;
    g->generation = generation;
    g->transport = transport;
    int rc = tide__tuning_load(&g->tuning);
    if (rc == TIDE_OK) {
        g->scratch = malloc(g->tuning.tcp_small_max ? g->tuning.tcp_small_max : 1);
        if (!g->scratch) rc = TIDE_ENOMEM;
    }
    if (rc != TIDE_OK) {
        free(g);
        return rc;
    }
    *out = g;
    return TIDE_OK;
}

void tide__group_destroy(tide__group_t *g)
{
    if (!g) return;
    if (g->transport) g->transport->ops->destroy(g->transport);
    free(g->scratch);
    free(g);
}

void tide__group_abort(tide__group_t *g, int code)
{
    int zero = 0;
    if (code >= 0) code = TIDE_EABORTED;
    atomic_compare_exchange_strong(&g->status, &zero, code);
    if (g->transport) g->transport->ops->abort(g->transport, code);
}

int tide__group_status(const tide__group_t *g)
{
    return atomic_load(&((tide__group_t *)g)->status);
}
