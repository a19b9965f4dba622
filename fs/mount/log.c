/* log: log lines to stderr or syslog, filtered by the configured level. */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <syslog.h>

#include "fuse_api.h"
#include "log.h"
#include "td_err.h"

static atomic_int log_level = TD_CONF_LOG_WARN;
static atomic_int log_syslog;

static int syslog_prio(td_conf_log level)
{
	switch (level) {
	case TD_CONF_LOG_ERROR:
		return LOG_ERR;
	case TD_CONF_LOG_WARN:
		return LOG_WARNING;
	case TD_CONF_LOG_INFO:
		return LOG_INFO;
	default:
		return LOG_DEBUG;
	}
}

static void vlog(td_conf_log level, const char *fmt, va_list ap)
{
	if (atomic_load_explicit(&log_syslog, memory_order_relaxed)) {
		vsyslog(syslog_prio(level), fmt, ap);
		return;
	}
	char line[1024];
	vsnprintf(line, sizeof line, fmt, ap);
	size_t n = 0;
	while (line[n])
		n++;
	while (n > 0 && line[n - 1] == '\n')
		line[--n] = '\0';
	/* One fprintf per line: stdio locks the stream, lines do not mix. */
	fprintf(stderr, "tadocfs: %s\n", line);
}

void td_fs_log(td_conf_log level, const char *fmt, ...)
{
	if ((int)level > atomic_load_explicit(&log_level, memory_order_relaxed))
		return;
	va_list ap;
	va_start(ap, fmt);
	vlog(level, fmt, ap);
	va_end(ap);
}

void td_fs_log_always(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vlog(TD_CONF_LOG_INFO, fmt, ap);
	va_end(ap);
}

static void fuse_log_to_ours(enum fuse_log_level level, const char *fmt, va_list ap)
{
	td_conf_log l;
	if (level <= FUSE_LOG_ERR)
		l = TD_CONF_LOG_ERROR;
	else if (level <= FUSE_LOG_WARNING)
		l = TD_CONF_LOG_WARN;
	else if (level <= FUSE_LOG_INFO)
		l = TD_CONF_LOG_INFO;
	else
		l = TD_CONF_LOG_DEBUG;
	if ((int)l > atomic_load_explicit(&log_level, memory_order_relaxed))
		return;
	vlog(l, fmt, ap);
}

void td_fs_log_setup(td_conf_log level)
{
	atomic_store(&log_level, (int)level);
	fuse_set_log_func(fuse_log_to_ours);
}

void td_fs_log_detached(void)
{
	openlog("tadocfs", LOG_PID, LOG_DAEMON);
	atomic_store(&log_syslog, 1);
}

int td_fs_fail_td(const char *subject, int err)
{
	const char *d = td_errdetail();
	size_t sl = strlen(subject);
	if (d && strncmp(d, subject, sl) == 0 && d[sl] == ':' && d[sl + 1] == ' ')
		d += sl + 2;
	if (d && *d && strcmp(d, td_strerror(err)) != 0)
		fprintf(stderr, "tadocfs: %s: %s (%s)\n", subject, td_strerror(err), d);
	else
		fprintf(stderr, "tadocfs: %s: %s\n", subject, td_strerror(err));
	return 1; /* TD_FS_EXIT_FAIL */
}
