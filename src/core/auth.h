/*
 * auth.h - proving that both ends of a connection hold the job's secret (P8).
 *
 * A mutual HMAC-SHA256 challenge in fixed-size binary frames, so it runs before
 * anything variable-length is read from an unproven peer:
 *   acceptor  -> connector: hello     {magic, version, nonce_a}
 *   connector -> acceptor : claim     {magic, kind, generation, rank, nonce_c,
 *                                      HMAC(secret, "claim" nonce_a kind gen rank)}
 *   acceptor  -> connector: verdict   {status, HMAC(secret, "verdict" nonce_c status)}
 * The acceptor checks the MAC and the generation; the connector checks the
 * verdict's MAC, so neither side talks to an impostor.
 */
#ifndef TIDE_CORE_AUTH_H
#define TIDE_CORE_AUTH_H

#include <stddef.h>
#include <stdint.h>

#define TIDE__SECRET_MAX 64

typedef struct {
    unsigned char key[TIDE__SECRET_MAX];
    size_t len;
} tide__secret_t;

enum tide__conn_kind { TIDE__CONN_CONTROL = 1, TIDE__CONN_DATA = 2 };

/* What the acceptor learns about a proven connector. */
typedef struct {
    uint32_t kind;
    uint32_t generation;
    uint32_t rank;
} tide__peer_claim_t;

/* Parses a hex secret (16..64 bytes once decoded). */
int tide__secret_from_hex(const char *hex, tide__secret_t *out);
/* Fills out with a fresh random secret; hex (2*len+1 bytes) receives it in hex. */
int tide__secret_generate(tide__secret_t *out, char *hex, size_t hexlen);

/* Connector side: proves itself and checks the acceptor. Both sides wait at most
 * timeout_ms, or until cancel_fd (-1: none) is readable (TIDE_EABORTED; net.h). */
int tide__auth_connect(int fd, const tide__secret_t *secret, uint32_t kind, uint32_t generation,
                       uint32_t rank, int timeout_ms, int cancel_fd);

/* Acceptor side. expected_generation < 0 accepts any generation (the caller then
 * checks claim->generation). On failure the connector is told and the error is
 * TIDE_EAUTH or TIDE_ESTALE. */
int tide__auth_accept(int fd, const tide__secret_t *secret, int64_t expected_generation,
                      int timeout_ms, int cancel_fd, tide__peer_claim_t *claim);

/* Random bytes from the OS. */
int tide__random_bytes(void *buf, size_t len);

#endif
