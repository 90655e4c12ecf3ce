/* reduce.c - see reduce.h. The float32 sum loop is the hot path of every large
 * allreduce: plain loops over restrict pointers that the compiler vectorizes. */
#include <string.h>

#include "coll/reduce.h"

float tide__half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: normalize */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while (!(man & 0x400u));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t tide__float_to_half(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) /* inf or nan */
        return (uint16_t)(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0));
    if (absx >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
        return (uint16_t)(sign | 0x7c00u);
    if (absx < 0x38800000u) { /* result is subnormal or zero */
        if (absx < 0x33000000u) return (uint16_t)sign; /* < 2^-25: rounds to zero */
        uint32_t e = absx >> 23, man = (absx & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e; /* 14 + (113 - e) */
        uint32_t half = man >> shift, rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t h = ((absx >> 13) - ((127 - 15) << 10));
    uint32_t rem = absx & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

float tide__bf16_to_float(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t tide__float_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet nan */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

#define OP_SUM(a, b) ((a) + (b))
#define OP_PROD(a, b) ((a) * (b))
#define OP_MIN(a, b) ((b) < (a) ? (b) : (a))
#define OP_MAX(a, b) ((b) > (a) ? (b) : (a))

/* Unsigned twins make integer wrap-around defined. */
#define WRAP_SUM(T, U, a, b) ((T)((U)(a) + (U)(b)))
#define WRAP_PROD(T, U, a, b) ((T)((U)(a) * (U)(b)))

#define DEFINE_FLOAT_KERNELS(T, NAME)                                                              \
    static void NAME##_2(T *d, const T *a, const T *b, size_t n, tide_op_t op)                        \
    {                                                                                              \
        switch (op) {                                                                              \
        case TIDE_SUM:                                                                             \
        case TIDE_AVG:                                                                             \
            for (size_t i = 0; i < n; i++) d[i] = OP_SUM(a[i], b[i]);                              \
            break;                                                                                 \
        case TIDE_PROD:                                                                            \
            for (size_t i = 0; i < n; i++) d[i] = OP_PROD(a[i], b[i]);                             \
            break;                                                                                 \
        case TIDE_MIN:                                                                             \
            for (size_t i = 0; i < n; i++) d[i] = OP_MIN(a[i], b[i]);                              \
            break;                                                                                 \
        case TIDE_MAX:                                                                             \
            for (size_t i = 0; i < n; i++) d[i] = OP_MAX(a[i], b[i]);                              \
            break;                                                                                 \
        default:                                                                                   \
            break;                                                                                 \
        }                                                                                          \
    }

#define DEFINE_INT_KERNELS(T, U, NAME)                                                             \
    static void NAME##_2(T *d, const T *a, const T *b, size_t n, tide_op_t op)                        \
    {                                                                                              \
        switch (op) {                                                                              \
        case TIDE_SUM:                                                                             \
        case TIDE_AVG:                                                                             \
            for (size_t i = 0; i < n; i++) d[i] = WRAP_SUM(T, U, a[i], b[i]);                      \
            break;                                                                                 \
        case TIDE_PROD:                                                                            \
            for (size_t i = 0; i < n; i++) d[i] = WRAP_PROD(T, U, a[i], b[i]);                     \
            break;                                                                                 \
        case TIDE_MIN:                                                                             \
            for (size_t i = 0; i < n; i++) d[i] = OP_MIN(a[i], b[i]);                              \
            break;                                                                                 \
        case TIDE_MAX:                                                                             \
            for (size_t i = 0; i < n; i++) d[i] = OP_MAX(a[i], b[i]);                              \
            break;                                                                                 \
        default:                                                                                   \
            break;                                                                                 \
        }                                                                                          \
    }

/* No restrict: d may equal a or b exactly (in-place reduction). GCC versions the
 * loops on a run-time overlap check and still vectorizes them. */
DEFINE_FLOAT_KERNELS(float, f32)
DEFINE_FLOAT_KERNELS(double, f64)
DEFINE_INT_KERNELS(int32_t, uint32_t, i32)
DEFINE_INT_KERNELS(int64_t, uint64_t, i64)
DEFINE_INT_KERNELS(uint8_t, uint32_t, u8)

static float half_apply(float a, float b, tide_op_t op)
{
    switch (op) {
    case TIDE_PROD: return a * b;
    case TIDE_MIN: return OP_MIN(a, b);
    case TIDE_MAX: return OP_MAX(a, b);
    default: return a + b;
    }
}

#define BLOCK_BYTES 4096

void tide__reduce2(void *dst, const void *a, const void *b, size_t count, tide_dtype_t dtype,
                   tide_op_t op)
{
    size_t es = tide_dtype_size(dtype);
    if (!es || !count) return;
    if (dtype == TIDE_FLOAT16 || dtype == TIDE_BFLOAT16) {
        const uint16_t *x = a, *y = b;
        uint16_t *d = dst;
        int bf = dtype == TIDE_BFLOAT16;
        for (size_t i = 0; i < count; i++) {
            float fx = bf ? tide__bf16_to_float(x[i]) : tide__half_to_float(x[i]);
            float fy = bf ? tide__bf16_to_float(y[i]) : tide__half_to_float(y[i]);
            float r = half_apply(fx, fy, op);
            d[i] = bf ? tide__float_to_bf16(r) : tide__float_to_half(r);
        }
        return;
    }
    switch (dtype) {
    case TIDE_FLOAT32: f32_2(dst, a, b, count, op); break;
    case TIDE_FLOAT64: f64_2(dst, a, b, count, op); break;
    case TIDE_INT32: i32_2(dst, a, b, count, op); break;
    case TIDE_INT64: i64_2(dst, a, b, count, op); break;
    case TIDE_UINT8: u8_2(dst, a, b, count, op); break;
    default: break;
    }
}

static void finish_block(void *buf, size_t count, tide_dtype_t dtype, int n)
{
    switch (dtype) {
    case TIDE_FLOAT32: {
        float *p = buf;
        for (size_t i = 0; i < count; i++) p[i] /= (float)n;
        break;
    }
    case TIDE_FLOAT64: {
        double *p = buf;
        for (size_t i = 0; i < count; i++) p[i] /= (double)n;
        break;
    }
    case TIDE_FLOAT16: {
        uint16_t *p = buf;
        for (size_t i = 0; i < count; i++)
            p[i] = tide__float_to_half(tide__half_to_float(p[i]) / (float)n);
        break;
    }
    case TIDE_BFLOAT16: {
        uint16_t *p = buf;
        for (size_t i = 0; i < count; i++)
            p[i] = tide__float_to_bf16(tide__bf16_to_float(p[i]) / (float)n);
        break;
    }
    case TIDE_INT32: {
        int32_t *p = buf;
        for (size_t i = 0; i < count; i++) p[i] /= n;
        break;
    }
    case TIDE_INT64: {
        int64_t *p = buf;
        for (size_t i = 0; i < count; i++) p[i] /= n;
        break;
    }
    case TIDE_UINT8: {
        uint8_t *p = buf;
        for (size_t i = 0; i < count; i++) p[i] = (uint8_t)(p[i] / n);
        break;
    }
    default:
        break;
    }
}

void tide__reduce_finish(void *buf, size_t count, tide_dtype_t dtype, tide_op_t op, int n)
{
    if (op != TIDE_AVG || n <= 1 || !count) return;
    finish_block(buf, count, dtype, n);
}

void tide__reduce_n(void *dst, void *dst2, const void *const *srcs, int nsrc, size_t count,
                    tide_dtype_t dtype, tide_op_t op, int divisor)
{
    size_t es = tide_dtype_size(dtype);
    if (!es || !count || nsrc <= 0) return;
    if (dtype == TIDE_FLOAT16 || dtype == TIDE_BFLOAT16) {
        /* Widen once, reduce every source in float32, round once. Each element is
         * read from every source before it is written, so dst may alias any. */
        int bf = dtype == TIDE_BFLOAT16;
        uint16_t *d = dst, *d2 = dst2;
        for (size_t i = 0; i < count; i++) {
            const uint16_t *s0 = srcs[0];
            float acc = bf ? tide__bf16_to_float(s0[i]) : tide__half_to_float(s0[i]);
            for (int k = 1; k < nsrc; k++) {
                const uint16_t *sk = srcs[k];
                acc = half_apply(acc, bf ? tide__bf16_to_float(sk[i]) : tide__half_to_float(sk[i]),
                                 op);
            }
            if (op == TIDE_AVG && divisor > 1) acc /= (float)divisor;
            uint16_t r = bf ? tide__float_to_bf16(acc) : tide__float_to_half(acc);
            d[i] = r;
            if (d2) d2[i] = r;
        }
        return;
    }
    /* Blocked: the running result stays in an L1-resident block while every source
     * streams past it once; the block is then stored to dst (and dst2). Going
     * through the block also makes dst aliasing any source harmless. */
    _Alignas(64) unsigned char acc[BLOCK_BYTES];
    size_t per = BLOCK_BYTES / es;
    for (size_t off = 0; off < count; off += per) {
        size_t n = count - off < per ? count - off : per;
        size_t boff = off * es, nb = n * es;
        if (nsrc == 1) {
            memcpy(acc, (const unsigned char *)srcs[0] + boff, nb);
        } else {
            tide__reduce2(acc, (const unsigned char *)srcs[0] + boff,
                          (const unsigned char *)srcs[1] + boff, n, dtype, op);
            for (int k = 2; k < nsrc; k++)
                tide__reduce2(acc, acc, (const unsigned char *)srcs[k] + boff, n, dtype, op);
        }
        if (divisor > 1) tide__reduce_finish(acc, n, dtype, op, divisor);
        memcpy((unsigned char *)dst + boff, acc, nb);
        if (dst2) memcpy((unsigned char *)dst2 + boff, acc, nb);
    }
}
