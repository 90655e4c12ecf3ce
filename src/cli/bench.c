/* bench.c - `tide bench allreduce`: the field's benchmark (nccl-tests
 * conventions: algbw = bytes / time, busbw = algbw * 2(n-1)/n), with the same
 * sizes and iteration counts as the peers in ../shared/peers, so that
 * compare-allreduce can put the two side by side. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/launch.h"
#include "core/param.h"
#include "tide.h"

static int usage(void)
{
    fprintf(stderr, "usage: tide bench allreduce --np N [--transport shm|tcp] [--min-bytes B] "
                    "[--max-bytes B] [--algo auto|ring|rdouble|shm-flat|shm-rsag] [--json]\n");
    return 2;
}

int tide__cli_bench(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "allreduce")) return usage();
    int64_t np = 2, minb = 4096, maxb = 64 << 20;
    const char *transport = "shm", *algo = NULL;
    int json = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json")) {
            json = 1;
            continue;
        }
        if (!val) return usage();
        i++;
        if (!strcmp(a, "--np") || !strcmp(a, "-n")) {
            if (tide__parse_int(val, 1, 256, &np)) return usage();
        } else if (!strcmp(a, "--transport")) {
            if (strcmp(val, "shm") && strcmp(val, "tcp")) return usage();
            transport = val;
        } else if (!strcmp(a, "--min-bytes")) {
            if (tide__parse_int(val, 4, 1ll << 32, &minb)) return usage();
        } else if (!strcmp(a, "--max-bytes")) {
            if (tide__parse_int(val, 4, 1ll << 32, &maxb)) return usage();
        } else if (!strcmp(a, "--algo")) {
            algo = val;
        } else {
            return usage();
        }
    }
    if (minb > maxb) return usage();
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return 1;
    exe[n] = 0;
    char smin[32], smax[32], tenv[64], aenv[64];
    snprintf(smin, sizeof smin, "%lld", (long long)minb);
    snprintf(smax, sizeof smax, "%lld", (long long)maxb);
    snprintf(tenv, sizeof tenv, "TIDE_TRANSPORT=%s", transport);
    snprintf(aenv, sizeof aenv, "TIDE_ALGO=%s", algo ? algo : "auto");
    char *wargv[] = {exe, "bench-worker", smin, smax, json ? "json" : "text", NULL};
    const char *env[] = {tenv, aenv, NULL};
    tide__launch_opts_t o = {.nworkers = (int)np, .argv = wargv, .grace_ms = 2000, .env = env};
    return tide__launch_local(&o);
}

int tide__cli_bench_worker(int argc, char **argv)
{
    if (argc < 4) return 2;
    size_t minb = strtoull(argv[1], NULL, 10), maxb = strtoull(argv[2], NULL, 10);
    int json = !strcmp(argv[3], "json");
    tide_comm_t *comm;
    int rc = tide_init(&comm);
    if (rc) {
        fprintf(stderr, "bench: tide_init: %s\n", tide_strerror(rc));
        return 1;
    }
    int n = tide_size(comm), rank = tide_rank(comm);
    float *buf = malloc(maxb);
    if (!buf) return 1;
    for (size_t i = 0; i < maxb / 4; i++) buf[i] = 1.0f;
    const char *transport = getenv("TIDE_TRANSPORT");
    if (!json && rank == 0)
        printf("%12s %12s %12s %12s\n", "bytes", "time_us", "algbw_GB/s", "busbw_GB/s");
    for (size_t b = minb; b <= maxb; b *= 4) {
        int iters = b < (1 << 20) ? 500 : (b < (16 << 20) ? 40 : 10);
        size_t count = b / 4;
        for (int w = 0; w < 3 && !rc; w++)
            rc = tide_allreduce(comm, buf, buf, count, TIDE_FLOAT32, TIDE_SUM);
        if (!rc) rc = tide_barrier(comm);
        uint64_t t0 = tide__now_ns();
        for (int i = 0; i < iters && !rc; i++)
            rc = tide_allreduce(comm, buf, buf, count, TIDE_FLOAT32, TIDE_SUM);
        double t = (double)(tide__now_ns() - t0) / 1e9 / iters;
        if (rc) {
            fprintf(stderr, "bench: allreduce of %zu bytes: %s\n", b, tide_strerror(rc));
            break;
        }
        double alg = (double)b / t / 1e9, bus = alg * 2.0 * (n - 1) / n;
        if (rank == 0) {
            if (json)
                printf("{\"impl\":\"tide\",\"ranks\":%d,\"bytes\":%zu,\"time_us\":%.2f,"
                       "\"algbw_gbs\":%.4f,\"busbw_gbs\":%.4f,\"transport\":\"%s\"}\n",
                       n, b, t * 1e6, alg, bus, transport ? transport : "auto");
            else
                printf("%12zu %12.2f %12.4f %12.4f\n", b, t * 1e6, alg, bus);
            fflush(stdout);
        }
    }
    free(buf);
    tide_finalize(comm);
    return rc ? 1 : 0;
}
