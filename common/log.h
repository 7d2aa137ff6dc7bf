/* log.h -- leveled, per-subsystem logging.  Every line starts
 * "host:pid rank N subsys LEVEL".  Level and subsystems come from
 * FLX_LOG_LEVEL and FLX_LOG_SUBSYS, read once per process. */
#ifndef FLX_COMMON_LOG_H
#define FLX_COMMON_LOG_H

#include <stdarg.h>

typedef enum {
    FLX_LOG_ERROR = 0,
    FLX_LOG_WARN,
    FLX_LOG_INFO,
    FLX_LOG_DEBUG,
    FLX_LOG_TRACE
} flx_log_level_t;

typedef enum {
    FLX_SUBSYS_INIT = 0,
    FLX_SUBSYS_NET,
    FLX_SUBSYS_COLL,
    FLX_SUBSYS_COMPRESS,
    FLX_SUBSYS_CTRL,
    FLX_SUBSYS_TRAIN,
    FLX_SUBSYS_TOOL,
    FLX_SUBSYS_COUNT
} flx_subsys_t;

/* Is a message at this level and subsystem printed? */
int flx_log_enabled(flx_log_level_t level, flx_subsys_t subsys);
void flx_log_emit(flx_log_level_t level, flx_subsys_t subsys, int rank,
                  const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
const char *flx_log_level_name(flx_log_level_t level);
const char *flx_subsys_name(flx_subsys_t subsys);

/* rank is the caller's rank or -1 when it is not known yet.  %m works
 * (errno is preserved by the emitter). */
#define FLX_LOG(level, subsys, rank, ...)                                   \
    do {                                                                    \
        if (flx_log_enabled((level), (subsys)))                             \
            flx_log_emit((level), (subsys), (rank), __FILE__, __LINE__,     \
                         __VA_ARGS__);                                      \
    } while (0)

#define flx_error(ss, rank, ...) FLX_LOG(FLX_LOG_ERROR, FLX_SUBSYS_##ss, rank, __VA_ARGS__)
#define flx_warn(ss, rank, ...)  FLX_LOG(FLX_LOG_WARN,  FLX_SUBSYS_##ss, rank, __VA_ARGS__)
#define flx_info(ss, rank, ...)  FLX_LOG(FLX_LOG_INFO,  FLX_SUBSYS_##ss, rank, __VA_ARGS__)
#define flx_debug(ss, rank, ...) FLX_LOG(FLX_LOG_DEBUG, FLX_SUBSYS_##ss, rank, __VA_ARGS__)
#define flx_trace(ss, rank, ...) FLX_LOG(FLX_LOG_TRACE, FLX_SUBSYS_##ss, rank, __VA_ARGS__)

#endif
