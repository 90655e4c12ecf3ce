/*
 * idx.h - loads the IDX files of (Fashion-)MNIST, gzip-compressed or not.
 *
 * An IDX file is a big-endian header (two zero bytes, a type byte, a dimension
 * count, then one uint32 per dimension) followed by the data. Only unsigned bytes
 * (type 0x08) are accepted. Every field is checked before it is trusted: the magic,
 * the dimensions against what the caller expects and against a size cap, the data
 * length (a short file is refused, and so is one with bytes after the data), and
 * the gzip stream itself (zlib checks its CRC at the end). A bad file yields an
 * error message naming the file, never a crash and never a partial result.
 */
#ifndef FM_IDX_H
#define FM_IDX_H

#include <stddef.h>
#include <stdint.h>

/* No file is allowed more than this many data bytes (Fashion-MNIST's largest is
 * 47 MB), so that a corrupt header cannot make us allocate without bound. */
#define FM_IDX_MAX_BYTES ((size_t)1 << 30)
#define FM_IDX_MAX_DIMS 4

typedef struct {
    int ndims;
    uint32_t dims[FM_IDX_MAX_DIMS];
    size_t len;    /* product of dims */
    uint8_t *data; /* len bytes, owned; free with fm_idx_free */
} fm_idx_t;

/*
 * Reads the IDX file at path, which must have `ndims` dimensions. For each i with
 * want[i] != 0, dims[i] must equal want[i] (want may be NULL). Returns 0 and fills
 * *out, or -1 with a message that names the file in err (errlen bytes, always
 * terminated) and *out zeroed.
 */
int fm_idx_load(const char *path, int ndims, const uint32_t *want, fm_idx_t *out, char *err,
                size_t errlen);
void fm_idx_free(fm_idx_t *idx);

/* A whole split of the dataset: n images of rows x cols pixels and n labels in
 * [0, classes). */
typedef struct {
    size_t n;
    uint32_t rows, cols;
    uint8_t *images; /* n * rows * cols, owned */
    uint8_t *labels; /* n, owned */
} fm_dataset_t;

/*
 * Loads DIR/PREFIX-images-idx3-ubyte.gz and DIR/PREFIX-labels-idx1-ubyte.gz (or the
 * same names without .gz when the compressed file is absent), requiring 28x28
 * images, as many labels as images, and every label below `classes`.
 * Returns 0, or -1 with a message in err.
 */
int fm_dataset_load(const char *dir, const char *prefix, int classes, fm_dataset_t *out, char *err,
                    size_t errlen);
void fm_dataset_free(fm_dataset_t *d);

#endif /* FM_IDX_H */
