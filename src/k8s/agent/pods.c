/*
 * pods.c - the pod runner (see pods.h). One informer thread watches the pods
 * bound to this agent's nodes and only queues what it sees; one supervisor thread
 * owns every pod record and does all the work (start, reap, restart, signal,
 * report, remove), so pod state needs no locking beyond the queue. Children are
 * reaped by polling waitpid every few tens of milliseconds, which bounds how late
 * an exit is noticed without any signal handler.
 */
#include "k8s/agent/pods.h"

#include "k8s/agent/services.h"
#include "k8s/watch.h"
#include "tide.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

enum { CS_WAITING = 0, CS_RUNNING, CS_TERMINATED };

typedef struct ctr {
    char name[128];
    char image[512];
    pid_t pid;      /* > 0 while running */
    pid_t last_pid; /* of the latest run, for containerID */
    int state;
    int restarts;
    int exit_code, signal;
    char reason[48], message[320];
    time_t started_at, finished_at;
    long restart_at; /* monotonic ms of the next start, 0: none scheduled */
    int ever_ran;
    json_t *last_state; /* {"terminated": {...}} of the previous run, or NULL */
} ctr_t;

typedef struct pod {
    char uid[64], ns[128], name[256], node[128];
    json_t *obj;
    uint32_t ip;
    int host_network;
    int nctr;
    ctr_t *ctrs;
    char restart_policy[16];
    char phase[16];
    int started;
    int terminating;
    long kill_at;
    int killed;
    int gone;    /* the API object is gone */
    int removed; /* we deleted it after termination */
    int dirty;
    int ready;
    time_t ready_since, start_time;
    long retry_at;  /* next start attempt after a config error */
    long status_at; /* no status push before this (backoff after a failed one) */
    struct pod *next;
} pod_t;

typedef struct qent {
    tide__k8s_event_t ev;
    json_t *obj;
    struct qent *next;
} qent_t;

static agent_t *ag;
static pthread_mutex_t qlock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t qcond = PTHREAD_COND_INITIALIZER;
static qent_t *qhead, *qtail;
static pod_t *pods;
static unsigned char *ipused; /* one byte per address of the pod range */
static uint32_t ipnext, ipcount;
static pthread_t watch_thr, sup_thr;

/* ---- addresses ------------------------------------------------------------ */

static uint32_t ip_alloc(void)
{
    /* Round robin rather than lowest-free, so that a replaced pod does not get
     * its predecessor's address at once (connections to the old one fail loudly
     * instead of reaching the new one by accident). */
    for (uint32_t k = 0; k < ipcount; k++) {
        uint32_t i = (ipnext + k) % ipcount;
        if (i == 0 || i == ipcount - 1 || ipused[i]) continue; /* network and broadcast */
        ipused[i] = 1;
        ipnext = i + 1;
        return ag->pod_net + i;
    }
    return 0;
}

static void ip_free(uint32_t ip)
{
    if (ip >= ag->pod_net && ip - ag->pod_net < ipcount) ipused[ip - ag->pod_net] = 0;
}

/* ---- env ------------------------------------------------------------------- */

/* Kubernetes' $(VAR) expansion: $(NAME) of a variable defined so far becomes its
 * value, $$ becomes $, anything else stays as written. */
static char *expand(const char *s, json_t *env)
{
    size_t cap = strlen(s) + 1, len = 0;
    char *out = malloc(cap);
    if (!out) return NULL;
    for (const char *p = s; *p;) {
        const char *val = NULL;
        size_t skip = 1;
        char one[2] = {*p, 0};
        if (p[0] == '$' && p[1] == '$') {
            val = "$";
            skip = 2;
        } else if (p[0] == '$' && p[1] == '(') {
            const char *close = strchr(p + 2, ')');
            if (close && close - p - 2 < 256) {
                char name[256];
                memcpy(name, p + 2, (size_t)(close - p - 2));
                name[close - p - 2] = 0;
                val = json_string_value(json_object_get(env, name));
                if (val) skip = (size_t)(close - p) + 1;
            }
        }
        if (!val) val = one;
        size_t vl = strlen(val);
        if (len + vl + 1 > cap) {
            while (len + vl + 1 > cap)
                cap *= 2;
            char *n = realloc(out, cap);
            if (!n) {
                free(out);
                return NULL;
            }
            out = n;
        }
        memcpy(out + len, val, vl);
        len += vl;
        p += skip;
    }
    out[len] = 0;
    return out;
}

static const char *field_ref(pod_t *p, const char *path, char *buf, size_t len)
{
    if (strcmp(path, "metadata.name") == 0) return p->name;
    if (strcmp(path, "metadata.namespace") == 0) return p->ns;
    if (strcmp(path, "metadata.uid") == 0) return p->uid;
    if (strcmp(path, "spec.nodeName") == 0) return p->node;
    if (strcmp(path, "spec.serviceAccountName") == 0) {
        const char *sa = tide__k8s_str(p->obj, "spec.serviceAccountName");
        return sa ? sa : "default";
    }
    if (strcmp(path, "status.podIP") == 0 || strcmp(path, "status.podIPs") == 0) {
        if (p->host_network) return ag->host_ip;
        agent_ip_str(p->ip, buf, len);
        return buf;
    }
    if (strcmp(path, "status.hostIP") == 0 || strcmp(path, "status.hostIPs") == 0)
        return ag->host_ip;
    /* metadata.labels['k'] and metadata.annotations['k'] */
    const char *kinds[] = {"metadata.labels['", "metadata.annotations['"};
    for (int i = 0; i < 2; i++) {
        size_t kl = strlen(kinds[i]);
        if (strncmp(path, kinds[i], kl) == 0) {
            char key[256];
            snprintf(key, sizeof key, "%s", path + kl);
            char *end = strstr(key, "']");
            if (!end) return NULL;
            *end = 0;
            json_t *m = tide__k8s_at(p->obj, i == 0 ? "metadata.labels" : "metadata.annotations");
            const char *v = json_string_value(json_object_get(m, key));
            return v ? v : "";
        }
    }
    return NULL;
}

/* Fetches key of a ConfigMap or Secret (decoded) in the pod's namespace; with key
 * NULL, merges every key into env with prefix. Returns 0, 1 if absent, -1 on error. */
static int kv_source(pod_t *p, int secret, const char *name, const char *key, const char *prefix,
                     json_t *env, char **value, char *err, size_t errlen)
{
    char path[1024];
    tide__k8s_path(path, sizeof path, "v1", p->ns, secret ? "secrets" : "configmaps", name, NULL);
    tide__k8s_resp_t r;
    int rc = tide__k8s_get(ag->client, path, &r);
    if (rc == TIDE_ENOTFOUND) {
        snprintf(err, errlen, "%s \"%s\" not found", secret ? "secret" : "configmap", name);
        tide__k8s_resp_clear(&r);
        return 1;
    }
    if (rc != TIDE_OK) {
        size_t n = strnlen(r.message, errlen - 1);
        memcpy(err, r.message, n);
        err[n] = 0;
        tide__k8s_resp_clear(&r);
        return -1;
    }
    json_t *data = json_object_get(r.body, "data");
    int out = 1;
    const char *k;
    json_t *v;
    json_object_foreach(data, k, v)
    {
        if (key && strcmp(k, key) != 0) continue;
        const char *s = json_string_value(v);
        if (!s) continue;
        char *val = NULL;
        if (secret) {
            tide__k8s_blob_t b;
            if (tide__k8s_base64_decode(s, strlen(s), &b) == TIDE_OK) {
                val = (char *)b.data;
            } else {
                val = strdup(""); /* an empty secret value is "" in base64 */
            }
        } else {
            val = strdup(s);
        }
        if (key) {
            *value = val;
            out = 0;
            break;
        }
        char full[512];
        snprintf(full, sizeof full, "%s%s", prefix ? prefix : "", k);
        json_object_set_new(env, full, json_string(val ? val : ""));
        free(val);
        out = 0;
    }
    if (key && out)
        snprintf(err, errlen, "key \"%s\" not found in %s \"%s\"", key,
                 secret ? "secret" : "configmap", name);
    if (!key) out = 0;
    tide__k8s_resp_clear(&r);
    return out;
}

static double quantity(const char *s)
{
    if (!s) return 0;
    char *end;
    double v = strtod(s, &end);
    static const struct {
        const char *suf;
        double mul;
    } sufs[] = {{"m", 1e-3},       {"k", 1e3},           {"M", 1e6},
                {"G", 1e9},        {"T", 1e12},          {"Ki", 1024.0},
                {"Mi", 1048576.0}, {"Gi", 1073741824.0}, {"Ti", 1099511627776.0}};
    for (size_t i = 0; i < sizeof sufs / sizeof sufs[0]; i++)
        if (strcmp(end, sufs[i].suf) == 0) return v * sufs[i].mul;
    return v;
}

/* Builds the environment of container c (a JSON object name -> value, in order).
 * Returns 0, or -1 with a CreateContainerConfigError-style message. */
static int build_env(pod_t *p, json_t *c, json_t *env, char *err, size_t errlen)
{
    const char *path = getenv("PATH");
    const char *home = getenv("HOME");
    char buf[64];
    json_object_set_new(env, "PATH", json_string(path ? path : "/usr/local/bin:/usr/bin:/bin"));
    json_object_set_new(env, "HOME", json_string(home ? home : "/root"));
    json_object_set_new(env, "HOSTNAME", json_string(p->name));
    json_object_set_new(env, "TIDE_K8S_HOSTS", json_string(services_hosts_path()));
    json_t *links = json_array();
    json_t *esl = tide__k8s_at(p->obj, "spec.enableServiceLinks");
    services_env(ag, p->ns, !json_is_false(esl), links);
    size_t i;
    json_t *e;
    json_array_foreach(links, i, e)
        json_object_set(env, json_string_value(json_array_get(e, 0)), json_array_get(e, 1));
    json_decref(links);

    json_array_foreach(json_object_get(c, "envFrom"), i, e)
    {
        const char *prefix = json_string_value(json_object_get(e, "prefix"));
        json_t *cm = json_object_get(e, "configMapRef"), *sec = json_object_get(e, "secretRef");
        json_t *ref = cm ? cm : sec;
        const char *name = tide__k8s_str(ref, "name");
        if (!name) continue;
        int r = kv_source(p, sec != NULL, name, NULL, prefix, env, NULL, err, errlen);
        if (r < 0 || (r > 0 && !json_is_true(json_object_get(ref, "optional")))) return -1;
    }
    json_array_foreach(json_object_get(c, "env"), i, e)
    {
        const char *name = json_string_value(json_object_get(e, "name"));
        if (!name) continue;
        json_t *vf = json_object_get(e, "valueFrom");
        if (!vf) {
            const char *v = json_string_value(json_object_get(e, "value"));
            char *x = expand(v ? v : "", env);
            json_object_set_new(env, name, json_string(x ? x : ""));
            free(x);
            continue;
        }
        const char *fp = tide__k8s_str(vf, "fieldRef.fieldPath");
        if (fp) {
            const char *v = field_ref(p, fp, buf, sizeof buf);
            if (!v) {
                snprintf(err, errlen, "env %s: fieldRef %s is not supported", name, fp);
                return -1;
            }
            json_object_set_new(env, name, json_string(v));
            continue;
        }
        const char *rf = tide__k8s_str(vf, "resourceFieldRef.resource");
        if (rf) {
            const char *cname = tide__k8s_str(vf, "resourceFieldRef.containerName");
            json_t *target = c;
            if (cname) {
                size_t j;
                json_t *cc;
                json_array_foreach(
                    tide__k8s_at(p->obj, "spec.containers"), j,
                    cc) if (strcmp(json_string_value(json_object_get(cc, "name")) ?: "", cname) ==
                            0) target = cc;
            }
            int cpu = strstr(rf, "cpu") != NULL;
            const char *dot = strchr(rf, '.');
            const char *kind = strncmp(rf, "limits", 6) == 0 ? "limits" : "requests";
            json_t *res = json_object_get(tide__k8s_at(target, "resources"), kind);
            const char *q = json_string_value(json_object_get(res, dot ? dot + 1 : rf));
            if (!q) {
                /* Without a limit the downward API gives the node's allocatable. */
                agent_node_t *n = agent_find_node(ag, p->node);
                q = n ? (cpu ? n->cpu : n->memory) : "0";
            }
            /* value / divisor, rounded up, as the downward API reports it. */
            const char *div = tide__k8s_str(vf, "resourceFieldRef.divisor");
            double d = div ? quantity(div) : 1;
            double x = quantity(q) / (d > 0 ? d : 1);
            long long v = (long long)x;
            if ((double)v < x) v++;
            snprintf(buf, sizeof buf, "%lld", v);
            json_object_set_new(env, name, json_string(buf));
            continue;
        }
        json_t *cmk = json_object_get(vf, "configMapKeyRef"),
               *sk = json_object_get(vf, "secretKeyRef");
        json_t *ref = cmk ? cmk : sk;
        if (ref) {
            char *v = NULL;
            int r = kv_source(p, sk != NULL, tide__k8s_str(ref, "name") ?: "",
                              tide__k8s_str(ref, "key") ?: "", NULL, env, &v, err, errlen);
            if (r == 0) {
                json_object_set_new(env, name, json_string(v ? v : ""));
                free(v);
            } else if (r < 0 || !json_is_true(json_object_get(ref, "optional"))) {
                return -1;
            }
            continue;
        }
        snprintf(err, errlen, "env %s: this valueFrom is not supported", name);
        return -1;
    }
    return 0;
}

/* ---- status ---------------------------------------------------------------- */

static json_t *ctr_state(const ctr_t *c)
{
    char s[40], f[40];
    if (c->state == CS_RUNNING) {
        agent_rfc3339(s, sizeof s, c->started_at);
        return json_pack("{s:{s:s}}", "running", "startedAt", s);
    }
    if (c->state == CS_TERMINATED) {
        agent_rfc3339(s, sizeof s, c->started_at ? c->started_at : c->finished_at);
        agent_rfc3339(f, sizeof f, c->finished_at);
        json_t *t = json_pack("{s:i,s:s,s:s,s:s}", "exitCode", c->exit_code, "reason", c->reason,
                              "startedAt", s, "finishedAt", f);
        if (c->signal) json_object_set_new(t, "signal", json_integer(c->signal));
        if (c->message[0]) json_object_set_new(t, "message", json_string(c->message));
        return json_pack("{s:o}", "terminated", t);
    }
    json_t *w = json_pack("{s:s}", "reason", c->reason[0] ? c->reason : "ContainerCreating");
    if (c->message[0]) json_object_set_new(w, "message", json_string(c->message));
    return json_pack("{s:o}", "waiting", w);
}

static void compute_phase(pod_t *p)
{
    int running = 0, terminated = 0, failed = 0, waiting_restart = 0;
    for (int i = 0; i < p->nctr; i++) {
        ctr_t *c = &p->ctrs[i];
        if (c->state == CS_RUNNING) running++;
        if (c->restart_at) waiting_restart++;
        if (c->state == CS_TERMINATED && !c->restart_at) {
            terminated++;
            if (c->exit_code != 0) failed++;
        }
    }
    const char *ph = "Pending";
    if (p->nctr > 0 && terminated == p->nctr) {
        ph = failed ? "Failed" : "Succeeded";
    } else if (running > 0 || waiting_restart > 0 || terminated > 0) {
        ph = "Running";
    }
    /* A terminal phase is final in Kubernetes: never move back from it. */
    if (strcmp(p->phase, "Succeeded") == 0 || strcmp(p->phase, "Failed") == 0) return;
    if (strcmp(p->phase, ph) != 0) {
        snprintf(p->phase, sizeof p->phase, "%s", ph);
        p->dirty = 1;
    }
    int ready = p->nctr > 0 && running == p->nctr && !p->terminating;
    if (ready != p->ready) {
        p->ready = ready;
        p->ready_since = time(NULL);
        p->dirty = 1;
    }
}

static int push_status(pod_t *p)
{
    char path[1024], ip[32], t0[40], tr[40];
    if (p->host_network)
        snprintf(ip, sizeof ip, "%s", ag->host_ip);
    else
        agent_ip_str(p->ip, ip, sizeof ip);
    agent_rfc3339(t0, sizeof t0, p->start_time);
    agent_rfc3339(tr, sizeof tr, p->ready_since ? p->ready_since : p->start_time);
    int done = strcmp(p->phase, "Succeeded") == 0 || strcmp(p->phase, "Failed") == 0;
    const char *nr_reason = done ? "PodCompleted" : "ContainersNotReady";
    json_t *conds = json_pack(
        "[{s:s,s:s,s:s},{s:s,s:s,s:s},{s:s,s:s,s:s,s:s},{s:s,s:s,s:s,s:s}]", "type",
        "PodReadyToStartContainers", "status", "True", "lastTransitionTime", t0, "type",
        "Initialized", "status", "True", "lastTransitionTime", t0, "type", "ContainersReady",
        "status", p->ready ? "True" : "False", "lastTransitionTime", tr, "reason",
        p->ready ? "" : nr_reason, "type", "Ready", "status", p->ready ? "True" : "False",
        "lastTransitionTime", tr, "reason", p->ready ? "" : nr_reason);
    json_t *cs = json_array();
    for (int i = 0; i < p->nctr; i++) {
        ctr_t *c = &p->ctrs[i];
        char id[200];
        snprintf(id, sizeof id, "tide://%s/%d", p->node, (int)c->last_pid);
        json_t *s =
            json_pack("{s:s,s:s,s:s,s:b,s:b,s:i,s:o}", "name", c->name, "image", c->image,
                      "imageID", "", "ready", c->state == CS_RUNNING && p->ready, "started",
                      c->state == CS_RUNNING, "restartCount", c->restarts, "state", ctr_state(c));
        if (c->ever_ran) json_object_set_new(s, "containerID", json_string(id));
        json_object_set_new(s, "lastState",
                            c->last_state ? json_incref(c->last_state) : json_object());
        json_array_append_new(cs, s);
    }
    /* podIPs and hostIPs merge by key in a strategic patch; "$patch: replace"
     * makes ours the whole list (two IPs of one family are invalid). */
    json_t *st =
        json_pack("{s:{s:s,s:s,s:[{s:s},{s:s}],s:s,s:[{s:s},{s:s}],s:s,s:o,s:o}}", "status",
                  "phase", p->phase, "hostIP", ag->host_ip, "hostIPs", "ip", ag->host_ip, "$patch",
                  "replace", "podIP", ip, "podIPs", "ip", ip, "$patch", "replace", "startTime", t0,
                  "conditions", conds, "containerStatuses", cs);
    tide__k8s_path(path, sizeof path, "v1", p->ns, "pods", p->name, NULL);
    tide__k8s_resp_t r;
    int rc =
        tide__k8s_patch_status(ag->client, path, st, "application/strategic-merge-patch+json", &r);
    json_decref(st);
    if (rc == TIDE_OK) {
        p->dirty = 0;
        agent_debug("pod %s/%s: status %s%s", p->ns, p->name, p->phase, p->ready ? " ready" : "");
    } else if (rc == TIDE_ENOTFOUND) {
        p->gone = 1;
        p->dirty = 0;
    } else {
        /* Retried from step(), but not at its 50 ms pace. */
        p->status_at = agent_now_ms() + 1000;
        agent_log("pod %s/%s: status update: %s", p->ns, p->name, r.message);
    }
    tide__k8s_resp_clear(&r);
    return rc;
}

/* ---- processes ------------------------------------------------------------ */

static void pod_dir(pod_t *p, char *buf, size_t len)
{
    if (snprintf(buf, len, "%s/pods/%s_%s_%s", ag->state_dir, p->ns, p->name, p->uid) >= (int)len)
        buf[len - 1] = 0; /* names are bounded by the API; a truncated dir still works */
}

static void mkdirs(const char *path)
{
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *s = tmp + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            mkdir(tmp, 0755);
            *s = '/';
        }
    mkdir(tmp, 0755);
}

static void ctr_fail_start(ctr_t *c, const char *reason, int code, const char *msg)
{
    c->state = CS_TERMINATED;
    c->exit_code = code;
    c->signal = 0;
    c->started_at = c->finished_at = time(NULL);
    snprintf(c->reason, sizeof c->reason, "%s", reason);
    snprintf(c->message, sizeof c->message, "%s", msg);
}

static void schedule_restart(pod_t *p, ctr_t *c)
{
    int again = strcmp(p->restart_policy, "Always") == 0 ||
                (strcmp(p->restart_policy, "OnFailure") == 0 && c->exit_code != 0);
    if (!again || p->terminating || p->gone) return;
    /* Kubelet's CrashLoopBackOff: 10 s doubling to 5 min; shortened here (1 s
     * doubling to 30 s) so that tests with restarting pods stay quick. */
    long delay = 1000L << (c->restarts < 5 ? c->restarts : 5);
    if (delay > 30000) delay = 30000;
    c->restart_at = agent_now_ms() + delay;
}

static json_t *find_spec(pod_t *p, const char *name)
{
    size_t i;
    json_t *c;
    json_array_foreach(tide__k8s_at(p->obj, "spec.containers"), i, c)
    {
        const char *n = json_string_value(json_object_get(c, "name"));
        if (n && strcmp(n, name) == 0) return c;
    }
    return NULL;
}

static void free_strv(char **v)
{
    if (!v) return;
    for (char **x = v; *x; x++)
        free(*x);
    free(v);
}

/* Starts container c of p. Returns 0 when started (or failed for good, with the
 * failure recorded), 1 when it must be retried later (config not there yet). */
static int ctr_start(pod_t *p, ctr_t *c)
{
    json_t *spec = find_spec(p, c->name);
    char err[320] = "";
    if (!spec) return 0;
    c->restart_at = 0;
    if (c->state == CS_TERMINATED) {
        /* This run's end becomes lastState, as a kubelet reports it. */
        json_decref(c->last_state);
        c->last_state = ctr_state(c);
        c->restarts++;
    }
    json_t *env = json_object();
    if (build_env(p, spec, env, err, sizeof err) < 0) {
        json_decref(env);
        c->state = CS_WAITING;
        snprintf(c->reason, sizeof c->reason, "CreateContainerConfigError");
        snprintf(c->message, sizeof c->message, "%s", err);
        p->dirty = 1;
        return 1;
    }
    json_t *cmd = json_object_get(spec, "command"), *args = json_object_get(spec, "args");
    size_t nargv = json_array_size(cmd) + json_array_size(args);
    if (nargv == 0) {
        json_decref(env);
        ctr_fail_start(c, "StartError", 128,
                       "no command: tide-node-agent runs the container's command on the host and "
                       "ignores its image");
        p->dirty = 1;
        return 0;
    }
    char **argv = calloc(nargv + 1, sizeof *argv);
    char **envp = calloc(json_object_size(env) + 1, sizeof *envp);
    size_t k = 0, i;
    json_t *v;
    json_array_foreach(cmd, i, v) argv[k++] = expand(json_string_value(v) ?: "", env);
    json_array_foreach(args, i, v) argv[k++] = expand(json_string_value(v) ?: "", env);
    const char *key;
    k = 0;
    json_object_foreach(env, key, v)
    {
        size_t n = strlen(key) + strlen(json_string_value(v)) + 2;
        envp[k] = malloc(n);
        snprintf(envp[k], n, "%s=%s", key, json_string_value(v));
        k++;
    }
    json_decref(env);
    const char *wd = json_string_value(json_object_get(spec, "workingDir"));
    char dir[PATH_MAX], logp[PATH_MAX + 200];
    pod_dir(p, dir, sizeof dir);
    mkdirs(dir);
    snprintf(logp, sizeof logp, "%s/%s.log", dir, c->name);
    int logfd = open(logp, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    int ep[2];
    if (pipe2(ep, O_CLOEXEC) < 0) ep[0] = ep[1] = -1;
    sigset_t all;
    sigemptyset(&all);
    pid_t pid = fork();
    if (pid == 0) {
        /* Only async-signal-safe calls from here to exec: other threads of the
         * agent may hold locks (malloc's, stdio's) at the moment of the fork. */
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        for (int s = 1; s < 32; s++)
            sigaction(s, &dfl, NULL);
        sigprocmask(SIG_SETMASK, &all, NULL); /* the agent blocks SIGTERM/SIGINT */
        int e = 0;
        /* Without a workingDir the pod's own directory (its logs' home) is the
         * cwd: there is no image WORKDIR to take, and it is a private scratch. */
        if (!(wd && *wd)) wd = dir;
        if (chdir(wd) < 0) {
            e = errno;
            if (ep[1] >= 0) (void)!write(ep[1], "W", 1), (void)!write(ep[1], &e, sizeof e);
            _exit(127);
        }
        if (devnull >= 0) dup2(devnull, 0);
        if (logfd >= 0) dup2(logfd, 1), dup2(logfd, 2);
        execvpe(argv[0], argv, envp);
        e = errno;
        if (ep[1] >= 0) (void)!write(ep[1], "E", 1), (void)!write(ep[1], &e, sizeof e);
        _exit(127);
    }
    if (ep[1] >= 0) close(ep[1]);
    if (logfd >= 0) close(logfd);
    if (devnull >= 0) close(devnull);
    if (pid < 0) {
        snprintf(err, sizeof err, "fork: %s", strerror(errno));
        ctr_fail_start(c, "StartError", 128, err);
    } else {
        /* The pipe closes on exec (CLOEXEC): EOF means the program is running. */
        char what = 0;
        int e = 0;
        ssize_t n = ep[0] >= 0 ? read(ep[0], &what, 1) : 0;
        if (n == 1 && read(ep[0], &e, sizeof e) == (ssize_t)sizeof e) {
            waitpid(pid, NULL, 0);
            snprintf(err, sizeof err, what == 'W' ? "workingDir %s: %s" : "exec %s: %s",
                     what == 'W' ? wd : argv[0], strerror(e));
            ctr_fail_start(c, "StartError", 128, err);
            agent_log("pod %s/%s container %s: %s", p->ns, p->name, c->name, err);
            schedule_restart(p, c);
        } else {
            c->pid = c->last_pid = pid;
            c->state = CS_RUNNING;
            c->ever_ran = 1;
            c->started_at = time(NULL);
            c->reason[0] = c->message[0] = 0;
            agent_log("pod %s/%s container %s: started pid %d (%s)", p->ns, p->name, c->name,
                      (int)pid, argv[0]);
        }
    }
    if (ep[0] >= 0) close(ep[0]);
    free_strv(argv);
    free_strv(envp);
    p->dirty = 1;
    return 0;
}

static void pod_start(pod_t *p)
{
    if (!p->host_network && !p->ip) {
        p->ip = ip_alloc();
        if (!p->ip) {
            agent_log("pod %s/%s: the pod range is full", p->ns, p->name);
            return;
        }
    }
    p->start_time = time(NULL);
    int retry = 0;
    for (int i = 0; i < p->nctr; i++)
        if (p->ctrs[i].state != CS_RUNNING && !p->ctrs[i].ever_ran)
            retry |= ctr_start(p, &p->ctrs[i]);
    p->started = !retry;
    if (retry) p->retry_at = agent_now_ms() + 2000;
    compute_phase(p);
    push_status(p);
}

static void signal_all(pod_t *p, int sig)
{
    for (int i = 0; i < p->nctr; i++)
        if (p->ctrs[i].pid > 0) kill(-p->ctrs[i].pid, sig);
}

static int any_running(pod_t *p)
{
    for (int i = 0; i < p->nctr; i++)
        if (p->ctrs[i].pid > 0) return 1;
    return 0;
}

static void begin_termination(pod_t *p)
{
    if (p->terminating) return;
    p->terminating = 1;
    json_t *g = tide__k8s_at(p->obj, "metadata.deletionGracePeriodSeconds");
    long grace = json_is_integer(g) ? (long)json_integer_value(g) : 30;
    if (grace < 0) grace = 0;
    p->kill_at = agent_now_ms() + grace * 1000;
    for (int i = 0; i < p->nctr; i++)
        p->ctrs[i].restart_at = 0;
    if (any_running(p)) {
        agent_log("pod %s/%s: deleting: SIGTERM, SIGKILL in %ld s", p->ns, p->name, grace);
        signal_all(p, SIGTERM);
    }
    p->dirty = 1;
}

/* ---- records ---------------------------------------------------------------- */

static pod_t *find_pod(const char *uid)
{
    for (pod_t *p = pods; p; p = p->next)
        if (strcmp(p->uid, uid) == 0) return p;
    return NULL;
}

static pod_t *new_pod(json_t *obj)
{
    pod_t *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    snprintf(p->uid, sizeof p->uid, "%s", tide__k8s_str(obj, "metadata.uid"));
    snprintf(p->ns, sizeof p->ns, "%s", tide__k8s_str(obj, "metadata.namespace") ?: "default");
    snprintf(p->name, sizeof p->name, "%s", tide__k8s_str(obj, "metadata.name") ?: "");
    snprintf(p->node, sizeof p->node, "%s", tide__k8s_str(obj, "spec.nodeName") ?: "");
    const char *rp = tide__k8s_str(obj, "spec.restartPolicy");
    snprintf(p->restart_policy, sizeof p->restart_policy, "%s", rp ? rp : "Always");
    snprintf(p->phase, sizeof p->phase, "Pending");
    p->host_network = json_is_true(tide__k8s_at(obj, "spec.hostNetwork"));
    p->obj = json_incref(obj);
    json_t *cs = tide__k8s_at(obj, "spec.containers");
    p->nctr = (int)json_array_size(cs);
    p->ctrs = calloc((size_t)(p->nctr ? p->nctr : 1), sizeof(ctr_t));
    size_t i;
    json_t *c;
    json_array_foreach(cs, i, c)
    {
        snprintf(p->ctrs[i].name, sizeof p->ctrs[i].name, "%s",
                 json_string_value(json_object_get(c, "name")) ?: "");
        snprintf(p->ctrs[i].image, sizeof p->ctrs[i].image, "%s",
                 json_string_value(json_object_get(c, "image")) ?: "");
    }
    p->next = pods;
    pods = p;
    return p;
}

static void free_pod(pod_t *p)
{
    pod_t **pp = &pods;
    while (*pp && *pp != p)
        pp = &(*pp)->next;
    if (*pp) *pp = p->next;
    ip_free(p->ip);
    for (int i = 0; i < p->nctr; i++)
        json_decref(p->ctrs[i].last_state);
    free(p->ctrs);
    json_decref(p->obj);
    free(p);
}

static void remove_from_api(pod_t *p)
{
    char path[1024];
    tide__k8s_path(path, sizeof path, "v1", p->ns, "pods", p->name, NULL);
    tide__k8s_delete_opts_t o = TIDE__K8S_DELETE_DEFAULTS;
    o.grace_seconds = 0;
    o.uid = p->uid;
    tide__k8s_resp_t r;
    int rc = tide__k8s_delete(ag->client, path, &o, &r);
    if (rc == TIDE_OK || rc == TIDE_ENOTFOUND || rc == TIDE_ESTALE) {
        agent_log("pod %s/%s: removed", p->ns, p->name);
        p->removed = 1;
    } else {
        agent_log("pod %s/%s: final delete: %s", p->ns, p->name, r.message);
    }
    tide__k8s_resp_clear(&r);
}

/* A pod this agent has no record of, but whose status says its containers ran:
 * they ran under an earlier agent, which took them down when it stopped (or
 * died). As a kubelet does for a container it cannot find, report each one that
 * was running as terminated with 137 ContainerStatusUnknown; restartPolicy then
 * decides, as for any exit: Never ends the pod Failed, the others start it again
 * with the restart counted. */
static void adopt(pod_t *p, json_t *obj)
{
    size_t i;
    json_t *cs;
    int ran = 0;
    json_array_foreach(tide__k8s_at(obj, "status.containerStatuses"), i, cs)
    {
        const char *name = json_string_value(json_object_get(cs, "name"));
        json_t *st = json_object_get(cs, "state");
        json_t *term = json_object_get(st, "terminated");
        if (!name || (!json_object_get(st, "running") && !term)) continue;
        for (int k = 0; k < p->nctr; k++) {
            ctr_t *c = &p->ctrs[k];
            if (strcmp(c->name, name) != 0) continue;
            ran = 1;
            c->state = CS_TERMINATED;
            c->restarts = (int)json_integer_value(json_object_get(cs, "restartCount"));
            c->started_at = c->finished_at = time(NULL);
            if (term) {
                c->exit_code = (int)json_integer_value(json_object_get(term, "exitCode"));
                snprintf(c->reason, sizeof c->reason, "%s",
                         json_string_value(json_object_get(term, "reason")) ?: "Error");
            } else {
                c->exit_code = 137;
                snprintf(c->reason, sizeof c->reason, "ContainerStatusUnknown");
                snprintf(
                    c->message, sizeof c->message,
                    "The container was running when tide-node-agent stopped; its process is gone");
            }
        }
    }
    if (!ran) return;
    p->start_time = time(NULL);
    int never = strcmp(p->restart_policy, "Never") == 0;
    for (int k = 0; k < p->nctr; k++) {
        ctr_t *c = &p->ctrs[k];
        if (c->state != CS_TERMINATED) continue;
        if (never || (strcmp(p->restart_policy, "OnFailure") == 0 && c->exit_code == 0))
            c->ever_ran = 1; /* stays terminated */
        else
            c->restart_at = agent_now_ms(); /* restarted by step(), restartCount + 1 */
    }
    p->started = 1;
    if (!p->host_network) {
        /* Keep the pod's address when it is ours and free: it stays what the
         * API already says. */
        uint32_t old;
        const char *s = tide__k8s_str(obj, "status.podIP");
        if (s && agent_ip_parse(s, &old) == 0 && old > ag->pod_net &&
            old - ag->pod_net < ipcount - 1 && !ipused[old - ag->pod_net]) {
            ipused[old - ag->pod_net] = 1;
            p->ip = old;
        } else {
            p->ip = ip_alloc();
        }
    }
    p->dirty = 1;
    agent_log("pod %s/%s: ran under an earlier agent; %s", p->ns, p->name,
              never ? "reporting its lost containers" : "restarting its containers");
}

static void apply_event(tide__k8s_event_t ev, json_t *obj)
{
    const char *uid = tide__k8s_str(obj, "metadata.uid");
    const char *node = tide__k8s_str(obj, "spec.nodeName");
    if (!uid || !agent_find_node(ag, node)) return;
    pod_t *p = find_pod(uid);
    if (ev == TIDE__K8S_DELETED) {
        if (p) {
            p->gone = 1;
            if (any_running(p)) {
                agent_log("pod %s/%s: deleted from the API; killing its processes", p->ns, p->name);
                signal_all(p, SIGKILL);
            }
        }
        return;
    }
    const char *phase = tide__k8s_str(obj, "status.phase");
    int terminal = phase && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0);
    int deleting = tide__k8s_at(obj, "metadata.deletionTimestamp") != NULL;
    if (!p) {
        if (terminal && !deleting) return; /* finished before this agent started */
        p = new_pod(obj);
        if (!p) return;
        if (terminal) {
            snprintf(p->phase, sizeof p->phase, "%s", phase);
            p->started = 1;
        } else if (!deleting) {
            adopt(p, obj);
        }
        agent_debug("pod %s/%s: bound to %s", p->ns, p->name, p->node);
    } else {
        json_decref(p->obj);
        p->obj = json_incref(obj);
    }
    if (deleting) begin_termination(p);
}

static void reap(void)
{
    int st;
    pid_t pid;
    while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
        for (pod_t *p = pods; p; p = p->next)
            for (int i = 0; i < p->nctr; i++) {
                ctr_t *c = &p->ctrs[i];
                if (c->pid != pid) continue;
                /* Whatever the main process left in its group goes with it, as
                 * everything in a container dies with its PID 1. */
                kill(-pid, SIGKILL);
                c->pid = 0;
                c->state = CS_TERMINATED;
                c->finished_at = time(NULL);
                if (WIFSIGNALED(st)) {
                    c->signal = WTERMSIG(st);
                    c->exit_code = 128 + c->signal;
                } else {
                    c->signal = 0;
                    c->exit_code = WEXITSTATUS(st);
                }
                snprintf(c->reason, sizeof c->reason, "%s",
                         c->exit_code == 0 ? "Completed" : "Error");
                c->message[0] = 0;
                agent_log("pod %s/%s container %s: exited %d%s", p->ns, p->name, c->name,
                          c->exit_code, c->signal ? " (signal)" : "");
                schedule_restart(p, c);
                p->dirty = 1;
            }
    }
}

static void step(void)
{
    reap();
    long now = agent_now_ms();
    pod_t *next;
    for (pod_t *p = pods; p; p = next) {
        next = p->next;
        if (p->gone) {
            if (!any_running(p)) free_pod(p);
            continue;
        }
        if (!p->started && !p->terminating && (!p->retry_at || now >= p->retry_at)) {
            pod_start(p);
            continue;
        }
        if (!p->terminating)
            for (int i = 0; i < p->nctr; i++) {
                ctr_t *c = &p->ctrs[i];
                if (c->restart_at && now >= c->restart_at) ctr_start(p, c);
            }
        if (p->terminating) {
            if (any_running(p) && !p->killed && now >= p->kill_at) {
                agent_log("pod %s/%s: grace period over: SIGKILL", p->ns, p->name);
                signal_all(p, SIGKILL);
                p->killed = 1;
            }
            if (!any_running(p)) {
                compute_phase(p);
                if (p->dirty && p->started) push_status(p);
                remove_from_api(p);
                if (p->removed || p->gone) free_pod(p);
                continue;
            }
        }
        compute_phase(p);
        if (p->dirty && now >= p->status_at) push_status(p);
    }
}

static void *supervisor_main(void *arg)
{
    for (;;) {
        pthread_mutex_lock(&qlock);
        if (!qhead && !atomic_load(&ag->stop)) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 50 * 1000000L;
            if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
            pthread_cond_timedwait(&qcond, &qlock, &ts);
        }
        qent_t *q = qhead;
        qhead = qtail = NULL;
        pthread_mutex_unlock(&qlock);
        while (q) {
            qent_t *n = q->next;
            apply_event(q->ev, q->obj);
            json_decref(q->obj);
            free(q);
            q = n;
        }
        if (atomic_load(&ag->stop)) break;
        step();
    }
    return NULL;
}

static int on_pod(void *ud, tide__k8s_event_t ev, json_t *obj)
{
    if (ev == TIDE__K8S_SYNCED || ev == TIDE__K8S_BOOKMARK || !obj) return 0;
    if (!agent_find_node(ag, tide__k8s_str(obj, "spec.nodeName"))) return 0;
    qent_t *q = calloc(1, sizeof *q);
    if (!q) return 0;
    q->ev = ev;
    q->obj = json_incref(obj);
    pthread_mutex_lock(&qlock);
    if (qtail)
        qtail->next = q;
    else
        qhead = q;
    qtail = q;
    pthread_cond_signal(&qcond);
    pthread_mutex_unlock(&qlock);
    return 0;
}

static void wlog(void *ud, const char *msg)
{
    agent_log("%s", msg);
}

static void *watch_main(void *arg)
{
    char fs[256];
    tide__k8s_watch_opts_t o = {0};
    o.collection = "/api/v1/pods";
    /* One node: the server filters by its nodeName index. Many: one watch of all
     * bound pods, filtered here, rather than a watch per node. */
    if (ag->nnodes == 1)
        snprintf(fs, sizeof fs, "spec.nodeName=%s", ag->nodes[0].name);
    else
        snprintf(fs, sizeof fs, "spec.nodeName!=");
    o.field_selector = fs;
    o.stop = &ag->stop;
    o.fn = on_pod;
    o.log = wlog;
    tide__k8s_watch_stats_t st;
    int rc = tide__k8s_watch(ag->client, &o, &st);
    if (rc != TIDE_OK && rc != TIDE_EABORTED)
        agent_log("pod watch ended: %s (%s)", tide__k8s_strerror(rc), st.last_error);
    return NULL;
}

int pods_start(agent_t *a)
{
    ag = a;
    ipcount = a->pod_bits >= 32 ? 1 : 1u << (32 - a->pod_bits);
    ipused = calloc(ipcount, 1);
    if (!ipused) return TIDE_ENOMEM;
    ipnext = 1;
    if (pthread_create(&sup_thr, NULL, supervisor_main, NULL) != 0) return TIDE_ESYS;
    if (pthread_create(&watch_thr, NULL, watch_main, NULL) != 0) return TIDE_ESYS;
    return TIDE_OK;
}

void pods_stop(agent_t *a, long grace_ms)
{
    pthread_mutex_lock(&qlock);
    pthread_cond_signal(&qcond);
    pthread_mutex_unlock(&qlock);
    pthread_join(watch_thr, NULL);
    pthread_join(sup_thr, NULL);
    for (pod_t *p = pods; p; p = p->next)
        signal_all(p, SIGTERM);
    long end = agent_now_ms() + grace_ms;
    for (;;) {
        reap();
        int left = 0;
        for (pod_t *p = pods; p; p = p->next)
            left |= any_running(p);
        if (!left) break;
        if (agent_now_ms() >= end) {
            for (pod_t *p = pods; p; p = p->next)
                signal_all(p, SIGKILL);
            end = agent_now_ms() + 60000;
        }
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    while (pods)
        free_pod(pods);
    free(ipused);
}
