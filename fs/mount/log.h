/* log: the tadocfs daemon's log: stderr in the foreground, syslog once detached, filtered by log_level. */
#ifndef TD_FS_LOG_H
#define TD_FS_LOG_H

#include "td_conf.h"

/* Set the most verbose level logged (conf log_level) and route libfuse's
 * own messages (fuse_log) through td_fs_log with the matching level. Until
 * td_fs_log_detached() is called, lines go to stderr as "tadocfs: ...". */
void td_fs_log_setup(td_conf_log level);

/* The daemon left the terminal (fuse_daemonize without -f): from now on
 * lines go to syslog (ident "tadocfs", facility daemon). */
void td_fs_log_detached(void);

/* Log one line (printf format, no trailing newline needed) when `level` is
 * at most the configured level. Thread-safe. */
void td_fs_log(td_conf_log level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Log one line whatever the level (answers to an explicit request such as
 * SIGUSR1). Thread-safe. */
void td_fs_log_always(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* One line on stderr before the daemon detaches: "tadocfs: SUBJECT:
 * td_strerror(err) (DETAIL)" with the engine's td_errdetail(), less a
 * leading "SUBJECT: " the detail already names. Returns 1
 * (TD_FS_EXIT_FAIL). */
int td_fs_fail_td(const char *subject, int err);

#endif
