/*
 * status.c - `tide status ADDR`: asks a coordinator's http://ADDR/status and
 * prints the job (state, generation, step, world size, rate) and its members as a
 * table.
 *
 * The answer is bounded (STATUS_MAX_BYTES, a timeout) and checked before anything
 * is printed; every field is optional, so a coordinator that says less still gets
 * a readable table. Strings from the network are printed with unprintable bytes
 * replaced, so that a hostile answer cannot drive the user's terminal.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <jansson.h>

#include "cli/cli.h"
#include "core/param.h"

#define STATUS_MAX_BYTES (1024 * 1024)
#define STATUS_MAX_ADDR 256

typedef struct {
    char *data;
    size_t len;
    int too_large;
} sink_t;

static size_t on_data(char *p, size_t size, size_t nmemb, void *userdata)
{
    sink_t *s = userdata;
    size_t n = size * nmemb;
    if (n > STATUS_MAX_BYTES - s->len) {
        s->too_large = 1;
        return 0; /* makes curl stop with CURLE_WRITE_ERROR */
    }
    char *q = realloc(s->data, s->len + n + 1);
    if (!q) return 0;
    memcpy(q + s->len, p, n);
    s->data = q;
    s->len += n;
    s->data[s->len] = '\0';
    return n;
}

static void status_usage(FILE *f)
{
    fprintf(f, "usage: tide status [--timeout S] [--json] ADDR\n"
               "  ADDR is the coordinator's HTTP address, host:port or http://host:port;\n"
               "  prints its members, generation, step and rate (--json: the raw answer)\n");
}

/* Copies a JSON string (or "-") for printing, cut at max bytes and made printable. */
static const char *str_field(const json_t *o, const char *key, char *buf, size_t n)
{
    const char *s = json_string_value(json_object_get(o, key));
    if (!s) return "-";
    size_t i = 0;
    for (; s[i] && i + 1 < n; i++)
        buf[i] = ((unsigned char)s[i] >= 0x20 && (unsigned char)s[i] < 0x7f) ? s[i] : '?';
    buf[i] = '\0';
    return buf;
}

/* A number field as text: integers as integers, others with `prec` decimals. */
static const char *num_field(const json_t *o, const char *key, int prec, char *buf, size_t n)
{
    const json_t *v = json_object_get(o, key);
    if (json_is_integer(v)) snprintf(buf, n, "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v)) snprintf(buf, n, "%.*f", prec, json_real_value(v));
    else snprintf(buf, n, "-");
    return buf;
}

#define NCOLS 6

/* The first of two names that the answer has: the coordinator's snapshot says
 * "size" and "waiting" where the documented schema says "world_size" and
 * "pending_joins"; both are read. */
static const char *either(const json_t *j, const char *a, const char *b)
{
    return json_object_get(j, a) || !json_object_get(j, b) ? a : b;
}

static void print_status(const json_t *j, FILE *out)
{
    char a[64], b[64], c[64];
    fprintf(out, "job          %s\n", str_field(j, "job", a, sizeof a));
    fprintf(out, "state        %s\n", str_field(j, "state", a, sizeof a));
    fprintf(out, "generation   %s\n", num_field(j, "generation", 0, a, sizeof a));
    fprintf(out, "step         %s\n", num_field(j, "step", 0, a, sizeof a));
    fprintf(out, "world size   %s (min %s, max %s)\n",
            num_field(j, either(j, "world_size", "size"), 0, a, sizeof a),
            num_field(j, "min", 0, b, sizeof b), num_field(j, "max", 0, c, sizeof c));
    int has_samples = json_is_number(json_object_get(j, "samples_per_s"));
    int has_steps = json_is_number(json_object_get(j, "steps_per_s"));
    if (has_samples || !has_steps)
        fprintf(out, "rate         %s samples/s%s", num_field(j, "samples_per_s", 1, a, sizeof a),
                has_steps ? ", " : "\n");
    if (has_steps)
        fprintf(out, "%s%s steps/s\n", has_samples ? "" : "rate         ",
                num_field(j, "steps_per_s", 2, a, sizeof a));
    const char *joins = either(j, "pending_joins", "waiting");
    if (json_object_get(j, joins))
        fprintf(out, "joining      %s\n", num_field(j, joins, 0, a, sizeof a));
    if (json_object_get(j, "uptime_s"))
        fprintf(out, "up           %s s\n", num_field(j, "uptime_s", 1, a, sizeof a));
    if (json_is_array(json_object_get(j, "events")))
        fprintf(out, "events       %zu\n", json_array_size(json_object_get(j, "events")));

    const json_t *members = json_object_get(j, "members");
    size_t n = json_array_size(members);
    fprintf(out, "\n%zu member%s\n", n, n == 1 ? "" : "s");
    if (!n) return;

    /* Two passes: column widths first, so the table lines up whatever the hosts. */
    static const char *const head[NCOLS] = {"RANK", "HOST", "PID", "STEP", "STATE", "HEARTBEAT"};
    size_t width[NCOLS];
    for (int k = 0; k < NCOLS; k++) width[k] = strlen(head[k]);
    char cell[NCOLS][64];
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) {
            for (int k = 0; k < NCOLS; k++)
                fprintf(out, "%-*s%s", k + 1 < NCOLS ? (int)width[k] : 0, head[k],
                        k + 1 < NCOLS ? "  " : "\n");
        }
        size_t i;
        const json_t *m;
        json_array_foreach(members, i, m)
        {
            num_field(m, "rank", 0, cell[0], sizeof cell[0]);
            str_field(m, "host", cell[1], sizeof cell[1]);
            if (!json_is_string(json_object_get(m, "host"))) strcpy(cell[1], "-");
            num_field(m, "pid", 0, cell[2], sizeof cell[2]);
            num_field(m, "step", 0, cell[3], sizeof cell[3]);
            str_field(m, "state", cell[4], sizeof cell[4]);
            if (!json_is_string(json_object_get(m, "state"))) strcpy(cell[4], "-");
            num_field(m, "last_heartbeat_ms", 0, cell[5], sizeof cell[5]);
            if (strcmp(cell[5], "-"))
                strncat(cell[5], " ms ago", sizeof cell[5] - strlen(cell[5]) - 1);
            for (int k = 0; k < NCOLS; k++) {
                if (pass == 0 && strlen(cell[k]) > width[k]) width[k] = strlen(cell[k]);
                if (pass == 1)
                    fprintf(out, "%-*s%s", k + 1 < NCOLS ? (int)width[k] : 0, cell[k],
                            k + 1 < NCOLS ? "  " : "\n");
            }
        }
    }
}

int tide__cli_status(int argc, char **argv)
{
    const char *addr = NULL;
    int64_t timeout_s = 5;
    int raw = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--timeout") && i + 1 < argc) {
            if (tide__parse_int(argv[++i], 1, 600, &timeout_s)) {
                fprintf(stderr, "tide status: --timeout \"%s\": expected seconds in 1..600\n",
                        argv[i]);
                return 2;
            }
        } else if (!strcmp(a, "--json")) {
            raw = 1;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            status_usage(stdout);
            return 0;
        } else if (a[0] == '-') {
            fprintf(stderr, "tide status: unknown option \"%s\"\n", a);
            status_usage(stderr);
            return 2;
        } else if (!addr) {
            addr = a;
        } else {
            status_usage(stderr);
            return 2;
        }
    }
    if (!addr) {
        status_usage(stderr);
        return 2;
    }
    const char *hostport = addr;
    if (!strncmp(hostport, "http://", 7)) hostport += 7;
    size_t hlen = strlen(hostport);
    while (hlen && hostport[hlen - 1] == '/') hlen--;
    int bad = hlen == 0 || hlen > STATUS_MAX_ADDR || !strncmp(addr, "https://", 8);
    for (size_t i = 0; i < hlen && !bad; i++)
        bad = hostport[i] <= 0x20 || hostport[i] >= 0x7f || hostport[i] == '/' ||
              hostport[i] == '?' || hostport[i] == '#' || hostport[i] == '@';
    if (bad) {
        fprintf(stderr, "tide status: \"%.300s\" is not a coordinator address (host:port)\n",
                addr);
        return 2;
    }
    char url[STATUS_MAX_ADDR + 32];
    snprintf(url, sizeof url, "http://%.*s/status", (int)hlen, hostport);

    if (curl_global_init(CURL_GLOBAL_DEFAULT)) {
        fprintf(stderr, "tide status: cannot initialize libcurl\n");
        return 1;
    }
    CURL *curl = curl_easy_init();
    if (!curl) {
        curl_global_cleanup();
        fprintf(stderr, "tide status: cannot initialize libcurl\n");
        return 1;
    }
    sink_t sink = {0};
    char cerr[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, timeout_s < 3 ? timeout_s * 1000L : 3000L);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, (long)timeout_s * 1000L);
    curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(curl, CURLOPT_PROXY, ""); /* a coordinator is never behind the user's proxy */
    curl_easy_setopt(curl, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)STATUS_MAX_BYTES);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &sink);
    curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, cerr);
    CURLcode cc = curl_easy_perform(curl);
    long code = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(curl);
    curl_global_cleanup();

    int rc = 1;
    json_t *j = NULL;
    if (cc != CURLE_OK) {
        if (sink.too_large || cc == CURLE_FILESIZE_EXCEEDED)
            fprintf(stderr, "tide status: %s: the answer is larger than %d KiB\n", url,
                    STATUS_MAX_BYTES / 1024);
        else
            fprintf(stderr, "tide status: cannot reach %s: %s (is the coordinator running?)\n",
                    url, cerr[0] ? cerr : curl_easy_strerror(cc));
        goto out;
    }
    if (code != 200) {
        fprintf(stderr, "tide status: %s answered HTTP %ld\n", url, code);
        goto out;
    }
    json_error_t jerr;
    j = json_loadb(sink.data ? sink.data : "", sink.len, 0, &jerr);
    if (!j) {
        fprintf(stderr, "tide status: %s: not valid JSON (line %d, column %d: %s)\n", url,
                jerr.line, jerr.column, jerr.text);
        goto out;
    }
    if (!json_is_object(j)) {
        fprintf(stderr, "tide status: %s: expected a JSON object\n", url);
        goto out;
    }
    const json_t *members = json_object_get(j, "members");
    if (members && !json_is_array(members)) {
        fprintf(stderr, "tide status: %s: \"members\" is not an array\n", url);
        goto out;
    }
    size_t i;
    const json_t *m;
    json_array_foreach(members, i, m)
    {
        if (!json_is_object(m)) {
            fprintf(stderr, "tide status: %s: members[%zu] is not an object\n", url, i);
            goto out;
        }
    }
    if (raw) {
        json_dumpf(j, stdout, JSON_INDENT(2));
        fputc('\n', stdout);
    } else {
        print_status(j, stdout);
    }
    fflush(stdout);
    rc = 0;
out:
    json_decref(j);
    free(sink.data);
    return rc;
}
