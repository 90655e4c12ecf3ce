/*
 * params.c - the parameter file (see params.h).
 */
#include "params.h"

#include "fileerr.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct {
    uint32_t magic;
    uint32_t version;
    uint64_t count;
} header_t;

int fm_params_save(const char *path, const float *params, size_t n, char *err, size_t errlen)
{
    if (n > FM_PARAMS_MAX_COUNT) {
        fm_file_error(err, errlen, path, "%zu parameters is more than a file may hold (%zu)", n,
             FM_PARAMS_MAX_COUNT);
        return -1;
    }
    size_t plen = strlen(path);
    char *tmp = malloc(plen + sizeof ".tmp");
    if (!tmp) {
        fm_file_error(err, errlen, path, "out of memory");
        return -1;
    }
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", sizeof ".tmp");
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        fm_file_error(err, errlen, tmp, "cannot create: %s", strerror(errno));
        free(tmp);
        return -1;
    }
    header_t h = {FM_PARAMS_MAGIC, FM_PARAMS_VERSION, (uint64_t)n};
    int ok = fwrite(&h, sizeof h, 1, f) == 1 && fwrite(params, sizeof *params, n, f) == n;
    int saved = errno;
    if (fclose(f) != 0 && ok) {
        ok = 0;
        saved = errno;
    }
    if (!ok) {
        fm_file_error(err, errlen, tmp, "write failed: %s", strerror(saved));
        remove(tmp);
        free(tmp);
        return -1;
    }
    if (rename(tmp, path) != 0) {
        fm_file_error(err, errlen, path, "cannot rename %s to it: %s", tmp, strerror(errno));
        remove(tmp);
        free(tmp);
        return -1;
    }
    free(tmp);
    return 0;
}

int fm_params_load(const char *path, float **out, size_t *n, char *err, size_t errlen)
{
    *out = NULL;
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        fm_file_error(err, errlen, path, "cannot open: %s", strerror(errno));
        return -1;
    }
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fm_file_error(err, errlen, path, "not a regular file");
        fclose(f);
        return -1;
    }
    header_t h;
    if (fread(&h, sizeof h, 1, f) != 1) {
        fm_file_error(err, errlen, path, "not a parameter file: %lld bytes, shorter than the %zu-byte header",
             (long long)sb.st_size, sizeof h);
        fclose(f);
        return -1;
    }
    if (h.magic != FM_PARAMS_MAGIC) {
        fm_file_error(err, errlen, path, "not a parameter file (magic %08x, want %08x)", h.magic,
             FM_PARAMS_MAGIC);
        fclose(f);
        return -1;
    }
    if (h.version != FM_PARAMS_VERSION) {
        fm_file_error(err, errlen, path, "parameter file version %u, this reader knows %u", h.version,
             FM_PARAMS_VERSION);
        fclose(f);
        return -1;
    }
    if (h.count == 0 || h.count > FM_PARAMS_MAX_COUNT) {
        fm_file_error(err, errlen, path, "parameter count %llu out of range (1 to %zu)",
             (unsigned long long)h.count, FM_PARAMS_MAX_COUNT);
        fclose(f);
        return -1;
    }
    /* The length must be exactly the header and count floats: this refuses a
     * truncated file before anything is allocated for it. */
    uint64_t want = sizeof h + h.count * sizeof(float);
    if ((uint64_t)sb.st_size != want) {
        fm_file_error(err, errlen, path, "%s: %lld bytes, the header's count of %llu parameters needs %llu",
             (uint64_t)sb.st_size < want ? "truncated" : "bytes after the data",
             (long long)sb.st_size, (unsigned long long)h.count, (unsigned long long)want);
        fclose(f);
        return -1;
    }
    size_t count = (size_t)h.count;
    float *p = malloc(count * sizeof *p);
    if (!p) {
        fm_file_error(err, errlen, path, "out of memory for %zu parameters", count);
        fclose(f);
        return -1;
    }
    /* The file may still change under us: the read itself is checked too. */
    if (fread(p, sizeof *p, count, f) != count) {
        fm_file_error(err, errlen, path, "truncated: read error or the file ends within the data");
        free(p);
        fclose(f);
        return -1;
    }
    fclose(f);
    *out = p;
    *n = count;
    return 0;
}
