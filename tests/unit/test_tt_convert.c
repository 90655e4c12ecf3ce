/*
 * test_tt_convert.c - checks the test suite's own float16/bfloat16 conversions
 * (tests/common/tt.c), which the multi-rank references rely on. They are checked
 * against properties rather than against libtide: every 16-bit pattern round-trips,
 * and every float32 converts to the nearest 16-bit value with ties to even (found by
 * comparing the neighbours in double precision), overflowing to Inf past the last
 * half-ulp. Where the compiler has _Float16, its conversion is a second oracle.
 * Also checks the input generator's exactness promise on a sample.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "tt.h"

static uint32_t fbits(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    return x;
}

static float bitsf(uint32_t x)
{
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static void test_f16_roundtrip_all(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = tt_f16_to_f32((uint16_t)h);
        bool nan = ((h >> 10) & 0x1f) == 0x1f && (h & 0x3ff);
        if (nan) {
            assert_true(isnan(f));
            continue;
        }
        if (tt_f32_to_f16(f) != h)
            fail_msg("f16 0x%04x -> %a -> 0x%04x", h, (double)f, tt_f32_to_f16(f));
    }
    assert_true(tt_f16_to_f32(0x3c00) == 1.0f);
    assert_true(tt_f16_to_f32(0x7bff) == 65504.0f);
    assert_true(tt_f16_to_f32(0x0001) == ldexpf(1.0f, -24));
    assert_true(tt_f16_to_f32(0xc000) == -2.0f);
}

static void test_bf16_roundtrip_all(void **state)
{
    (void)state;
    for (uint32_t b = 0; b < 0x10000; b++) {
        float f = tt_bf16_to_f32((uint16_t)b);
        if (isnan(f)) continue;
        if (tt_f32_to_bf16(f) != b)
            fail_msg("bf16 0x%04x -> %a -> 0x%04x", b, (double)f, tt_f32_to_bf16(f));
    }
}

/* Is h the correctly rounded 16-bit value of x, judged in double precision? */
static bool nearest_even_ok(float x, uint16_t h, float (*to32)(uint16_t), double maxfin,
                            double halfulp_at_max)
{
    double xd = (double)x;
    double ad = fabs(xd);
    double got = (double)to32(h);
    if (ad >= maxfin + halfulp_at_max) /* overflow: to Inf, also at the exact tie */
        return isinf(got) && (got > 0) == (xd > 0);
    if (isinf(got)) return false;
    /* The neighbours of h of the same sign. */
    uint16_t mag = h & 0x7fff, sign = h & 0x8000;
    double err = fabs(got - xd);
    if (mag > 0) {
        double below = (double)to32((uint16_t)(sign | (mag - 1)));
        if (fabs(below - xd) < err || (fabs(below - xd) == err && (h & 1))) return false;
    }
    double above = (double)to32((uint16_t)(sign | (mag + 1)));
    if (!isinf(above) && (fabs(above - xd) < err || (fabs(above - xd) == err && (h & 1))))
        return false;
    /* The sign is kept, zero included. */
    return signbit(got) == signbit(xd);
}

static void test_f32_to_16_rounding(void **state)
{
    (void)state;
    /* Every float32 near the 16-bit ranges' interesting spots plus a pseudo-random
     * sweep of the whole float32 space. */
    const double f16_max = 65504.0, f16_half = 16.0;
    const double bf_max = (double)bitsf(0x7f7f0000u), bf_half = ldexp(1.0, 127 - 8);
    for (uint64_t i = 0; i < 4000000; i++) {
        uint32_t x;
        if (i < 2000000)
            x = (uint32_t)tt_hash4(99, i, 0, 0);
        else /* exponents inside binary16's range, where ties are likely */
            x = (uint32_t)((tt_hash4(98, i, 0, 0) & 0x81ffffffu) | (((i % 45) + 98) << 23));
        if ((x & 0x7f800000u) == 0x7f800000u) continue;
        float f = bitsf(x);
        uint16_t h = tt_f32_to_f16(f), b = tt_f32_to_bf16(f);
        if (!nearest_even_ok(f, h, tt_f16_to_f32, f16_max, f16_half))
            fail_msg("f16: %a (0x%08x) -> 0x%04x (%a) is not the nearest-even value", (double)f, x,
                     h, (double)tt_f16_to_f32(h));
        if (!nearest_even_ok(f, b, tt_bf16_to_f32, bf_max, bf_half))
            fail_msg("bf16: %a (0x%08x) -> 0x%04x (%a) is not the nearest-even value", (double)f, x,
                     b, (double)tt_bf16_to_f32(b));
#ifdef __FLT16_MAX__
        _Float16 c = (_Float16)f;
        uint16_t cb;
        memcpy(&cb, &c, 2);
        if (cb != h)
            fail_msg("f16: %a -> 0x%04x, the compiler's _Float16 gives 0x%04x", (double)f, h, cb);
#endif
    }
    /* Ties, spelled out. */
    assert_int_equal(tt_f32_to_f16(2049.0f), 0x6800);  /* 2048: even */
    assert_int_equal(tt_f32_to_f16(2051.0f), 0x6802);  /* 2052: even */
    assert_int_equal(tt_f32_to_f16(65519.0f), 0x7bff); /* below the overflow tie */
    assert_int_equal(tt_f32_to_f16(65520.0f), 0x7c00); /* the tie goes to Inf */
    assert_int_equal(tt_f32_to_f16(ldexpf(1.0f, -25)), 0x0000);
    assert_int_equal(tt_f32_to_f16(ldexpf(1.5f, -25)), 0x0001);
    assert_int_equal(tt_f32_to_bf16(bitsf(0x3f808000u)), 0x3f80); /* tie to even */
    assert_int_equal(tt_f32_to_bf16(bitsf(0x3f818000u)), 0x3f82);
    assert_int_equal(tt_f32_to_bf16(bitsf(0x7f7fffffu)), 0x7f80); /* overflow to Inf */
    (void)fbits;
}

/* The generator promises exact partial results for TT_EXACT: check that summing
 * or multiplying in a different order (reversed, in double) gives the same bits. */
static void test_generator_exact(void **state)
{
    (void)state;
    const size_t count = 5000;
    static unsigned char in[8][5000 * 8];
    for (int n = 1; n <= 8; n++)
        for (int d = 0; d < TIDE_DTYPE_COUNT; d++)
            for (int o = 0; o < TIDE_OP_COUNT; o++) {
                tide_dtype_t dt = (tide_dtype_t)d;
                tide_op_t op = (tide_op_t)o;
                if (!tt_is_float(dt) || op == TIDE_AVG || op == TIDE_MIN || op == TIDE_MAX)
                    continue;
                for (int r = 0; r < n; r++)
                    tt_gen(in[r], dt, op, TT_EXACT, 5, r, n, count);
                tt_refbuf_t rb;
                memset(&rb, 0, sizeof rb);
                assert_int_equal(tt_refbuf_reserve(&rb, count), 0);
                tt_reference(&rb, dt, op, TT_EXACT, 5, n, count);
                for (size_t i = 0; i < count; i++) {
                    /* Reverse order, in double, rounded once at the end, with every
                     * partial checked to be representable in the dtype. */
                    double acc = 0;
                    for (int r = n - 1; r >= 0; r--) {
                        double v;
                        uint16_t u;
                        float f;
                        switch (dt) {
                        case TIDE_FLOAT16:
                            memcpy(&u, in[r] + 2 * i, 2);
                            v = tt_f16_to_f32(u);
                            break;
                        case TIDE_BFLOAT16:
                            memcpy(&u, in[r] + 2 * i, 2);
                            v = tt_bf16_to_f32(u);
                            break;
                        case TIDE_FLOAT32:
                            memcpy(&f, in[r] + 4 * i, 4);
                            v = f;
                            break;
                        default:
                            memcpy(&v, in[r] + 8 * i, 8);
                            break;
                        }
                        acc = (r == n - 1) ? v : (op == TIDE_PROD ? acc * v : acc + v);
                        double back;
                        switch (dt) {
                        case TIDE_FLOAT16:
                            back = tt_f16_to_f32(tt_f32_to_f16((float)acc));
                            break;
                        case TIDE_BFLOAT16:
                            back = tt_bf16_to_f32(tt_f32_to_bf16((float)acc));
                            break;
                        case TIDE_FLOAT32:
                            back = (float)acc;
                            break;
                        default:
                            back = acc;
                            break;
                        }
                        if (back != acc)
                            fail_msg("%s %s n=%d element %zu: partial %a is not exact",
                                     tt_dtype_name(dt), tt_op_name(op), n, i, acc);
                    }
                    /* ... and the reference, computed in the other order, agrees. */
                    unsigned char want[8];
                    uint16_t u16;
                    float f32;
                    switch (dt) {
                    case TIDE_FLOAT16:
                        u16 = tt_f32_to_f16((float)acc);
                        memcpy(want, &u16, 2);
                        break;
                    case TIDE_BFLOAT16:
                        u16 = tt_f32_to_bf16((float)acc);
                        memcpy(want, &u16, 2);
                        break;
                    case TIDE_FLOAT32:
                        f32 = (float)acc;
                        memcpy(want, &f32, 4);
                        break;
                    default:
                        memcpy(want, &acc, 8);
                        break;
                    }
                    size_t es = tt_esize(dt);
                    if (memcmp(want, (unsigned char *)rb.ref + i * es, es) != 0)
                        fail_msg("%s %s n=%d element %zu: the reference disagrees with the "
                                 "reversed-order sum",
                                 tt_dtype_name(dt), tt_op_name(op), n, i);
                }
                tt_refbuf_free(&rb);
            }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16_roundtrip_all),
        cmocka_unit_test(test_bf16_roundtrip_all),
        cmocka_unit_test(test_f32_to_16_rounding),
        cmocka_unit_test(test_generator_exact),
    };
    return cmocka_run_group_tests_name("tt conversions (the tests' own reference)", tests, NULL,
                                       NULL);
}
