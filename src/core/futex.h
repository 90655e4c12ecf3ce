/*
 * futex.h - waiting on a 32-bit counter in memory shared between processes.
 *
 * Waits spin briefly, then block (STYLE.md 8): on a machine with fewer cores than
 * ranks, a rank that spins holds the core the rank it waits for needs. The waker
 * only makes the system call when someone announced that it sleeps.
 */
#ifndef TIDE_CORE_FUTEX_H
#define TIDE_CORE_FUTEX_H

#include <stdatomic.h>
#include <stdint.h>

/* A counter others wait on, with the number of sleepers beside it. */
typedef struct {
    _Atomic uint32_t value;
    _Atomic uint32_t sleepers;
} tide__futex_t;

/* Blocks while f->value == expected, for at most timeout_ns. Returns at once if it
 * differs. Spurious returns are allowed; callers re-check. */
void tide__futex_wait(tide__futex_t *f, uint32_t expected, uint64_t timeout_ns);

/* Stores value (release) and wakes every sleeper. */
void tide__futex_store(tide__futex_t *f, uint32_t value);

/* Wakes every sleeper without changing the value (used by abort). */
void tide__futex_wake_all(tide__futex_t *f);

static inline void tide__cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

#endif
