/*
 * idx.c - the IDX reader (see idx.h). Reads through zlib's gz* interface, which
 * also reads uncompressed files transparently.
 */
#include "idx.h"

#include "fileerr.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define IDX_TYPE_UBYTE 0x08

/* Explains why a read of `what` stopped after got of want bytes: a corrupt gzip
 * stream (bad data, or a CRC or length mismatch in its trailer), a stream that ends
 * early, an I/O error, or a file that simply ends before the header says it should. */
static void short_read(gzFile f, char *err, size_t errlen, const char *path, const char *what,
                       size_t got, size_t want)
{
    int code = Z_OK;
    const char *msg = gzerror(f, &code);
    /* zlib's message is "PATH: reason"; keep only the reason. */
    size_t plen = strlen(path);
    if (msg && strncmp(msg, path, plen) == 0 && strncmp(msg + plen, ": ", 2) == 0) msg += plen + 2;
    if (code == Z_ERRNO)
        fm_file_error(err, errlen, path, "read error in the %s: %s", what, strerror(errno));
    else if (code == Z_BUF_ERROR)
        fm_file_error(err, errlen, path, "truncated gzip stream: it ends within the %s (%zu of %zu bytes)",
             what, got, want);
    else if (code != Z_OK)
        fm_file_error(err, errlen, path, "corrupt gzip data (%s)", msg && *msg ? msg : zError(code));
    else
        fm_file_error(err, errlen, path, "truncated: the file ends within the %s (%zu of %zu bytes)", what,
             got, want);
}

/* Reads exactly len bytes. Returns 0, or -1 when the file ends early or fails. */
static int read_full(gzFile f, void *buf, size_t len, size_t *got)
{
    uint8_t *p = buf;
    *got = 0;
    while (*got < len) {
        size_t want = len - *got;
        if (want > (1u << 30))
            want = 1u << 30; /* gzread takes an unsigned int and returns an int */
        int n = gzread(f, p + *got, (unsigned)want);
        if (n <= 0) return -1;
        *got += (size_t)n;
    }
    return 0;
}

static uint32_t be32(const uint8_t *b)
{
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | (uint32_t)b[3];
}

int fm_idx_load(const char *path, int ndims, const uint32_t *want, fm_idx_t *out, char *err,
                size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (ndims < 1 || ndims > FM_IDX_MAX_DIMS) {
        fm_file_error(err, errlen, path, "unsupported dimension count %d", ndims);
        return -1;
    }
    errno = 0;
    gzFile f = gzopen(path, "rb");
    if (!f) {
        int e = errno;
        fm_file_error(err, errlen, path, "cannot open: %s%s", e ? strerror(e) : "out of memory",
             e == ENOENT ? " (is --data-dir right?)" : "");
        return -1;
    }
    uint8_t hdr[4 + 4 * FM_IDX_MAX_DIMS];
    size_t hlen = 4 + 4 * (size_t)ndims, got;
    if (read_full(f, hdr, hlen, &got) != 0) {
        short_read(f, err, errlen, path, "header", got, hlen);
        goto bad;
    }
    if (hdr[0] != 0 || hdr[1] != 0 || hdr[2] != IDX_TYPE_UBYTE || hdr[3] != ndims) {
        fm_file_error(err, errlen, path,
             "bad magic 0x%02x%02x%02x%02x (want 0x0000%02x%02x: unsigned bytes, %d dimensions); "
             "not an IDX file of the expected kind",
             hdr[0], hdr[1], hdr[2], hdr[3], IDX_TYPE_UBYTE, ndims, ndims);
        goto bad;
    }
    size_t len = 1;
    for (int i = 0; i < ndims; i++) {
        uint32_t d = be32(hdr + 4 + 4 * i);
        out->dims[i] = d;
        if (want && want[i] && d != want[i]) {
            fm_file_error(err, errlen, path, "dimension %d is %u, expected %u", i, d, want[i]);
            goto bad;
        }
        if (d == 0) {
            fm_file_error(err, errlen, path, "dimension %d is 0", i);
            goto bad;
        }
        if (d > FM_IDX_MAX_BYTES / len) {
            fm_file_error(err, errlen, path, "dimension %d is %u: the data would exceed the %zu-byte limit",
                 i, d, FM_IDX_MAX_BYTES);
            goto bad;
        }
        len *= d;
    }
    out->ndims = ndims;
    out->len = len;
    out->data = malloc(len);
    if (!out->data) {
        fm_file_error(err, errlen, path, "out of memory for %zu bytes", len);
        goto bad;
    }
    if (read_full(f, out->data, len, &got) != 0) {
        short_read(f, err, errlen, path, "data", got, len);
        goto bad;
    }
    /* The header promised len bytes; anything after them means the header and the
     * data disagree. Reading on also makes zlib check the gzip trailer (CRC-32 and
     * length), which it only does on reaching the end of the stream. */
    uint8_t extra;
    int n = gzread(f, &extra, 1);
    if (n < 0) {
        short_read(f, err, errlen, path, "gzip trailer", 0, 0);
        goto bad;
    }
    if (n > 0) {
        fm_file_error(err, errlen, path, "has bytes after the %zu data bytes its header declares", len);
        goto bad;
    }
    int rc = gzclose_r(f);
    f = NULL;
    if (rc != Z_OK) {
        fm_file_error(err, errlen, path, "error closing: %s", zError(rc));
        goto bad;
    }
    return 0;
bad:
    if (f) gzclose_r(f);
    fm_idx_free(out);
    return -1;
}

void fm_idx_free(fm_idx_t *idx)
{
    free(idx->data);
    memset(idx, 0, sizeof *idx);
}

/* DIR/NAME.gz if it exists, else DIR/NAME (so unpacked copies work too). */
static void data_path(char *buf, size_t len, const char *dir, const char *name)
{
    size_t d = strlen(dir);
    while (d > 1 && dir[d - 1] == '/')
        d--;
    snprintf(buf, len, "%.*s/%s.gz", (int)d, dir, name);
    if (access(buf, F_OK) == 0) return;
    snprintf(buf, len, "%.*s/%s", (int)d, dir, name);
    if (access(buf, F_OK) == 0) return;
    /* Neither exists: name the compressed file, the one the error should mention. */
    snprintf(buf, len, "%.*s/%s.gz", (int)d, dir, name);
}

int fm_dataset_load(const char *dir, const char *prefix, int classes, fm_dataset_t *out, char *err,
                    size_t errlen)
{
    memset(out, 0, sizeof *out);
    char ipath[4096], lpath[4096], name[256];
    snprintf(name, sizeof name, "%s-images-idx3-ubyte", prefix);
    data_path(ipath, sizeof ipath, dir, name);
    snprintf(name, sizeof name, "%s-labels-idx1-ubyte", prefix);
    data_path(lpath, sizeof lpath, dir, name);

    fm_idx_t img, lab;
    const uint32_t want_img[3] = {0, 28, 28};
    if (fm_idx_load(ipath, 3, want_img, &img, err, errlen) != 0) return -1;
    if (fm_idx_load(lpath, 1, NULL, &lab, err, errlen) != 0) {
        fm_idx_free(&img);
        return -1;
    }
    if (lab.dims[0] != img.dims[0]) {
        fm_file_error(err, errlen, lpath, "has %u labels but %s has %u images", lab.dims[0], ipath,
             img.dims[0]);
        goto bad;
    }
    for (size_t i = 0; i < lab.len; i++) {
        if (lab.data[i] >= classes) {
            fm_file_error(err, errlen, lpath, "label %zu is %u, not below %d", i, lab.data[i], classes);
            goto bad;
        }
    }
    out->n = img.dims[0];
    out->rows = img.dims[1];
    out->cols = img.dims[2];
    out->images = img.data;
    out->labels = lab.data;
    return 0;
bad:
    fm_idx_free(&img);
    fm_idx_free(&lab);
    return -1;
}

void fm_dataset_free(fm_dataset_t *d)
{
    free(d->images);
    free(d->labels);
    memset(d, 0, sizeof *d);
}
