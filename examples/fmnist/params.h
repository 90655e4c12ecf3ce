/*
 * params.h - the parameter file of fmnist-train --save-params: the final parameter
 * slab as float32, behind a small header, so that two runs can be compared
 * (fmnist-params-diff) without trusting either file.
 *
 * The layout, all in the writer's byte order (files are compared on the machine
 * that wrote them; a file of the other byte order fails the magic check):
 *
 *   uint32 magic    FM_PARAMS_MAGIC ("FMNP" in a little-endian file)
 *   uint32 version  FM_PARAMS_VERSION
 *   uint64 count    number of parameters
 *   float  params[count]
 *
 * The reader checks the magic, the version, the count against a cap and the file's
 * length against the count (a truncated file and one with bytes after the data are
 * both refused) before it allocates; an error names the file. This module never
 * talks to Tide.
 */
#ifndef FM_PARAMS_H
#define FM_PARAMS_H

#include <stddef.h>

#define FM_PARAMS_MAGIC 0x504e4d46u /* "FMNP" */
#define FM_PARAMS_VERSION 1u
/* No file holds more than this many parameters (1 GiB of floats; the default model
 * has 235,146), so that a corrupt count cannot make the reader allocate without
 * bound. */
#define FM_PARAMS_MAX_COUNT ((size_t)1 << 28)

/*
 * Writes n floats from params to path: first to path.tmp, then renamed over path,
 * so that a run that fails half-way never leaves a short file under the name asked
 * for. Returns 0, or -1 with a message naming the file in err (errlen bytes, always
 * terminated).
 */
int fm_params_save(const char *path, const float *params, size_t n, char *err, size_t errlen);

/*
 * Reads the file at path. Returns 0 with *out (malloc'd, the caller frees it) and
 * *n, or -1 with a message naming the file in err, *out NULL and *n 0.
 */
int fm_params_load(const char *path, float **out, size_t *n, char *err, size_t errlen);

#endif /* FM_PARAMS_H */
