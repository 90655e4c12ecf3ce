/* setup.c - what both transports decide the same way from a setup. */
#include <string.h>
#include <unistd.h>

#include "transport/transport.h"

int tide__setup_oversubscribed(const tide__transport_setup_t *s)
{
    int local = 0;
    for (int j = 0; j < s->size; j++)
        local += !strcmp(s->members[j].host_id, s->members[s->rank].host_id);
    return local > sysconf(_SC_NPROCESSORS_ONLN);
}
