/* log.c -- the log emitter.  The process-wide level and subsystem mask are
 * read from the environment once; they are the only process-wide state in
 * flexcoll and never change after the first message. */
#include "common/log.h"
#include "common/config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const level_names[] = {"ERROR", "WARN", "INFO", "DEBUG", "TRACE"};
static const char *const subsys_names[] = {"init", "net", "coll", "compress",
                                           "ctrl", "train", "tool"};

static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static int log_level = FLX_LOG_WARN;
static unsigned log_subsys_mask = ~0u;
static char log_host[64];

const char *flx_log_level_name(flx_log_level_t level)
{
    return (unsigned)level <= FLX_LOG_TRACE ? level_names[level] : "?";
}

const char *flx_subsys_name(flx_subsys_t subsys)
{
    return (unsigned)subsys < FLX_SUBSYS_COUNT ? subsys_names[subsys] : "?";
}

static void log_init(void)
{
    int level;
    unsigned mask;

    if (gethostname(log_host, sizeof(log_host)) != 0)
        strcpy(log_host, "?");
    log_host[sizeof(log_host) - 1] = '\0';
    /* Malformed values are reported by flx_config_load (FLX_ERR_CONFIG);
     * here they leave the defaults in place. */
    if (flx_config_parse_log_level(getenv("FLX_LOG_LEVEL"), &level) == 0)
        log_level = level;
    if (flx_config_parse_subsys(getenv("FLX_LOG_SUBSYS"), &mask) == 0)
        log_subsys_mask = mask;
}

int flx_log_enabled(flx_log_level_t level, flx_subsys_t subsys)
{
    pthread_once(&log_once, log_init);
    if ((int)level > log_level)
        return 0;
    /* errors always print: they say what failed and where */
    return level == FLX_LOG_ERROR || (log_subsys_mask & (1u << subsys));
}

void flx_log_emit(flx_log_level_t level, flx_subsys_t subsys, int rank,
                  const char *file, int line, const char *fmt, ...)
{
    int saved_errno = errno;
    char msg[1024];
    char head[160];
    const char *base = strrchr(file, '/');
    va_list ap;

    pthread_once(&log_once, log_init);
    if (rank >= 0)
        snprintf(head, sizeof(head), "%s:%d rank %d %s %s", log_host,
                 (int)getpid(), rank, subsys_names[subsys], level_names[level]);
    else
        snprintf(head, sizeof(head), "%s:%d rank - %s %s", log_host,
                 (int)getpid(), subsys_names[subsys], level_names[level]);
    errno = saved_errno;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    /* one write per line so that lines of concurrent ranks do not mix */
    if (level >= FLX_LOG_DEBUG)
        fprintf(stderr, "%s %s (%s:%d)\n", head, msg, base ? base + 1 : file, line);
    else
        fprintf(stderr, "%s %s\n", head, msg);
    errno = saved_errno;
}
