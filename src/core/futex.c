/* futex.c - see futex.h. Shared (not private) futexes: the words live in
 * memory mapped by several processes. */
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/futex.h"

void tide__futex_wait(tide__futex_t *f, uint32_t expected, uint64_t timeout_ns)
{
    atomic_fetch_add(&f->sleepers, 1);
    /* The increment above is sequentially consistent with the waker's store and
     * load of sleepers, so either the waker sees us or we see its new value. */
    if (atomic_load(&f->value) == expected) {
        struct timespec ts = {(time_t)(timeout_ns / 1000000000ull),
                              (long)(timeout_ns % 1000000000ull)};
        syscall(SYS_futex, (uint32_t *)&f->value, FUTEX_WAIT, expected, &ts, NULL, 0);
    }
    atomic_fetch_sub(&f->sleepers, 1);
}

void tide__futex_wake_all(tide__futex_t *f)
{
    if (atomic_load(&f->sleepers) > 0)
        syscall(SYS_futex, (uint32_t *)&f->value, FUTEX_WAKE, 0x7fffffff, NULL, NULL, 0);
}

void tide__futex_store(tide__futex_t *f, uint32_t value)
{
    atomic_store(&f->value, value);
    tide__futex_wake_all(f);
}
