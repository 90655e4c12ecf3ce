/* run.c - `tide run`: a job of N workers, static or elastic. See launch.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/launch.h"
#include "cli/trace.h"
#include "core/param.h"

static const char usage_text[] =
    "usage: tide run [-n N] [--min N] [--max N] [--hosts-script PATH] [options] -- CMD [ARGS...]\n"
    "\n"
    "  -n N                 workers to start (static job: its size; default 1, or --max)\n"
    "  --min N, --max N     an elastic job: it keeps training with N..M workers; a worker that\n"
    "                       dies no longer stops it (default min 1, max N)\n"
    "  --hosts-script PATH  elastic capacity: PATH prints HOST[:SLOTS] lines, polled\n"
    "  --hosts-poll-ms MS   how often (default 1000)\n"
    "  --launch TEMPLATE    how to start a worker on a host that is not localhost, with {host}\n"
    "                       replaced: 'ssh {host}', 'ip netns exec {host}'\n"
    "  --listen HOST[:PORT] where the coordinator listens (default 127.0.0.1, any port)\n"
    "  --advertise HOST     the address workers dial (default: the --listen host)\n"
    "  --pause-timeout MS   fail after this long below --min (default 60000)\n"
    "  --no-respawn         do not refill the slots of workers that exited\n"
    "  --blacklist-cooldown MS  first cooldown of a failing host, doubling (default 1000)\n"
    "  --events FILE        the coordinator's events as JSON lines\n"
    "  --http HOST:PORT     serve /metrics, /healthz and /status there (tide status)\n"
    "  --chaos FILE         inject faults on a schedule (docs/chaos-and-reports.md)\n"
    "  --trace FILE         replay a capacity trace (time_ms,capacity lines)\n"
    "  --trace-speedup X    replay the trace X times faster (default 1)\n"
    "  --trace-notice S     notice each trace preemption gets, in seconds (default 0: SIGKILL)\n"
    "  --report FILE        write the run report (JSON) at the end, and print its summary\n"
    "  --grace-ms MS        between SIGTERM and SIGKILL when stopping (default 5000)\n"
    "  --quiet              no progress or event lines\n";

static int real(const char *opt, const char *v, double lo, double hi, double *out)
{
    char *end;
    double x = strtod(v, &end);
    if (!*v || *end || !(x >= lo && x <= hi)) {
        fprintf(stderr, "tide run: %s \"%s\": expected a number in %g..%g\n", opt, v, lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

static int number(const char *opt, const char *v, int64_t lo, int64_t hi, int *out)
{
    int64_t x;
    if (tide__parse_int(v, lo, hi, &x)) {
        fprintf(stderr, "tide run: %s \"%s\": expected a number in %lld..%lld\n", opt, v,
                (long long)lo, (long long)hi);
        return -1;
    }
    *out = (int)x;
    return 0;
}

int tide__cli_run(int argc, char **argv)
{
    tide__launch_opts_t o = {.nworkers = 0, .grace_ms = 5000};
    int n = 0, min = 0, max = 0;
    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--")) {
            i++;
            break;
        }
        if (!strcmp(a, "--quiet")) {
            o.quiet = 1;
            continue;
        }
        if (!strcmp(a, "--no-respawn")) {
            o.no_respawn = 1;
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(usage_text, stdout);
            return 0;
        }
        if (a[0] != '-') break;
        if (!v) {
            fprintf(stderr, "tide run: %s needs a value\n", a);
            return 2;
        }
        int bad = 0;
        if (!strcmp(a, "-n") || !strcmp(a, "--np")) bad = number(a, v, 1, 4096, &n);
        else if (!strcmp(a, "--min")) bad = number(a, v, 1, 4096, &min);
        else if (!strcmp(a, "--max")) bad = number(a, v, 1, 4096, &max);
        else if (!strcmp(a, "--grace-ms")) bad = number(a, v, 0, 3600000, &o.grace_ms);
        else if (!strcmp(a, "--hosts-poll-ms")) bad = number(a, v, 10, 3600000, &o.hosts_poll_ms);
        else if (!strcmp(a, "--pause-timeout")) bad = number(a, v, 1, 86400000, &o.pause_timeout_ms);
        else if (!strcmp(a, "--blacklist-cooldown"))
            bad = number(a, v, 1, 3600000, &o.blacklist_base_ms);
        else if (!strcmp(a, "--hosts-script")) o.hosts_script = v;
        else if (!strcmp(a, "--launch")) o.launch_tmpl = v;
        else if (!strcmp(a, "--listen")) o.listen = v;
        else if (!strcmp(a, "--advertise")) o.advertise = v;
        else if (!strcmp(a, "--events")) o.events_path = v;
        else if (!strcmp(a, "--http")) o.http = v;
        else if (!strcmp(a, "--chaos")) o.chaos_path = v;
        else if (!strcmp(a, "--trace")) o.trace_path = v;
        else if (!strcmp(a, "--report")) o.report_path = v;
        else if (!strcmp(a, "--trace-speedup")) bad = real(a, v, 1e-3, 1e6, &o.trace_speedup);
        else if (!strcmp(a, "--trace-notice")) bad = real(a, v, 0, 86400, &o.trace_notice_s);
        else {
            fprintf(stderr, "tide run: unknown option \"%s\"\n%s", a, usage_text);
            return 2;
        }
        if (bad) return 2;
        i++;
    }
    if (i >= argc) {
        fputs(usage_text, stderr);
        return 2;
    }
    o.argv = argv + i;
    int elastic = min || max || o.hosts_script;
    if ((o.chaos_path || o.trace_path) && !elastic) {
        fprintf(stderr, "tide run: --chaos and --trace need an elastic job (--min and --max)\n");
        return 2;
    }
    if (!elastic) {
        if (o.no_respawn || o.launch_tmpl) {
            fprintf(stderr, "tide run: --no-respawn and --launch need an elastic job (--min/--max "
                            "or --hosts-script)\n");
            return 2;
        }
        o.nworkers = n ? n : 1;
        return tide__launch_local(&o);
    }
    if (!min) min = 1;
    if (!max) max = o.hosts_script ? 4096 : (n > min ? n : min);
    if (min > max) {
        fprintf(stderr, "tide run: --min %d is above --max %d\n", min, max);
        return 2;
    }
    if (!n && o.trace_path) {
        /* The trace says how many to start with. */
        tide__trace_opts_t to = {o.trace_speedup > 0 ? o.trace_speedup : 1.0, max, min, 0};
        tide__trace_t tr;
        char err[512];
        if (tide__trace_load(o.trace_path, &to, &tr, err, sizeof err) != 0) {
            fprintf(stderr, "tide run: %s\n", err);
            return 2;
        }
        n = tide__trace_target(&tr, 0);
        tide__trace_free(&tr);
    }
    if (!n) n = o.hosts_script ? min : max;
    if (!o.hosts_script && (n < min || n > max)) {
        fprintf(stderr, "tide run: -n %d must be within --min %d and --max %d\n", n, min, max);
        return 2;
    }
    o.nworkers = n;
    o.min = min;
    o.max = max;
    return tide__launch_local(&o);
}
