/* main.c - the `tide` command: one binary, one subcommand per job. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "tide.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: tide COMMAND [ARGS]\n\n"
               "  run [-n N] [--quiet] -- CMD ...   run a job of N workers on this machine\n"
               "  bench allreduce --np N --transport shm|tcp [--min-bytes B] [--max-bytes B] [--json]\n"
               "  status ADDR                       members, generation, step and rate of a job\n"
               "  report FILE [--png OUT]           summarize (and draw) a run report\n"
               "  version\n\n"
               "Tide %s. See README.md and docs/.\n",
            tide_version());
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "run")) return tide__cli_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "coordinator")) return tide__cli_coordinator(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench")) return tide__cli_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench-worker")) return tide__cli_bench_worker(argc - 1, argv + 1);
    if (!strcmp(cmd, "status")) return tide__cli_status(argc - 1, argv + 1);
    if (!strcmp(cmd, "report")) return tide__cli_report(argc - 1, argv + 1);
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        printf("tide %s\n", tide_version());
        return 0;
    }
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "tide: unknown command \"%s\"\n", cmd);
    usage(stderr);
    return 2;
}
