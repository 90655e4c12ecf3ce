/*
 * test_dtype.c - tide_dtype_size for every dtype and for values that are not
 * dtypes, the frozen enum values, tide_version's format, and the NULL-comm queries
 * whose results the header fixes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "tide.h"

static void test_dtype_size_known(void **state)
{
    (void)state;
    assert_int_equal(tide_dtype_size(TIDE_FLOAT32), 4);
    assert_int_equal(tide_dtype_size(TIDE_FLOAT64), 8);
    assert_int_equal(tide_dtype_size(TIDE_FLOAT16), 2);
    assert_int_equal(tide_dtype_size(TIDE_BFLOAT16), 2);
    assert_int_equal(tide_dtype_size(TIDE_INT32), 4);
    assert_int_equal(tide_dtype_size(TIDE_INT64), 8);
    assert_int_equal(tide_dtype_size(TIDE_UINT8), 1);
}

static void test_dtype_size_unknown(void **state)
{
    (void)state;
    const int bad[] = {TIDE_DTYPE_COUNT, TIDE_DTYPE_COUNT + 1, -1, -1000, 1000, 0x7fffffff};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t s = tide_dtype_size((tide_dtype_t)bad[i]);
        if (s != 0) fail_msg("tide_dtype_size(%d) is %zu, want 0 for an unknown dtype", bad[i], s);
    }
}

static void test_enum_values_frozen(void **state)
{
    (void)state;
    /* The wire format and the Python binding depend on these numbers. */
    assert_int_equal(TIDE_FLOAT32, 0);
    assert_int_equal(TIDE_FLOAT64, 1);
    assert_int_equal(TIDE_FLOAT16, 2);
    assert_int_equal(TIDE_BFLOAT16, 3);
    assert_int_equal(TIDE_INT32, 4);
    assert_int_equal(TIDE_INT64, 5);
    assert_int_equal(TIDE_UINT8, 6);
    assert_int_equal(TIDE_DTYPE_COUNT, 7);
    assert_int_equal(TIDE_SUM, 0);
    assert_int_equal(TIDE_AVG, 1);
    assert_int_equal(TIDE_MIN, 2);
    assert_int_equal(TIDE_MAX, 3);
    assert_int_equal(TIDE_PROD, 4);
    assert_int_equal(TIDE_OP_COUNT, 5);
}

static void test_version(void **state)
{
    (void)state;
    const char *v = tide_version();
    assert_non_null(v);
    unsigned a, b, c;
    char rest;
    if (sscanf(v, "%u.%u.%u%c", &a, &b, &c, &rest) != 3)
        fail_msg("tide_version() is \"%s\", want MAJOR.MINOR.PATCH", v);
#ifdef TIDE_EXPECTED_VERSION
    assert_string_equal(v, TIDE_EXPECTED_VERSION);
#endif
}

static void test_null_comm_queries(void **state)
{
    (void)state;
    assert_int_equal(tide_rank(NULL), -1);
    assert_int_equal(tide_size(NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtype_size_known),   cmocka_unit_test(test_dtype_size_unknown),
        cmocka_unit_test(test_enum_values_frozen), cmocka_unit_test(test_version),
        cmocka_unit_test(test_null_comm_queries),
    };
    return cmocka_run_group_tests_name("dtype", tests, NULL, NULL);
}
