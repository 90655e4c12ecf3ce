/* auth.c - see auth.h. HMAC from OpenSSL; comparisons in constant time. */
#include <arpa/inet.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <string.h>

#include "core/auth.h"
#include "core/error.h"
#include "core/net.h"
#include "core/param.h"

#define AUTH_MAGIC 0x54494445u /* "TIDE" */
#define AUTH_VERSION 1u
#define NONCE_LEN 16
#define MAC_LEN 32

struct hello {
    uint32_t magic, version;
    unsigned char nonce[NONCE_LEN];
};
struct claim {
    uint32_t magic, kind, generation, rank;
    unsigned char nonce[NONCE_LEN];
    unsigned char mac[MAC_LEN];
};
struct verdict {
    uint32_t status;
    unsigned char mac[MAC_LEN];
};

int tide__random_bytes(void *buf, size_t len)
{
    return RAND_bytes(buf, (int)len) == 1 ? TIDE_OK : TIDE_ESYS;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

int tide__secret_from_hex(const char *hex, tide__secret_t *out)
{
    size_t n = hex ? strlen(hex) : 0;
    if (n % 2 || n / 2 < 16 || n / 2 > TIDE__SECRET_MAX) return TIDE_EINVAL;
    for (size_t i = 0; i < n / 2; i++) {
        int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) return TIDE_EINVAL;
        out->key[i] = (unsigned char)(hi << 4 | lo);
    }
    out->len = n / 2;
    return TIDE_OK;
}

int tide__secret_generate(tide__secret_t *out, char *hex, size_t hexlen)
{
    out->len = 32;
    TIDE_CHECK(tide__random_bytes(out->key, out->len));
    if (hex) {
        if (hexlen < out->len * 2 + 1) return TIDE_EINVAL;
        for (size_t i = 0; i < out->len; i++) snprintf(hex + 2 * i, 3, "%02x", out->key[i]);
    }
    return TIDE_OK;
}

static void mac_of(const tide__secret_t *s, const char *label, const unsigned char *nonce,
                   const uint32_t *words, int nwords, unsigned char out[MAC_LEN])
{
    unsigned char msg[64];
    size_t l = strlen(label);
    memcpy(msg, label, l);
    memcpy(msg + l, nonce, NONCE_LEN);
    l += NONCE_LEN;
    for (int i = 0; i < nwords; i++) {
        uint32_t be = htonl(words[i]);
        memcpy(msg + l, &be, 4);
        l += 4;
    }
    unsigned int ol = MAC_LEN;
    HMAC(EVP_sha256(), s->key, (int)s->len, msg, l, out, &ol);
}

int tide__auth_connect(int fd, const tide__secret_t *secret, uint32_t kind, uint32_t generation,
                       uint32_t rank, int timeout_ms, int cancel_fd)
{
    uint64_t deadline = tide__now_ns() + (uint64_t)timeout_ms * 1000000ull;
    struct hello h;
    TIDE_CHECK(tide__net_read_full(fd, &h, sizeof h, deadline, cancel_fd));
    if (ntohl(h.magic) != AUTH_MAGIC || ntohl(h.version) != AUTH_VERSION) {
        TIDE_WARN("peer is not a Tide endpoint of protocol version %u", AUTH_VERSION);
        return TIDE_EPROTO;
    }
    struct claim c;
    c.magic = htonl(AUTH_MAGIC);
    c.kind = htonl(kind);
    c.generation = htonl(generation);
    c.rank = htonl(rank);
    TIDE_CHECK(tide__random_bytes(c.nonce, NONCE_LEN));
    uint32_t words[3] = {kind, generation, rank};
    mac_of(secret, "claim", h.nonce, words, 3, c.mac);
    TIDE_CHECK(tide__net_write_full(fd, &c, sizeof c, deadline, cancel_fd));
    struct verdict v;
    TIDE_CHECK(tide__net_read_full(fd, &v, sizeof v, deadline, cancel_fd));
    uint32_t status = ntohl(v.status);
    unsigned char expect[MAC_LEN];
    mac_of(secret, "verdict", c.nonce, &status, 1, expect);
    if (CRYPTO_memcmp(expect, v.mac, MAC_LEN)) {
        TIDE_ERROR("the peer could not prove it holds the job secret (TIDE_JOB_SECRET differs?)");
        return TIDE_EAUTH;
    }
    int st = -(int)status;
    if (st != TIDE_OK) {
        if (st == TIDE_EAUTH)
            TIDE_ERROR("the peer refused our job secret (TIDE_JOB_SECRET differs?)");
        return st;
    }
    return TIDE_OK;
}

int tide__auth_accept(int fd, const tide__secret_t *secret, int64_t expected_generation,
                      int timeout_ms, int cancel_fd, tide__peer_claim_t *claim)
{
    uint64_t deadline = tide__now_ns() + (uint64_t)timeout_ms * 1000000ull;
    struct hello h = {htonl(AUTH_MAGIC), htonl(AUTH_VERSION), {0}};
    TIDE_CHECK(tide__random_bytes(h.nonce, NONCE_LEN));
    TIDE_CHECK(tide__net_write_full(fd, &h, sizeof h, deadline, cancel_fd));
    struct claim c;
    TIDE_CHECK(tide__net_read_full(fd, &c, sizeof c, deadline, cancel_fd));
    int status = TIDE_OK;
    uint32_t words[3] = {ntohl(c.kind), ntohl(c.generation), ntohl(c.rank)};
    unsigned char expect[MAC_LEN];
    mac_of(secret, "claim", h.nonce, words, 3, expect);
    if (ntohl(c.magic) != AUTH_MAGIC) status = TIDE_EPROTO;
    else if (CRYPTO_memcmp(expect, c.mac, MAC_LEN)) status = TIDE_EAUTH;
    else if (expected_generation >= 0 && words[1] != (uint32_t)expected_generation)
        status = TIDE_ESTALE;
    struct verdict v;
    uint32_t wire_status = (uint32_t)(-status);
    v.status = htonl(wire_status);
    mac_of(secret, "verdict", c.nonce, &wire_status, 1, v.mac);
    /* The verdict goes out even on failure so an honest connector learns why. */
    int wrc = tide__net_write_full(fd, &v, sizeof v, deadline, cancel_fd);
    if (status != TIDE_OK) return status;
    TIDE_CHECK(wrc);
    claim->kind = words[0];
    claim->generation = words[1];
    claim->rank = words[2];
    return TIDE_OK;
}
