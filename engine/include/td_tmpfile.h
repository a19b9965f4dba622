/* td_tmpfile: names of the temporary files that writers create beside a target, and removal of those a crash left. */
#ifndef TD_TMPFILE_H
#define TD_TMPFILE_H

#include <stddef.h>

#include "td_err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Every temporary that the engine (and the tools over it) writes beside a
 * file TARGET before renaming it into place is named
 *
 *     TARGET.tmp.PID            (tag NULL)
 *     TARGET.TAG.tmp.PID        (tag: a short word, e.g. "compact", "add")
 *
 * where PID is the decimal id of the process that writes it. A name of
 * this shape whose process is gone is debris of a crash, and
 * td_tmp_sweep removes it; one whose process still runs is never touched.
 * A name may nest (TARGET.compact.tmp.PID.tmp.PID is the writer's
 * temporary for TARGET.compact.tmp.PID): what counts is the PID at its end.
 *
 * Write the temporary name for `target` (and `tag`, NULL or a word of
 * lowercase letters) for this process into buf (NUL-terminated).
 * TD_OK, TD_ERANGE (buf too small), TD_EINVAL (bad tag). Thread-safe. */
int td_tmp_path(const char *target, const char *tag, char *buf, size_t cap);

/* Remove the temporaries of `target` (names "TARGET." ... ".tmp.PID" in
 * its directory, made by td_tmp_path for any tag) whose process no longer
 * exists (kill(PID, 0) fails with ESRCH: PIDs of this PID namespace);
 * this process's own and those of running processes are kept. Call it while holding the target's lock
 * (td_lock.h), so no writer of this target is starting meanwhile.
 * *removed (may be NULL) gets the count; when it is not 0 and msg is not
 * NULL, msg gets one line for the user naming what was removed (cut to
 * cap). TD_OK, or TD_EIO when the directory cannot be read or a file not
 * removed (detail names it; what could be removed is removed). */
int td_tmp_sweep(const char *target, unsigned *removed, char *msg, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
