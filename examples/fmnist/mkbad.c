/*
 * mkbad.c - fmnist-mkbad DIR: writes small Fashion-MNIST-shaped datasets into
 * DIR/<case>/, one well-formed ("ok") and the others each with one file broken in
 * one way, for the test that the trainer refuses them with a clear message.
 *
 * Each case directory gets an EXPECT file holding the name of the file the error
 * message must mention ("ok" has none). The broken files are made the way real
 * ones break: a download cut short, a bit flipped on disk, the wrong file under
 * the right name, headers that disagree with the data.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define N_TRAIN 64
#define N_TEST 20

static const char *root;

static _Noreturn void fatal(const char *what, const char *path)
{
    fprintf(stderr, "fmnist-mkbad: %s %s: %s\n", what, path, strerror(errno));
    exit(1);
}

static void put32(unsigned char *b, unsigned v)
{
    b[0] = (unsigned char)(v >> 24);
    b[1] = (unsigned char)(v >> 16);
    b[2] = (unsigned char)(v >> 8);
    b[3] = (unsigned char)v;
}

/* An IDX image (kind 3) or label (kind 1) file as bytes: header then data. */
typedef struct {
    unsigned char *b;
    size_t len;
} blob_t;

static blob_t idx_images(unsigned n, unsigned rows, unsigned cols)
{
    blob_t x = {malloc(16 + (size_t)n * rows * cols), 16 + (size_t)n * rows * cols};
    x.b[0] = x.b[1] = 0;
    x.b[2] = 0x08;
    x.b[3] = 3;
    put32(x.b + 4, n);
    put32(x.b + 8, rows);
    put32(x.b + 12, cols);
    for (size_t i = 16; i < x.len; i++)
        x.b[i] = (unsigned char)(i * 2654435761u >> 24);
    return x;
}

static blob_t idx_labels(unsigned n)
{
    blob_t x = {malloc(8 + n), 8 + (size_t)n};
    x.b[0] = x.b[1] = 0;
    x.b[2] = 0x08;
    x.b[3] = 1;
    put32(x.b + 4, n);
    for (unsigned i = 0; i < n; i++)
        x.b[8 + i] = (unsigned char)(i % 10);
    return x;
}

static void path_of(char *buf, size_t len, const char *c, const char *name)
{
    snprintf(buf, len, "%s/%s/%s", root, c, name);
}

static void write_gz(const char *c, const char *name, blob_t x)
{
    char p[4096];
    path_of(p, sizeof p, c, name);
    gzFile f = gzopen(p, "wb");
    if (!f) fatal("cannot create", p);
    if (x.len && gzwrite(f, x.b, (unsigned)x.len) != (int)x.len) fatal("cannot write", p);
    if (gzclose(f) != Z_OK) fatal("cannot close", p);
}

static void write_raw(const char *c, const char *name, const void *b, size_t len)
{
    char p[4096];
    path_of(p, sizeof p, c, name);
    FILE *f = fopen(p, "wb");
    if (!f || fwrite(b, 1, len, f) != len || fclose(f) != 0) fatal("cannot write", p);
}

/* Creates DIR/c with a complete, valid dataset, and its EXPECT file. */
static void make_case(const char *c, const char *expect)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", root, c);
    if (mkdir(p, 0755) != 0 && errno != EEXIST) fatal("cannot create", p);
    blob_t ti = idx_images(N_TRAIN, 28, 28), tl = idx_labels(N_TRAIN);
    blob_t vi = idx_images(N_TEST, 28, 28), vl = idx_labels(N_TEST);
    write_gz(c, "train-images-idx3-ubyte.gz", ti);
    write_gz(c, "train-labels-idx1-ubyte.gz", tl);
    write_gz(c, "t10k-images-idx3-ubyte.gz", vi);
    write_gz(c, "t10k-labels-idx1-ubyte.gz", vl);
    free(ti.b);
    free(tl.b);
    free(vi.b);
    free(vl.b);
    path_of(p, sizeof p, c, "EXPECT");
    unlink(p);
    if (expect) write_raw(c, "EXPECT", expect, strlen(expect));
}

/* Cuts an existing file to `keep` bytes, or flips one byte at `at`. */
static void cut(const char *c, const char *name, long keep)
{
    char p[4096];
    path_of(p, sizeof p, c, name);
    if (truncate(p, keep) != 0) fatal("cannot truncate", p);
}

static void flip(const char *c, const char *name, long at)
{
    char p[4096];
    path_of(p, sizeof p, c, name);
    FILE *f = fopen(p, "r+b");
    if (!f || fseek(f, at, SEEK_SET) != 0) fatal("cannot open", p);
    int ch = fgetc(f);
    if (ch == EOF || fseek(f, at, SEEK_SET) != 0 || fputc(ch ^ 0x5a, f) == EOF || fclose(f) != 0)
        fatal("cannot rewrite", p);
}

static long size_of(const char *c, const char *name)
{
    char p[4096];
    struct stat st;
    path_of(p, sizeof p, c, name);
    if (stat(p, &st) != 0) fatal("cannot stat", p);
    return (long)st.st_size;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: fmnist-mkbad DIR\n");
        return 2;
    }
    root = argv[1];
    if (mkdir(root, 0755) != 0 && errno != EEXIST) fatal("cannot create", root);
    const char *TI = "train-images-idx3-ubyte.gz", *TL = "train-labels-idx1-ubyte.gz";
    const char *VI = "t10k-images-idx3-ubyte.gz", *VL = "t10k-labels-idx1-ubyte.gz";
    blob_t x;

    make_case("ok", NULL);

    /* A download cut short: the gzip stream ends in the middle. */
    make_case("gzip-truncated", TI);
    cut("gzip-truncated", TI, size_of("gzip-truncated", TI) / 2);

    /* Cut inside the 16-byte header (the compressed file is kept whole). */
    make_case("header-truncated", VI);
    x = idx_images(N_TEST, 28, 28);
    x.len = 10;
    write_gz("header-truncated", VI, x);
    free(x.b);

    /* A flipped byte in the compressed data: zlib reports a data or CRC error. */
    make_case("gzip-corrupt", TI);
    flip("gzip-corrupt", TI, size_of("gzip-corrupt", TI) / 2);

    /* The gzip trailer's CRC no longer matches. */
    make_case("gzip-bad-crc", VL);
    flip("gzip-bad-crc", VL, size_of("gzip-bad-crc", VL) - 6);

    /* An empty file. */
    make_case("empty", TL);
    write_raw("empty", TL, "", 0);

    /* The labels file under the images name: the magic says 1 dimension. */
    make_case("bad-magic", TI);
    x = idx_labels(N_TRAIN);
    write_gz("bad-magic", TI, x);
    free(x.b);

    /* Not IDX at all (an HTML error page saved as the dataset). */
    make_case("not-idx", VI);
    const char *html = "<html><body>404 Not Found</body></html>\n";
    x = (blob_t){(unsigned char *)html, strlen(html)};
    write_gz("not-idx", VI, x);

    /* Images of the wrong shape. */
    make_case("bad-dims", TI);
    x = idx_images(N_TRAIN, 27, 28);
    write_gz("bad-dims", TI, x);
    free(x.b);

    /* The header claims more images than the file holds. */
    make_case("short-data", TI);
    x = idx_images(N_TRAIN, 28, 28);
    put32(x.b + 4, N_TRAIN + 5);
    write_gz("short-data", TI, x);
    free(x.b);

    /* The header claims fewer: bytes are left after the declared data. */
    make_case("trailing-data", VI);
    x = idx_images(N_TEST, 28, 28);
    put32(x.b + 4, N_TEST - 1);
    write_gz("trailing-data", VI, x);
    free(x.b);

    /* A header whose sizes would need terabytes: refused before allocating. */
    make_case("huge-dims", TI);
    x = idx_images(1, 28, 28);
    put32(x.b + 4, 0xffffffffu);
    write_gz("huge-dims", TI, x);
    free(x.b);

    /* Zero images. */
    make_case("zero-count", VL);
    x = idx_labels(N_TEST);
    put32(x.b + 4, 0);
    x.len = 8;
    write_gz("zero-count", VL, x);
    free(x.b);

    /* Fewer labels than images. */
    make_case("count-mismatch", TL);
    x = idx_labels(N_TRAIN - 1);
    write_gz("count-mismatch", TL, x);
    free(x.b);

    /* A label outside 0..9. */
    make_case("bad-label", VL);
    x = idx_labels(N_TEST);
    x.b[8 + 3] = 11;
    write_gz("bad-label", VL, x);
    free(x.b);

    /* A missing file. */
    make_case("missing", TL);
    char p[4096];
    path_of(p, sizeof p, "missing", TL);
    if (unlink(p) != 0) fatal("cannot remove", p);

    (void)VL;
    return 0;
}
