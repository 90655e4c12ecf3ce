/*
 * test_errors.c - tide_strerror and tide_errname over every code of TIDE_ERRNO_MAP,
 * and over codes that are not in it.
 *
 * The table in tide.h is the contract (codes are frozen once published), so the
 * test walks the same table: every code has its own non-empty message, equal to the
 * table's, and its own name "TIDE_<NAME>"; names and messages are distinct; codes
 * are 0 for OK and distinct negatives otherwise; unknown codes still get a message.
 */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "tide.h"

typedef struct {
    int code;
    int value;
    const char *name;
    const char *msg;
} entry_t;

#define ENTRY(name, value, msg) {TIDE_##name, (value), "TIDE_" #name, (msg)},
static const entry_t table[] = {TIDE_ERRNO_MAP(ENTRY)};
#undef ENTRY
#define NTABLE (sizeof table / sizeof table[0])

static void test_codes_are_frozen_values(void **state)
{
    (void)state;
    assert_int_equal(TIDE_OK, 0);
    for (size_t i = 0; i < NTABLE; i++) {
        assert_int_equal(table[i].code, table[i].value);
        if (i > 0) assert_true(table[i].code < 0);
        for (size_t j = 0; j < i; j++)
            assert_int_not_equal(table[i].code, table[j].code);
    }
    /* The ones the collectives use, spelled out: renumbering them breaks users. */
    assert_int_equal(TIDE_EINVAL, -1);
    assert_int_equal(TIDE_EPEERLOST, -3);
    assert_int_equal(TIDE_EABORTED, -4);
    assert_int_equal(TIDE_EMISMATCH, -5);
}

static void test_strerror_every_code(void **state)
{
    (void)state;
    for (size_t i = 0; i < NTABLE; i++) {
        const char *m = tide_strerror(table[i].code);
        assert_non_null(m);
        assert_true(m[0] != '\0');
        if (strcmp(m, table[i].msg) != 0)
            fail_msg("tide_strerror(%s) is \"%s\", the table says \"%s\"", table[i].name, m,
                     table[i].msg);
        /* A static message: the same string every time. */
        assert_ptr_equal(m, tide_strerror(table[i].code));
        for (size_t j = 0; j < i; j++)
            if (strcmp(m, tide_strerror(table[j].code)) == 0)
                fail_msg("%s and %s share the message \"%s\"", table[i].name, table[j].name, m);
    }
}

static void test_errname_every_code(void **state)
{
    (void)state;
    for (size_t i = 0; i < NTABLE; i++) {
        const char *n = tide_errname(table[i].code);
        if (!n) fail_msg("tide_errname(%d) is NULL, want %s", table[i].code, table[i].name);
        if (strcmp(n, table[i].name) != 0)
            fail_msg("tide_errname(%d) is \"%s\", want \"%s\"", table[i].code, n, table[i].name);
        for (size_t j = 0; j < i; j++) {
            const char *o = tide_errname(table[j].code);
            if (o && strcmp(n, o) == 0)
                fail_msg("codes %d and %d share the name %s", table[i].code, table[j].code, n);
        }
    }
}

static bool is_known_name(const char *n)
{
    for (size_t i = 0; i < NTABLE; i++)
        if (strcmp(n, table[i].name) == 0) return true;
    return false;
}

static void test_unknown_codes(void **state)
{
    (void)state;
    int last = table[NTABLE - 1].code;
    const int unknown[] = {1, 2, 100, last - 1, last - 1000, INT_MIN, INT_MAX};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        const char *m = tide_strerror(unknown[i]);
        if (!m) fail_msg("tide_strerror(%d) is NULL (the header says never)", unknown[i]);
        assert_true(m[0] != '\0');
        if (strcmp(m, tide_strerror(TIDE_OK)) == 0)
            fail_msg("tide_strerror(%d) claims success: \"%s\"", unknown[i], m);
        /* The header does not say what name an unknown code has; it must not be
         * the name of a real one. */
        const char *n = tide_errname(unknown[i]);
        if (n && is_known_name(n))
            fail_msg("tide_errname(%d) is the name of a real code: %s", unknown[i], n);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codes_are_frozen_values),
        cmocka_unit_test(test_strerror_every_code),
        cmocka_unit_test(test_errname_every_code),
        cmocka_unit_test(test_unknown_codes),
    };
    return cmocka_run_group_tests_name("errors", tests, NULL, NULL);
}
