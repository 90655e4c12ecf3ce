/*
 * tt.c - helpers shared by Tide's multi-rank and fault tests (see tt.h).
 *
 * Nothing here may depend on libtide's own conversions or element sizes: the point
 * of a reference is that it is computed independently of the code under test.
 */
#include "tt.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int tt_rank = -1;
long tt_failures = 0;

/* ---------------------------------------------------------------- element types */

size_t tt_esize(tide_dtype_t dt)
{
    switch (dt) {
    case TIDE_FLOAT32:
        return 4;
    case TIDE_FLOAT64:
        return 8;
    case TIDE_FLOAT16:
        return 2;
    case TIDE_BFLOAT16:
        return 2;
    case TIDE_INT32:
        return 4;
    case TIDE_INT64:
        return 8;
    case TIDE_UINT8:
        return 1;
    default:
        return 0;
    }
}

const char *tt_dtype_name(tide_dtype_t dt)
{
    switch (dt) {
    case TIDE_FLOAT32:
        return "float32";
    case TIDE_FLOAT64:
        return "float64";
    case TIDE_FLOAT16:
        return "float16";
    case TIDE_BFLOAT16:
        return "bfloat16";
    case TIDE_INT32:
        return "int32";
    case TIDE_INT64:
        return "int64";
    case TIDE_UINT8:
        return "uint8";
    default:
        return "?dtype";
    }
}

const char *tt_op_name(tide_op_t op)
{
    switch (op) {
    case TIDE_SUM:
        return "sum";
    case TIDE_AVG:
        return "avg";
    case TIDE_MIN:
        return "min";
    case TIDE_MAX:
        return "max";
    case TIDE_PROD:
        return "prod";
    default:
        return "?op";
    }
}

bool tt_is_float(tide_dtype_t dt)
{
    return dt == TIDE_FLOAT32 || dt == TIDE_FLOAT64 || dt == TIDE_FLOAT16 || dt == TIDE_BFLOAT16;
}

/* ------------------------------------------------------------ 16-bit floats */

static uint32_t f32_bits(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    return x;
}

static float bits_f32(uint32_t x)
{
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

float tt_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0) {
        /* Zero or subnormal: man * 2^-24, exact in float32. */
        float v = ldexpf((float)man, -24);
        return sign ? -v : v;
    }
    if (exp == 31) return bits_f32(sign | 0x7f800000u | (man << 13));
    return bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

/* Rounds the non-negative integer v >> shift to nearest, ties to even. */
static uint32_t rshift_rne(uint32_t v, unsigned shift)
{
    if (shift == 0) return v;
    if (shift >= 32) return 0; /* v < 2^32 <= half of 2^shift's unit: rounds to zero */
    uint32_t q = v >> shift;
    uint32_t rem = v & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return q;
}

uint16_t tt_f32_to_f16(float f)
{
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t exp = (x >> 23) & 0xffu;
    uint32_t man = x & 0x7fffffu;
    if (exp == 0xff) /* Inf stays Inf; NaN stays a (quiet) NaN */
        return (uint16_t)(sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0u));
    int e = (int)exp - 127 + 15; /* the binary16 biased exponent */
    if (e >= 31) return (uint16_t)(sign | 0x7c00u);
    if (e <= 0) {
        /* Subnormal in binary16: m = full * 2^(exp - 126) with the implicit bit;
         * a carry out of 1023 lands on the smallest normal, which is right. */
        if (exp == 0) return sign; /* float32 subnormals are far below binary16's range */
        uint32_t full = man | 0x800000u;
        unsigned shift = (unsigned)(126 - (int)exp); /* 14 - e, >= 14 */
        return (uint16_t)(sign | rshift_rne(full, shift));
    }
    /* Normal: keep 10 mantissa bits; a carry propagates into the exponent and from
     * the largest finite value into Inf, both as IEEE prescribes. */
    uint32_t h = ((uint32_t)e << 10) | (man >> 13);
    uint32_t rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
    return (uint16_t)(sign | h);
}

float tt_bf16_to_f32(uint16_t b)
{
    return bits_f32((uint32_t)b << 16);
}

uint16_t tt_f32_to_bf16(float f)
{
    uint32_t x = f32_bits(f);
    if ((x & 0x7f800000u) == 0x7f800000u && (x & 0x7fffffu))
        return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
    uint32_t lsb = (x >> 16) & 1u;
    x += 0x7fffu + lsb; /* ties to even; overflows into Inf correctly */
    return (uint16_t)(x >> 16);
}

/* ------------------------------------------------------------------- inputs */

static uint64_t mix64(uint64_t z)
{
    z ^= z >> 30;
    z *= 0xbf58476d1ce4e5b9ull;
    z ^= z >> 27;
    z *= 0x94d049bb133111ebull;
    z ^= z >> 31;
    return z;
}

uint64_t tt_hash4(uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
    uint64_t z = a * 0x9e3779b97f4a7c15ull;
    z ^= (b + 0x632be59bd9b4e019ull) * 0xd6e8feb86659fd93ull;
    z ^= (c + 0x85157af5ull) * 0xff51afd7ed558ccdull;
    z ^= (d + 0x2545f4914f6cdd1dull) * 0xc4ceb9fe1a85ec53ull;
    return mix64(z);
}

/* A uniform integer in [0, n) from h (n > 0), without a division. */
static uint64_t below(uint64_t h, uint64_t n)
{
    __extension__ typedef unsigned __int128 u128;
    return (uint64_t)(((u128)h * n) >> 64);
}

/* A uniform integer in [-m, m]. */
static int64_t sym(uint64_t h, int64_t m)
{
    return (int64_t)below(h, (uint64_t)(2 * m + 1)) - m;
}

static void put_f32(void *buf, size_t i, float v)
{
    memcpy((char *)buf + 4 * i, &v, 4);
}
static void put_f64(void *buf, size_t i, double v)
{
    memcpy((char *)buf + 8 * i, &v, 8);
}
static void put_u16(void *buf, size_t i, uint16_t v)
{
    memcpy((char *)buf + 2 * i, &v, 2);
}
static void put_i32(void *buf, size_t i, int32_t v)
{
    memcpy((char *)buf + 4 * i, &v, 4);
}
static void put_i64(void *buf, size_t i, int64_t v)
{
    memcpy((char *)buf + 8 * i, &v, 8);
}
static void put_u8(void *buf, size_t i, uint8_t v)
{
    ((uint8_t *)buf)[i] = v;
}

/* A float value (stored in dt) for exact sums: k * 2^-frac with |k| <= kmax. */
static void gen_sum_float(void *buf, tide_dtype_t dt, uint64_t seed, int rank, int size,
                          size_t count)
{
    /* Per-rank bounds such that every partial sum of up to `size` ranks has at most
     * the dtype's significand bits: f16 11, bf16 8, f32 24, f64 53. */
    int64_t kmax;
    int frac;
    switch (dt) {
    case TIDE_FLOAT16:
        kmax = 2048 / size;
        frac = 2;
        break;
    case TIDE_BFLOAT16:
        kmax = 256 / size;
        frac = 2;
        break;
    case TIDE_FLOAT32:
        kmax = ((int64_t)1 << 24) / size;
        frac = 4;
        break;
    default:
        kmax = ((int64_t)1 << 53) / size;
        frac = 10;
        break;
    }
    const double scale = ldexp(1.0, -frac); /* exact: a power of two */
    for (size_t i = 0; i < count; i++) {
        uint64_t h = tt_hash4(seed, (uint64_t)rank, i, 1);
        int64_t k = sym(h, kmax);
        double v = (double)k * scale;
        switch (dt) {
        case TIDE_FLOAT16:
            put_u16(buf, i, tt_f32_to_f16((float)v));
            break;
        case TIDE_BFLOAT16:
            put_u16(buf, i, tt_f32_to_bf16((float)v));
            break;
        case TIDE_FLOAT32:
            put_f32(buf, i, (float)v);
            break;
        default:
            put_f64(buf, i, v);
            break;
        }
    }
}

/* A float value for exact products: +-m * 2^j, with small odd m on few ranks. */
static void gen_prod_float(void *buf, tide_dtype_t dt, uint64_t seed, int rank, size_t count)
{
    double p2[61]; /* 2^-30 .. 2^30, so that ldexp stays out of the loop */
    for (int j = 0; j < 61; j++)
        p2[j] = ldexp(1.0, j - 30);
    for (size_t i = 0; i < count; i++) {
        uint64_t h = tt_hash4(seed, (uint64_t)rank, i, 2);
        double sign = (h & 1) ? -1.0 : 1.0;
        double v;
        if (below(h >> 1, 53) == 0) {
            v = 0.0;
        } else if (rank >= 8) {
            v = sign;
        } else if (dt == TIDE_FLOAT16 || dt == TIDE_BFLOAT16) {
            /* m in {1,3} on ranks 0 and 1 only: products need <= 4 significand bits;
             * 2^j with j in [-2,1]: over 8 ranks the magnitude stays in
             * [2^-16, 9 * 2^8], inside binary16's normal range. */
            double m = (rank < 2 && ((h >> 8) & 1)) ? 3.0 : 1.0;
            int j = (int)below(h >> 16, 4) - 2;
            v = sign * m * p2[j + 30];
        } else if (dt == TIDE_FLOAT32) {
            double m = (double)(2 * below(h >> 8, 4) + 1); /* 7^8 < 2^24 */
            int j = (int)below(h >> 24, 17) - 8;
            v = sign * m * p2[j + 30];
        } else {
            double m = (double)(2 * below(h >> 8, 8) + 1); /* 15^8 < 2^53 */
            int j = (int)below(h >> 24, 61) - 30;
            v = sign * m * p2[j + 30];
        }
        switch (dt) {
        case TIDE_FLOAT16:
            put_u16(buf, i, tt_f32_to_f16((float)v));
            break;
        case TIDE_BFLOAT16:
            put_u16(buf, i, tt_f32_to_bf16((float)v));
            break;
        case TIDE_FLOAT32:
            put_f32(buf, i, (float)v);
            break;
        default:
            put_f64(buf, i, v);
            break;
        }
    }
}

/* Random finite bit patterns of a float dtype. nozero_sign: map -0 to +0 (MIN and
 * MAX may return either zero). clamp: keep the exponent two below the top, so that
 * the sum of two values cannot overflow. */
static void gen_bits_float(void *buf, tide_dtype_t dt, uint64_t seed, int rank, size_t count,
                           bool nozero_sign, bool clamp, bool near)
{
    for (size_t i = 0; i < count; i++) {
        uint64_t h = tt_hash4(seed, (uint64_t)rank, i, 3);
        /* near: for half of the elements (the same ones on every rank) every rank's
         * exponent is within one of a shared base, so sums round in the last bit. */
        bool close = near && (tt_hash4(seed, 0xc105e, i, 4) & 1);
        uint64_t base = tt_hash4(seed, 0xba5e, i, 5);
        if (dt == TIDE_FLOAT16 || dt == TIDE_BFLOAT16) {
            unsigned ebits = dt == TIDE_FLOAT16 ? 5 : 8, mbits = 15 - ebits;
            uint32_t emax = (1u << ebits) - 1; /* the Inf/NaN exponent */
            uint32_t s = (uint32_t)(h >> 63);
            uint32_t m = (uint32_t)h & ((1u << mbits) - 1);
            uint32_t e = (uint32_t)(h >> 20) & emax;
            if (close) e = 1 + (uint32_t)below(base, emax - 3) + (uint32_t)((h >> 40) & 1);
            if (e == emax) e = emax - 1;
            if (clamp && e > emax - 3) e = emax - 3;
            uint16_t v = (uint16_t)((s << 15) | (e << mbits) | m);
            if (nozero_sign && v == 0x8000u) v = 0;
            put_u16(buf, i, v);
        } else if (dt == TIDE_FLOAT32) {
            uint32_t s = (uint32_t)(h >> 63), m = (uint32_t)h & 0x7fffffu;
            uint32_t e = (uint32_t)(h >> 30) & 0xffu;
            if (close) e = 1 + (uint32_t)below(base, 252) + (uint32_t)((h >> 40) & 1);
            if (e == 0xff) e = 0xfe;
            if (clamp && e > 0xfc) e = 0xfc;
            uint32_t v = (s << 31) | (e << 23) | m;
            if (nozero_sign && v == 0x80000000u) v = 0;
            memcpy((char *)buf + 4 * i, &v, 4);
        } else {
            uint64_t h2 = tt_hash4(seed, (uint64_t)rank, i, 6);
            uint64_t s = h >> 63, m = h2 & 0xfffffffffffffull;
            uint64_t e = (h >> 30) & 0x7ffu;
            if (close) e = 1 + below(base, 2044) + ((h >> 45) & 1);
            if (e == 0x7ff) e = 0x7fe;
            if (clamp && e > 0x7fc) e = 0x7fc;
            uint64_t v = (s << 63) | (e << 52) | m;
            if (nozero_sign && v == 0x8000000000000000ull) v = 0;
            memcpy((char *)buf + 8 * i, &v, 8);
        }
    }
}

static void gen_int(void *buf, tide_dtype_t dt, tide_op_t op, uint64_t seed, int rank, int size,
                    size_t count)
{
    for (size_t i = 0; i < count; i++) {
        uint64_t h = tt_hash4(seed, (uint64_t)rank, i, 7);
        if (op == TIDE_MIN || op == TIDE_MAX) {
            switch (dt) {
            case TIDE_INT32:
                put_i32(buf, i, (int32_t)(uint32_t)h);
                break;
            case TIDE_INT64:
                put_i64(buf, i, (int64_t)h);
                break;
            default:
                put_u8(buf, i, (uint8_t)h);
                break;
            }
        } else if (op == TIDE_PROD) {
            switch (dt) {
            case TIDE_INT32: /* 3^8 fits easily */
                put_i32(buf, i, rank < 8 ? (int32_t)sym(h, 3) : ((h & 1) ? -1 : 1));
                break;
            case TIDE_INT64: /* 200^8 < 2^63 */
                put_i64(buf, i, rank < 8 ? sym(h, 200) : ((h & 1) ? -1 : 1));
                break;
            default: {
                /* At most 7 factors of 2 per element (< 256); the element's
                 * designated rank contributes 0 or 1. */
                uint8_t v;
                if ((size_t)rank == i % (size_t)size)
                    v = below(h, 7) == 0 ? 0 : 1;
                else
                    v = (rank < 8 && (h >> 9 & 1)) ? 2 : 1;
                put_u8(buf, i, v);
                break;
            }
            }
        } else { /* SUM, AVG: partial sums stay in range, negative values included */
            switch (dt) {
            case TIDE_INT32:
                put_i32(buf, i, (int32_t)sym(h, ((int64_t)1 << 30) / size));
                break;
            case TIDE_INT64:
                put_i64(buf, i, sym(h, ((int64_t)1 << 60) / size));
                break;
            default:
                put_u8(buf, i, (uint8_t)below(h, (uint64_t)(255 / size) + 1));
                break;
            }
        }
    }
}

void tt_gen(void *buf, tide_dtype_t dt, tide_op_t op, tt_regime_t regime, uint64_t case_seed,
            int rank, int size, size_t count)
{
    if (!tt_is_float(dt)) {
        gen_int(buf, dt, op, case_seed, rank, size, count);
        return;
    }
    if (op == TIDE_MIN || op == TIDE_MAX) {
        gen_bits_float(buf, dt, case_seed, rank, count, true, false, false);
        return;
    }
    if (regime == TT_ROUND) {
        gen_bits_float(buf, dt, case_seed, rank, count, false, op == TIDE_AVG, true);
        return;
    }
    if (op == TIDE_PROD)
        gen_prod_float(buf, dt, case_seed, rank, count);
    else
        gen_sum_float(buf, dt, case_seed, rank, size, count);
}

/* ---------------------------------------------------------------- reference */

int tt_refbuf_reserve(tt_refbuf_t *rb, size_t count)
{
    if (count <= rb->cap && rb->ref) return 0;
    tt_refbuf_free(rb);
    size_t n = count ? count : 1;
    rb->ref = malloc(n * 8);
    rb->tol = malloc(n * sizeof(double));
    rb->scratch = malloc(n * 8);
    rb->acc = malloc(n * 8);
    rb->cap = n;
    if (!rb->ref || !rb->tol || !rb->scratch || !rb->acc) {
        tt_refbuf_free(rb);
        return -1;
    }
    return 0;
}

void tt_refbuf_free(tt_refbuf_t *rb)
{
    free(rb->ref);
    free(rb->tol);
    free(rb->scratch);
    free(rb->acc);
    memset(rb, 0, sizeof *rb);
}

static float load_f(const void *buf, size_t i, tide_dtype_t dt)
{
    uint16_t u;
    float f;
    switch (dt) {
    case TIDE_FLOAT16:
        memcpy(&u, (const char *)buf + 2 * i, 2);
        return tt_f16_to_f32(u);
    case TIDE_BFLOAT16:
        memcpy(&u, (const char *)buf + 2 * i, 2);
        return tt_bf16_to_f32(u);
    default:
        memcpy(&f, (const char *)buf + 4 * i, 4);
        return f;
    }
}

static int64_t load_i(const void *buf, size_t i, tide_dtype_t dt)
{
    int32_t v32;
    int64_t v64;
    switch (dt) {
    case TIDE_INT32:
        memcpy(&v32, (const char *)buf + 4 * i, 4);
        return v32;
    case TIDE_INT64:
        memcpy(&v64, (const char *)buf + 8 * i, 8);
        return v64;
    default:
        return ((const uint8_t *)buf)[i];
    }
}

/* The unit roundoff of a float dtype (half an ulp at 1). */
static double unit_roundoff(tide_dtype_t dt)
{
    switch (dt) {
    case TIDE_FLOAT16:
        return ldexp(1.0, -11);
    case TIDE_BFLOAT16:
        return ldexp(1.0, -8);
    case TIDE_FLOAT32:
        return ldexp(1.0, -24);
    default:
        return ldexp(1.0, -53);
    }
}

static double denorm_min(tide_dtype_t dt)
{
    switch (dt) {
    case TIDE_FLOAT16:
        return ldexp(1.0, -24);
    case TIDE_BFLOAT16:
        return ldexp(1.0, -133);
    case TIDE_FLOAT32:
        return ldexp(1.0, -149);
    default:
        return ldexp(1.0, -1074);
    }
}

void tt_reference(tt_refbuf_t *rb, tide_dtype_t dt, tide_op_t op, tt_regime_t regime,
                  uint64_t case_seed, int size, size_t count)
{
    bool avg_tol = (op == TIDE_AVG && tt_is_float(dt));
    for (size_t i = 0; i < count; i++)
        rb->tol[i] = 0.0;
    if (dt == TIDE_FLOAT64) {
        double *acc = rb->acc;
        for (int r = 0; r < size; r++) {
            tt_gen(rb->scratch, dt, op, regime, case_seed, r, size, count);
            const double *x = rb->scratch;
            for (size_t i = 0; i < count; i++) {
                double v = x[i];
                if (avg_tol) rb->tol[i] += fabs(v);
                if (r == 0) {
                    acc[i] = v;
                    continue;
                }
                switch (op) {
                case TIDE_SUM:
                case TIDE_AVG:
                    acc[i] += v;
                    break;
                case TIDE_PROD:
                    acc[i] *= v;
                    break;
                case TIDE_MIN:
                    acc[i] = v < acc[i] ? v : acc[i];
                    break;
                default:
                    acc[i] = v > acc[i] ? v : acc[i];
                    break;
                }
            }
        }
        for (size_t i = 0; i < count; i++) {
            double v = acc[i];
            if (op == TIDE_AVG) v = v / (double)size;
            put_f64(rb->ref, i, v);
        }
    } else if (tt_is_float(dt)) {
        /* float32, and the 16-bit floats reduced in float32 (tide.h). */
        float *acc = rb->acc;
        for (int r = 0; r < size; r++) {
            tt_gen(rb->scratch, dt, op, regime, case_seed, r, size, count);
            for (size_t i = 0; i < count; i++) {
                float v = load_f(rb->scratch, i, dt);
                if (avg_tol) rb->tol[i] += fabs((double)v);
                if (r == 0) {
                    acc[i] = v;
                    continue;
                }
                switch (op) {
                case TIDE_SUM:
                case TIDE_AVG:
                    acc[i] += v;
                    break;
                case TIDE_PROD:
                    acc[i] *= v;
                    break;
                case TIDE_MIN:
                    acc[i] = v < acc[i] ? v : acc[i];
                    break;
                default:
                    acc[i] = v > acc[i] ? v : acc[i];
                    break;
                }
            }
        }
        for (size_t i = 0; i < count; i++) {
            float v = acc[i];
            if (op == TIDE_AVG) v = v / (float)size;
            switch (dt) {
            case TIDE_FLOAT16:
                put_u16(rb->ref, i, tt_f32_to_f16(v));
                break;
            case TIDE_BFLOAT16:
                put_u16(rb->ref, i, tt_f32_to_bf16(v));
                break;
            default:
                put_f32(rb->ref, i, v);
                break;
            }
        }
    } else {
        int64_t *acc = rb->acc;
        for (int r = 0; r < size; r++) {
            tt_gen(rb->scratch, dt, op, regime, case_seed, r, size, count);
            for (size_t i = 0; i < count; i++) {
                int64_t v = load_i(rb->scratch, i, dt);
                if (r == 0) {
                    acc[i] = v;
                    continue;
                }
                switch (op) {
                case TIDE_SUM:
                case TIDE_AVG:
                    acc[i] += v;
                    break;
                case TIDE_PROD:
                    acc[i] *= v;
                    break;
                case TIDE_MIN:
                    acc[i] = v < acc[i] ? v : acc[i];
                    break;
                default:
                    acc[i] = v > acc[i] ? v : acc[i];
                    break;
                }
            }
        }
        for (size_t i = 0; i < count; i++) {
            int64_t v = acc[i];
            if (op == TIDE_AVG) v = v / size; /* C division truncates toward zero, as tide.h says */
            switch (dt) {
            case TIDE_INT32:
                put_i32(rb->ref, i, (int32_t)v);
                break;
            case TIDE_INT64:
                put_i64(rb->ref, i, v);
                break;
            default:
                put_u8(rb->ref, i, (uint8_t)v);
                break;
            }
        }
    }
    if (avg_tol) {
        /* AVG may be computed as the sum divided by n, times 1/n, or (for the
         * 16-bit types) in float32 and then rounded: each way the error is at most
         * about (n + 1) unit roundoffs of the mean magnitude, plus the smallest
         * subnormal for underflow. A bit-exact result always passes. */
        double u = unit_roundoff(dt), dm = denorm_min(dt);
        for (size_t i = 0; i < count; i++)
            rb->tol[i] = (double)(size + 2) * u * rb->tol[i] / (double)size + 2 * dm;
    }
}

static double load_as_double(const void *buf, size_t i, tide_dtype_t dt)
{
    if (dt == TIDE_FLOAT64) {
        double d;
        memcpy(&d, (const char *)buf + 8 * i, 8);
        return d;
    }
    return (double)load_f(buf, i, dt);
}

void tt_format_elem(char *out, size_t n, const void *p, tide_dtype_t dt)
{
    size_t es = tt_esize(dt);
    uint64_t bits = 0;
    memcpy(&bits, p, es); /* little-endian: the low bytes */
    if (tt_is_float(dt))
        snprintf(out, n, "0x%0*" PRIx64 " (%.17g)", (int)(2 * es), bits, load_as_double(p, 0, dt));
    else
        snprintf(out, n, "0x%0*" PRIx64 " (%" PRId64 ")", (int)(2 * es), bits, load_i(p, 0, dt));
}

size_t tt_compare(const void *got, const tt_refbuf_t *rb, tide_dtype_t dt, size_t count,
                  const char *what)
{
    size_t es = tt_esize(dt), bad = 0;
    const char *g = got, *w = rb->ref;
    for (size_t i = 0; i < count; i++) {
        if (memcmp(g + i * es, w + i * es, es) == 0) continue;
        if (rb->tol && rb->tol[i] > 0) {
            double a = load_as_double(g, i, dt), b = load_as_double(w, i, dt);
            if (a == b || fabs(a - b) <= rb->tol[i]) continue;
        }
        if (bad < 4) {
            char gs[64], ws[64];
            tt_format_elem(gs, sizeof gs, g + i * es, dt);
            tt_format_elem(ws, sizeof ws, w + i * es, dt);
            tt_fail("%s: element %zu of %zu: got %s, want %s%s", what, i, count, gs, ws,
                    rb->tol && rb->tol[i] > 0 ? " (within tolerance)" : "");
        }
        bad++;
    }
    if (bad > 4) tt_fail("%s: %zu of %zu elements differ in all", what, bad, count);
    return bad;
}

/* ---------------------------------------------------------- guarded buffers */

static unsigned char guard_byte(size_t i)
{
    return (unsigned char)(0xa5u ^ (i * 29u));
}

int tt_buf_alloc(tt_buf_t *b, size_t bytes)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes + 2 * TT_GUARD) != 0) return -1;
    b->base = p;
    b->data = b->base + TT_GUARD;
    b->bytes = bytes;
    for (size_t i = 0; i < TT_GUARD; i++) {
        b->base[i] = guard_byte(i);
        b->base[TT_GUARD + bytes + i] = guard_byte(i + 7);
    }
    return 0;
}

void tt_buf_free(tt_buf_t *b)
{
    free(b->base);
    memset(b, 0, sizeof *b);
}

bool tt_buf_guards_ok(const tt_buf_t *b)
{
    for (size_t i = 0; i < TT_GUARD; i++)
        if (b->base[i] != guard_byte(i) || b->base[TT_GUARD + b->bytes + i] != guard_byte(i + 7))
            return false;
    return true;
}

static uint64_t pattern_word(uint64_t tag, size_t w)
{
    return tt_hash4(tag, 0x9a77e4, w, 8);
}

void tt_buf_fill_pattern(tt_buf_t *b, uint64_t tag)
{
    unsigned char *d = b->data;
    for (size_t off = 0; off < b->bytes; off += 8) {
        uint64_t v = pattern_word(tag, off / 8);
        size_t n = b->bytes - off < 8 ? b->bytes - off : 8;
        memcpy(d + off, &v, n);
    }
}

bool tt_buf_has_pattern(const tt_buf_t *b, uint64_t tag)
{
    const unsigned char *d = b->data;
    for (size_t off = 0; off < b->bytes; off += 8) {
        uint64_t v = pattern_word(tag, off / 8);
        size_t n = b->bytes - off < 8 ? b->bytes - off : 8;
        if (memcmp(d + off, &v, n) != 0) return false;
    }
    return true;
}

/* ---------------------------------------------------------------- reporting */

static void vreport(const char *kind, const char *fmt, va_list ap)
{
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (tt_rank >= 0)
        fprintf(stderr, "[r%d] %s%s\n", tt_rank, kind, msg);
    else
        fprintf(stderr, "%s%s\n", kind, msg);
    fflush(stderr);
}

void tt_fail(const char *fmt, ...)
{
    tt_failures++;
    if (tt_failures > 60) {
        if (tt_failures == 61) fprintf(stderr, "[r%d] (further failures not shown)\n", tt_rank);
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    vreport("FAIL: ", fmt, ap);
    va_end(ap);
}

void tt_note(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vreport("", fmt, ap);
    va_end(ap);
}

const char *tt_rcname(int rc)
{
    const char *n = tide_errname(rc);
    return n ? n : "(null name)";
}

bool tt_expect_rc(int rc, int want, const char *what)
{
    if (rc == want) return true;
    tt_fail("%s: returned %d %s, want %d %s", what, rc, tt_rcname(rc), want, tt_rcname(want));
    return false;
}

/* ------------------------------------------------------ time, watchdog, scale */

double tt_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void tt_sleep(double seconds)
{
    struct timespec ts;
    ts.tv_sec = (time_t)seconds;
    ts.tv_nsec = (long)((seconds - (double)ts.tv_sec) * 1e9);
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static char watchdog_msg[512];
static volatile sig_atomic_t watchdog_len;

static void watchdog_fire(int sig)
{
    (void)sig;
    ssize_t w = write(STDERR_FILENO, watchdog_msg, (size_t)watchdog_len);
    (void)w;
    _exit(TT_EXIT_HANG);
}

void tt_watchdog(unsigned seconds, const char *what)
{
    static bool installed;
    if (!installed) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = watchdog_fire;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGALRM, &sa, NULL);
        installed = true;
    }
    alarm(0);
    if (seconds == 0) return;
    int n = snprintf(watchdog_msg, sizeof watchdog_msg,
                     "[r%d] HANG: no progress for %u s in %s (watchdog)\n", tt_rank, seconds, what);
    watchdog_len = n < 0 ? 0 : (n >= (int)sizeof watchdog_msg ? (int)sizeof watchdog_msg - 1 : n);
    alarm(seconds);
}

double tt_scale(void)
{
    const char *s = getenv("TIDE_TEST_SCALE");
    if (!s || !*s) return 1.0;
    double v = strtod(s, NULL);
    if (!(v > 0.0)) return 1.0;
    return v > 1.0 ? 1.0 : v;
}

size_t tt_scaled_count(size_t count, size_t min)
{
    size_t c = (size_t)((double)count * tt_scale());
    if (c < min) c = min;
    return c | 1u;
}

const char *tt_opt(int argc, char **argv, const char *name, const char *dflt)
{
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0) return argv[i + 1];
    return dflt;
}

long tt_opt_long(int argc, char **argv, const char *name, long dflt)
{
    const char *v = tt_opt(argc, argv, name, NULL);
    return v ? strtol(v, NULL, 0) : dflt;
}
