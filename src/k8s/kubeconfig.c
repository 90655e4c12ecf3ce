/*
 * kubeconfig.c - kubeconfig and in-cluster service-account loading (see
 * kubeconfig.h). The YAML is read with libyaml's document API into a node tree
 * and walked by key; only the fields a client needs are looked at, so a
 * kubeconfig written by any tool (kubectl, kind, kubeadm) loads.
 */
#include "k8s/kubeconfig.h"

#include "tide.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <yaml.h>

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

const char *tide__k8s_strerror(int err)
{
    switch (err) {
#define TIDE_K8S_ERRMSG(name, value, msg)                                                          \
    case (value):                                                                                  \
        return (msg);
        TIDE_ERRNO_MAP(TIDE_K8S_ERRMSG)
#undef TIDE_K8S_ERRMSG
    }
    return "unknown error";
}

void tide__k8s_blob_free(tide__k8s_blob_t *b)
{
    if (!b) return;
    free(b->data);
    b->data = NULL;
    b->len = 0;
}

int tide__k8s_read_file(const char *path, size_t max, tide__k8s_blob_t *out)
{
    out->data = NULL;
    out->len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return errno == ENOENT ? TIDE_ENOTFOUND : TIDE_EIO;
    struct stat st;
    /* The size from fstat is only a hint (a file can grow while read); the read
     * loop below enforces max on what is actually read. */
    if (fstat(fileno(f), &st) == 0 && st.st_size > 0 && (unsigned long long)st.st_size > max) {
        fclose(f);
        return TIDE_EINVAL;
    }
    size_t cap = 4096, len = 0;
    unsigned char *buf = malloc(cap + 1);
    if (!buf) {
        fclose(f);
        return TIDE_ENOMEM;
    }
    for (;;) {
        if (len == cap) {
            if (cap >= max) { /* one more byte than allowed would not fit */
                int c = fgetc(f);
                if (c == EOF) break;
                free(buf);
                fclose(f);
                return TIDE_EINVAL;
            }
            size_t ncap = cap * 2 > max ? max : cap * 2;
            unsigned char *nb = realloc(buf, ncap + 1);
            if (!nb) {
                free(buf);
                fclose(f);
                return TIDE_ENOMEM;
            }
            buf = nb;
            cap = ncap;
        }
        size_t n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (n == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return TIDE_EIO;
    }
    buf[len] = 0;
    out->data = buf;
    out->len = len;
    return TIDE_OK;
}

int tide__k8s_base64_decode(const char *in, size_t inlen, tide__k8s_blob_t *out)
{
    out->data = NULL;
    out->len = 0;
    size_t nonspace = 0;
    for (size_t i = 0; i < inlen; i++)
        if (in[i] != ' ' && in[i] != '\n' && in[i] != '\r' && in[i] != '\t') nonspace++;
    /* OpenSSL's decoder accepts an unpadded tail silently in some versions; the
     * kubeconfig format always pads, so a length that is not a multiple of four is
     * rejected here rather than decoded into a truncated certificate. */
    if (nonspace == 0 || nonspace % 4 != 0 || inlen > INT_MAX) return TIDE_EINVAL;
    size_t cap = nonspace / 4 * 3 + 1;
    unsigned char *buf = malloc(cap + 1);
    EVP_ENCODE_CTX *ctx = EVP_ENCODE_CTX_new();
    if (!buf || !ctx) {
        free(buf);
        EVP_ENCODE_CTX_free(ctx);
        return TIDE_ENOMEM;
    }
    EVP_DecodeInit(ctx);
    int n1 = 0, n2 = 0;
    int rc = EVP_DecodeUpdate(ctx, buf, &n1, (const unsigned char *)in, (int)inlen);
    if (rc >= 0) rc = EVP_DecodeFinal(ctx, buf + n1, &n2);
    EVP_ENCODE_CTX_free(ctx);
    if (rc < 0 || n1 + n2 <= 0) {
        free(buf);
        return TIDE_EINVAL;
    }
    out->len = (size_t)(n1 + n2);
    buf[out->len] = 0;
    out->data = buf;
    return TIDE_OK;
}

void tide__k8s_auth_free(tide__k8s_auth_t *a)
{
    if (!a) return;
    free(a->server);
    /* The client key is a credential: do not leave it in freed heap memory. */
    if (a->key.data) memset(a->key.data, 0, a->key.len);
    tide__k8s_blob_free(&a->ca);
    tide__k8s_blob_free(&a->cert);
    tide__k8s_blob_free(&a->key);
    if (a->token) {
        memset(a->token, 0, strlen(a->token));
        free(a->token);
    }
    free(a->namespace_);
    free(a->source);
    memset(a, 0, sizeof(*a));
}

/* ---- YAML tree helpers ---------------------------------------------------- */

static yaml_node_t *map_get(yaml_document_t *doc, yaml_node_t *map, const char *key)
{
    if (!map || map->type != YAML_MAPPING_NODE) return NULL;
    size_t klen = strlen(key);
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key);
        if (k && k->type == YAML_SCALAR_NODE && k->data.scalar.length == klen &&
            memcmp(k->data.scalar.value, key, klen) == 0)
            return yaml_document_get_node(doc, p->value);
    }
    return NULL;
}

/* The scalar's text, or NULL when node is absent, not a scalar, or null/empty. */
static const char *scalar(yaml_node_t *n)
{
    if (!n || n->type != YAML_SCALAR_NODE || n->data.scalar.length == 0) return NULL;
    const char *s = (const char *)n->data.scalar.value;
    if (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
        (strcmp(s, "null") == 0 || strcmp(s, "~") == 0))
        return NULL;
    return s;
}

/* In a list of {name: X, <field>: {...}} entries (clusters, users, contexts),
 * the <field> mapping of the entry named name. */
static yaml_node_t *named_entry(yaml_document_t *doc, yaml_node_t *root, const char *list,
                                const char *field, const char *name)
{
    yaml_node_t *seq = map_get(doc, root, list);
    if (!seq || seq->type != YAML_SEQUENCE_NODE) return NULL;
    for (yaml_node_item_t *it = seq->data.sequence.items.start; it < seq->data.sequence.items.top;
         it++) {
        yaml_node_t *e = yaml_document_get_node(doc, *it);
        const char *n = scalar(map_get(doc, e, "name"));
        if (n && strcmp(n, name) == 0) {
            yaml_node_t *v = map_get(doc, e, field);
            /* An entry with an empty body ("user: {}") is valid: anonymous. */
            return v ? v : e;
        }
    }
    return NULL;
}

/* Resolves a file name from the kubeconfig against its directory. */
static void resolve(char *out, size_t outlen, const char *dir, const char *name)
{
    if (name[0] == '/' || !dir)
        snprintf(out, outlen, "%s", name);
    else
        snprintf(out, outlen, "%s/%s", dir, name);
}

/* Fills blob from either <field>-data (base64) or <field> (a file name). */
static int load_pem(yaml_document_t *doc, yaml_node_t *m, const char *field, const char *dir,
                    const char *cfgpath, tide__k8s_blob_t *blob, char *err, size_t errlen)
{
    char dkey[96];
    snprintf(dkey, sizeof dkey, "%s-data", field);
    yaml_node_t *dn = map_get(doc, m, dkey);
    const char *data = scalar(dn);
    if (data) {
        int rc = tide__k8s_base64_decode(data, dn->data.scalar.length, blob);
        if (rc == TIDE_EINVAL)
            set_err(err, errlen, "kubeconfig %s: %s: not valid base64", cfgpath, dkey);
        else if (rc != TIDE_OK)
            set_err(err, errlen, "kubeconfig %s: %s: %s", cfgpath, dkey, tide__k8s_strerror(rc));
        return rc;
    }
    const char *file = scalar(map_get(doc, m, field));
    if (!file) return TIDE_OK;
    char p[PATH_MAX];
    resolve(p, sizeof p, dir, file);
    int rc = tide__k8s_read_file(p, TIDE__K8S_MAX_CONFIG_BYTES, blob);
    if (rc != TIDE_OK)
        set_err(err, errlen, "kubeconfig %s: %s: cannot read %s: %s", cfgpath, field, p,
                rc == TIDE_EINVAL ? "larger than 4 MiB" : tide__k8s_strerror(rc));
    return rc;
}

int tide__k8s_kubeconfig_load(const char *path, const char *context, tide__k8s_auth_t *out,
                              char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    char pathbuf[PATH_MAX];
    if (!path || !*path) {
        const char *env = getenv("KUBECONFIG");
        if (env && *env) {
            /* Only the first file of a merged list: merging is kubectl's business. */
            size_t n = strcspn(env, ":");
            snprintf(pathbuf, sizeof pathbuf, "%.*s", (int)n, env);
        } else {
            const char *home = getenv("HOME");
            snprintf(pathbuf, sizeof pathbuf, "%s/.kube/config", home ? home : "");
        }
        path = pathbuf;
    }

    tide__k8s_blob_t text;
    int rc = tide__k8s_read_file(path, TIDE__K8S_MAX_CONFIG_BYTES, &text);
    if (rc != TIDE_OK) {
        set_err(err, errlen, "kubeconfig %s: %s", path,
                rc == TIDE_ENOTFOUND ? "no such file"
                : rc == TIDE_EINVAL  ? "larger than 4 MiB"
                                     : "cannot read");
        return rc == TIDE_EINVAL ? TIDE_ECONFIG : rc;
    }

    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser)) {
        tide__k8s_blob_free(&text);
        return TIDE_ENOMEM;
    }
    yaml_parser_set_input_string(&parser, text.data, text.len);
    if (!yaml_parser_load(&parser, &doc)) {
        set_err(err, errlen, "kubeconfig %s: line %zu: %s", path, parser.problem_mark.line + 1,
                parser.problem ? parser.problem : "YAML syntax error");
        yaml_parser_delete(&parser);
        tide__k8s_blob_free(&text);
        return TIDE_ECONFIG;
    }
    yaml_parser_delete(&parser);
    tide__k8s_blob_free(&text);

    char dirbuf[PATH_MAX];
    snprintf(dirbuf, sizeof dirbuf, "%s", path);
    const char *dir = dirname(dirbuf);

    rc = TIDE_ECONFIG;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (!root || root->type != YAML_MAPPING_NODE) {
        set_err(err, errlen, "kubeconfig %s: not a YAML mapping", path);
        goto done;
    }
    const char *ctxname =
        context && *context ? context : scalar(map_get(&doc, root, "current-context"));
    if (!ctxname) {
        set_err(err, errlen, "kubeconfig %s: no current-context and no context given", path);
        goto done;
    }
    yaml_node_t *ctx = named_entry(&doc, root, "contexts", "context", ctxname);
    if (!ctx) {
        set_err(err, errlen, "kubeconfig %s: context \"%s\" not found", path, ctxname);
        goto done;
    }
    const char *cluname = scalar(map_get(&doc, ctx, "cluster"));
    const char *username = scalar(map_get(&doc, ctx, "user"));
    const char *ns = scalar(map_get(&doc, ctx, "namespace"));
    if (!cluname) {
        set_err(err, errlen, "kubeconfig %s: context \"%s\" names no cluster", path, ctxname);
        goto done;
    }
    yaml_node_t *clu = named_entry(&doc, root, "clusters", "cluster", cluname);
    if (!clu) {
        set_err(err, errlen, "kubeconfig %s: cluster \"%s\" (of context \"%s\") not found", path,
                cluname, ctxname);
        goto done;
    }
    const char *server = scalar(map_get(&doc, clu, "server"));
    if (!server || (strncmp(server, "https://", 8) != 0 && strncmp(server, "http://", 7) != 0)) {
        set_err(err, errlen, "kubeconfig %s: cluster \"%s\": server %s%s%s", path, cluname,
                server ? "\"" : "", server ? server : "missing",
                server ? "\" is not an http(s) URL" : "");
        goto done;
    }
    out->server = strdup(server);
    size_t sl = strlen(out->server);
    while (sl > 0 && out->server[sl - 1] == '/')
        out->server[--sl] = 0;
    const char *insecure = scalar(map_get(&doc, clu, "insecure-skip-tls-verify"));
    out->insecure_skip_verify = insecure && strcmp(insecure, "true") == 0;
    if ((rc = load_pem(&doc, clu, "certificate-authority", dir, path, &out->ca, err, errlen)) !=
        TIDE_OK)
        goto done;

    if (username) {
        yaml_node_t *user = named_entry(&doc, root, "users", "user", username);
        if (!user) {
            set_err(err, errlen, "kubeconfig %s: user \"%s\" (of context \"%s\") not found", path,
                    username, ctxname);
            rc = TIDE_ECONFIG;
            goto done;
        }
        if ((rc = load_pem(&doc, user, "client-certificate", dir, path, &out->cert, err, errlen)) !=
                TIDE_OK ||
            (rc = load_pem(&doc, user, "client-key", dir, path, &out->key, err, errlen)) != TIDE_OK)
            goto done;
        if (!out->cert.data != !out->key.data) {
            set_err(err, errlen,
                    "kubeconfig %s: user \"%s\": client-certificate and client-key must be given "
                    "together",
                    path, username);
            rc = TIDE_ECONFIG;
            goto done;
        }
        const char *token = scalar(map_get(&doc, user, "token"));
        const char *tokfile = scalar(map_get(&doc, user, "tokenFile"));
        if (token) {
            out->token = strdup(token);
        } else if (tokfile) {
            char p[PATH_MAX];
            resolve(p, sizeof p, dir, tokfile);
            tide__k8s_blob_t t;
            if ((rc = tide__k8s_read_file(p, TIDE__K8S_MAX_CONFIG_BYTES, &t)) != TIDE_OK) {
                set_err(err, errlen, "kubeconfig %s: user \"%s\": tokenFile %s: %s", path, username,
                        p, tide__k8s_strerror(rc));
                goto done;
            }
            while (t.len > 0 && (t.data[t.len - 1] == '\n' || t.data[t.len - 1] == '\r'))
                t.data[--t.len] = 0;
            out->token = (char *)t.data;
        }
        if (map_get(&doc, user, "exec") || map_get(&doc, user, "auth-provider")) {
            if (!out->token && !out->cert.data) {
                set_err(err, errlen,
                        "kubeconfig %s: user \"%s\": exec and auth-provider credentials are not "
                        "supported",
                        path, username);
                rc = TIDE_ENOTSUP;
                goto done;
            }
        }
    }
    out->namespace_ = strdup(ns ? ns : "default");
    char src[PATH_MAX + 128];
    snprintf(src, sizeof src, "kubeconfig %s (context \"%s\")", path, ctxname);
    out->source = strdup(src);
    if (!out->server || !out->namespace_ || !out->source) {
        rc = TIDE_ENOMEM;
        goto done;
    }
    rc = TIDE_OK;
done:
    yaml_document_delete(&doc);
    if (rc != TIDE_OK) tide__k8s_auth_free(out);
    return rc;
}

int tide__k8s_incluster_load(const char *root, tide__k8s_auth_t *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    if (!root) root = TIDE__K8S_SA_ROOT;
    const char *host = getenv("KUBERNETES_SERVICE_HOST");
    const char *port = getenv("KUBERNETES_SERVICE_PORT");
    if (!host || !*host || !port || !*port) {
        set_err(err, errlen,
                "in-cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set");
        return TIDE_ECONFIG;
    }
    if (strspn(port, "0123456789") != strlen(port) || strlen(port) > 5) {
        set_err(err, errlen, "in-cluster: KUBERNETES_SERVICE_PORT \"%s\" is not a port", port);
        return TIDE_ECONFIG;
    }
    char url[512];
    /* An IPv6 service address needs brackets in a URL. */
    if (strchr(host, ':'))
        snprintf(url, sizeof url, "https://[%s]:%s", host, port);
    else
        snprintf(url, sizeof url, "https://%s:%s", host, port);

    char p[PATH_MAX];
    tide__k8s_blob_t tok, ns;
    snprintf(p, sizeof p, "%s/token", root);
    int rc = tide__k8s_read_file(p, TIDE__K8S_MAX_CONFIG_BYTES, &tok);
    if (rc != TIDE_OK) {
        set_err(err, errlen, "in-cluster: %s: %s", p, tide__k8s_strerror(rc));
        return rc;
    }
    while (tok.len > 0 && (tok.data[tok.len - 1] == '\n' || tok.data[tok.len - 1] == '\r'))
        tok.data[--tok.len] = 0;
    if (tok.len == 0) {
        set_err(err, errlen, "in-cluster: %s is empty", p);
        tide__k8s_blob_free(&tok);
        return TIDE_EAUTH;
    }
    out->token = (char *)tok.data;
    snprintf(p, sizeof p, "%s/ca.crt", root);
    rc = tide__k8s_read_file(p, TIDE__K8S_MAX_CONFIG_BYTES, &out->ca);
    if (rc != TIDE_OK) {
        set_err(err, errlen, "in-cluster: %s: %s", p, tide__k8s_strerror(rc));
        tide__k8s_auth_free(out);
        return rc;
    }
    snprintf(p, sizeof p, "%s/namespace", root);
    if (tide__k8s_read_file(p, 4096, &ns) == TIDE_OK) {
        while (ns.len > 0 && (ns.data[ns.len - 1] == '\n' || ns.data[ns.len - 1] == '\r'))
            ns.data[--ns.len] = 0;
        out->namespace_ = (char *)ns.data;
    } else {
        out->namespace_ = strdup("default");
    }
    out->server = strdup(url);
    out->source = strdup("in-cluster service account");
    if (!out->server || !out->source || !out->namespace_) {
        tide__k8s_auth_free(out);
        return TIDE_ENOMEM;
    }
    return TIDE_OK;
}
