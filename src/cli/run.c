/* run.c - `tide run`: a job of N workers on this machine. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/launch.h"
#include "core/param.h"

int tide__cli_run(int argc, char **argv)
{
    tide__launch_opts_t o = {.nworkers = 1, .grace_ms = 5000};
    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i];
        int64_t v;
        if (!strcmp(a, "--")) {
            i++;
            break;
        }
        if ((!strcmp(a, "-n") || !strcmp(a, "--np")) && i + 1 < argc) {
            if (tide__parse_int(argv[++i], 1, 1024, &v)) {
                fprintf(stderr, "tide run: -n \"%s\": expected a number of workers in 1..1024\n",
                        argv[i]);
                return 2;
            }
            o.nworkers = (int)v;
        } else if (!strcmp(a, "--grace-ms") && i + 1 < argc) {
            if (tide__parse_int(argv[++i], 0, 3600000, &v)) {
                fprintf(stderr, "tide run: --grace-ms \"%s\": expected milliseconds\n", argv[i]);
                return 2;
            }
            o.grace_ms = (int)v;
        } else if (!strcmp(a, "--quiet")) {
            o.quiet = 1;
        } else if (a[0] == '-') {
            fprintf(stderr, "tide run: unknown option \"%s\"\n", a);
            return 2;
        } else {
            break;
        }
    }
    if (i >= argc) {
        fprintf(stderr, "usage: tide run [-n N] [--grace-ms MS] [--quiet] -- CMD [ARGS...]\n");
        return 2;
    }
    o.argv = argv + i;
    return tide__launch_local(&o);
}
