/*
 * log.h - leveled logging to stderr, prefixed with the rank so that the
 * interleaved output of many workers stays readable. TIDE_LOG_LEVEL picks the
 * level (error, warn, info, debug); the default is warn.
 */
#ifndef TIDE_CORE_LOG_H
#define TIDE_CORE_LOG_H

enum tide__log_level { TIDE_LOG_ERROR = 0, TIDE_LOG_WARN, TIDE_LOG_INFO, TIDE_LOG_DEBUG };

int tide__log_enabled(enum tide__log_level level);
void tide__log(enum tide__log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Sets the "[tide rank N]" prefix; a negative rank means "[tide]". */
void tide__log_set_rank(int rank);
void tide__log_set_prefix(const char *who);

#define TIDE_LOG_AT(lvl, ...)                                                                      \
    do {                                                                                           \
        if (tide__log_enabled(lvl)) tide__log(lvl, __VA_ARGS__);                                   \
    } while (0)
#define TIDE_ERROR(...) TIDE_LOG_AT(TIDE_LOG_ERROR, __VA_ARGS__)
#define TIDE_WARN(...) TIDE_LOG_AT(TIDE_LOG_WARN, __VA_ARGS__)
#define TIDE_INFO(...) TIDE_LOG_AT(TIDE_LOG_INFO, __VA_ARGS__)
#define TIDE_DEBUG(...) TIDE_LOG_AT(TIDE_LOG_DEBUG, __VA_ARGS__)

#endif
